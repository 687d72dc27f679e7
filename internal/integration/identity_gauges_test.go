package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/service"
)

// gauge reads one series of a replica's registry: the value of the metric named name whose
// labels include labels; false when there is none.
func gauge(t *testing.T, svc *service.Service, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := svc.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// The identity gauges count what the hosts hold: every simulated host provisioned with a 5-day
// server JWT is inside both windows, and the soonest expiry is 5 days from its signing.
func TestIntegrationIdentityGauges(t *testing.T) {
	const hosts = 6
	e := newEnv(t, envOptions{})
	e.cfg.ServerJWTValidity, e.cfg.ServerJWTValidityDuration = "5d", 5*24*time.Hour
	status := e.startFleetSim(hosts, "--prefix", "idg-")
	began := time.Now()
	svc := e.replica("replica-a", service.Options{Worker: true, Discovery: true, IdentityRefresh: time.Second})
	waitSimRestarted(t, status, hosts, time.Minute)
	done := time.Now()

	require.Eventually(t, func() bool {
		n7, _ := gauge(t, svc, "choria_provisioner_identities_expiring", map[string]string{"within": "7d"})
		n30, _ := gauge(t, svc, "choria_provisioner_identities_expiring", map[string]string{"within": "30d"})
		return n7 == hosts && n30 == hosts
	}, 30*time.Second, 250*time.Millisecond, "identities_expiring counts every host in both windows")
	next, ok := gauge(t, svc, "choria_provisioner_identity_next_expiry_timestamp_seconds", nil)
	require.True(t, ok)
	exp := time.Unix(int64(next), 0)
	require.False(t, exp.Before(began.Add(5*24*time.Hour).Add(-time.Second)), "soonest expiry %v, signed after %v", exp, began)
	require.False(t, exp.After(done.Add(5*24*time.Hour).Add(time.Second)), "soonest expiry %v, signed before %v", exp, done)
	enabled, ok := gauge(t, svc, "choria_provisioner_renewal_enabled", nil)
	require.True(t, ok)
	require.Zero(t, enabled, "renewal is off by default")
}
