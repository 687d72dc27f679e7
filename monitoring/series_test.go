package monitoring

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/common/metrics/sdkmetrics"
)

// series are the names /metrics can serve, each with the label names its samples may carry.
type series map[string]map[string]bool

// scrapeLabels are added by Prometheus to every series it scrapes.
var scrapeLabels = []string{"instance", "job"}

// exportedSeries is what the provisioner serves: the choria_provisioner_* series of a real
// registry made by metrics.New, every vector given a child so that it is gathered, and every
// series the Temporal SDK records (found in the SDK's own source, sdkMetrics) recorded once
// through the provisioner's own SDK handler, which drops the per-request ones as it does in
// production. What a real registry gathers is what the exposition names: _total on the SDK's
// counters, _seconds and _bucket on its timers, the client's names verbatim on ours.
func exportedSeries(t *testing.T) series {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "dc1")
	require.NoError(t, err)
	touchVectors(t, m)
	h, stop, err := sdkmetrics.Handler(reg, zap.NewNop())
	require.NoError(t, err)
	defer stop()
	sdk := sdkMetrics(t)
	for name, kind := range sdk.kinds {
		switch kind {
		case "Counter":
			h.Counter(name).Inc(1)
		case "Gauge":
			h.Gauge(name).Update(1)
		case "Timer":
			h.Timer(name).Record(time.Millisecond)
		}
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	out := series{}
	for _, f := range families {
		labels := map[string]bool{}
		for _, l := range scrapeLabels {
			labels[l] = true
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		if strings.HasPrefix(f.GetName(), "temporal_") {
			// recorded here without tags; in production they carry the SDK's tag keys
			for k := range sdk.tags {
				labels[k] = true
			}
		}
		addFamily(out, f, labels)
	}
	return out
}

// addFamily adds the sample names of one gathered family as the text exposition writes them.
func addFamily(out series, f *dto.MetricFamily, labels map[string]bool) {
	with := func(extra string) map[string]bool {
		l := map[string]bool{extra: true}
		for k := range labels {
			l[k] = true
		}
		return l
	}
	name := f.GetName()
	switch f.GetType() {
	case dto.MetricType_HISTOGRAM:
		out[name+"_bucket"] = with("le")
		out[name+"_sum"], out[name+"_count"] = labels, labels
	case dto.MetricType_SUMMARY:
		if len(f.GetMetric()) > 0 && len(f.GetMetric()[0].GetSummary().GetQuantile()) > 0 {
			out[name] = with("quantile")
		}
		out[name+"_sum"], out[name+"_count"] = labels, labels
	default:
		out[name] = labels
	}
}

// touchVectors makes one child of every vector in m, whatever its label count, so that the
// registry gathers the series that are only exported once something happens (rpc_time, ...).
func touchVectors(t *testing.T, m *metrics.Metrics) {
	t.Helper()
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		get := v.Field(i).MethodByName("GetMetricWithLabelValues")
		if !get.IsValid() {
			continue
		}
		made := false
		for n := 1; n <= 5 && !made; n++ {
			args := make([]reflect.Value, n)
			for j := range args {
				args[j] = reflect.ValueOf("x")
			}
			made = get.Call(args)[1].IsNil()
		}
		require.True(t, made, "no label count fits metrics.Metrics.%s", v.Type().Field(i).Name)
	}
}

// sdk is what the Temporal SDK records: each metric's name and the kind of instrument it is
// recorded with, and the tag keys its series carry.
type sdk struct {
	kinds map[string]string
	tags  map[string]bool
}

// sdkMetrics reads the Temporal SDK the provisioner links (its module directory, from go list):
// the metric names and tag keys are constants of its internal/common/metrics package, and a
// name's kind is the handler method (Counter, Gauge, Timer) it is passed to, directly or through
// a variable assigned in the same function. Names the SDK declares but never records are left
// out: nothing exports them.
func sdkMetrics(t *testing.T) sdk {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.temporal.io/sdk").Output()
	require.NoError(t, err, "locating the Temporal SDK's source")
	dir := strings.TrimSpace(string(out))
	require.NotEmpty(t, dir, "the Temporal SDK is not in the module cache: go mod download")
	consts, tags := sdkConstants(t, filepath.Join(dir, "internal", "common", "metrics", "constants.go"))

	res := sdk{kinds: map[string]string{}, tags: tags}
	fset := token.NewFileSet()
	// every series is recorded under internal/ (the rest of the module holds a file of Go 1.27
	// syntax, which this toolchain's go/parser refuses)
	err = filepath.WalkDir(filepath.Join(dir, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				recordKinds(t, fn.Body, f.Name.Name == "metrics", consts, res.kinds)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, res.kinds, "no metric found in the Temporal SDK's source")
	return res
}

// sdkConstants evaluates constants.go (it imports nothing) with go/types: every string constant
// by its Go name, and the values of the "Metric tag keys" block.
func sdkConstants(t *testing.T, file string) (map[string]string, map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	require.NoError(t, err)
	pkg, err := (&types.Config{}).Check("metrics", fset, []*ast.File{f}, nil)
	require.NoError(t, err)
	consts := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		if c, ok := pkg.Scope().Lookup(name).(*types.Const); ok && c.Val().Kind() == constant.String {
			consts[name] = constant.StringVal(c.Val())
		}
	}
	tags := map[string]bool{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || g.Doc == nil || !strings.Contains(g.Doc.Text(), "tag keys") {
			continue
		}
		for _, spec := range g.Specs {
			for _, n := range spec.(*ast.ValueSpec).Names {
				tags[consts[n.Name]] = true
			}
		}
	}
	require.NotEmpty(t, tags, "no metric tag keys in %s", file)
	return consts, tags
}

// recordKinds finds handler.Counter/Gauge/Timer(x) calls in body, x a metrics constant or a
// variable body assigns constants to, and records each constant's value with the kind.
func recordKinds(t *testing.T, body *ast.BlockStmt, inMetrics bool, consts map[string]string, kinds map[string]string) {
	direct := func(e ast.Expr) string {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && id.Name == "metrics" {
				if _, ok := consts[x.Sel.Name]; ok {
					return x.Sel.Name
				}
			}
		case *ast.Ident:
			if _, ok := consts[x.Name]; ok && inMetrics {
				return x.Name
			}
		}
		return ""
	}
	assigned := map[string][]string{}
	ast.Inspect(body, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == len(a.Rhs) {
			for i, l := range a.Lhs {
				if id, ok := l.(*ast.Ident); ok && direct(a.Rhs[i]) != "" {
					assigned[id.Name] = append(assigned[id.Name], direct(a.Rhs[i]))
				}
			}
		}
		return true
	})
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Counter" && sel.Sel.Name != "Gauge" && sel.Sel.Name != "Timer") {
			return true
		}
		names := []string{direct(call.Args[0])}
		if id, ok := call.Args[0].(*ast.Ident); ok && names[0] == "" {
			names = assigned[id.Name]
		}
		for _, c := range names {
			if c == "" || !strings.HasPrefix(consts[c], "temporal_") {
				continue
			}
			if k, seen := kinds[consts[c]]; seen && k != sel.Sel.Name {
				t.Fatalf("the SDK records %s both as a %s and as a %s", consts[c], k, sel.Sel.Name)
			}
			kinds[consts[c]] = sel.Sel.Name
		}
		return true
	})
}
