package activities

import (
	"crypto/fips140"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/choria-io/go-choria/protocol"
	v2 "github.com/choria-io/go-choria/protocol/v2"
	rpcclient "github.com/choria-io/go-choria/providers/agent/mcorpc/client"

	"github.com/choria-temporal/provisioner/common/textsafe"
)

// replyTarget is go-choria's reply subject for a request (choria.ReplyTarget).
func replyTarget(collective, caller, requestID string) string {
	var sum string
	if fips140.Enabled() {
		s := sha256.Sum256([]byte(caller))
		sum = hex.EncodeToString(s[:])
	} else {
		s := md5.Sum([]byte(caller))
		sum = hex.EncodeToString(s[:])
	}
	return collective + ".reply." + sum + "." + requestID
}

// request is one request as it goes on the wire, with what its reply must match.
type request struct {
	id      string
	target  string
	replyTo string
	data    []byte
}

// replyBody is what a v2 transport, secure reply and reply carry of a reply.
type replyBody struct {
	transport v2.TransportMessage
	secure    v2.SecureReply
	reply     v2.Reply
	rpc       rpcclient.RPCReply
}

// decode unwraps a v2 reply as go-choria's client does (NewReplyFromTransportJSON, ParseReply),
// checking the secure reply's hash; the DDL's output defaults are the base of its data.
func (c *directClient) decode(raw []byte, agentName, action, requestID string) (*rpcReply, error) {
	var b replyBody
	if err := json.Unmarshal(raw, &b.transport); err != nil {
		return nil, fmt.Errorf("undecodable transport: %w", err)
	}
	if b.transport.Protocol != protocol.TransportV2 {
		return nil, fmt.Errorf("reply in %q, not %s", b.transport.Protocol, protocol.TransportV2)
	}
	if err := json.Unmarshal(b.transport.Data, &b.secure); err != nil {
		return nil, fmt.Errorf("undecodable secure reply: %w", err)
	}
	if base64.StdEncoding.EncodeToString(c.sec.ChecksumBytes(b.secure.MessageBody)) != b.secure.Hash {
		return nil, errors.New("secure reply does not match its hash")
	}
	if err := json.Unmarshal(b.secure.MessageBody, &b.reply); err != nil {
		return nil, fmt.Errorf("undecodable reply: %w", err)
	}
	if b.reply.Request != requestID {
		return nil, fmt.Errorf("reply from %s to request %q, not %q", b.reply.Sender, b.reply.Request, requestID)
	}
	if err := json.Unmarshal(b.reply.MessageBody, &b.rpc); err != nil {
		return nil, fmt.Errorf("undecodable RPC reply from %s: %w", b.reply.Sender, err)
	}
	return newReply(c.ddls, agentName, action, b.reply.Sender, &b.rpc)
}

// newReply is the reply as the generated clients' outputs hold it.
func newReply(ddls agentDDLs, agentName, action, sender string, r *rpcclient.RPCReply) (*rpcReply, error) {
	out := &rpcReply{sender: sender, code: int(r.Statuscode), msg: textsafe.Clean(r.Statusmsg, MaxStatusMessageBytes), data: map[string]any{}}
	if d, ok := ddls[agentName]; ok {
		if act, err := d.ActionInterface(action); err == nil {
			act.SetOutputDefaults(out.data)
		}
	}
	if len(r.Data) > 0 {
		if err := json.Unmarshal(r.Data, &out.data); err != nil {
			return nil, fmt.Errorf("undecodable data in the reply from %s: %w", sender, err)
		}
	}
	return out, nil
}
