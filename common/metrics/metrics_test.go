package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Before any event, every series the Choria Provisioner exports at start is there at 0 with the
// site label, and so is every other series without a label of its own.
func TestSeriesAtZeroOnStart(t *testing.T) {
	reg := siteRegistry(t)
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			name := f.GetName()
			if r, ok := labels["reason"]; ok && name == "choria_provisioner_sightings_refused_total" {
				name += "{" + r + "}" // the one series exported at 0 for each of its labels
				delete(labels, "reason")
			}
			require.Equal(t, map[string]string{"site": "dc1"}, labels, name)
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[name] = m.GetGauge().GetValue()
			}
		}
	}
	want := map[string]float64{}
	for _, n := range []string{
		// what the Choria Provisioner exports at start
		"discovered", "provisioned", "waiting_nodes", "work_queue_entries", "paused",
		// and the rest without an rpc label
		"event_discovered", "discover_cycles", "discovery_errors", "provision_errors", "helper_errors",
		"helper_shutdown_requests", "busy_workers", "stale_sightings", "deferred_nodes", "audit_failures_total", "banned_refused_total",
		// 0 until the control state cannot be read
		"control_unreadable",
	} {
		want["choria_provisioner_"+n] = 0
	}
	for _, r := range RefusedReasons() {
		want["choria_provisioner_sightings_refused_total{"+r+"}"] = 0
	}
	require.Equal(t, want, got)
}

// With only a port, /metrics listens on every interface (as the Choria Provisioner's
// ":monitor_port"), so a Prometheus on another host can scrape it; an address narrows it.
func TestServeBindsAllInterfacesUnlessNarrowed(t *testing.T) {
	reg := siteRegistry(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	addr, err := Serve(ctx, net.JoinHostPort("", "0"), reg, false)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.True(t, net.ParseIP(host).IsUnspecified(), "bound to %s", addr)
	resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `choria_provisioner_provisioned{site="dc1"} 0`)

	addr, err = Serve(ctx, net.JoinHostPort("127.0.0.1", "0"), reg, false)
	require.NoError(t, err)
	host, _, err = net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
}

// siteRegistry is a fresh registry with the provisioner's series of site dc1 on it.
func siteRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	_, err := New(reg, "dc1")
	require.NoError(t, err)
	return reg
}
