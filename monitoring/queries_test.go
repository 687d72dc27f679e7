package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	dashboardFile  = "grafana/choria-provisioner.json"
	rulesFile      = "prometheus/alerts.yaml"
	rulesTestsFile = "prometheus/alerts_test.yaml"
)

// grafanaMacros are the dashboard's interval variables, as Grafana substitutes them before the
// query reaches Prometheus. The other variables ($site, $instance) stand only inside quoted
// label matchers, where any text parses.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m", "$__range", "1h", "${__range}", "1h")

// checker parses a query as PromQL and checks that every series it selects is exported, with
// the labels it matches on, and that every label it groups or joins by is on one of them.
type checker struct {
	exported series
	// prometheus are series Prometheus makes itself (up): alert rules may use them
	prometheus series
	p          parser.Parser
}

func newChecker(t *testing.T) checker {
	return checker{exported: exportedSeries(t), p: parser.NewParser(parser.Options{})}
}

func (c checker) check(query string) error {
	expr, err := c.p.ParseExpr(grafanaMacros.Replace(query))
	if err != nil {
		return fmt.Errorf("%q is not PromQL: %w", query, err)
	}
	var errs []error
	seen := map[string]bool{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		labels, ok := c.exported[vs.Name]
		if !ok {
			labels, ok = c.prometheus[vs.Name]
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%q: nothing exports a series named %q", query, vs.Name))
			return nil
		}
		for l := range labels {
			seen[l] = true
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel && !labels[m.Name] {
				errs = append(errs, fmt.Errorf("%q: %s has no label %q", query, vs.Name, m.Name))
			}
		}
		return nil
	})
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		var by []string
		switch x := n.(type) {
		case *parser.AggregateExpr:
			by = x.Grouping
		case *parser.BinaryExpr:
			if x.VectorMatching != nil {
				by = append(append(by, x.VectorMatching.MatchingLabels...), x.VectorMatching.Include...)
			}
		}
		for _, l := range by {
			if !seen[l] {
				errs = append(errs, fmt.Errorf("%q: no series it selects has a label %q", query, l))
			}
		}
		return nil
	})
	return errors.Join(errs...)
}

// labelValues is Grafana's variable query label_values(selector, label), which is not PromQL.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

func (c checker) checkVariable(query string) error {
	m := labelValues.FindStringSubmatch(strings.TrimSpace(query))
	if m == nil {
		return c.check(query)
	}
	return c.check(fmt.Sprintf("group by (%s) (%s)", m[2], m[1]))
}

// dashboard is what the test reads of the Grafana dashboard.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

// checkDashboard checks every panel's queries and every variable's, and says how many queries.
func (c checker) checkDashboard(d dashboard) (int, error) {
	var errs []error
	queries := 0
	for _, p := range d.Panels {
		for _, p := range append([]panel{p}, p.Panels...) {
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("panel %q has no query", p.Title))
			}
			for _, tg := range p.Targets {
				if err := c.check(tg.Expr); err != nil {
					errs = append(errs, fmt.Errorf("panel %q: %w", p.Title, err))
				}
				queries++
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, ok := v.Query.(string)
		if m, isMap := v.Query.(map[string]any); isMap {
			q, ok = m["query"].(string)
		}
		if !ok {
			errs = append(errs, fmt.Errorf("variable %s has no query", v.Name))
		} else if err := c.checkVariable(q); err != nil {
			errs = append(errs, fmt.Errorf("variable %s: %w", v.Name, err))
		}
	}
	return queries, errors.Join(errs...)
}

// Every panel of the dashboard has queries, each PromQL over series the provisioner or the
// Temporal SDK exports, with labels they have; so do the variables.
func TestDashboardQueriesNameExportedSeries(t *testing.T) {
	c := newChecker(t)
	n, err := c.checkDashboard(readDashboard(t))
	require.NoError(t, err)
	require.Greater(t, n, 20)
	t.Logf("%d queries checked against %d exported series", n, len(c.exported))
}

