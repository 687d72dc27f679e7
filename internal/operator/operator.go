// Package operator is what the `hosts` commands do: read and repair host workflows through
// Temporal (and, for reprovision, Choria RPC), never through a provisioner process.
package operator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/choria-io/go-choria/client/choria_provisionclient"
	"github.com/choria-io/go-choria/inter"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/choria-temporal/provisioner/internal/control"
	"github.com/choria-temporal/provisioner/workflows"
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
	Starter   workflows.Starter // how a retry starts a host's new run
	TaskQueue string
	Namespace string // empty: Temporal's default namespace
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
	Runs       int       `json:"runs"`
}

func (o *Operator) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Query builds the visibility query of every run of f's hosts (Outcome, Step and Site are
// matched on the latest run only, by List): also what `temporal workflow list --query` takes.
func (o *Operator) Query(f Filter) string {
	return workflows.HostsQuery{TaskQueue: o.TaskQueue, Outcome: f.Outcome, Step: f.Step, Site: f.Site}.String()
}

func unreachable(err error) error {
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	if errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return err
}

// List returns the latest run of every host matching f. Outcome, step and site are matched on
// the latest run only, so a host that failed once and was provisioned later is not "failed".
func (o *Operator) List(ctx context.Context, f Filter) ([]Host, error) {
	latest := map[string]*Host{}
	var token []byte
	for {
		resp, err := o.C.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: o.Query(Filter{}), NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, unreachable(fmt.Errorf("listing hosts: %w", err))
		}
		for _, ex := range resp.Executions {
			h := o.hostOf(ex)
			if cur, ok := latest[h.WorkflowID]; ok {
				h.Runs = cur.Runs + 1
				if cur.Started.After(h.Started) {
					cur.Runs = h.Runs
					continue
				}
			} else {
				h.Runs = 1
			}
			latest[h.WorkflowID] = &h
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	var out []Host
	for _, h := range latest {
		if (f.Outcome != "" && h.Outcome != f.Outcome) || (f.Step != "" && h.Step != f.Step) ||
			(f.Site != "" && h.Site != f.Site) || (f.Text != "" && !strings.Contains(h.Identity, f.Text)) {
			continue
		}
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	o.fillReasons(ctx, out)
	return out, nil
}

func (o *Operator) hostOf(ex *workflowpb.WorkflowExecutionInfo) Host {
	h := Host{WorkflowID: ex.GetExecution().GetWorkflowId(), RunID: ex.GetExecution().GetRunId(), Status: statusName(ex.GetStatus())}
	h.Identity, _ = workflows.IdentityFromWorkflowID(h.WorkflowID)
	if t := ex.GetStartTime(); t != nil {
		h.Started = t.AsTime()
	}
	if t := ex.GetCloseTime(); t != nil {
		h.Closed = t.AsTime()
	}
	sa := converter.GetDefaultDataConverter()
	fields := ex.GetSearchAttributes().GetIndexedFields()
	get := func(name string) string {
		var v string
		if p, ok := fields[name]; ok {
			_ = sa.FromPayload(p, &v)
		}
		return v
	}
	h.Site, h.Outcome, h.Step = get(workflows.SiteKey.GetName()), get(workflows.OutcomeKey.GetName()), get(workflows.StepKey.GetName())
	if h.Outcome == "" && ex.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		h.Outcome = strings.ToLower(h.Status) // closed before it could record one: canceled, terminated
	}
	return h
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.TrimPrefix(s.String(), "WorkflowExecutionStatus")
}

// fillReasons reads the failure message of failed runs (it is not in visibility).
func (o *Operator) fillReasons(ctx context.Context, hosts []Host) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range hosts {
		if hosts[i].Status != "Failed" && hosts[i].Status != "Terminated" && hosts[i].Status != "TimedOut" {
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
	d := &Detail{Host: o.hostOf(desc.GetWorkflowExecutionInfo())}
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
	return d, nil
}

// lastStatus is the status of a host's latest run; a running one is ErrAlreadyRunning.
func (o *Operator) lastStatus(ctx context.Context, identity string) (string, error) {
	desc, err := o.C.DescribeWorkflowExecution(ctx, workflows.WorkflowID(identity), "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return "", fmt.Errorf("%w: %s has no provisioning workflow", ErrUnknownHost, identity)
	}
	if err != nil {
		return "", unreachable(err)
	}
	status := desc.GetWorkflowExecutionInfo().GetStatus()
	if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return "", fmt.Errorf("%w: %s", ErrAlreadyRunning, identity)
	}
	return statusName(status), nil
}

// Retry starts a new run of a host whose latest run failed (or was canceled, terminated, or
// timed out).
func (o *Operator) Retry(ctx context.Context, identity string) error {
	status, err := o.lastStatus(ctx, identity)
	if err != nil {
		return err
	}
	if status == "Completed" || status == "ContinuedAsNew" {
		return fmt.Errorf("%w: %s is %s; use reprovision to provision it again", ErrNotFailed, identity, strings.ToLower(status))
	}
	in := workflows.ProvisionInput{Identity: identity, Source: workflows.SourceOperator}
	_, err = o.C.ExecuteWorkflow(ctx, o.Starter.RetryOptions(in), workflows.WorkflowName, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return fmt.Errorf("%w: %s", ErrAlreadyRunning, identity)
	}
	return unreachable(err)
}

// RetrySummary says what a bulk retry did.
type RetrySummary struct {
	Retried []string          `json:"retried"`
	Skipped map[string]string `json:"skipped,omitempty"` // identity -> why
}

// RetryFailed retries every host whose latest run failed and matches f; progress is called after
// each host.
func (o *Operator) RetryFailed(ctx context.Context, f Filter, progress func(done, total int)) (*RetrySummary, error) {
	f.Outcome = workflows.OutcomeFailed
	hosts, err := o.List(ctx, f)
	if err != nil {
		return nil, err
	}
	sum := &RetrySummary{Skipped: map[string]string{}}
	var mu sync.Mutex
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	done := 0
	for _, h := range hosts {
		if h.Status == "Running" {
			continue // failed outcome but still running cannot happen; be safe
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer func() { <-sem; wg.Done() }()
			err := o.Retry(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				sum.Skipped[id] = err.Error()
			} else {
				sum.Retried = append(sum.Retried, id)
			}
			done++
			if progress != nil {
				progress(done, len(hosts))
			}
		}(h.Identity)
	}
	wg.Wait()
	sort.Strings(sum.Retried)
	return sum, nil
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

// Reprovision asks provisioned servers, over Choria RPC with the provisioning token, to go back
// into provisioning mode; each restarts, announces itself and is provisioned again by a new run.
// fw must be a client able to reach provisioned servers (their collective and account).
func Reprovision(ctx context.Context, fw inter.Framework, token string, identities []string, timeout time.Duration) (map[string]error, error) {
	pc, err := choria_provisionclient.New(fw)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := pc.OptionTargets(identities).Reprovision(token).Do(rctx)
	if err != nil {
		return nil, fmt.Errorf("reprovision request: %w", err)
	}
	out := map[string]error{}
	for _, id := range identities {
		out[id] = fmt.Errorf("no reply within %v", timeout)
	}
	for _, r := range res.AllOutputs() {
		d := r.ResultDetails()
		if _, asked := out[d.Sender()]; !asked {
			continue
		}
		if d.OK() {
			out[d.Sender()] = nil
		} else {
			out[d.Sender()] = errors.New(d.StatusMessage())
		}
	}
	return out, nil
}
