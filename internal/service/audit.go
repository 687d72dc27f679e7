package service

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/choria-temporal/provisioner/common/auditlog"
	"github.com/choria-temporal/provisioner/config"
)

// Audit is the configured audit sink: the log issuances, bans and retirements are appended to,
// and the index of each identity's state read back from it (nil without a store to read: sink
// stdout).
type Audit struct {
	Log   *auditlog.Log
	Index *auditlog.Index
	// Read is the store the index reads (audit --verify reads it whole); nil with Index
	Read auditlog.Store
	// release lets go of what the sink holds beside its store (the stream's broker connection)
	release func()
}

// Close closes the sink.
func (a *Audit) Close() error {
	err := a.Log.Close()
	if a.release != nil {
		a.release()
	}
	return err
}

// AuditStreamTimeout bounds connecting to the broker and opening the audit stream.
const AuditStreamTimeout = 30 * time.Second

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
	var release func()
	switch a.Sink {
	case "file":
		if store, err = auditlog.OpenFile(a.File); err != nil {
			return nil, err
		}
		read = auditlog.ReadFile(a.File)
	case "stdout":
		store = auditlog.NewWriterStore(os.Stdout)
	case "stream":
		st, closeConn, err := openAuditStream(cfg)
		if err != nil {
			return nil, err
		}
		// one store for both: the stream serialises writers itself, and a read holds no state
		store, read, release = st, st, closeConn
	default:
		return nil, fmt.Errorf("audit.sink %s: not available in this build", a.Sink)
	}
	log, err := auditlog.New(key, store, writer)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, err
	}
	out := &Audit{Log: log, Read: read, release: release}
	if read != nil {
		out.Index = auditlog.NewIndex(key, read, BanRefresh)
	}
	return out, nil
}

// openAuditStream opens audit.stream on the broker with choria_config's own credentials: the
// choria account, where the broker runs Choria Streams, not the provisioning account the
// workers' password puts them in (it has no JetStream). Those credentials need Streams user
// and the right to publish to the audit subject (docs/operations.md).
func openAuditStream(cfg *config.Config) (*auditlog.StreamStore, func(), error) {
	fw, err := NewFleetClientFramework(cfg, cfg.ChoriaConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("audit.sink stream: %w", err)
	}
	// the connector keeps its context for its life and retries its first dial until it ends:
	// a timer, not a deadline, bounds that dial alone
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(AuditStreamTimeout, cancel)
	conn, err := fw.NewConnector(ctx, fw.MiddlewareServers, fw.CallerID()+"-audit", fw.Logger("audit"))
	timer.Stop()
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("audit.sink stream: connecting to the broker: %w", err)
	}
	release := func() { conn.Close(); cancel() }
	octx, ocancel := context.WithTimeout(context.Background(), AuditStreamTimeout)
	defer ocancel()
	st, err := auditlog.OpenStream(octx, conn.Nats(), cfg.Audit.Stream, cfg.Audit.MaxAgeDuration)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("audit.sink stream: %w", err)
	}
	return st, release, nil
}

// auditWriter names this process in the entries it writes: its host and process ID.
func auditWriter() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
