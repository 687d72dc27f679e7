// Package reprovision asks provisioned servers to go back into provisioning mode: what `hosts
// reprovision` does by hand and the renewal workflow does for identities about to lapse. It is
// Choria RPC alone (no Temporal): both callers start what follows themselves, or leave it to
// discovery.
package reprovision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/choria-io/go-choria/client/choria_provisionclient"
	"github.com/choria-io/go-choria/inter"
)

// A server's answer to a reprovision request: none in time, or an error reply.
var (
	ErrNoReply    = errors.New("no reply")
	ErrErrorReply = errors.New("error reply")
)

// Ask asks provisioned servers, over Choria RPC with the provisioning token, to go back into
// provisioning mode; each restarts, announces itself and is provisioned again by a new run. Its
// answer is each identity's: nil (accepted), ErrNoReply or ErrErrorReply; err is a request that
// could not be made. fw must be a client able to reach provisioned servers (their collective and
// account).
func Ask(ctx context.Context, fw inter.Framework, token string, identities []string, timeout time.Duration) (map[string]error, error) {
	pc, err := choria_provisionclient.New(fw)
	if err != nil {
		return nil, fmt.Errorf("choria_provision client: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := pc.OptionTargets(identities).Reprovision(token).Do(rctx)
	if err != nil {
		return nil, fmt.Errorf("reprovision request: %w", err)
	}
	out := map[string]error{}
	for _, id := range identities {
		out[id] = fmt.Errorf("%w within %v", ErrNoReply, timeout)
	}
	for _, r := range res.AllOutputs() {
		d := r.ResultDetails()
		if _, asked := out[d.Sender()]; !asked {
			continue
		}
		if d.OK() {
			out[d.Sender()] = nil
		} else {
			out[d.Sender()] = fmt.Errorf("%w: %s", ErrErrorReply, d.StatusMessage())
		}
	}
	return out, nil
}
