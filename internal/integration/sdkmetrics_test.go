package integration

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/common/metrics/sdkmetrics"
)

// The Temporal SDK's own signals are on the provisioner's registry beside the
// choria_provisioner_* series, as Prometheus series with the names Temporal's worker tuning
// guide uses, and they move with the work: schedule-to-start latencies of every activity and
// workflow task the worker ran, slots, pollers.
func TestIntegrationTemporalSDKMetrics(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0})
	status := e.startFleetSim(5, "--prefix", "sdkm-")
	svc := e.provisioner("replica-a")
	waitSimRestarted(t, status, 5, 60*time.Second)

	var families map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		got, err := svc.Registry().Gather()
		require.NoError(t, err)
		families = map[string]*dto.MetricFamily{}
		for _, f := range got {
			families[f.GetName()] = f
		}
		p := families["choria_provisioner_provisioned"]
		return p != nil && p.GetMetric()[0].GetCounter().GetValue() == 5
	}, 10*time.Second, 200*time.Millisecond)

	histogram := func(name string) *dto.Histogram {
		t.Helper()
		f := families[name]
		require.NotNil(t, f, "%s on the registry", name)
		require.Equal(t, dto.MetricType_HISTOGRAM, f.GetType(), name)
		h := &dto.Histogram{}
		for _, m := range f.GetMetric() {
			h.SampleCount = ptr(h.GetSampleCount() + m.GetHistogram().GetSampleCount())
			h.Bucket = m.GetHistogram().GetBucket()
		}
		return h
	}
	// 6 regular activities per host (jwt, gen25519, inventory, helper, configure, restart; sign is
	// a local activity in the helper's task); at least one workflow task each
	act := histogram("temporal_activity_schedule_to_start_latency_seconds")
	require.GreaterOrEqual(t, act.GetSampleCount(), uint64(5*6), "activities of 5 hosts")
	require.Len(t, act.GetBucket(), len(sdkmetrics.LatencyBuckets), "latency buckets in seconds")
	require.Greater(t, histogram("temporal_workflow_task_schedule_to_start_latency_seconds").GetSampleCount(), uint64(5))
	require.Greater(t, histogram("temporal_workflow_task_execution_latency_seconds").GetSampleCount(), uint64(5))
	require.GreaterOrEqual(t, histogram("temporal_activity_execution_latency_seconds").GetSampleCount(), uint64(5*6))
	for _, name := range []string{"temporal_worker_task_slots_available", "temporal_worker_task_slots_used", "temporal_num_pollers"} {
		require.NotNil(t, families[name], "%s on the registry", name)
	}
	var names []string
	for n := range families {
		names = append(names, n)
	}
	require.NotNil(t, families["temporal_workflow_task_queue_poll_succeed_total"], "SDK counters are Prometheus counters: %v", names)
	require.Equal(t, dto.MetricType_COUNTER, families["temporal_workflow_task_queue_poll_succeed_total"].GetType())
}

func ptr[T any](v T) *T { return &v }
