package service

import (
	"fmt"
	"os"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/auditlog"
)

// openAudit opens the audit sink the configuration names (audit.sink); nil without one.
func openAudit(cfg *config.Config, replica string) (*auditlog.Log, error) {
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
	var store auditlog.Store
	switch a.Sink {
	case "file":
		if store, err = auditlog.OpenFile(a.File); err != nil {
			return nil, err
		}
	case "stdout":
		store = auditlog.NewWriterStore(os.Stdout)
	default:
		return nil, fmt.Errorf("audit.sink %s: not available in this build", a.Sink)
	}
	return auditlog.New(key, store, replica)
}

// auditWriter names this process in the entries it writes: its host and process ID.
func auditWriter() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
