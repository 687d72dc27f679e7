package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/choria-io/fisk"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/audit"
	"github.com/choria-temporal/provisioner/internal/service"
)

// auditCommand lists the identities issued in a window, from Temporal alone.
type auditCommand struct {
	config      string
	since       string
	until       string
	identity    string
	json        bool
	noDecisions bool
	verify      bool
	sinkFile    string
	out         io.Writer
}

func (a *auditCommand) register(app *fisk.Application) {
	a.out = os.Stdout
	cmd := app.Command("audit", "List every identity issued in a window, superseded ones included: identity, issued, expires, signer, the helper's decision, the run, its source")
	configFlag(cmd, "Provisioner configuration file (its temporal section, site and codec key are used)", &a.config)
	cmd.Flag("since", "Start of the window: an RFC 3339 time or a duration ago (24h, 7d); required but with --verify").StringVar(&a.since)
	cmd.Flag("until", "End of the window (default: now), as --since").StringVar(&a.until)
	cmd.Flag("identity", "Only this host's issuances").StringVar(&a.identity)
	cmd.Flag("json", "JSON lines, one issuance an object (for a SIEM)").UnNegatableBoolVar(&a.json)
	cmd.Flag("no-decisions", "Read visibility only: no history read, no codec key needed, no helper decision or message").UnNegatableBoolVar(&a.noDecisions)
	cmd.Flag("verify", "Check the audit sink's chain (audit.sink, audit.key_file): every entry's MAC and place; names an entry edited, removed or inserted, and exits 1 on any").UnNegatableBoolVar(&a.verify)
	cmd.Flag("file", "With --verify: this file of entries instead of audit.file (a copy the log pipeline kept, sink stdout)").StringVar(&a.sinkFile)
}

func (a *auditCommand) window(now time.Time) (audit.Window, error) {
	w := audit.Window{Identity: a.identity}
	if a.since == "" {
		return w, fmt.Errorf("--since is required (or --verify)")
	}
	var err error
	if w.Since, err = audit.ParseTime(a.since, now); err != nil {
		return w, err
	}
	if a.until != "" {
		w.Until, err = audit.ParseTime(a.until, now)
	}
	return w, err
}

func (a *auditCommand) run(ctx context.Context) error {
	if a.verify {
		return a.verifySink(ctx)
	}
	w, err := a.window(time.Now())
	if err != nil {
		return err
	}
	cfg, err := config.LoadForOperator(a.config)
	if err != nil {
		return err
	}
	r := &audit.Reader{TaskQueue: cfg.Temporal.TaskQueue, Site: cfg.Site}
	if !a.noDecisions {
		dc, cd, err := service.DataConverter(cfg)
		if err != nil {
			return fmt.Errorf("the helper's decisions need the codec key (or --no-decisions): %w", err)
		}
		// the worker's rules: an answer the worker would not have read is no decision
		// (temporal.plaintext: nothing is encrypted, so nothing can be checked)
		r.DC = dc
		if cd != nil {
			r.DC = audit.Converter(cd)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := service.DialTemporal(dctx, cfg, zap.NewNop())
	if err != nil {
		return fmt.Errorf("temporal is unreachable: %w", err)
	}
	defer c.Close()
	r.C = c
	recs, err := r.Records(ctx, w)
	if err != nil {
		return err
	}
	if recs, err = a.withSink(ctx, cfg, recs, w); err != nil {
		return err
	}
	if a.json {
		return audit.WriteJSON(a.out, recs)
	}
	return audit.WriteTable(a.out, recs)
}
