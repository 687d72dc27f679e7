package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A build run before and after the others is judged on the mean of its rates and costs, and on
// the worse of its memory and correctness figures.
func TestBracketedMeansRatesAndKeepsTheWorse(t *testing.T) {
	before := &Result{Scenario: "burst-500", Hosts: 500, Configured: 500, Restarted: 500, HostsPerSecond: 20,
		ProvisionerCPUMsPerHost: 20, TemporalCPUMsPerHost: 60, ProvisionerPeakRSSMiB: 80, RunsPerHost: 1,
		ToConfiguredMs:                Percentiles{P50: 1000, P95: 3000, P99: 4000, Max: 5000},
		WorkflowTaskScheduleToStartMs: &Latency{Count: 100, Mean: 10, P95: 40}, Kind: KindOurs}
	after := &Result{Scenario: "burst-500", Hosts: 500, Configured: 499, Restarted: 499, ConfiguredTwice: 1, HostsPerSecond: 30,
		ProvisionerCPUMsPerHost: 16, TemporalCPUMsPerHost: 50, ProvisionerPeakRSSMiB: 90, RunsPerHost: 1.002,
		ToConfiguredMs:                Percentiles{P50: 600, P95: 2000, P99: 3000, Max: 6000},
		WorkflowTaskScheduleToStartMs: &Latency{Count: 300, Mean: 2, P95: 20}, Kind: KindOurs}
	r := Bracketed(before, after)
	require.Equal(t, 25.0, r.HostsPerSecond)
	require.Equal(t, 18.0, r.ProvisionerCPUMsPerHost)
	require.Equal(t, 55.0, r.TemporalCPUMsPerHost)
	require.Equal(t, Percentiles{P50: 800, P95: 2500, P99: 3500, Max: 6000}, r.ToConfiguredMs)
	require.Equal(t, 90.0, r.ProvisionerPeakRSSMiB, "peak memory: the higher")
	require.Equal(t, 499, r.Configured, "hosts configured: the fewer")
	require.Equal(t, 1, r.ConfiguredTwice)
	require.Equal(t, 1.002, r.RunsPerHost)
	require.Equal(t, &Latency{Count: 400, Mean: 4, P95: 30}, r.WorkflowTaskScheduleToStartMs, "mean weighted by count")
	require.Equal(t, 20.0, before.HostsPerSecond, "the runs themselves are kept as they were")
}
