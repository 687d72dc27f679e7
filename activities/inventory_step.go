package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// StepInventory is the step as status, search attributes and logs name it; InventoryName its activity.
const StepInventory, InventoryName = "inventory", "Inventory"

// MaxInventoryBytes keeps an inventory well inside Temporal's payload limit (2 MiB by default),
// so one host's huge fact set fails that host with a reason instead of its workflow task.
const MaxInventoryBytes = 1 << 20

// ErrInventoryTooLarge is returned for inventories over MaxInventoryBytes.
var ErrInventoryTooLarge = errors.New("inventory is too large")

// Inventory calls rpcutil#inventory.
func (a *Activities) Inventory(ctx context.Context, in HostInput) (*InventoryResult, error) {
	r, err := a.rpc(ctx, in.Identity, "rpcutil", "inventory", a.set.RPCTimeout, map[string]any{})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	version, vok := r.data["version"].(string)
	upgradable, uok := r.data["upgradable"].(bool)
	if !vok || !uok {
		return nil, NewError(ErrTypeBadReply, fmt.Sprintf("rpcutil#inventory: reply from %s has no version or upgradable", r.sender), nil)
	}
	// the helper gets the inventory as go-choria's generated client encodes its output
	j, err := json.Marshal(r.data)
	if err != nil {
		return nil, NewError(ErrTypeBadReply, fmt.Sprintf("rpcutil#inventory: cannot encode inventory: %v", err), nil)
	}
	if err := checkInventorySize(len(j)); err != nil {
		return nil, NewError(ErrTypeTooLarge, err.Error(), err)
	}
	return &InventoryResult{Inventory: string(j), Version: version, Upgradable: upgradable}, nil
}

func checkInventorySize(n int) error {
	if n > MaxInventoryBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d (Temporal payload size): trim the server's facts", ErrInventoryTooLarge, n, MaxInventoryBytes)
	}
	return nil
}
