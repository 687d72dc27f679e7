// Package renewal renews the identities the provisioner issued before they lapse: a Temporal
// Schedule per task queue runs RenewIdentities, which finds the identities expiring within
// renew_before in their records (the audit sink's, with a sink that reads back; else each host's
// latest run, hostruns.Current) and asks each server, at the configured rate, to re-enter
// provisioning mode (choria_provision#reprovision, as `hosts reprovision`); the server is then
// provisioned as usual by a run started with source "renewal", with a new key and JWT. Nothing
// is renewed unless the worker's own configuration enables it, and no host the records say is
// not due, banned or retired.
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
	// OutcomeDeferred: not asked, the worker's renewal rate being spent by renewal runs renewing
	// side by side (started at will); the next run finds the host
	OutcomeDeferred = "deferred"
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
	// Expired are the hosts whose identity had lapsed before renewal reached them, renewed or
	// not: reported, never silently skipped (their servers may be off the fleet already)
	Expired []string `json:"expired,omitempty"`
	Skipped string   `json:"skipped,omitempty"` // why the run renewed nothing (disabled, outside the window)
}

// Activity names, registered by Activities.Register.
const (
	FindExpiringName = "RenewalFindExpiring"
	RenewName        = "RenewalRenew"
)

// Error types of the Renew activity (temporal.ApplicationError types): the host's outcome.
const (
	ErrTypeUnreachable = "RenewalUnreachable" // no reply to the reprovision request: retried
	ErrTypeRefused     = "RenewalRefused"     // an error reply, or no run could be started: not retried
	ErrTypeForeign     = "RenewalForeign"     // the task is not one our renewal runs scheduled: not retried
	ErrTypeDeferred    = "RenewalDeferred"    // the worker's renewal rate is spent: not asked, not retried
)

// MaxHostsPerRun bounds the hosts one run renews (the soonest to expire first): the next
// Schedule run finds the rest, and a run's history stays small (about 8 events a host).
const MaxHostsPerRun = 1000

// Policy is what the worker's configuration decides about a renewal run. The run records it
// (a side effect) when it starts: the Schedule's action carries no input, so that no client of
// the namespace can ask a run for more than the configuration allows.
type Policy struct {
	Enabled     bool          `json:"enabled"`
	RenewBefore time.Duration `json:"renew_before"`
	Rate        float64       `json:"rate"` // hosts per minute
	// WindowStart, WindowEnd: minutes after midnight UTC in which a run may renew (equal: any time)
	WindowStart int `json:"window_start"`
	WindowEnd   int `json:"window_end"`
	// Limit of hosts a run renews (0: MaxHostsPerRun)
	Limit int `json:"limit,omitempty"`
}

// InWindow says whether t is inside the policy's window (always, without one). A window whose
// end is before its start wraps midnight.
func (p Policy) InWindow(t time.Time) bool {
	if p.WindowStart == p.WindowEnd {
		return true
	}
	t = t.UTC()
	m := t.Hour()*60 + t.Minute()
	if p.WindowStart < p.WindowEnd {
		return m >= p.WindowStart && m < p.WindowEnd
	}
	return m >= p.WindowStart || m < p.WindowEnd
}

// Pace is how a run spreads its hosts at Rate: batch hosts every tick. Below a host a second,
// one host a tick of 60/Rate seconds; above, Rate/60 hosts every second (one timer a second
// keeps a fast run's history small).
func (p Policy) Pace() (batch int, tick time.Duration) {
	perSecond := p.Rate / 60
	if perSecond <= 1 {
		return 1, time.Duration(float64(time.Minute) / p.Rate)
	}
	return int(perSecond + 0.5), time.Second
}

// FindInput asks for the current identities of our task queue that expire before Before.
type FindInput struct {
	Before time.Time `json:"before"`
	Limit  int       `json:"limit"`
}

// Expiring is one current identity that expires before FindInput.Before.
type Expiring struct {
	Identity string    `json:"identity"`
	RunID    string    `json:"run_id"`
	Expires  time.Time `json:"expires"`
}

// FindResult is the identities found, the soonest to expire first, at most Limit of Found.
type FindResult struct {
	Found int        `json:"found"`
	Hosts []Expiring `json:"hosts,omitempty"`
}

// RenewInput asks one host to re-enter provisioning mode; Now is the run's time, which says
// whether its identity had lapsed already.
type RenewInput struct {
	Host Expiring  `json:"host"`
	Now  time.Time `json:"now"`
}
