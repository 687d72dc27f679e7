package service

import (
	"fmt"
	"os"
	"time"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/auditlog"
)

// Audit is the configured audit sink: the log issuances, bans and retirements are appended to,
// and the index of each identity's state read back from it (nil without a store to read: sink
// stdout).
type Audit struct {
	Log   *auditlog.Log
	Index *auditlog.Index
}

// Close closes the sink.
func (a *Audit) Close() error { return a.Log.Close() }

// BanRefresh is how often the worker reads the audit again for bans: a ban reaches every
// worker within it.
const BanRefresh = 2 * time.Second

// OpenAudit opens the audit sink the configuration names (audit.sink); nil without one. writer
// names the process in its entries.
func OpenAudit(cfg *config.Config, writer string) (*Audit, error) {
	a := cfg.Audit
	if a.Sink == "" {
		return nil, nil
	}
	b, err := os.ReadFile(a.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("audit.key_file: %w", err)
	}
	key, err := auditlog.ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("audit.key_file %s: %w", a.KeyFile, err)
	}
	var store, read auditlog.Store
	switch a.Sink {
	case "file":
		if store, err = auditlog.OpenFile(a.File); err != nil {
			return nil, err
		}
		read = auditlog.ReadFile(a.File)
	case "stdout":
		store = auditlog.NewWriterStore(os.Stdout)
	default:
		return nil, fmt.Errorf("audit.sink %s: not available in this build", a.Sink)
	}
	log, err := auditlog.New(key, store, writer)
	if err != nil {
		return nil, err
	}
	out := &Audit{Log: log}
	if read != nil {
		out.Index = auditlog.NewIndex(key, read, BanRefresh)
	}
	return out, nil
}

// auditWriter names this process in the entries it writes: its host and process ID.
func auditWriter() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
