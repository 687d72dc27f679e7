package sdkmetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
)

func TestHandlerExportsOnTheRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := metrics.New(reg, "dc1")
	require.NoError(t, err)
	h, stop, err := Handler(reg, zap.NewNop())
	require.NoError(t, err)
	defer stop()
	tagged := h.WithTags(map[string]string{"task_queue": "q"})
	tagged.Timer("temporal_activity_schedule_to_start_latency").Record(30 * time.Millisecond)
	tagged.Counter("temporal_workflow_completed").Inc(2)
	tagged.Gauge("temporal_worker_task_slots_available").Update(7)
	tagged.WithTags(map[string]string{"operation": "PollWorkflowTaskQueue"}).Timer("temporal_request_latency").Record(time.Millisecond)

	got, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, f := range got {
		byName[f.GetName()] = f
	}
	require.Contains(t, byName, "choria_provisioner_paused", "our series stay")
	lat := byName["temporal_activity_schedule_to_start_latency_seconds"]
	require.NotNil(t, lat)
	hist := lat.GetMetric()[0].GetHistogram()
	require.Equal(t, uint64(1), hist.GetSampleCount())
	require.InDelta(t, 0.03, hist.GetSampleSum(), 1e-9)
	require.Len(t, hist.GetBucket(), len(LatencyBuckets))
	require.Equal(t, uint64(1), hist.GetBucket()[5].GetCumulativeCount(), "30 ms is in the 50 ms bucket")
	require.Equal(t, uint64(0), hist.GetBucket()[4].GetCumulativeCount(), "and not in the 25 ms one")
	var labels []string
	for _, l := range lat.GetMetric()[0].GetLabel() {
		labels = append(labels, l.GetName()+"="+l.GetValue())
	}
	require.Contains(t, labels, "task_queue=q")
	require.Equal(t, dto.MetricType_COUNTER, byName["temporal_workflow_completed_total"].GetType())
	require.Equal(t, 2.0, byName["temporal_workflow_completed_total"].GetMetric()[0].GetCounter().GetValue())
	require.Equal(t, 7.0, byName["temporal_worker_task_slots_available"].GetMetric()[0].GetGauge().GetValue())
	require.NotContains(t, byName, "temporal_request_latency_seconds", "per-request series are dropped")
}
