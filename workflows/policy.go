package workflows

import "time"

// Features select the optional steps (the Choria Provisioner's features).
type Features struct {
	JWT      bool `json:"jwt"`
	ED25519  bool `json:"ed25519"`
	PKI      bool `json:"pki"`
	Upgrades bool `json:"upgrades,omitempty"`
	// UpgradesOptional lets provisioning go on when an upgrade fails (upgrades_optional).
	UpgradesOptional bool `json:"upgrades_optional,omitempty"`
}

// Policy is everything the worker's own configuration decides about a run: which checks run,
// where the helper goes, how long a deferred host waits. A run takes it from the worker that
// runs its first workflow task and records it in its history (a side effect), so that neither
// its input nor a later configuration change can alter a run under way.
type Policy struct {
	Site         string        `json:"site"`
	Features     Features      `json:"features"`
	DeferDelay   time.Duration `json:"defer_delay"`
	MaxDefers    int           `json:"max_defers"`
	RestartSplay int           `json:"restart_splay"`
	// Fast runs the steps as local activities (temporal.fast_mode), configure excepted.
	Fast bool `json:"fast,omitempty"`
	// HelperQueue sends helper calls to the run's helper task queue (HelperTaskQueue), which
	// Temporal paces fleet-wide (helper_rate_limit); otherwise they stay on the run's own queue.
	HelperQueue bool `json:"helper_queue,omitempty"`
}

// Defaults for a policy's zero values.
const (
	DefaultDeferDelay   = 30 * time.Second
	DefaultMaxDefers    = 120
	DefaultRestartSplay = 1 // as the Choria Provisioner: the server waits 2 s, then re-executes
	// continueAsNewDefers bounds one run's history: a host deferred this often continues as new.
	continueAsNewDefers = 10
)

// withDefaults fills what the configuration left zero.
func (p Policy) withDefaults() Policy {
	if p.DeferDelay <= 0 {
		p.DeferDelay = DefaultDeferDelay
	}
	if p.MaxDefers <= 0 {
		p.MaxDefers = DefaultMaxDefers
	}
	if p.RestartSplay <= 0 {
		p.RestartSplay = DefaultRestartSplay
	}
	return p
}
