package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/choria-io/go-choria/client/rpcutilclient"
)

// MaxInventoryBytes keeps an inventory well inside Temporal's payload limit (2 MiB by default),
// so one host's huge fact set fails that host with a reason instead of its workflow task.
const MaxInventoryBytes = 1 << 20

// ErrInventoryTooLarge is returned for inventories over MaxInventoryBytes.
var ErrInventoryTooLarge = errors.New("inventory is too large")

// Inventory calls rpcutil#inventory.
func (a *Activities) Inventory(ctx context.Context, in HostInput) (*InventoryResult, error) {
	r, err := rpc(ctx, a, in.Identity, "rpcutil#inventory", a.set.RPCTimeout, func(ctx context.Context) ([]*rpcutilclient.InventoryOutput, error) {
		rc, err := rpcutilclient.New(a.fw)
		if err != nil {
			return nil, err
		}
		return do[*rpcutilclient.InventoryResult, *rpcutilclient.InventoryOutput](ctx, rc.OptionTargets([]string{in.Identity}).OptionWorkers(1).Inventory())
	})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	j, err := r.JSON()
	if err != nil {
		return nil, NewError(ErrTypeBadReply, fmt.Sprintf("rpcutil#inventory: cannot encode inventory: %v", err), nil)
	}
	if err := checkInventorySize(len(j)); err != nil {
		return nil, NewError(ErrTypeTooLarge, err.Error(), err)
	}
	return &InventoryResult{Inventory: string(j), Version: r.Version(), Upgradable: r.Upgradable()}, nil
}

func checkInventorySize(n int) error {
	if n > MaxInventoryBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d (Temporal payload size): trim the server's facts", ErrInventoryTooLarge, n, MaxInventoryBytes)
	}
	return nil
}
