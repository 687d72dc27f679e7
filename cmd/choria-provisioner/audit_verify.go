package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/auditlog"
)

// errAuditProblems makes audit --verify exit 1: the chain has entries that do not verify.
var errAuditProblems = errors.New("the audit chain does not verify")

// verifySink checks the configured audit sink's chain and prints what it found.
func (a *auditCommand) verifySink(ctx context.Context) error {
	cfg, err := config.LoadForOperator(a.config)
	if err != nil {
		return err
	}
	if cfg.Audit.KeyFile == "" {
		return fmt.Errorf("audit.key_file is not set: the chain's MACs need it")
	}
	b, err := os.ReadFile(cfg.Audit.KeyFile)
	if err != nil {
		return fmt.Errorf("audit.key_file: %w", err)
	}
	key, err := auditlog.ParseKey(string(b))
	if err != nil {
		return fmt.Errorf("audit.key_file %s: %w", cfg.Audit.KeyFile, err)
	}
	var store auditlog.Store
	switch {
	case a.sinkFile != "":
		store = auditlog.ReadFile(a.sinkFile)
	case cfg.Audit.Sink == "file":
		store = auditlog.ReadFile(cfg.Audit.File)
	default:
		return fmt.Errorf("audit.sink %q: give the entries' file with --file", cfg.Audit.Sink)
	}
	defer store.Close()
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
