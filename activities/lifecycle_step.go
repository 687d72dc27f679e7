package activities

import (
	"context"
	"time"
)

// StepRestart is the step as status, search attributes and logs name it; RestartName its activity.
const StepRestart, RestartName = "restart", "Restart"

// StepUpgrade is the step as status, search attributes and logs name it; ReleaseUpdateName its activity.
const StepUpgrade, ReleaseUpdateName = "upgrade", "ReleaseUpdate"

// StepShutdown is the step as status, search attributes and logs name it; ShutdownName its activity.
const StepShutdown, ShutdownName = "shutdown", "Shutdown"

// Restart asks the server to restart into its new configuration.
func (a *Activities) Restart(ctx context.Context, in RestartInput) (*MessageResult, error) {
	r, err := a.provision(ctx, in.Identity, "restart", map[string]any{"token": a.set.Token, "splay": float64(in.Splay)})
	if err != nil {
		return nil, err
	}
	// choria_provisioner_provisioned is counted by the run's outcome (service.ProvisionErrors)
	a.logger(ctx, in.Identity, StepRestart).Info("provisioned")
	res := message(r)
	res.At = time.Now()
	return res, nil
}

// ReleaseUpdate asks the server to update its binary with choria_provision#release_update; the
// server restarts into the new version (still in provisioning mode) about 2 s later.
func (a *Activities) ReleaseUpdate(ctx context.Context, in UpgradeInput) (*MessageResult, error) {
	if a.set.UpgradesRepository == "" {
		return nil, NewError(ErrTypeConfig, "upgrades_repository is not configured", nil)
	}
	// downloading and verifying a binary takes longer than an ordinary RPC
	r, err := a.rpc(ctx, in.Identity, "choria_provision", "release_update", 3*a.set.RPCTimeout,
		map[string]any{"repository": a.set.UpgradesRepository, "token": a.set.Token, "version": in.Version})
	if err != nil {
		return nil, err
	}
	return message(r), nil
}

// Shutdown asks the server to shut down (the helper's decision).
func (a *Activities) Shutdown(ctx context.Context, in HostInput) (*MessageResult, error) {
	r, err := a.provision(ctx, in.Identity, "shutdown", map[string]any{"token": a.set.Token})
	if err != nil {
		return nil, err
	}
	return message(r), nil
}
