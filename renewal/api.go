// Package renewal renews the identities the provisioner issued before they lapse: a Temporal
// Schedule per task queue runs RenewIdentities, which finds the identities expiring within
// renew_before by a visibility query (hostruns.Current) and asks each server, at the configured
// rate, to re-enter provisioning mode (choria_provision#reprovision, as `hosts reprovision`);
// the server is then provisioned as usual by a run started with source "renewal", with a new
// key and JWT. Nothing is renewed unless the worker's own configuration enables it.
package renewal

import "time"

// WorkflowName is the registered name of the renewal workflow.
const WorkflowName = "RenewIdentities"

// ScheduleID is the one Schedule of a task queue's renewals, whatever the number of replicas.
func ScheduleID(taskQueue string) string { return "renewal:" + taskQueue }

// RunWorkflowID is the workflow ID the Schedule starts its runs under (Temporal appends the
// scheduled time).
func RunWorkflowID(taskQueue string) string { return "renewal-run:" + taskQueue }

// Outcomes of one host's renewal.
const (
	// OutcomeRenewed: the server accepted the reprovision request and a run with source
	// "renewal" was started for it; that run's outcome is the host's
	OutcomeRenewed = "renewed"
	// OutcomeUnreachable: the server did not answer the reprovision request
	OutcomeUnreachable = "unreachable"
	// OutcomeRefused: the server answered with an error, or the run could not be started
	OutcomeRefused = "refused"
)

// HostRenewal is one host's renewal in one run of the renewal workflow.
type HostRenewal struct {
	Identity string    `json:"identity"`
	RunID    string    `json:"run_id"`            // the provisioning run whose identity was renewed
	Expires  time.Time `json:"expires"`           // that identity's expiry
	Expired  bool      `json:"expired,omitempty"` // it had lapsed before renewal reached it
	Outcome  string    `json:"outcome"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// Result is what one run of the renewal workflow did.
type Result struct {
	Found   int           `json:"found"`   // current identities expiring within renew_before
	Renewed int           `json:"renewed"` // hosts whose renewal was started
	Failed  []HostRenewal `json:"failed,omitempty"`
	Skipped string        `json:"skipped,omitempty"` // why the run renewed nothing (disabled, outside the window)
}
