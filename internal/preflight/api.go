// Package preflight is `choria-provisioner check`: what a site runs before it starts the service
// (typically while switching a host from the Choria Provisioner), to learn in one pass whether the
// service will start and work. It checks the configuration, that every file the configuration
// names can be read by the user the service runs as (and is not hidden by the packaged unit's
// sandbox), that the helper's command resolves, the signer token's expiry, and that the broker,
// Temporal, the namespace, its search attributes and the codec key are all usable.
//
// It changes nothing: it never runs the helper, writes no file (not even the log), registers
// nothing on Temporal and publishes nothing on the broker. Identity switching (running the checks
// as the service user) is the caller's job: see cmd/choria-provisioner/check.go.
package preflight

import (
	"time"

	"go.uber.org/zap"
)

// Status is a check's outcome. Only Fail makes `check` exit non-zero.
type Status string

// Check outcomes.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
	Skip Status = "skip"
)

// Result is one line of the report: what was checked, what was found and, when it is not OK,
// what to do about it.
type Result struct {
	Name   string
	Status Status
	Detail string
	Fix    string
}

// Options say what to check.
type Options struct {
	// ConfigFile is the provisioner's YAML; ChoriaConfig, when set, overrides its choria_config
	// (as run --choria-config does).
	ConfigFile   string
	ChoriaConfig string
	// User is the name the report uses for whoever runs the checks (the service user, when the
	// caller switched to it).
	User string
	// Timeout bounds each network check.
	Timeout time.Duration
	// Sandbox is the installed unit's sandbox; nil when no unit is installed, so that only file
	// permissions matter.
	Sandbox *Sandbox
	// Log receives the Temporal SDK's and go-choria's own logs; nil discards them.
	Log *zap.Logger
	// Now is the clock for token expiry (tests); nil is time.Now.
	Now func() time.Time
}

// Sandbox is what the systemd unit (with its drop-ins) lets the service see and write.
type Sandbox struct {
	Unit string // the unit file it was read from
	User string // User=, empty for root
	// Config and ChoriaConfig are the --config and --choria-config of ExecStart.
	Config       string
	ChoriaConfig string
	// ProtectHome is "yes", "read-only", "tmpfs" or "" (no); PrivateTmp hides /tmp and /var/tmp.
	ProtectHome string
	PrivateTmp  bool
	// StrictSystem is ProtectSystem=strict: only Writable (and the state, logs, cache and
	// runtime directories) may be written.
	StrictSystem bool
	Writable     []string
}
