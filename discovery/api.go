// Package discovery finds Choria Servers waiting in provisioning mode, by broadcast discovery
// every interval and by lifecycle startup events, and hands every sighting to Temporal as a
// start of the host's workflow. It keeps no durable queue and no host state: any number of
// replicas may run it at once.
//
// Its rooms: intake (intake.go, gate.go: a startup event or reply is checked for size, form and
// rate before anything is queued), sweep (sweep.go: a broadcast every interval and one listing of
// the open runs), judge (judge.go, settle.go: a stale sighting, a run that is finishing, one at
// work) and start (start.go: the one place a run is started).
package discovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/choria-io/go-choria/lifecycle"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// ProvisioningCollective is where unprovisioned servers wait.
const ProvisioningCollective = "provisioning"

// ProvisionAgent is the agent every server in provisioning mode serves.
const ProvisionAgent = "choria_provision"

// ProvisionerComponent is the lifecycle component of the provisioner's own startup event.
const ProvisionerComponent = "provisioner"

// EventQueueGroup spreads lifecycle events over the replicas: each event reaches one of them.
const EventQueueGroup = "choria-temporal-provisioner"

// MaxEventSize bounds what is parsed from the wire; a startup event is a few hundred bytes.
const MaxEventSize = 16 << 10

// MaxReplySize bounds a discovery reply that is read; one is a transport of about a kilobyte
// (a protocol v1 reply carries the sender's certificate: a few).
const MaxReplySize = 64 << 10

// Bounds of discovery's queues, each of sightings already checked for size, form and rate. A
// sighting that finds its queue full is refused (metrics.RefusedFull) and found by the next sweep.
const (
	EventQueueSize  = 10000  // startup events waiting for a goroutine to hand them to Temporal
	SweepQueueSize  = 100000 // distinct sightings of one sweep
	SettleQueueSize = 10000  // sightings waiting for a finishing run to close (settle.go)
)

// LateEvent is how long a startup event may wait in the queue before discovery checks, as for a
// sweep, that the host was not provisioned since it arrived.
const LateEvent = time.Second

// FinishingRecheck is how often a sighting of a host whose run is past its restart RPC looks
// whether that run has closed before it is judged. The run closes at its next workflow task,
// within moments of the restart RPC while a worker is up.
const FinishingRecheck = 500 * time.Millisecond

// CheckTimeout bounds one look at a host's latest run: past it the sighting is unjudged and
// refused (a partition from Temporal holds a call until the SDK's own deadline).
const CheckTimeout = 5 * time.Second

// ListTimeout bounds a sweep's listing of the open runs; past it the sweep describes instead.
const ListTimeout = 30 * time.Second

// HandoverWindow is how long after its discovery window a sweep goes on handing sightings to
// Temporal at the new-hosts rate; the rest are refused (rate) and left to the next sweep.
const HandoverWindow = 10 * time.Second

// PauseCheckEvery is how often discovery reads the pause state between sweeps: the paused gauge
// follows it, and a sweep that missed (paused, the state unreadable, or failed) runs again at the
// first check that finds provisioning running.
const PauseCheckEvery = 10 * time.Second

// RefusedSweepAfter is how soon after a sweep the next one runs when a sighting was refused for
// rate since: the refused hosts are found then instead of an interval later.
const RefusedSweepAfter = 10 * time.Second

// ErrBadEvent classifies lifecycle messages that are not startup events of a valid identity.
var ErrBadEvent = errors.New("unusable lifecycle event")

// StartupSubject is the subject of startup events of component.
func StartupSubject(component string) string {
	return "choria.lifecycle.event.startup." + component
}

// ParseStartupEvent returns the identity in a lifecycle startup event of component, or an error
// wrapping ErrBadEvent that says what is wrong with it.
func ParseStartupEvent(data []byte, component string) (string, error) {
	if len(data) > MaxEventSize {
		return "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadEvent, len(data), MaxEventSize)
	}
	ev, err := lifecycle.NewFromJSON(data)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	if ev.Type() != lifecycle.Startup {
		return "", fmt.Errorf("%w: type %s, want startup", ErrBadEvent, ev.TypeString())
	}
	if ev.Component() != component {
		return "", fmt.Errorf("%w: component %q, want %q", ErrBadEvent, ev.Component(), component)
	}
	id := ev.Identity()
	if err := workflows.ValidateIdentity(id); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	return id, nil
}

// Starter is the part of the Temporal client discovery uses.
type Starter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	GetWorkflow(ctx context.Context, workflowID string, runID string) client.WorkflowRun
	Lister
}

// Lister is the part of the Temporal client a sweep lists the open runs with.
type Lister = hostruns.Lister

// PauseChecker tells whether fleet-wide provisioning is paused.
type PauseChecker interface {
	Paused(ctx context.Context) (bool, error)
}

// Options configure a Discoverer.
type Options struct {
	Interval          time.Duration    // between sweeps, and between summaries of what was refused
	DiscoveryTimeout  time.Duration    // how long a sweep listens for replies
	Component         string           // lifecycle component of servers in provisioning mode
	Start             hostruns.Starter // task queue, site and fast mode of the runs it starts
	StartConcurrency  int              // start calls in flight during a sweep, and for events
	DisableEvents     bool
	DisableBroadcasts bool
	Pause             PauseChecker // nil: never paused
	Version           string       // announced in the provisioner's own startup event
	// NewHostsRate bounds the sightings per second, events and sweeps together, that are handed
	// to Temporal (each may start a run), NewHostsBurst of them at once (new_hosts_rate,
	// new_hosts_burst); 0: unlimited.
	NewHostsRate  float64
	NewHostsBurst int
	// Turn, when set, is called at every turn of discovery's loop (at least every 10 s between
	// sweeps): the process's health watches it.
	Turn func()
}
