package activities

import (
	"context"

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
)

// Restart asks the server to restart into its new configuration.
func (a *Activities) Restart(ctx context.Context, in RestartInput) (*MessageResult, error) {
	r, err := callProvision(ctx, a, in.Identity, "restart", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.RestartOutput, error) {
		return do[*cpc.RestartResult, *cpc.RestartOutput](ctx, pc.Restart(a.set.Token).Splay(float64(in.Splay)))
	})
	if err != nil {
		return nil, err
	}
	a.metrics.Provisioned.WithLabelValues(a.set.Site).Inc()
	a.logger(ctx, in.Identity, StepRestart).Info("provisioned")
	return &MessageResult{Message: r.Message()}, nil
}

// ReleaseUpdate asks the server to update its binary with choria_provision#release_update; the
// server restarts into the new version (still in provisioning mode) about 2 s later.
func (a *Activities) ReleaseUpdate(ctx context.Context, in UpgradeInput) (*MessageResult, error) {
	if a.set.UpgradesRepository == "" {
		return nil, NewError(ErrTypeConfig, "upgrades_repository is not configured", nil)
	}
	// downloading and verifying a binary takes longer than an ordinary RPC
	r, err := callWithin(ctx, a, in.Identity, "release_update", 3*a.set.RPCTimeout, func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.ReleaseUpdateOutput, error) {
		return do[*cpc.ReleaseUpdateResult, *cpc.ReleaseUpdateOutput](ctx, pc.ReleaseUpdate(a.set.UpgradesRepository, a.set.Token, in.Version))
	})
	if err != nil {
		return nil, err
	}
	return &MessageResult{Message: r.Message()}, nil
}

// Shutdown asks the server to shut down (the helper's decision).
func (a *Activities) Shutdown(ctx context.Context, in HostInput) (*MessageResult, error) {
	r, err := callProvision(ctx, a, in.Identity, "shutdown", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.ShutdownOutput, error) {
		return do[*cpc.ShutdownResult, *cpc.ShutdownOutput](ctx, pc.Shutdown(a.set.Token))
	})
	if err != nil {
		return nil, err
	}
	return &MessageResult{Message: r.Message()}, nil
}
