package style

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// No test asserts by sleeping: "sleep, then check nothing happened" passes vacuously on a slow
// machine, and "sleep, then expect N" fails on one. A test waits on the event it expects
// (require.Eventually on the condition), proves a window closed by a later event (a later sweep
// counted, a later step in the history, a log line of the decision), or owns its clock: in a
// synctest bubble time.Sleep moves the bubble's fake clock, exactly, and takes no wall time.
// The sleeps left on the wall clock are the exceptions below, each with why: a fault held for
// its period, a scenario's pacing, the interval of a poll that asserts on what it polls.

// sleepException is a function (Recv.Method for a method) of a test file that may sleep on
// the wall clock, n times (a new sleep there is not taken for one already justified).
type sleepException struct {
	file, fn string
	n        int
	why      string
}

var sleepExceptions = []sleepException{
	// faults and scenarios held for their period: the duration is what the test measures
	{"internal/integration/faults_manual_test.go", "TestIntegrationFaultDiskFull", 1, "holds the disk full for FAULTS_DISK_FULL, the fault's period"},
	{"internal/integration/faults_compound_test.go", "TestIntegrationFaultPartitions", 1, "holds each cut for FAULTS_PARTITION_CUT, the fault's period"},
	{"internal/integration/faults_sim_test.go", "sleepUntil", 1, "paces a compound fault: each injection at its offset from the first"},
	{"internal/integration/rollingupgrade_test.go", "TestIntegrationRollingUpgrade", 1, "holds an upgraded replica down 10 s (a reboot, systemd's RestartSec) mid-upgrade"},
	{"internal/integration/restartwindow_test.go", "restartWindow", 1, "a re-image longer than the restart window: the product judges it on the wall clock, against Temporal's timestamps"},
	{"internal/integration/webui_test.go", "TestIntegrationWebUIFastModeHost", 1, "lets the UI lay out again before a screenshot for the docs; nothing is asserted on it"},
	// the interval of a poll that asserts on the polled condition (fails at once on a dead
	// service or simulator, or reports the last state read)
	{"internal/integration/compose_test.go", "TestComposeStack", 1, "polls docker compose ps, failing at once on a service that exited, until all are healthy"},
	{"internal/integration/compose_test.go", "browser.waitURL", 1, "polls the page's location until a redirect lands, with a deadline"},
	{"internal/integration/browser_test.go", "browser.waitText", 1, "polls the page's text until it shows what is awaited, with a deadline"},
	{"internal/integration/health_test.go", "env.waitProbe", 1, "polls a probe URL until it answers the awaited code and state, with a deadline"},
	{"internal/integration/postgres_test.go", "waitSimDone", 1, "polls the simulator's status file until every host restarted or time is up (the caller counts the lost)"},
	{"internal/integration/faults_sim_test.go", "env.waitSimDone", 1, "the same, ended at once by a simulator that exited"},
	{"internal/health/health_test.go", "TestProbeFollowsTheComponent", 1, "polls the report (1000 waits of 1 ms) until the probe loop reaches the awaited state; its owner's to put in a bubble"},
	// asserts by sleeping, to be converted by the file's owner: waiting on the broker's exit
}

// sleepSite is one reference to time.Sleep in a test file.
type sleepSite struct {
	fn     string // the enclosing top-level function, Recv.Method for a method
	line   int
	bubble bool // inside a synctest.Test bubble
}

// sleepSites are the references to time.Sleep (called or not) in f.
func sleepSites(fs *token.FileSet, f *ast.File) []sleepSite {
	timeName, synctestName := importName(f, "time"), importName(f, "testing/synctest")
	if timeName == "" {
		return nil
	}
	is := func(e ast.Expr, pkg, name string) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || pkg == "" {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == pkg && sel.Sel.Name == name
	}
	// functions of the file passed by name to synctest.Test run in a bubble as a whole
	bubbleFuncs := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && is(c.Fun, synctestName, "Test") && len(c.Args) == 2 {
			if id, ok := c.Args[1].(*ast.Ident); ok {
				bubbleFuncs[id.Name] = true
			}
		}
		return true
	})
	var sites []sleepSite
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = recvName(fd.Recv.List[0].Type) + "." + name
		}
		var bubbles []ast.Node // the function literals given to synctest.Test
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok && is(c.Fun, synctestName, "Test") && len(c.Args) == 2 {
				bubbles = append(bubbles, c.Args[1])
			}
			if n != nil && is(exprOf(n), timeName, "Sleep") {
				in := bubbleFuncs[fd.Name.Name] && fd.Recv == nil
				for _, b := range bubbles {
					in = in || b.Pos() <= n.Pos() && n.End() <= b.End()
				}
				sites = append(sites, sleepSite{fn: name, line: fs.Position(n.Pos()).Line, bubble: in})
			}
			return true
		})
	}
	return sites
}

