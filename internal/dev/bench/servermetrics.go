package bench

import (
	"fmt"

	dto "github.com/prometheus/client_model/go"
)

// The Temporal dev server's own series the bench reads, by the operation label:
// what it asked of its database (and how long that took), which queue tasks it processed, and
// which requests each of its services served. They say where Temporal's CPU per host goes
// without a profiler, and they count, so they compare across machines.
var serverCounters = []struct {
	key, family string
	value       func(*dto.Metric) float64
}{
	{"persistence_requests", "persistence_requests", func(m *dto.Metric) float64 { return m.GetCounter().GetValue() }},
	// in milliseconds: per host, seconds rounded to two decimals said nothing
	{"persistence_ms", "persistence_latency", func(m *dto.Metric) float64 { return m.GetHistogram().GetSampleSum() * 1000 }},
	{"tasks", "task_latency", func(m *dto.Metric) float64 { return float64(m.GetHistogram().GetSampleCount()) }},
	// the visibility store's own: in the dev server the same SQLite file as the rest
	{"visibility_requests", "visibility_persistence_requests", func(m *dto.Metric) float64 { return m.GetCounter().GetValue() }},
	{"visibility_ms", "visibility_persistence_latency", func(m *dto.Metric) float64 { return m.GetHistogram().GetSampleSum() * 1000 }},
	{"service_requests", "service_requests", func(m *dto.Metric) float64 { return m.GetCounter().GetValue() }},
}

// serverCounts reads the server's counters from its /metrics, summed over every label but the
// operation (namespace, service), keyed "key/operation".
func serverCounts(port int) (map[string]float64, error) {
	families, err := scrape(port)
	if err != nil {
		return nil, fmt.Errorf("the Temporal server's metrics: %w", err)
	}
	out := map[string]float64{}
	for _, c := range serverCounters {
		for _, m := range families[c.family].GetMetric() {
			op := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" {
					op = l.GetValue()
				}
			}
			out[c.key+"/"+op] += c.value(m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none of the expected series on the Temporal server's /metrics")
	}
	return out, nil
}

// perHost is what happened between two readings, per host, to two decimals; series that did
// not move are left out.
func perHost(before, after map[string]float64, hosts int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = round(d/float64(max(hosts, 1)), 2)
		}
	}
	return out
}