// The same check of the same dashboard fails once one panel names a series nobody exports, or
// loses its queries.
func TestDashboardCheckFailsOnAPanelOfNobodysSeries(t *testing.T) {
	c := newChecker(t)
	d := readDashboard(t)
	p := &d.Panels[len(d.Panels)-1]
	p.Targets[0].Expr = `sum(rate(choria_provisioner_hosts_retried[5m]))`
	_, err := c.checkDashboard(d)
	require.ErrorContains(t, err, `nothing exports a series named "choria_provisioner_hosts_retried"`)

	d = readDashboard(t)
	d.Panels[1].Targets = nil
	_, err = c.checkDashboard(d)
	require.ErrorContains(t, err, "has no query")
}

// The alert rules are valid Prometheus rules (rulefmt parses every expression) over series the
// provisioner or the SDK exports, or up, which Prometheus makes for every target it scrapes.
func TestAlertRulesNameExportedSeries(t *testing.T) {
	c := newChecker(t)
	c.prometheus = series{"up": {"instance": true, "job": true}}
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, c.p, slog.Default())
	require.Empty(t, errs)
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NoError(t, c.check(r.Expr), "rule %s%s", r.Alert, r.Record)
			require.NotEmpty(t, r.Annotations["summary"], "alert %s says nothing", r.Alert)
			require.NotEmpty(t, r.Labels["severity"], "alert %s has no severity", r.Alert)
			n++
		}
	}
	require.Positive(t, n)
}

// rulesTests is what the test reads of promtool's unit test file.
type rulesTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Alerts []struct {
			Name     string `yaml:"alertname"`
			Expected []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// promtool runs the unit tests (make test-monitoring); this says they cover every alert, once
// firing and once not, so that a new alert cannot go untested.
func TestEveryAlertIsTestedFiringAndNot(t *testing.T) {
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.Default())
	require.Empty(t, errs)
	b, err := os.ReadFile(rulesTestsFile)
	require.NoError(t, err)
	var tests rulesTests
	require.NoError(t, yaml.Unmarshal(b, &tests))
	require.Equal(t, []string{"alerts.yaml"}, tests.RuleFiles)
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.Alerts {
			if len(a.Expected) > 0 {
				firing[a.Name] = true
			} else {
				quiet[a.Name] = true
			}
		}
	}
	var missing []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !firing[r.Alert] {
				missing = append(missing, r.Alert+" firing")
			}
			if !quiet[r.Alert] {
				missing = append(missing, r.Alert+" not firing")
			}
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "alerts without a promtool test case")
}

// The checker is what makes the tests above able to fail: a series nobody exports, one the
// provisioner's SDK handler drops, a label a series lacks, and text that is not PromQL are
// refused; a good query passes.
func TestCheckerRefusesWhatNobodyExports(t *testing.T) {
	c := newChecker(t)
	require.NoError(t, c.check(`sum by (site) (rate(choria_provisioner_provisioned{site=~"$site"}[$__rate_interval]))`))
	require.NoError(t, c.check(`histogram_quantile(0.95, sum by (le, task_queue) (rate(temporal_activity_schedule_to_start_latency_seconds_bucket[5m])))`))
	for _, bad := range []string{
		`rate(choria_provisioner_hosts_provisioned[5m])`,          // no such series
		`rate(temporal_request_latency_seconds_count[5m])`,        // the SDK's, dropped by our handler
		`sum(choria_provisioner_rpc_time_sum{step="configure"})`,  // no such label
		`sum by (activity_type) (choria_provisioner_provisioned)`, // grouped by a label it lacks
		`up == 0`, // Prometheus', not ours
		`sum(rate(choria_provisioner_provisioned[5m]) by (site)`,                      // not PromQL
		`label_values(choria_provisioner_provisioned, task_queue)`,                    // not a dashboard query
		`temporal_workflow_completed`,                                                 // counters end in _total
		`temporal_activity_schedule_to_start_latency_bucket`,                          // timers are _seconds
		`choria_provisioner_helper_time{quantile="0.5"}`,                              // our summaries have no quantiles
		`choria_provisioner_discovered{site="dc1"} and on (rpc) temporal_num_pollers`, // joined on a missing label
	} {
		require.Error(t, c.check(bad), bad)
	}
	require.Error(t, c.checkVariable(`label_values(choria_provisioner_provisioned, task_queue)`))
	require.NoError(t, c.checkVariable(`label_values(choria_provisioner_provisioned, site)`))
}
