package service

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/renewal"
)

// RenewalPolicy is what this process's configuration decides about the renewal runs its worker
// begins (renewal.Policy).
func RenewalPolicy(cfg *config.Config) renewal.Policy {
	r := cfg.Renewal
	return renewal.Policy{Enabled: r.Enabled, RenewBefore: r.RenewBeforeDuration, Rate: r.Rate, WindowStart: r.WindowStart,
		WindowEnd: r.WindowEnd, Limit: renewal.MaxHostsPerRun}
}

// SetupRenewal makes the task queue's renewal Schedule what the configuration says (created or
// updated when renewal is enabled, deleted when not); it returns what it did.
func SetupRenewal(ctx context.Context, c client.Client, cfg *config.Config) (string, error) {
	return renewal.EnsureSchedule(ctx, c, cfg.Temporal.TaskQueue, cfg.Renewal.IntervalDuration, cfg.Renewal.Enabled)
}

// notRenewed says why the audit keeps a host from renewal: banned or retired ("": renew it).
func (s *Service) notRenewed(ctx context.Context, identity string) (string, error) {
	a := s.audit.Load()
	if a == nil || a.Index == nil {
		return "", nil
	}
	st, err := a.Index.State(ctx, identity)
	switch {
	case err != nil:
		return "", fmt.Errorf("the audit's bans cannot be read: %w", err)
	case st.Banned:
		return "banned: " + st.Reason, nil
	case st.Retired:
		return "retired: " + st.Reason, nil
	}
	return "", nil
}

// registerRenewal registers RenewIdentities on the worker, always: a Schedule run that reaches a
// replica whose configuration has renewal off completes at once, renewing nothing, rather than
// waiting for a worker that knows its type. The steps are registered only with renewal on, with
// a Choria client from renewal.choria_config (the fleet's collective and account).
func (s *Service) registerRenewal(w worker.Worker, tc client.Client) error {
	renewal.Workflow{Policy: RenewalPolicy(s.cfg)}.Register(w)
	if !s.cfg.Renewal.Enabled {
		return nil
	}
	fw, err := NewFleetClientFramework(s.cfg, s.cfg.Renewal.ChoriaConfig)
	if err != nil {
		return fmt.Errorf("renewal.choria_config: %w", err)
	}
	deps := renewal.Deps{Temporal: tc, Starter: Starter(s.cfg), Fleet: fw, Token: s.cfg.Token,
		RPCTimeout: s.cfg.RPCTimeoutDuration, Renewals: s.Metrics.Renewals, Log: s.log.Named("renewal"), Skip: s.notRenewed,
		Rate: s.cfg.Renewal.Rate}
	if a := s.audit.Load(); a != nil && a.Index != nil {
		deps.Records, deps.RenewBefore = a.Index, s.cfg.Renewal.RenewBeforeDuration // the identities as the audit holds them, whatever the runs' retention
	}
	renewal.NewActivities(deps).Register(w)
	s.log.Info("renewal on", zap.String("schedule_id", renewal.ScheduleID(s.cfg.Temporal.TaskQueue)),
		zap.Duration("renew_before", s.cfg.Renewal.RenewBeforeDuration), zap.Float64("per_minute", s.cfg.Renewal.Rate))
	return nil
}
