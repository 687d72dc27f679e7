// Package workflows holds ProvisionHost, the durable provisioning of one Choria Server, and its
// contract: the workflow ID, signal, query and search-attribute names, statuses and types.
package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"go.temporal.io/sdk/temporal"

	"github.com/choria-temporal/provisioner/activities"
)

// WorkflowName is the registered name of ProvisionHost.
const WorkflowName = activities.HostWorkflowType

// SeenSignal is sent at every sighting of a host (discovery sweep or startup event); a running
// workflow absorbs it, a closed one is replaced by a new run (signal-with-start).
const SeenSignal = "seen"

// StatusQuery returns the workflow's Status.
const StatusQuery = "status"

// PauseSignal holds a host's workflow before its next step; ResumeSignal lets it go on. The
// operator CLI sends them to every running host when provisioning is paused fleet-wide.
const (
	PauseSignal  = "pause"
	ResumeSignal = "resume"
)

// Helper decisions, as Status.HelperDecision.
const (
	DecisionConfigure = "configure"
	DecisionDefer     = "defer"
	DecisionShutdown  = "shutdown"
)

// workflowIDPrefix begins the workflow ID of every host.
const workflowIDPrefix = activities.HostWorkflowIDPrefix

// HelperSlots is what a worker process tells the runs it works on about its helper calls.
type HelperSlots interface {
	// HelperSlotFree: a helper call this process took now would start at once.
	HelperSlotFree() bool
}

// HostWorkflow is ProvisionHost bound to the process that registers it.
type HostWorkflow struct {
	// Helpers nil: every helper call goes to the helper task queue, as a process with
	// helper_rate_limit registers it (Temporal paces that queue alone)
	Helpers HelperSlots
}

// WorkflowID is the one workflow ID of a host: it depends on the identity alone, so every replica
// and every sighting addresses the same workflow.
func WorkflowID(identity string) string { return workflowIDPrefix + identity }

// IdentityFromWorkflowID is the host of a workflow ID made by WorkflowID; ok is false for any
// other workflow (the control workflow, for one).
func IdentityFromWorkflowID(id string) (identity string, ok bool) {
	return strings.CutPrefix(id, workflowIDPrefix)
}

// HostsQuery selects hosts' runs in Temporal's visibility store; empty fields match every run.
// Its String is also what `temporal workflow list --query` takes.
type HostsQuery struct {
	TaskQueue string
	Outcome   string // ProvisionOutcome
	Step      string // ProvisionStep
	Site      string // ProvisionSite
	Running   bool   // open runs only
}

func (q HostsQuery) String() string {
	parts := []string{fmt.Sprintf("WorkflowType = '%s'", WorkflowName)}
	add := func(field, value string) {
		if value != "" {
			parts = append(parts, fmt.Sprintf("%s = '%s'", field, unquote(value)))
		}
	}
	add("TaskQueue", q.TaskQueue)
	add(OutcomeKey.GetName(), q.Outcome)
	add(StepKey.GetName(), q.Step)
	add(SiteKey.GetName(), q.Site)
	if q.Running {
		parts = append(parts, "ExecutionStatus = 'Running'")
	}
	return strings.Join(parts, " AND ")
}

