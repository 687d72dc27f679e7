package fleetsim

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/protocol"
	v1 "github.com/choria-io/go-choria/protocol/v1"
	v2 "github.com/choria-io/go-choria/protocol/v2"
)

// The protocol v2 messages are read and written here with go-choria's own types, exactly as its
// constructors and JSON methods do, minus one thing: go-choria compiles the message's JSON
// schema again for every request it reads and every reply it writes (four compiles per RPC),
// which was 55 % of the simulator's CPU in a 500-host burst: CPU a real fleet spends on its own
// machines, not beside the provisioner it is measured against. wire_test.go checks that what
// this writes passes go-choria's schemas and reads back through go-choria, and that go-choria's
// messages read here as there.

// decodeV2 reads a transport holding a secure request and returns the request and its reply
// subject. Like the go-choria calls it replaces (NewSecureRequestFromTransport with skipvalidate),
// it does not verify the caller's signature: a simulated host trusts its provisioner.
func decodeV2(data []byte) (protocol.Request, string, error) {
	var tm v2.TransportMessage
	if err := json.Unmarshal(data, &tm); err != nil {
		return nil, "", err
	}
	if tm.Protocol != protocol.TransportV2 || tm.Headers == nil {
		return nil, "", fmt.Errorf("not a %s message", protocol.TransportV2)
	}
	var sr v2.SecureRequest
	if err := json.Unmarshal(tm.Data, &sr); err != nil {
		return nil, "", err
	}
	if sr.Protocol != protocol.SecureRequestV2 {
		return nil, "", fmt.Errorf("not a %s message", protocol.SecureRequestV2)
	}
	req := &v2.Request{}
	if err := json.Unmarshal(sr.MessageBody, req); err != nil {
		return nil, "", fmt.Errorf("could not parse the request: %w", err)
	}
	if req.Protocol != protocol.RequestV2 {
		return nil, "", fmt.Errorf("not a %s message", protocol.RequestV2)
	}
	return req, tm.Headers.ReplyTo, nil
}

// encodeV2 writes the reply of sender to req with body, signed when the security provider signs
// replies, in a transport message.
func encodeV2(req protocol.Request, sender string, body []byte, sec inter.SecurityProvider) ([]byte, error) {
	rep := &v2.Reply{Protocol: protocol.ReplyV2, MessageBody: body, Request: req.RequestID(), Sender: sender,
		SendingAgent: req.Agent(), TimeStamp: time.Now().UnixNano()}
	protocol.CopyFederationData(req, rep)
	j, err := json.Marshal(rep)
	if err != nil {
		return nil, err
	}
	srep := &v2.SecureReply{Protocol: protocol.SecureReplyV2, MessageBody: j,
		Hash: base64.StdEncoding.EncodeToString(sec.ChecksumBytes(j))}
	if sec.ShouldSignReplies() {
		token, err := sec.TokenBytes()
		if err != nil {
			return nil, fmt.Errorf("could not read the sender's token: %w", err)
		}
		if srep.Signature, err = sec.SignBytes(j); err != nil {
			return nil, err
		}
		srep.SenderJWT = string(token)
	}
	sj, err := json.Marshal(srep)
	if err != nil {
		return nil, err
	}
	return json.Marshal(&v2.TransportMessage{Protocol: protocol.TransportV2, Data: sj, Headers: &v2.TransportHeaders{Sender: sender}})
}

// goChoriaProtocol is one protocol version's go-choria constructors: reading a request,
// writing a reply.
type goChoriaProtocol struct {
	transportJSON func([]byte) (protocol.TransportMessage, error)
	secureRequest func(protocol.TransportMessage, inter.SecurityProvider, bool) (protocol.SecureRequest, error)
	request       func(protocol.SecureRequest) (protocol.Request, error)
	reply         func(protocol.Request, string) (protocol.Reply, error)
	secure        func(protocol.Reply, inter.SecurityProvider) (protocol.SecureReply, error)
	transport     func(string) (protocol.TransportMessage, error)
}

func goChoriaV1() goChoriaProtocol {
	return goChoriaProtocol{transportJSON: v1.NewTransportFromJSON, secureRequest: v1.NewSecureRequestFromTransport,
		request: v1.NewRequestFromSecureRequest, reply: v1.NewReply, secure: v1.NewSecureReply, transport: v1.NewTransportMessage}
}

func goChoriaV2() goChoriaProtocol {
	return goChoriaProtocol{transportJSON: v2.NewTransportFromJSON, secureRequest: v2.NewSecureRequestFromTransport,
		request: v2.NewRequestFromSecureRequest, reply: v2.NewReply, secure: v2.NewSecureReply, transport: v2.NewTransportMessage}
}

// decodeGoChoria reads a request with go-choria's constructors (protocol v1 always, v2 with
// Options.GoChoriaWire); like decodeV2 it does not verify the caller's signature.
func decodeGoChoria(c goChoriaProtocol, data []byte, sec inter.SecurityProvider) (protocol.Request, string, error) {
	tm, err := c.transportJSON(data)
	if err != nil {
		return nil, "", err
	}
	sreq, err := c.secureRequest(tm, sec, true)
	if err != nil {
		return nil, "", err
	}
	req, err := c.request(sreq)
	return req, tm.ReplyTo(), err
}

// encodeGoChoria writes a reply with go-choria's constructors: protocol v1 always, v2 with
// Options.GoChoriaWire.
func encodeGoChoria(c goChoriaProtocol, req protocol.Request, sender string, body []byte, sec inter.SecurityProvider) ([]byte, error) {
	rep, err := c.reply(req, sender)
	if err != nil {
		return nil, err
	}
	rep.SetMessage(body)
	srep, err := c.secure(rep, sec)
	if err != nil {
		return nil, err
	}
	tm, err := c.transport(sender)
	if err != nil {
		return nil, err
	}
	if err := tm.SetReplyData(srep); err != nil {
		return nil, err
	}
	return tm.JSON()
}
