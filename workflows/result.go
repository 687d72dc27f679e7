package workflows

import "time"

// ProvisionResult is the workflow's result when it does not fail.
type ProvisionResult struct {
	Identity string `json:"identity"`
	Outcome  string `json:"outcome"`
	Message  string `json:"message,omitempty"`
	// RestartedAt is when the restart RPC succeeded, with the splay it asked for: the host left
	// provisioning mode by LeftProvisioningBy, whenever the run itself closed (a provisioner
	// stopped right after the restart RPC closes it only when one comes back). Zero for runs that
	// restarted nothing.
	RestartedAt  time.Time `json:"restarted_at,omitzero"`
	RestartSplay int       `json:"restart_splay,omitempty"`
	// Issued is the identity a provisioned run issued (nil: none it could read, as when the
	// helper gave neither a server JWT nor a certificate)
	Issued *IdentityRecord `json:"issued,omitempty"`
}

// ServerRestartDelay is what go-choria's restart action adds to a random share of the splay
// before the server re-executes.
const ServerRestartDelay = 2 * time.Second

// LeftProvisioningBy is the latest moment the host could still have answered in provisioning
// mode before the restart this run made: a sighting made after it is of a host that is back in
// provisioning mode, not a late echo of this run. Zero when the result does not say.
func (r ProvisionResult) LeftProvisioningBy() time.Time {
	if r.RestartedAt.IsZero() {
		return time.Time{}
	}
	return r.RestartedAt.Add(RestartWindow(r.RestartSplay))
}

// RestartWindow is how long after a restart RPC asking for splay seconds (0: the default) the
// server may still answer in provisioning mode.
func RestartWindow(splay int) time.Duration {
	if splay <= 0 {
		splay = DefaultRestartSplay
	}
	return time.Duration(splay)*time.Second + ServerRestartDelay
}
