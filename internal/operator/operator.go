// Package operator is what the `hosts` commands do: read and repair host workflows through
// Temporal (and, for reprovision, Choria RPC), never through a provisioner process.
package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/choria-temporal/provisioner/internal/control"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// Sentinel errors the CLI turns into exit codes.
var (
	ErrUnknownHost    = errors.New("unknown host")
	ErrUnreachable    = errors.New("temporal is unreachable")
	ErrAlreadyRunning = errors.New("host is being provisioned already")
	ErrNotFailed      = errors.New("host's latest run did not fail")
)

// Operator acts on the host workflows of one namespace and task queue.
type Operator struct {
	C         client.Client
	DC        converter.DataConverter
	Starter   hostruns.Starter // how a retry starts a host's new run
	TaskQueue string
	Namespace string // empty: Temporal's default namespace
	// StartRate paces a bulk retry's starts, a second (new_hosts_rate: a retry adds to the
	// runs discovery starts), StartBurst at once; 0 is unlimited
	StartRate  float64
	StartBurst int
	// Now is injectable for tests.
	Now func() time.Time
}

// Filter selects hosts. Empty fields match everything.
type Filter struct {
	Outcome string
	Step    string
	Site    string
	Text    string // substring of the identity
}

// Host is one host's latest run.
type Host struct {
	Identity   string    `json:"identity"`
	Site       string    `json:"site"`
	Outcome    string    `json:"outcome"`
	Step       string    `json:"step"`
	Status     string    `json:"status"`
	WorkflowID string    `json:"workflow_id"`
	RunID      string    `json:"run_id"`
	Started    time.Time `json:"started"`
	Closed     time.Time `json:"closed,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Runs       int       `json:"runs,omitempty"` // 0: not counted (an --expiring listing)
	// Foreign says who started the run when a provisioner did not (any namespace client may
	// start a workflow under a host's ID): such a run is never retried
	Foreign string `json:"foreign,omitempty"`
	// the identity the run issued (its search attributes, else its status): absent for a run
	// that issued none
	IdentityIssued  time.Time `json:"identity_issued,omitzero"`
	IdentityExpires time.Time `json:"identity_expires,omitzero"`
	IdentitySigner  string    `json:"identity_signer,omitempty"`
	// Expired: the identity's expiry has passed (when the listing was made)
	Expired bool `json:"identity_expired,omitempty"`
}

func (o *Operator) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func unreachable(err error) error {
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	if errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return err
}

// reasonReads bounds the history reads of a listing's failure reasons in flight: each is a
// small read of one close event, and a listing of 2,000 failed hosts waits for all of them.
const reasonReads = 32

// fillReasons reads the failure message of failed runs (it is not in visibility) that have no
// reason yet (their error type, from visibility), or of every one when full.
func (o *Operator) fillReasons(ctx context.Context, hosts []Host, full bool) {
	sem := make(chan struct{}, reasonReads)
	var wg sync.WaitGroup
	for i := range hosts {
		if hosts[i].Status != "Failed" && hosts[i].Status != "Terminated" && hosts[i].Status != "TimedOut" || (hosts[i].Reason != "" && !full) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(h *Host) {
			defer func() { <-sem; wg.Done() }()
			h.Reason = o.closeReason(ctx, h.WorkflowID, h.RunID)
		}(&hosts[i])
	}
	wg.Wait()
}

func (o *Operator) closeReason(ctx context.Context, id, run string) string {
	it := o.C.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return ""
		}
		if a := ev.GetWorkflowExecutionFailedEventAttributes(); a != nil {
			return o.message(a.GetFailure())
		}
		if a := ev.GetWorkflowExecutionTerminatedEventAttributes(); a != nil {
			return "terminated: " + a.GetReason()
		}
		if ev.GetWorkflowExecutionTimedOutEventAttributes() != nil {
			return "timed out"
		}
	}
	return ""
}

// message is a failure's message, decrypted: the provisioner encrypts failure messages and stack
// traces like payloads (codec.FailureConverter). Without the codec key it says so.
func (o *Operator) message(f *failurepb.Failure) string {
	if f.GetEncodedAttributes() == nil || o.DC == nil {
		return f.GetMessage()
	}
	f = proto.Clone(f).(*failurepb.Failure)
	converter.DecodeCommonFailureAttributes(o.DC, f)
	if f.GetEncodedAttributes() != nil && f.GetMessage() == encodedFailure {
		return "(encrypted: reading the reason needs the codec key)"
	}
	return f.GetMessage()
}

// encodedFailure is the message the SDK leaves on a failure whose text it encoded.
const encodedFailure = "Encoded failure"

// Detail is what `hosts show` prints.
type Detail struct {
	Host
	State   *workflows.Status `json:"state,omitempty"`
	Pending []PendingStep     `json:"pending,omitempty"`
}

// PendingStep is an activity in flight, with the attempt Temporal is on and its last failure.
type PendingStep struct {
	Activity    string    `json:"activity"`
	Attempt     int32     `json:"attempt"`
	LastFailure string    `json:"last_failure,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitempty"`
}

// Show returns a host's latest run with its status query answer and in-flight steps.
func (o *Operator) Show(ctx context.Context, identity string) (*Detail, error) {
	id := workflows.WorkflowID(identity)
	desc, err := o.C.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, fmt.Errorf("%w: %s has no provisioning workflow", ErrUnknownHost, identity)
	}
	if err != nil {
		return nil, unreachable(fmt.Errorf("describing %s: %w", identity, err))
	}
	d := &Detail{Host: o.hostOf(hostruns.Decode(desc.GetWorkflowExecutionInfo()))}
	if d.Foreign != "" {
		return d, nil // its status query and steps are not the provisioner's
	}
	if d.Host.Status != "Running" && d.Host.Status != "Completed" {
		d.Reason = o.closeReason(ctx, id, d.RunID)
	}
	for _, pa := range desc.GetPendingActivities() {
		p := PendingStep{Activity: pa.GetActivityType().GetName(), Attempt: pa.GetAttempt(), LastFailure: o.message(pa.GetLastFailure())}
		if t := pa.GetScheduledTime(); t != nil && pa.GetAttempt() > 1 {
			p.NextAttempt = t.AsTime()
		}
		d.Pending = append(d.Pending, p)
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// the query needs a worker to answer (it replays closed runs); without one, show what is known
	if v, err := o.C.QueryWorkflow(qctx, id, d.RunID, workflows.StatusQuery); err == nil {
		var st workflows.Status
		if v.Get(&st) == nil {
			d.State = &st
		}
	}
	if d.IdentityExpires.IsZero() && d.State != nil && d.State.Issued != nil && d.Outcome == workflows.OutcomeProvisioned {
		d.setIdentity(d.State.Issued.Issued, d.State.Issued.Expires, d.State.Issued.Signer, o.now())
	}
	return d, nil
}

// Cancel cancels a host's running workflow.
func (o *Operator) Cancel(ctx context.Context, identity string) error {
	err := o.C.CancelWorkflow(ctx, workflows.WorkflowID(identity), "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return fmt.Errorf("%w: %s has no running provisioning workflow", ErrUnknownHost, identity)
	}
	return unreachable(err)
}

// Control is the control workflow's client for o's task queue.
func (o *Operator) Control() *control.Client {
	return control.New(o.C, o.Namespace, o.TaskQueue, o.DC)
}

// SetPaused pauses or resumes provisioning fleet-wide: discovery in every replica stops or resumes
// starting hosts, and every running host holds before, or goes on with, its next step. It returns
// how many running hosts were signaled.
func (o *Operator) SetPaused(ctx context.Context, paused bool, by, reason string) (int, error) {
	n, err := o.Control().SetPaused(ctx, paused, workflows.ControlRequest{By: by, Reason: reason, At: o.now().UTC()})
	return n, unreachable(err)
}
