package preflight

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
)

type runner struct {
	o      Options
	log    *zap.Logger
	report func(Result)
	failed int
}

func (r *runner) emit(res Result) {
	if res.Status == Fail {
		r.failed++
	}
	r.report(res)
}

// Run runs every check in order, handing each result to report as it is known, and returns how
// many failed. Checks that depend on an earlier one (the namespace on Temporal) are left out
// when it failed.
func Run(ctx context.Context, o Options, report func(Result)) int {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.User == "" {
		o.User = "this user"
	}
	r := &runner{o: o, log: o.Log, report: report}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	if o.Sandbox != nil {
		r.emit(Result{Name: "unit", Status: OK, Detail: fmt.Sprintf("%s (and its drop-ins): runs as %s; files are checked against its sandbox", o.Sandbox.Unit, orNone(o.Sandbox.User))})
	}
	cfg := r.checkConfig()
	if cfg == nil {
		return r.failed
	}
	r.checkFiles(cfg)
	r.checkHelper(cfg)
	r.checkSecrets(cfg)
	r.checkSigner(cfg)
	cd := r.checkCodecKey(cfg)
	r.checkHealth(ctx, cfg)
	r.checkBroker(ctx, cfg)
	tc := r.checkTemporal(ctx, cfg)
	if tc == nil {
		return r.failed
	}
	defer tc.Close()
	ok, retention := r.checkNamespace(ctx, cfg, tc)
	if !ok {
		return r.failed
	}
	r.checkSearchAttributes(ctx, cfg, tc)
	r.checkRenewal(ctx, cfg, tc, retention)
	if cd != nil {
		r.checkCodecMatches(ctx, cfg, tc, cd)
	}
	return r.failed
}

// Print writes one result as one line: status, check, what was found and, for a problem, what
// to do about it.
func Print(w io.Writer, res Result) {
	line := fmt.Sprintf("%-4s  %-18s %s", res.Status, res.Name, res.Detail)
	if res.Fix != "" && res.Status != OK {
		line += " -> " + res.Fix
	}
	fmt.Fprintln(w, line)
}
