package bench

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// As the Temporal server's Prometheus reporter writes them: a counter with the operation among
// other labels, and histograms whose count and sum the bench reads.
const serverPage = `# TYPE persistence_requests counter
persistence_requests{namespace="default",operation="UpdateWorkflowExecution",service_name="history"} 170
persistence_requests{namespace="system",operation="UpdateWorkflowExecution",service_name="history"} 30
persistence_requests{namespace="default",operation="CreateTasks",service_name="matching"} 40
# TYPE persistence_latency histogram
persistence_latency_bucket{operation="UpdateWorkflowExecution",service_name="history",le="0.001"} 150
persistence_latency_bucket{operation="UpdateWorkflowExecution",service_name="history",le="+Inf"} 200
persistence_latency_sum{operation="UpdateWorkflowExecution",service_name="history"} 0.5
persistence_latency_count{operation="UpdateWorkflowExecution",service_name="history"} 200
# TYPE visibility_persistence_requests counter
visibility_persistence_requests{operation="UpsertWorkflowExecution",service_name="history",visibility_plugin_name="sqlite"} 20
# TYPE task_latency histogram
task_latency_bucket{operation="TimerActiveTaskWorkflowTaskTimeout",le="+Inf"} 70
task_latency_sum{operation="TimerActiveTaskWorkflowTaskTimeout"} 1
task_latency_count{operation="TimerActiveTaskWorkflowTaskTimeout"} 70
task_latency_bucket{operation="VisibilityTaskStartExecution",le="+Inf"} 10
task_latency_sum{operation="VisibilityTaskStartExecution"} 1
task_latency_count{operation="VisibilityTaskStartExecution"} 10
`

func TestServerCountsPerHost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var page atomic.Value
	page.Store(serverPage)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page.Load()) })}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port

	before, err := serverCounts(port)
	require.NoError(t, err)
	require.Equal(t, 200.0, before["persistence_requests/UpdateWorkflowExecution"], "summed over namespaces")
	require.Equal(t, 500.0, before["persistence_ms/UpdateWorkflowExecution"])
	require.Equal(t, 70.0, before["tasks/TimerActiveTaskWorkflowTaskTimeout"])
	require.Equal(t, 20.0, before["visibility_requests/UpsertWorkflowExecution"], "the visibility store's writes")

	after := map[string]float64{}
	for k, v := range before {
		after[k] = v
	}
	after["persistence_requests/UpdateWorkflowExecution"] += 170
	after["tasks/TimerActiveTaskWorkflowTaskTimeout"] += 72
	after["tasks/VisibilityTaskStartExecution"] += 10
	got := perHost(before, after, 10)
	require.Equal(t, map[string]float64{"persistence_requests/UpdateWorkflowExecution": 17, "tasks/TimerActiveTaskWorkflowTaskTimeout": 7.2,
		"tasks/VisibilityTaskStartExecution": 1}, got, "series that did not move are left out")

	r := &Result{TemporalServerPerHost: got}
	v, ok := serverFamily("tasks/Timer")(r)
	require.True(t, ok)
	require.Equal(t, 7.2, v)
	_, ok = serverSeries("persistence_requests/CreateTasks")(&Result{})
	require.False(t, ok, "an older bench's result has no server series")

	m := meanSeries(got, map[string]float64{"persistence_requests/UpdateWorkflowExecution": 19})
	require.Equal(t, 18.0, m["persistence_requests/UpdateWorkflowExecution"])
	require.Equal(t, 3.6, m["tasks/TimerActiveTaskWorkflowTaskTimeout"])

	page.Store("# TYPE something_else counter\nsomething_else 1\n")
	_, err = serverCounts(port)
	require.ErrorContains(t, err, "none of the expected series")
}
