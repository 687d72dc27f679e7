package activities

import (
	"context"

	"github.com/choria-io/go-choria/inter"
)

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
