package config

import "time"

// Audit is the audit section: where the provisioner appends what it did to each identity
// (internal/auditlog), outside the Temporal namespace. Off by default (sink empty); a site that
// turns it on gets every issuance appended before the identity is sent, and no identity sent
// when the sink cannot be written, unless fail_open says otherwise.
type Audit struct {
	Sink string `koanf:"sink"` // "", file, stdout, stream
	// File: the JSON-lines file of sink file (one per replica)
	File string `koanf:"file"`
	// KeyFile: the key the entries' MACs are made with (hex, 32 bytes or more); the workers'
	// and `audit --verify`'s only, never the codec server's
	KeyFile string `koanf:"key_file"`
	// Stream: the Choria Streams stream of sink stream, on the broker of choria_config
	Stream string `koanf:"stream"`
	// MaxAge: how long the stream keeps entries; beyond the longest validity the site issues
	MaxAge string `koanf:"max_age"`
	// FailOpen: send the identity even when the sink cannot be written (logged and counted)
	FailOpen bool `koanf:"fail_open"`

	MaxAgeDuration time.Duration `koanf:"-"`
}

// AuditSinks are the sinks audit.sink may name.
var AuditSinks = []string{"file", "stdout", "stream"}

func auditDefaults() map[string]any {
	return map[string]any{
		"audit.sink":      "",
		"audit.file":      "/var/lib/choria-provisioner/audit.jsonl",
		"audit.key_file":  "",
		"audit.stream":    "CHORIA-PROVISIONER-AUDIT",
		"audit.max_age":   "800d",
		"audit.fail_open": false,
	}
}

func (c *Config) validateAudit() error {
	a := &c.Audit
	var err error
	if a.MaxAgeDuration, err = ParseDuration(a.MaxAge); err != nil || a.MaxAgeDuration <= 0 {
		return invalid("audit.max_age", "%q is not a duration", a.MaxAge)
	}
	switch a.Sink {
	case "":
		return nil
	case "file", "stdout", "stream":
	default:
		return invalid("audit.sink", "%q is not one of file, stdout, stream (or empty: no audit sink)", a.Sink)
	}
	if a.KeyFile == "" {
		return invalid("audit.key_file", "required with audit.sink: the key the entries are authenticated with (openssl rand -hex 32)")
	}
	if err := secretFile(a.KeyFile); err != nil {
		return invalid("audit.key_file", "%v", err)
	}
	if a.Sink == "file" && a.File == "" {
		return invalid("audit.file", "required with audit.sink: file")
	}
	if a.Sink == "stream" && c.ServerJWTValidityDuration > 0 && a.MaxAgeDuration < c.ServerJWTValidityDuration {
		return invalid("audit.max_age", "%s is shorter than server_jwt_validity (%s): entries of identities still valid would age out", a.MaxAge, c.ServerJWTValidity)
	}
	if a.Sink == "stream" && a.Stream == "" {
		return invalid("audit.stream", "required with audit.sink: stream")
	}
	return nil
}