func exprOf(n ast.Node) ast.Expr {
	e, _ := n.(ast.Expr)
	return e
}

// importName is the name path is imported as in f ("" when it is not).
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == path {
			if im.Name != nil {
				return im.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// testFiles are the repository's *_test.go files, relative to its root.
func testFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// wallClockSleeps counts, by file and function, the sleeps outside synctest bubbles, with the
// line of each.
func wallClockSleeps(t *testing.T) map[[2]string][]int {
	t.Helper()
	fs := token.NewFileSet()
	out := map[[2]string][]int{}
	for _, rel := range testFiles(t) {
		f, err := parser.ParseFile(fs, filepath.Join("../..", rel), nil, parser.SkipObjectResolution)
		require.NoError(t, err, rel)
		for _, s := range sleepSites(fs, f) {
			if !s.bubble {
				out[[2]string{rel, s.fn}] = append(out[[2]string{rel, s.fn}], s.line)
			}
		}
	}
	return out
}

// Every time.Sleep of a test outside a synctest bubble is a named exception, as many times as
// it says, with why; and every exception still names sleeps (a stale one is removed).
func TestNoTestAssertsBySleeping(t *testing.T) {
	found := wallClockSleeps(t)
	listed := map[[2]string]bool{}
	for _, x := range sleepExceptions {
		key := [2]string{x.file, x.fn}
		require.False(t, listed[key], "%s %s is listed twice", x.file, x.fn)
		listed[key] = true
		if strings.TrimSpace(x.why) == "" {
			t.Errorf("%s %s: an exception says why", x.file, x.fn)
		}
		switch lines := found[key]; {
		case len(lines) == 0:
			t.Errorf("%s %s: listed as sleeping, and no longer does: remove the exception", x.file, x.fn)
		case len(lines) != x.n:
			t.Errorf("%s %s sleeps %d times (lines %v), the exception names %d: wait on an event for the new one, or say why it is one",
				x.file, x.fn, len(lines), lines, x.n)
		}
	}
	for key, lines := range found {
		if !listed[key] {
			for _, l := range lines {
				t.Errorf("%s:%d: %s sleeps on the wall clock: wait on the event it expects (require.Eventually), on a later one "+
					"that closes the window, or own the clock (synctest); a fault held or a pace kept is an exception in sleepExceptions, with why",
					key[0], l, key[1])
			}
		}
	}
}

// The check bites: a sleep outside a bubble is found, in its function; one inside a bubble (a
// literal or a function given by name), or in a comment, is not; an aliased import is followed.
func TestTheCheckFindsASleep(t *testing.T) {
	src := `package x
import (
	"testing"
	"testing/synctest"
	clock "time"
)
// clock.Sleep(time.Second) in a comment
func TestA(t *testing.T) {
	clock.Sleep(clock.Second)
	synctest.Test(t, func(t *testing.T) { clock.Sleep(clock.Hour) })
	synctest.Test(t, inABubble)
}
func inABubble(t *testing.T) { clock.Sleep(clock.Minute) }
type env struct{}
func (e *env) wait() { f := clock.Sleep; f(0) }
`
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "x_test.go", src, parser.ParseComments)
	require.NoError(t, err)
	var got []string
	for _, s := range sleepSites(fs, f) {
		got = append(got, fmt.Sprintf("%s:%d:%v", s.fn, s.line, s.bubble))
	}
	require.Equal(t, []string{"TestA:9:false", "TestA:10:true", "inABubble:13:true", "env.wait:15:false"}, got)
	require.True(t, strings.HasSuffix(testFiles(t)[0], "_test.go"))
}
