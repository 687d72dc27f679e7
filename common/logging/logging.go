// Package logging builds the zap logger from configuration and adapts it to the Temporal SDK.
package logging

import (
	"fmt"
	"os"
	"strings"

	tlog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Field names used across the provisioner, so logs can be searched the same way everywhere.
const (
	FieldIdentity = "identity"
	FieldSite     = "site"
	FieldStep     = "step"
	FieldAttempt  = "attempt"
	FieldAuditSeq = "audit_seq" // the entry's place in the audit chain
	// of a refused payload or task
	FieldReason       = "reason"
	FieldWorkflowID   = "workflow_id"
	FieldWorkflowType = "workflow_type"
	FieldBinding      = "binding"
	FieldActivity     = "activity"
	FieldDetail       = "detail"
	// of a run whose recorded policy is not the worker's
	FieldRecordedDigest = "recorded_digest"
	FieldWorkerDigest   = "worker_digest"
)

// New returns a JSON zap logger at level writing to file ("" or "-" for stderr).
func New(level string, file string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(strings.ToLower(strings.Replace(level, "warning", "warn", 1)))
	if err != nil {
		return nil, fmt.Errorf("loglevel: %w", err)
	}
	out := zapcore.Lock(os.Stderr)
	if file != "" && file != "-" {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
		if err != nil {
			return nil, fmt.Errorf("logfile: %w", err)
		}
		out = zapcore.AddSync(f)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), out, lvl)
	return zap.New(core), nil
}

// Temporal adapts a zap logger to the SDK's logger so workflow and activity logs land in the same
// stream with the same fields.
//
// With keeps its fields and adds them at each entry instead of cloning the zap core: the SDK
// makes a logger With the run's fields for every cached workflow and every activity execution,
// and a clone (encoder and its buffer) cost each open workflow kilobytes of memory that its few
// log lines never needed (docs/performance.md).
type Temporal struct {
	z  *zap.SugaredLogger
	kv []any // With's fields, before each entry's own
}

var _ tlog.Logger = Temporal{}
var _ tlog.WithLogger = Temporal{}

// NewTemporal wraps z; a caller, when logged, is the SDK's (past Temporal.Info and Temporal.log).
func NewTemporal(z *zap.Logger) Temporal {
	return Temporal{z: z.WithOptions(zap.AddCallerSkip(2)).Sugar()}
}

func (t Temporal) Debug(msg string, kv ...any) { t.log(zapcore.DebugLevel, msg, kv) }
func (t Temporal) Info(msg string, kv ...any)  { t.log(zapcore.InfoLevel, msg, kv) }
func (t Temporal) Warn(msg string, kv ...any)  { t.log(zapcore.WarnLevel, msg, kv) }
func (t Temporal) Error(msg string, kv ...any) { t.log(zapcore.ErrorLevel, msg, kv) }

func (t Temporal) log(lvl zapcore.Level, msg string, kv []any) {
	if lvl < t.z.Level() {
		return // the SDK logs at debug per task: no fields built for nothing
	}
	t.z.Logw(lvl, msg, t.fields(kv)...)
}

// With returns a logger that adds kv to every entry.
func (t Temporal) With(kv ...any) tlog.Logger { return Temporal{z: t.z, kv: join(t.kv, kv)} }

// fields are an entry's: With's, then its own.
func (t Temporal) fields(kv []any) []any {
	if len(t.kv) == 0 {
		return kv
	}
	return join(t.kv, kv)
}

// join copies, so that no logger shares a backing array with its parent or its caller.
func join(a, b []any) []any { return append(append(make([]any, 0, len(a)+len(b)), a...), b...) }
