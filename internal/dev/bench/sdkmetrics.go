package bench

import (
	"fmt"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Latency summarises a Temporal SDK latency histogram, in milliseconds: its mean, and its p95
// interpolated within the histogram's buckets.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean"`
	P95   float64 `json:"p95"`
}

// The Temporal SDK's schedule-to-start series, as OpenTelemetry's Prometheus exporter names them.
const (
	activityScheduleToStart     = "temporal_activity_schedule_to_start_latency_seconds"
	workflowTaskScheduleToStart = "temporal_workflow_task_schedule_to_start_latency_seconds"
)

// scrape reads a Prometheus page on a loopback port.
func scrape(port int) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading /metrics on port %d: %w", port, err)
	}
	return families, nil
}

// sdkLatencies reads the schedule-to-start latencies from the provisioner's /metrics.
func sdkLatencies(port int, res *Result) error {
	families, err := scrape(port)
	if err != nil {
		return err
	}
	res.ActivityScheduleToStartMs = latency(families[activityScheduleToStart])
	res.WorkflowTaskScheduleToStartMs = latency(families[workflowTaskScheduleToStart])
	if res.ActivityScheduleToStartMs == nil && res.WorkflowTaskScheduleToStartMs == nil {
		return fmt.Errorf("no %s on /metrics (an older build?)", activityScheduleToStart)
	}
	return nil
}

// latency merges every series of a histogram family (task queues, activity types).
func latency(f *dto.MetricFamily) *Latency {
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	var count uint64
	var sum float64
	buckets := map[float64]uint64{}
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	if count == 0 {
		return nil
	}
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	return &Latency{Count: count, Mean: round(sum/float64(count)*1000, 1), P95: round(quantile(0.95, count, bounds, buckets)*1000, 1)}
}

// quantile interpolates linearly within the bucket that holds the q-th observation.
func quantile(q float64, count uint64, bounds []float64, cumulative map[float64]uint64) float64 {
	rank := q * float64(count)
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		c := cumulative[b]
		if float64(c) >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			if c == below {
				return b
			}
			return lower + (b-lower)*(rank-float64(below))/float64(c-below)
		}
		lower, below = b, c
	}
	return lower
}
