// Package workflows holds ProvisionHost, the durable provisioning of one Choria Server, and its
// contract: the workflow ID, signal, query and search-attribute names, statuses and types.
package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// WorkflowName is the registered name of ProvisionHost.
const WorkflowName = activities.HostWorkflowType

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
	// SourceKey is how the run's sighting was made (discovery, event, operator, renewal): set at
	// start, so that the audit and `hosts list --renewal failed` find renewal runs by a query
	SourceKey = temporal.NewSearchAttributeKeyKeyword("ProvisionSource")
	// The identity a provisioned run issued (IdentityRecord), set with its outcome: plain
	// times and a key ID, never the JWT or the certificate
	IssuedKey  = temporal.NewSearchAttributeKeyTime("IdentityIssued")
	ExpiresKey = temporal.NewSearchAttributeKeyTime("IdentityExpires")
	SignerKey  = temporal.NewSearchAttributeKeyKeyword("IdentitySigner")
	// ErrorKey is the error type a failed run failed with (HelperError, NoReply, ...; see
	// failureType), set with its outcome: what `hosts list` shows without reading each run's
	// history. The reason itself stays in the encrypted history: a helper's stderr is in it.
	ErrorKey = temporal.NewSearchAttributeKeyKeyword("ProvisionError")
)

// SearchAttributes are the custom search attributes to register on a namespace, by name, with
// their types (enumspb.IndexedValueType).
func SearchAttributes() map[string]enumspb.IndexedValueType {
	attrs := map[string]enumspb.IndexedValueType{}
	for _, k := range []temporal.SearchAttributeKeyKeyword{IdentityKey, SiteKey, StepKey, OutcomeKey, SourceKey, SignerKey, ErrorKey} {
		attrs[k.GetName()] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	for _, k := range []temporal.SearchAttributeKeyTime{IssuedKey, ExpiresKey} {
		attrs[k.GetName()] = enumspb.INDEXED_VALUE_TYPE_DATETIME
	}
	return attrs
}

// SearchAttributeNames lists the custom search attributes to register on a namespace, sorted.
func SearchAttributeNames() []string {
	names := make([]string, 0, 8)
	for n := range SearchAttributes() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
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

// HostWorkflow is ProvisionHost bound to the policy of the worker that registers it.
type HostWorkflow struct {
	Policy Policy
	Hooks  Hooks
	// Signer signs server JWTs in a local activity of this worker (the worker's
	// activities.LocalSigner); nil where nothing is signed (a replayer) or the test registers it.
	Signer *activities.LocalSigner
}

// Registry is where workflows are registered: a worker, a replayer, a test environment.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// Register registers ProvisionHost bound to p, and ProvisionerControl: the one registration the
// service, the replayer and the tests share.
func Register(r Registry, p Policy) { HostWorkflow{Policy: p}.Register(r) }

// Register registers ProvisionHost as h and ProvisionerControl on r.
func (h HostWorkflow) Register(r Registry) {
	r.RegisterWorkflowWithOptions(h.ProvisionHost, workflow.RegisterOptions{Name: WorkflowName})
	r.RegisterWorkflowWithOptions(ProvisionerControl, workflow.RegisterOptions{Name: ControlWorkflowName})
}

// HelperTaskQueue is the task queue of the helper calls of runs on taskQueue. It is derived from
// the run's own queue, never read from its input: a run cannot send its helper call to a queue
// that someone else polls.
func HelperTaskQueue(taskQueue string) string { return taskQueue + "-helper" }

// Sources of a sighting.
const (
	SourceDiscovery = "discovery"
	SourceEvent     = "event"
	SourceOperator  = "operator"
	SourceRenewal   = "renewal" // the renewal workflow asked the server to re-enter provisioning mode
)

// ProvisionInput starts a host's workflow. It names the host and the sighting, and nothing
// else: whatever bears on trust or on the run's shape is the worker's Policy. An input with any
// other field is refused (ErrForeignInput), so that a client of the namespace cannot ask a run
// for something the configuration did not.
type ProvisionInput struct {
	Identity string `json:"identity"`
	Source   string `json:"source"`
	// SeenAt is when the sighting that started this run was made (zero from operators): the
	// first reads use it to recognise a stale sighting of a host provisioned since.
	SeenAt time.Time `json:"seen_at,omitzero"`
	// Defers already spent by earlier runs of a continued-as-new workflow.
	Defers int `json:"defers,omitempty"`
}

// ErrForeignInput is the refusal of a run's input that is not what a starter of ours writes.
var ErrForeignInput = errors.New("refused input")

// UnmarshalJSON decodes strictly: an unknown field is an error, which fails the run before
// its first step.
func (in *ProvisionInput) UnmarshalJSON(b []byte) error {
	type plain ProvisionInput // without this method
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("%w: %v: a run's input names the host and the sighting only", ErrForeignInput, err)
	}
	*in = ProvisionInput(p)
	return nil
}

// Starter is what every starter of host runs (discovery, the operator CLI) takes from its own
// configuration.
type Starter struct {
	TaskQueue string
	Site      string
	Fast      bool // temporal.fast_mode: a longer workflow task timeout
}

// Options are the start options of a new run of in's host: the workflow ID, the search
// attributes and the summary the Web UI lists it with. A closed workflow gets a new run (the
// host is back in provisioning mode) and an open one is left alone; the operator CLI narrows both.
func (s Starter) Options(in ProvisionInput) client.StartWorkflowOptions {
	o := client.StartWorkflowOptions{
		ID:                       WorkflowID(in.Identity),
		TaskQueue:                s.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    StartSearchAttributes(in.Identity, s.Site, in.Source),
		StaticSummary:            Summary(in.Identity, s.Site, in.Source),
		StaticDetails:            startDetails(in),
	}
	if s.Fast {
		o.WorkflowTaskTimeout = FastModeTaskTimeout
	}
	return o
}

// RetryOptions are the start options of an operator's retry of in's host: a new run only when
// the host's latest run failed (or was canceled, terminated or timed out), and an error, not the
// open run, when one is at work.
func (s Starter) RetryOptions(in ProvisionInput) client.StartWorkflowOptions {
	o := s.Options(in)
	o.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	o.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED
	o.WorkflowExecutionErrorWhenAlreadyStarted = true
	return o
}

// DefaultTaskTimeout is Temporal's workflow task timeout, which a run started with none gets.
const DefaultTaskTimeout = 10 * time.Second

// TaskTimeout is the workflow task timeout of the runs s starts.
func (s Starter) TaskTimeout() time.Duration {
	if s.Fast {
		return FastModeTaskTimeout
	}
	return DefaultTaskTimeout
}

// Summary is a run's one line in the Web UI's workflow list.
func Summary(identity, site, source string) string {
	if site == "" {
		return fmt.Sprintf("%s · found by %s", identity, source)
	}
	return fmt.Sprintf("%s · site %s · found by %s", identity, site, source)
}

func startDetails(in ProvisionInput) string {
	if in.SeenAt.IsZero() {
		return fmt.Sprintf("Started by %s.", in.Source)
	}
	return fmt.Sprintf("Sighted by %s at %s.", in.Source, in.SeenAt.UTC().Format(time.RFC3339))
}

// StartSearchAttributes are a new run's search attributes, set by whoever starts it so that the
// run need not upsert them itself (each upsert is a history event and a visibility write).
func StartSearchAttributes(identity, site, source string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(IdentityKey.ValueSet(identity), SiteKey.ValueSet(site), OutcomeKey.ValueSet(OutcomeRunning),
		SourceKey.ValueSet(source))
}

// FastModeTaskTimeout is the workflow task timeout of a fast-mode run. Its first workflow task
// runs every read, the helper and the signing as local activities; under load a task that overran
// Temporal's default 10 s was timed out and its next attempt ran those steps again. The price: a
// worker killed mid-host leaves its fast-mode hosts for this long before another worker runs them.
const FastModeTaskTimeout = 30 * time.Second

// Defaults for a policy's zero values.
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
	Identity       string    `json:"identity"`
	Site           string    `json:"site"`
	Step           string    `json:"step"`
	Attempt        int       `json:"attempt"` // run of the current step by the workflow (the helper's are counted here)
	Outcome        string    `json:"outcome"`
	Paused         bool      `json:"paused,omitempty"`
	Message        string    `json:"message,omitempty"`
	LastError      string    `json:"last_error,omitempty"`
	HelperDecision string    `json:"helper_decision,omitempty"`
	HelperMessage  string    `json:"helper_message,omitempty"`
	Defers         int       `json:"defers"`
	Source         string    `json:"source"`           // how the run's sighting was made
	SeenAt         time.Time `json:"seen_at,omitzero"` // when (zero from operators)
	ServerVersion  string    `json:"server_version,omitempty"`
	Upgraded       string    `json:"upgraded,omitempty"` // version the server was upgraded to
	// Issued is the identity the run issued, once it configured the server with it
	Issued   *IdentityRecord `json:"issued,omitempty"`
	Timeline []StepRecord    `json:"timeline"`
}

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

// ControlRequest is the payload of PauseSignal and ResumeSignal, to the control workflow and to
// the running hosts alike: sealed for the control scope of its task queue (ControlWorkflowID), it
// says what it is for (Action, TaskQueue) and when it was made, so that a request copied out of a
// history serves no other purpose, queue or time (ControlSignals).
type ControlRequest struct {
	Action    string    `json:"action"`     // PauseSignal or ResumeSignal
	TaskQueue string    `json:"task_queue"` // the control scope
	By        string    `json:"by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
}

// ControlState is the fleet-wide state.
type ControlState struct {
	Paused bool      `json:"paused"`
	Since  time.Time `json:"since,omitempty"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}
