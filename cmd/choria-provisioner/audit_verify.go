package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/choria-temporal/provisioner/common/auditlog"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/audit"
	"github.com/choria-temporal/provisioner/internal/service"
)

// errAuditProblems makes audit --verify exit 1: the chain has entries that do not verify.
var errAuditProblems = errors.New("the audit chain does not verify")

// sinkStore is the audit key and the store of the configured sink (or --file), to read; close
// releases what opening it took (the stream's broker connection).
func (a *auditCommand) sinkStore(cfg *config.Config) (key []byte, store auditlog.Store, release func(), err error) {
	if cfg.Audit.KeyFile == "" {
		return nil, nil, nil, fmt.Errorf("audit.key_file is not set: the chain's MACs need it")
	}
	b, err := os.ReadFile(cfg.Audit.KeyFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("audit.key_file: %w", err)
	}
	if key, err = auditlog.ParseKey(string(b)); err != nil {
		return nil, nil, nil, fmt.Errorf("audit.key_file %s: %w", cfg.Audit.KeyFile, err)
	}
	switch {
	case a.sinkFile != "":
		return key, auditlog.ReadFile(a.sinkFile), func() {}, nil
	case cfg.Audit.Sink == "file":
		return key, auditlog.ReadFile(cfg.Audit.File), func() {}, nil
	case cfg.Audit.Sink == "stream":
		sink, err := service.OpenAudit(cfg, "operator:"+whoami())
		if err != nil {
			return nil, nil, nil, err
		}
		return key, sink.Read, func() { _ = sink.Close() }, nil
	}
	return nil, nil, nil, fmt.Errorf("audit.sink %q: give the entries' file with --file", cfg.Audit.Sink)
}

// verifySink checks the configured audit sink's chain and prints what it found.
func (a *auditCommand) verifySink(ctx context.Context) error {
	cfg, err := config.LoadForOperator(a.config)
	if err != nil {
		return err
	}
	key, store, release, err := a.sinkStore(cfg)
	if err != nil {
		return err
	}
	defer release()
	r, err := auditlog.Verify(ctx, key, store)
	if err != nil {
		return err
	}
	if a.json {
		if err := json.NewEncoder(a.out).Encode(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.out, "%d entries, the last %d\n", r.Entries, r.Last)
		for _, p := range r.Problems {
			fmt.Fprintf(a.out, "line %d (entry %d): %s\n", p.Line, p.Seq, p.What)
		}
	}
	if len(r.Problems) > 0 {
		return fmt.Errorf("%w: %d problems", errAuditProblems, len(r.Problems))
	}
	return nil
}

// withSink sets beside each issuance what the audit sink holds of it, and adds the sink's
// issuances whose runs Temporal no longer holds, when the configuration has a sink that reads
// back; recs as they are without one.
func (a *auditCommand) withSink(ctx context.Context, cfg *config.Config, recs []audit.Record, w audit.Window) ([]audit.Record, error) {
	if cfg.Audit.Sink == "" || cfg.Audit.Sink == "stdout" {
		return recs, nil
	}
	key, store, release, err := a.sinkStore(cfg)
	if err != nil {
		return nil, err
	}
	defer release()
	entries, unproven, err := auditlog.Entries(ctx, key, store)
	if err != nil {
		return nil, fmt.Errorf("reading the audit sink: %w", err)
	}
	if unproven > 0 {
		fmt.Fprintf(os.Stderr, "choria-provisioner: %d entries of the audit sink do not verify and were not read (audit --verify)\n", unproven)
	}
	return audit.MergeSink(recs, entries, w), nil
}
