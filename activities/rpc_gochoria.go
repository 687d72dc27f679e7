package activities

import (
	"context"
	"fmt"
	"sync"

	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/protocol"
	rpcclient "github.com/choria-io/go-choria/providers/agent/mcorpc/client"
)

// goChoriaClient sends requests with go-choria's mcorpc client exactly as its generated clients
// do (the DDL, one worker, the target), for the sites directClient does not serve.
type goChoriaClient struct {
	fw   inter.Framework
	ddls agentDDLs
}

func (c *goChoriaClient) call(ctx context.Context, identity, agentName, action string, args map[string]any) ([]*rpcReply, error) {
	d, err := c.ddls.withDefaults(agentName, action, args)
	if err != nil {
		return nil, err
	}
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
