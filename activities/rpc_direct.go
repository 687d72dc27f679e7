package activities

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/protocol"
	v2 "github.com/choria-io/go-choria/protocol/v2"
	rpcclient "github.com/choria-io/go-choria/providers/agent/mcorpc/client"
	choriasec "github.com/choria-io/go-choria/providers/security/choria"
	"github.com/nats-io/nats.go"
)

// directClient builds, signs and sends protocol v2 requests itself over the shared connection,
// byte for byte what go-choria's client sends (TestIntegrationRPCWire compares the two on a real
// broker) but without go-choria's per-message cost: its v2 Request.JSON, SecureRequest.SetMessage
// and Message.Transport compile the protocol's JSON schemas again for every request to validate
// what they just built (the largest share of the provisioner's CPU in `make bench`'s profile), and
// every request gets a client/client with a 100,000-slot reply channel and two goroutines per
// subscription. Here the structure is fixed by construction, so it is validated against the
// schemas in tests instead of on every call. A reply is decoded as go-choria's client decodes it,
// checking its hash as go-choria's SecureReply.Valid does.
type directClient struct {
	fw    inter.Framework
	sec   inter.SecurityProvider
	creds *credentials
	ddls  agentDDLs

	identity   string // the transport's sender and the request's sender ID
	caller     string // the caller ID of the JWT
	collective string
	ttl        int

	mu   sync.Mutex
	conn inter.Connector
}

// newDirectClient returns nil when the framework needs something only go-choria's own client
// does: protocol v1 (x509 sites), a remote signer, federation, or a mandatory client filter. Those
// sites keep go-choria's client.
func newDirectClient(fw inter.Framework, ddls agentDDLs) (*directClient, error) {
	cfg := fw.Configuration()
	if cfg == nil || fw.RequestProtocol() != protocol.RequestV2 || cfg.Choria.SecurityProvider != "choria" ||
		cfg.Choria.RemoteSignerService || cfg.Choria.RemoteSignerURL != "" || fw.IsFederated() || cfg.Choria.RequireClientFilter {
		return nil, nil
	}
	// the same provider go-choria's framework builds for the "choria" security setting: its
	// configuration is checked as go-choria checks it, and it checks the replies' hashes; its seed
	// signs the requests and its JWT is the caller (credentials, read as it reads them)
	sec, err := choriasec.New(choriasec.WithChoriaConfig(cfg), choriasec.WithLog(fw.Logger("security")))
	if err != nil {
		return nil, fmt.Errorf("choria security provider: %w", err)
	}
	return &directClient{
		fw: fw, sec: sec, ddls: ddls,
		creds:    &credentials{seedFile: cfg.Choria.ChoriaSecuritySeedFile, tokenFile: cfg.Choria.ChoriaSecurityTokenFile},
		identity: cfg.Identity, caller: fw.CallerID(), collective: cfg.MainCollective, ttl: cfg.TTL,
	}, nil
}

func (c *directClient) connector(ctx context.Context) (inter.Connector, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	conn, err := c.fw.NewConnector(ctx, c.fw.MiddlewareServers, c.fw.CallerID()+"-rpc", c.fw.Logger("rpc"))
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

// build makes the transport message of one request: the mcorpc request in a v2 request, signed
// into a v2 secure request, wrapped in a v2 transport with go-choria's headers.
func (c *directClient) build(identity, agentName, action string, args map[string]any, server string) (*request, error) {
	if _, err := c.ddls.withDefaults(agentName, action, args); err != nil {
		return nil, err
	}
	pj, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("could not encode payload: %w", err)
	}
	body, err := json.Marshal(rpcclient.RPCRequest{Agent: agentName, Action: action, Data: pj})
	if err != nil {
		return nil, fmt.Errorf("could not encode request: %w", err)
	}
	id, err := c.fw.NewRequestID()
	if err != nil {
		return nil, err
	}
	// a directed request carries its agent as a filter (go-choria's Message.SetType)
	filter := protocol.NewFilter()
	filter.AddAgentFilter(agentName)
	req := &v2.Request{
		Protocol:    protocol.RequestV2,
		MessageBody: body,
		ReqEnvelope: v2.ReqEnvelope{
			RequestID: id, SenderID: c.identity, CallerID: c.caller, Collective: c.collective,
			Agent: agentName, TTL: c.ttl, Time: time.Now().UnixNano(), Filter: filter,
		},
	}
	rj, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("could not encode request: %w", err)
	}
	sj, err := c.secure(rj)
	if err != nil {
		return nil, err
	}
	replyTo := replyTarget(c.collective, c.caller, id)
	t := &v2.TransportMessage{
		Protocol: protocol.TransportV2,
		Data:     sj,
		Headers: &v2.TransportHeaders{
			ReplyTo: replyTo, Sender: c.identity,
			// the hop go-choria's connection records as it publishes
			SeenBy: [][3]string{{server, c.identity, server}},
		},
	}
	tj, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("could not encode transport: %w", err)
	}
	return &request{id: id, target: c.collective + ".node." + identity, replyTo: replyTo, data: tj}, nil
}

// secure wraps a request in its signed envelope, as v2.NewSecureRequest: unsigned and without
// a caller JWT only in an insecure build.
func (c *directClient) secure(rj []byte) ([]byte, error) {
	sr := &v2.SecureRequest{Protocol: protocol.SecureRequestV2, MessageBody: rj, Signature: []byte("insecure")}
	if protocol.IsSecure() {
		key, token, err := c.creds.current()
		if err != nil {
			return nil, fmt.Errorf("the caller's credentials: %w", err)
		}
		sr.CallerJWT = string(token)
		sr.Signature = ed25519.Sign(key, rj)
	}
	sj, err := json.Marshal(sr)
	if err != nil {
		return nil, fmt.Errorf("could not encode secure request: %w", err)
	}
	return sj, nil
}

// call subscribes to the request's own reply subject on the shared connection, publishes the
// request and returns the first reply: a request names one host, go-choria's client stops at the
// first reply from it too. NATS handles one connection's SUB before its PUB, so no flush is
// needed between them.
func (c *directClient) call(ctx context.Context, identity, agentName, action string, args map[string]any) ([]*rpcReply, error) {
	conn, err := c.connector(ctx)
	if err != nil {
		return nil, err
	}
	nc := conn.Nats()
	if nc == nil {
		return nil, errors.New("choria connection is not established")
	}
	req, err := c.build(identity, agentName, action, args, conn.ConnectedServer())
	if err != nil {
		return nil, err
	}
	replies := make(chan *nats.Msg, replyBuffer)
	sub, err := nc.ChanSubscribe(req.replyTo, replies)
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", req.replyTo, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Publish(req.target, req.data); err != nil {
		return nil, fmt.Errorf("publishing to %s: %w", req.target, err)
	}
	select {
	case m := <-replies:
		r, err := c.decode(m.Data, agentName, action, req.id)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUndecodable, err)
		}
		return []*rpcReply{r}, nil
	case <-ctx.Done():
		return nil, nil
	}
}
