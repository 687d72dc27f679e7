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
type Temporal struct{ z *zap.SugaredLogger }

var _ tlog.Logger = Temporal{}
var _ tlog.WithLogger = Temporal{}

// NewTemporal wraps z.
func NewTemporal(z *zap.Logger) Temporal {
	return Temporal{z: z.WithOptions(zap.AddCallerSkip(1)).Sugar()}
}

func (t Temporal) Debug(msg string, kv ...any) { t.z.Debugw(msg, kv...) }
func (t Temporal) Info(msg string, kv ...any)  { t.z.Infow(msg, kv...) }
func (t Temporal) Warn(msg string, kv ...any)  { t.z.Warnw(msg, kv...) }
func (t Temporal) Error(msg string, kv ...any) { t.z.Errorw(msg, kv...) }

// With returns a logger that adds kv to every entry.
func (t Temporal) With(kv ...any) tlog.Logger { return Temporal{z: t.z.With(kv...)} }
