package activities

import (
	"context"
	"crypto/ed25519"
	"crypto/fips140"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/choria-io/go-choria/client/choria_provisionclient"
	"github.com/choria-io/go-choria/client/rpcutilclient"
	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/protocol"
	v2 "github.com/choria-io/go-choria/protocol/v2"
	"github.com/choria-io/go-choria/providers/agent/mcorpc"
	rpcclient "github.com/choria-io/go-choria/providers/agent/mcorpc/client"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/ddl/agent"
	choriasec "github.com/choria-io/go-choria/providers/security/choria"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// rpcReply is one host's reply to one request: what go-choria's generated clients would have
// given the activity, the same for both ways of sending it.
type rpcReply struct {
	sender string
	code   int
	msg    string
	// data is the action's DDL output defaults overlaid with the reply's data, as go-choria's
	// generated clients build their outputs (the inventory goes to the helper as this map's JSON).
	data map[string]any
}

func (r *rpcReply) Sender() string        { return r.sender }
func (r *rpcReply) OK() bool              { return mcorpc.StatusCode(r.code) == mcorpc.OK }
func (r *rpcReply) StatusMessage() string { return r.msg }

// str is a string output; a missing or mistyped one is a bad reply (the generated clients panic).
func (r *rpcReply) str(key string) (string, error) {
	s, ok := r.data[key].(string)
	if !ok {
		return "", fmt.Errorf("reply from %s has no string %q: %w", r.sender, key, errBadOutput)
	}
	return s, nil
}

var errBadOutput = errors.New("unexpected reply data")

// agentDDLs are the DDLs of the agents the activities call, parsed once per process: their input
// defaults go into every request and their output defaults under every reply, as in go-choria's
// generated clients, which parse them on every call.
type agentDDLs map[string]*agent.DDL

func loadDDLs() (agentDDLs, error) {
	pd, err := choria_provisionclient.DDL()
	if err != nil {
		return nil, fmt.Errorf("choria_provision DDL: %w", err)
	}
	ud, err := rpcutilclient.DDL()
	if err != nil {
		return nil, fmt.Errorf("rpcutil DDL: %w", err)
	}
	return agentDDLs{pd.Metadata.Name: pd, ud.Metadata.Name: ud}, nil
}

// rpcCaller sends one request to one host and returns its replies (none when it did not answer
// within ctx).
type rpcCaller interface {
	call(ctx context.Context, identity, agentName, action string, args map[string]any) ([]*rpcReply, error)
}

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

// build makes the transport message of one request: the mcorpc request in a v2 request, signed
// into a v2 secure request, wrapped in a v2 transport with go-choria's headers.
func (c *directClient) build(identity, agentName, action string, args map[string]any, server string) (*request, error) {
	d, ok := c.ddls[agentName]
	if !ok {
		return nil, fmt.Errorf("no DDL for agent %s", agentName)
	}
	act, err := d.ActionInterface(action)
	if err != nil {
		return nil, err
	}
	_ = act.SetDefaults(args) // never fails
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
	sr := &v2.SecureRequest{Protocol: protocol.SecureRequestV2, MessageBody: rj, Signature: []byte("insecure")}
	// as v2.NewSecureRequest: unsigned and without a caller JWT only in an insecure build
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
	out := &rpcReply{sender: sender, code: int(r.Statuscode), msg: r.Statusmsg, data: map[string]any{}}
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

var errUndecodable = errors.New("bad reply")

// failingCaller fails every request with err.
type failingCaller struct{ err error }

func (f failingCaller) call(context.Context, string, string, string, map[string]any) ([]*rpcReply, error) {
	return nil, f.err
}

// goChoriaClient sends requests with go-choria's mcorpc client exactly as its generated clients
// do (the DDL, one worker, the target), for the sites directClient does not serve.
type goChoriaClient struct {
	fw   inter.Framework
	ddls agentDDLs
}

func (c *goChoriaClient) call(ctx context.Context, identity, agentName, action string, args map[string]any) ([]*rpcReply, error) {
	d, ok := c.ddls[agentName]
	if !ok {
		return nil, fmt.Errorf("no DDL for agent %s", agentName)
	}
	act, err := d.ActionInterface(action)
	if err != nil {
		return nil, err
	}
	_ = act.SetDefaults(args) // never fails
	rc, err := rpcclient.New(c.fw, agentName, rpcclient.DDL(d))
	if err != nil {
		return nil, fmt.Errorf("could not create client: %w", err)
	}
	var (
		mu      sync.Mutex
		replies []*rpcReply
		bad     error
	)
	_, err = rc.Do(ctx, action, args, rpcclient.Workers(1), rpcclient.Targets([]string{identity}),
		rpcclient.ReplyHandler(func(pr protocol.Reply, r *rpcclient.RPCReply) {
			if r == nil {
				return
			}
			out, err := newReply(c.ddls, agentName, action, pr.SenderID(), r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bad = err
				return
			}
			replies = append(replies, out)
		}))
	if err != nil {
		return nil, fmt.Errorf("could not perform request: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if bad != nil && len(replies) == 0 {
		return nil, fmt.Errorf("%w: %v", errUndecodable, bad)
	}
	return replies, nil
}

// Requester sends requests to one host exactly as the activities do, for callers outside this
// package that must speak to servers the same way (the wire tests).
type Requester struct {
	c rpcCaller
}

// Reply is one host's reply to a Requester's request.
type Reply struct {
	Sender  string
	Code    int
	Message string
	Data    map[string]any
}

// NewRequester is the activities' RPC client over fw.
func NewRequester(fw inter.Framework) *Requester {
	return &Requester{c: newCaller(fw, nil)}
}

// BuildsRequests says whether requests are built and signed here (protocol v2) rather than by
// go-choria's client.
func (r *Requester) BuildsRequests() bool {
	_, ok := r.c.(*directClient)
	return ok
}

// Call sends one request to identity and returns its replies (none if it did not answer within ctx).
func (r *Requester) Call(ctx context.Context, identity, agentName, action string, args map[string]any) ([]Reply, error) {
	replies, err := r.c.call(ctx, identity, agentName, action, args)
	if err != nil {
		return nil, err
	}
	out := make([]Reply, len(replies))
	for i, rr := range replies {
		out[i] = Reply{Sender: rr.sender, Code: rr.code, Message: rr.msg, Data: rr.data}
	}
	return out, nil
}

// newCaller is the RPC client for fw: requests built and signed here for protocol v2 sites,
// go-choria's client for the others.
func newCaller(fw inter.Framework, log *zap.Logger) rpcCaller {
	if fw == nil {
		return failingCaller{errors.New("no Choria framework to send requests with")}
	}
	ddls, err := loadDDLs()
	if err != nil {
		// go-choria's embedded DDLs: broken only with the module; every RPC then says why
		return failingCaller{err}
	}
	direct, err := newDirectClient(fw, ddls)
	if err != nil && log != nil {
		log.Warn("building Choria requests with go-choria's client", zap.Error(err))
	}
	if direct != nil {
		return direct
	}
	return &goChoriaClient{fw: fw, ddls: ddls}
}
