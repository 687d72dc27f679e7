package integration

import (
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// exposition is a process's /metrics page, parsed as Prometheus parses it: a family a name.
type exposition map[string]*dto.MetricFamily

// scrape reads the /metrics page of a process listening on 127.0.0.1:port.
func scrape(port int) (exposition, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics on port %d: %s", port, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// values are the samples of the family name whose labels include each pair given (label, value,
// label, value…): counters, gauges and untyped alike. None when the family is absent: a process
// shows a series once it has counted something.
func (x exposition) values(name string, labels ...string) []float64 {
	var out []float64
	for _, m := range x[name].GetMetric() {
		if hasLabels(m, labels) {
			out = append(out, m.GetCounter().GetValue()+m.GetGauge().GetValue()+m.GetUntyped().GetValue())
		}
	}
	return out
}

// sum is the total of values (0 when there are none).
func (x exposition) sum(name string, labels ...string) float64 {
	total := 0.0
	for _, v := range x.values(name, labels...) {
		total += v
	}
	return total
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
