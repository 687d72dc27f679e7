package service

import (
	"context"
	"slices"
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
	expiries, err := s.expiries(ctx, tc, query, now.Add(widest))
	if err != nil {
		return err
	}
	for _, w := range windows {
		n := 0
		for _, exp := range expiries {
			if exp.Before(now.Add(w.d)) {
				n++
			}
		}
		s.Metrics.IdentitiesExpiring.WithLabelValues(s.cfg.Site, w.label).Set(float64(n))
	}
	if len(expiries) == 0 {
		s.Metrics.IdentityNextExpiry.DeleteLabelValues(s.cfg.Site)
		return nil
	}
	s.Metrics.IdentityNextExpiry.WithLabelValues(s.cfg.Site).Set(float64(expiries[0].Unix()))
	return nil
}

// expiries are the expiries, soonest first, of the identities hosts hold that lapse before
// before: by the audit sink's records when this worker has them (retired hosts left out), with
// the hosts the sink has no issuance of from their latest runs; else by each host's latest run.
func (s *Service) expiries(ctx context.Context, tc client.Client, query string, before time.Time) ([]time.Time, error) {
	current, err := hostruns.Current(ctx, tc, query)
	if err != nil {
		return nil, err
	}
	var out []time.Time
	a := s.audit.Load()
	if a == nil || a.Index == nil {
		for _, r := range current {
			out = append(out, r.Expires)
		}
		return out, nil
	}
	recs, err := a.Index.Expiring(ctx, before, s.cfg.Site)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		out = append(out, r.Expires)
	}
	all, err := a.Index.All(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range current {
		if st := all[r.HostIdentity()]; st.Issued.IsZero() && !st.Retired {
			out = append(out, r.Expires)
		}
	}
	slices.SortFunc(out, func(x, y time.Time) int { return x.Compare(y) })
	return out, nil
}