// CompletedAfterQuery selects the completed runs of one host's workflow that closed after t.
func CompletedAfterQuery(workflowID string, after time.Time) (string, error) {
	if strings.ContainsAny(workflowID, `'"\`) {
		return "", fmt.Errorf("workflow ID %q cannot be quoted in a visibility query", workflowID)
	}
	return fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'Completed' AND CloseTime > '%s'",
		workflowID, after.UTC().Format(time.RFC3339Nano)), nil
}

// unquote keeps a value from closing its quotes in a visibility query.
func unquote(s string) string { return strings.ReplaceAll(s, "'", "") }

// Typed search attributes, upserted on transitions so that the Web UI and `temporal workflow list
// --query` can filter hosts.
var (
	IdentityKey = temporal.NewSearchAttributeKeyKeyword("ProvisionIdentity")
	SiteKey     = temporal.NewSearchAttributeKeyKeyword("ProvisionSite")
	StepKey     = temporal.NewSearchAttributeKeyKeyword("ProvisionStep")
	OutcomeKey  = temporal.NewSearchAttributeKeyKeyword("ProvisionOutcome")
)

// StartSearchAttributes are a new run's search attributes, set by whoever starts it so that the
// run need not upsert them itself (each upsert is a history event and a visibility write).
func StartSearchAttributes(in ProvisionInput) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(IdentityKey.ValueSet(in.Identity), SiteKey.ValueSet(in.Site), OutcomeKey.ValueSet(OutcomeRunning))
}

// FastModeTaskTimeout is the workflow task timeout of a fast-mode run. Its one workflow task runs
// every step as a local activity; under load a task that overran Temporal's default 10 s (before
// the SDK's heartbeat at 80 % of it reached the server) was timed out and its next attempt ran
// the steps again, configure included (2,810 hosts configured twice at 50,000 hosts in
// docs/performance.md). The price: a worker killed mid-host leaves its fast-mode hosts for this
// long before another worker runs them again.
const FastModeTaskTimeout = 30 * time.Second

// DefaultTaskTimeout is Temporal's workflow task timeout, which a run started with none gets.
const DefaultTaskTimeout = 10 * time.Second

// TaskTimeout is the workflow task timeout a run of in is started with (0: Temporal's default,
// DefaultTaskTimeout).
func TaskTimeout(in ProvisionInput) time.Duration {
	if in.Fast {
		return FastModeTaskTimeout
	}
	return 0
}

// SearchAttributeNames lists the custom search attributes to register on a namespace.
func SearchAttributeNames() []string {
	return []string{IdentityKey.GetName(), SiteKey.GetName(), StepKey.GetName(), OutcomeKey.GetName()}
}

// Outcomes of a host, as the ProvisionOutcome search attribute and Status.Outcome.
const (
	OutcomeRunning     = "running"
	OutcomeDeferred    = "deferred"
	OutcomeFailed      = "failed"
	OutcomeProvisioned = "provisioned"
	OutcomeShutdown    = "shutdown"
)

// Steps, in the order they run (the activities' steps are named in their contract), and the
// states between and after them.
const (
	StepJWT       = activities.StepJWT
	StepGen25519  = activities.StepGen25519
	StepGencsr    = activities.StepGencsr
	StepInventory = activities.StepInventory
	StepHelper    = activities.StepHelper
	StepSign      = activities.StepSign
	StepConfigure = activities.StepConfigure
	StepUpgrade   = activities.StepUpgrade
	StepRestart   = activities.StepRestart
	StepShutdown  = activities.StepShutdown
	StepDeferred  = "deferred"
	StepDone      = "done"
)

// Features select the optional steps; they come from the starter's configuration.
type Features struct {
	JWT      bool `json:"jwt"`
	ED25519  bool `json:"ed25519"`
	PKI      bool `json:"pki"`
	Upgrades bool `json:"upgrades,omitempty"`
	// UpgradesOptional lets provisioning go on when an upgrade fails (upgrades_optional).
	UpgradesOptional bool `json:"upgrades_optional,omitempty"`
}

// Sources of a sighting.
const (
	SourceDiscovery = "discovery"
	SourceEvent     = "event"
	SourceOperator  = "operator"
)

// Sighting is the payload of SeenSignal.
type Sighting struct {
	Source string    `json:"source"`
	At     time.Time `json:"at"`
}

// ProvisionInput starts a host's workflow. It carries no secret.
type ProvisionInput struct {
	Identity     string        `json:"identity"`
	Site         string        `json:"site"`
	Features     Features      `json:"features"`
	Source       string        `json:"source"`
	DeferDelay   time.Duration `json:"defer_delay"`
	MaxDefers    int           `json:"max_defers"`
	RestartSplay int           `json:"restart_splay"`
	// Defers already spent by earlier runs of a continued-as-new workflow.
	Defers int `json:"defers"`
	// SeenAt is when the sighting that started this run was made (zero from operators): the
	// first RPC uses it to recognise a stale sighting of a host provisioned since.
	SeenAt time.Time `json:"seen_at,omitzero"`
	// LocalReads runs jwt, gen25519, inventory and sign as local activities (temporal.local_activities).
	LocalReads bool `json:"local_reads,omitempty"`
	// HelperTaskQueue, when set, is the rate-limited task queue of helper calls (helper_rate_limit).
	HelperTaskQueue string `json:"helper_task_queue,omitempty"`
	// Version is the command sequence the starter asks for (CurrentVersion); zero for runs
	// started before it was carried here, which replay with their GetVersion markers.
	Version int `json:"version,omitempty"`
	// Fast runs every step as a local activity (temporal.fast_mode; Version 2 and later).
	Fast bool `json:"fast,omitempty"`
}

// Versions of the workflow's command sequence. A version in the input costs a new run nothing,
// where each workflow.GetVersion records a marker and upserts TemporalChangeVersion.
const (
	// VersionMarkers: changes guarded by GetVersion markers (runs started before Version existed)
	VersionMarkers = 0
	// VersionLean: the reads scheduled together, sign a local activity, no markers and no
	// restart-grace timer (discovery judges late sightings by the result's RestartedAt)
	VersionLean = 2
	// CurrentVersion is what starters put in new runs' input.
	CurrentVersion = VersionLean
)

// Defaults for inputs left zero.
const (
	DefaultDeferDelay   = 30 * time.Second
	DefaultMaxDefers    = 120
	DefaultRestartSplay = 1 // as the Choria Provisioner: the server waits 2 s, then re-executes
	// continueAsNewDefers bounds one run's history: a host deferred this often continues as new.
	continueAsNewDefers = 10
)

// StepRecord is one run of a step in the timeline.
type StepRecord struct {
	Step     string    `json:"step"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitempty"`
	Attempts int32     `json:"attempts,omitempty"` // activity attempts this run took (0: unknown)
	Error    string    `json:"error,omitempty"`
	Note     string    `json:"note,omitempty"` // what the step changed of what was asked (a capped server JWT expiry)
}

// Status is what the status query returns.
type Status struct {
	Identity       string       `json:"identity"`
	Site           string       `json:"site"`
	Step           string       `json:"step"`
	Attempt        int          `json:"attempt"` // run of the current step by the workflow (the helper's are counted here)
	Outcome        string       `json:"outcome"`
	Paused         bool         `json:"paused,omitempty"`
	Message        string       `json:"message,omitempty"`
	LastError      string       `json:"last_error,omitempty"`
	HelperDecision string       `json:"helper_decision,omitempty"`
	HelperMessage  string       `json:"helper_message,omitempty"`
	Defers         int          `json:"defers"`
	Sightings      int          `json:"sightings"`
	LastSeen       time.Time    `json:"last_seen"`
	ServerVersion  string       `json:"server_version,omitempty"`
	Upgraded       string       `json:"upgraded,omitempty"` // version the server was upgraded to
	Timeline       []StepRecord `json:"timeline"`
}

// ProvisionResult is the workflow's result when it does not fail.
type ProvisionResult struct {
	Identity string `json:"identity"`
	Outcome  string `json:"outcome"`
	Message  string `json:"message,omitempty"`
	// RestartedAt is when the restart RPC succeeded, with the splay it asked for: the host left
	// provisioning mode by LeftProvisioningBy, whenever the run itself closed (a provisioner
	// stopped during the restart grace closes it only when it comes back). Zero for runs that
	// restarted nothing, and for runs of versions before this field.
	RestartedAt  time.Time `json:"restarted_at,omitzero"`
	RestartSplay int       `json:"restart_splay,omitempty"`
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

// ErrInvalidIdentity is returned for identities that cannot be a Choria identity.
var ErrInvalidIdentity = errors.New("invalid identity")

// MaxIdentityLength bounds identities; Choria identities are host names.
const MaxIdentityLength = 253

// ValidateIdentity rejects what cannot be a host identity before it becomes a workflow: empty,
// too long, control or space characters, and NATS subject wildcards.
func ValidateIdentity(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidIdentity)
	}
	if len(id) > MaxIdentityLength {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidIdentity, len(id), MaxIdentityLength)
	}
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == '*' || r == '>' || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: %q contains %q", ErrInvalidIdentity, id, r)
		}
	}
	return nil
}

// ControlWorkflowName is the fleet-wide control workflow: one per task queue, it holds whether
// provisioning is paused, so discovery (in every replica) and the operator CLI agree.
const ControlWorkflowName = "ProvisionerControl"

// ControlStateQuery returns a ControlState.
const ControlStateQuery = "state"

// ControlWorkflowID is the control workflow of a task queue.
func ControlWorkflowID(taskQueue string) string { return "provisioner-control:" + taskQueue }

// ControlRequest is the payload of PauseSignal and ResumeSignal sent to the control workflow.
type ControlRequest struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// ControlState is the fleet-wide state.
type ControlState struct {
	Paused bool      `json:"paused"`
	Since  time.Time `json:"since,omitempty"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}
