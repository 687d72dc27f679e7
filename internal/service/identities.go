package service

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/renewal"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// IdentityRefresh is how often a worker replica counts the identities about to expire: a
// visibility query of the identities expiring within the widest window, and one IN query per
// hostruns.IDsPerQuery of them to keep each host's latest, never a scan of the fleet.
const IdentityRefresh = 5 * time.Minute

// identityWindow is a window of choria_provisioner_identities_expiring.
type identityWindow struct {
	label string
	d     time.Duration
}

// identityWindows are the gauge's windows, the widest last.
func identityWindows() []identityWindow {
	return []identityWindow{{"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}}
}

// watchIdentities keeps the identity gauges until ctx ends: the expiry alerts compare them with
// renew_before (monitoring/prometheus/alerts.yaml).
func (s *Service) watchIdentities(ctx context.Context, tc client.Client, policy renewal.Policy, every time.Duration) {
	enabled := 0.0
	if policy.Enabled {
		enabled = 1
	}
	s.Metrics.RenewalEnabled.WithLabelValues(s.cfg.Site).Set(enabled)
	s.Metrics.RenewBeforeSeconds.WithLabelValues(s.cfg.Site).Set(policy.RenewBefore.Seconds())
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := ""
	for {
		if err := s.refreshIdentities(ctx, tc, policy.RenewBefore); err != nil && err.Error() != last {
			s.log.Warn("identity gauges not refreshed", zap.Error(err))
			last = err.Error()
		} else if err == nil {
			last = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Service) refreshIdentities(ctx context.Context, tc client.Client, renewBefore time.Duration) error {
	windows := identityWindows()
	widest := max(windows[len(windows)-1].d, renewBefore)
	now := time.Now()
	query, err := hostruns.IssuedQuery(s.cfg.Temporal.TaskQueue, s.cfg.Site, hostruns.ExpiresBefore(now.Add(widest)))
	if err != nil {
		return err
	}
	current, err := hostruns.Current(ctx, tc, query)
	if err != nil {
		return err
	}
	current = s.withoutRetired(ctx, current)
	for _, w := range windows {
		n := 0
		for _, r := range current {
			if r.Expires.Before(now.Add(w.d)) {
				n++
			}
		}
		s.Metrics.IdentitiesExpiring.WithLabelValues(s.cfg.Site, w.label).Set(float64(n))
	}
	if len(current) == 0 {
		s.Metrics.IdentityNextExpiry.DeleteLabelValues(s.cfg.Site)
		return nil
	}
	s.Metrics.IdentityNextExpiry.WithLabelValues(s.cfg.Site).Set(float64(current[0].Expires.Unix()))
	return nil
}

// withoutRetired drops the hosts the audit says are gone for good (hosts retire): no alert for
// an identity nobody holds any more.
func (s *Service) withoutRetired(ctx context.Context, runs []hostruns.Run) []hostruns.Run {
	a := s.audit.Load()
	if a == nil || a.Index == nil {
		return runs
	}
	all, err := a.Index.All(ctx)
	if err != nil {
		return runs // counted as held: an unreadable audit hides no identity from the alerts
	}
	out := runs[:0:0]
	for _, r := range runs {
		if !all[r.HostIdentity()].Retired {
			out = append(out, r)
		}
	}
	return out
}
