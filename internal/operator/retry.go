package operator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"golang.org/x/time/rate"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// ErrNotOurs is a host whose latest run a provisioner did not start: any namespace client may
// start a workflow of any type under a host's workflow ID, and the operator leaves it alone.
var ErrNotOurs = errors.New("host's latest run is not a provisioner's")

// retryWorkers bounds the starts of a bulk retry in flight; new_hosts_rate paces them. 32 keep
// 50 a second while a start takes up to 0.6 s; 64 at once on the dev server under load left
// starts unanswered past the client's 10 s deadline (docs/operations.md).
const retryWorkers = 32

// startAttempts is how often a bulk retry tries a start Temporal did not answer.
const startAttempts = 3

// latestRun describes a host's latest run: ErrUnknownHost when it has none, ErrNotOurs when a
// provisioner did not start it, ErrAlreadyRunning when it is open.
func (o *Operator) latestRun(ctx context.Context, identity string) (hostruns.Run, error) {
	desc, err := o.C.DescribeWorkflowExecution(ctx, workflows.WorkflowID(identity), "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return hostruns.Run{}, fmt.Errorf("%w: %s has no provisioning workflow", ErrUnknownHost, identity)
	}
	if err != nil {
		return hostruns.Run{}, unreachable(err)
	}
	r := hostruns.Decode(desc.GetWorkflowExecutionInfo())
	switch {
	case !r.Ours(o.TaskQueue):
		return r, fmt.Errorf("%w: %s: %s", ErrNotOurs, identity, foreign(r))
	case r.Running():
		return r, fmt.Errorf("%w: %s", ErrAlreadyRunning, identity)
	}
	return r, nil
}

// Retry starts a new run of a host whose latest run, a provisioner's, failed (or was canceled,
// terminated, or timed out).
func (o *Operator) Retry(ctx context.Context, identity string) error {
	r, err := o.latestRun(ctx, identity)
	if err != nil {
		return err
	}
	if status := r.StatusName(); status == "Completed" || status == "ContinuedAsNew" {
		return fmt.Errorf("%w: %s is %s; use reprovision to provision it again", ErrNotFailed, identity, strings.ToLower(status))
	}
	return o.start(ctx, identity)
}

// start starts a host's new run with the retry's options: Temporal starts it only when the
// latest run failed (or was canceled, terminated or timed out), and an open run is an error.
func (o *Operator) start(ctx context.Context, identity string) error {
	in := workflows.ProvisionInput{Identity: identity, Source: workflows.SourceOperator}
	_, err := o.C.ExecuteWorkflow(ctx, o.Starter.RetryOptions(in), workflows.WorkflowName, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return fmt.Errorf("%w: %s (or its latest run did not fail)", ErrAlreadyRunning, identity)
	}
	return unreachable(err)
}

// RetryRequest is a bulk retry: the failed hosts matching Filter (its outcome is ignored).
type RetryRequest struct {
	Filter Filter
	DryRun bool                  // list what would be retried and skipped, start nothing
	Prog   func(done, total int) // called after each host's start, nil for none
}

// RetrySummary says what a bulk retry did (or, with DryRun, would do).
type RetrySummary struct {
	DryRun  bool              `json:"dry_run,omitempty"`
	Retried []string          `json:"retried"`
	Skipped map[string]string `json:"skipped,omitempty"` // identity -> why
}

// RetryFailed retries every host whose latest run failed and matches f; progress is called after
// each host.
func (o *Operator) RetryFailed(ctx context.Context, f Filter, progress func(done, total int)) (*RetrySummary, error) {
	return o.Retries(ctx, RetryRequest{Filter: f, Prog: progress})
}

// Retries retries the failed hosts of req, paced at StartRate starts a second: the hosts whose
// latest run is a provisioner's and failed. A host whose latest run someone else started is
// skipped and reported, as is one whose start fails.
func (o *Operator) Retries(ctx context.Context, req RetryRequest) (*RetrySummary, error) {
	f := req.Filter
	f.Outcome = workflows.OutcomeFailed
	if err := f.validate(); err != nil {
		return nil, err
	}
	sum := &RetrySummary{DryRun: req.DryRun, Skipped: map[string]string{}}
	ids, err := o.failedLatest(ctx, f, sum)
	if err != nil {
		return nil, err
	}
	if req.DryRun {
		sum.Retried = ids
	} else {
		o.startAll(ctx, ids, sum, req.Prog)
	}
	sort.Strings(sum.Retried)
	return sum, nil
}

// failedLatest lists the hosts whose latest run is a failed one of ours; a host whose latest run
// is someone else's, after a failed one of ours, is put in sum.Skipped.
func (o *Operator) failedLatest(ctx context.Context, f Filter, sum *RetrySummary) ([]string, error) {
	var ids []string
	err := o.candidates(ctx, f, cursor{}, func(c candidate) bool {
		id, _ := workflows.IdentityFromWorkflowID(c.run.WorkflowID)
		switch {
		case f.Text != "" && !strings.Contains(id, f.Text):
		case c.latestRun():
			ids = append(ids, id)
		case !c.latest.Run.Ours(o.TaskQueue):
			sum.Skipped[id] = foreign(c.latest.Run)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("listing failed hosts: %w", err)
	}
	return ids, nil
}

// startAll retries ids, retryWorkers at a time and at most StartRate a second. The listing found
// each host's latest run failed and a provisioner's, so it starts without a describe: Temporal
// itself refuses the start when the latest run is open or did not fail by then.
func (o *Operator) startAll(ctx context.Context, ids []string, sum *RetrySummary, progress func(done, total int)) {
	lim := rate.NewLimiter(rate.Inf, 1)
	if o.StartRate > 0 {
		lim = rate.NewLimiter(rate.Limit(o.StartRate), max(o.StartBurst, 1))
	}
	work := make(chan string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := 0
	for range min(retryWorkers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				err := lim.Wait(ctx)
				if err == nil {
					err = o.startPatiently(ctx, id)
				}
				mu.Lock()
				if err != nil {
					sum.Skipped[id] = err.Error()
				} else {
					sum.Retried = append(sum.Retried, id)
				}
				done++
				if progress != nil {
					progress(done, len(ids))
				}
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}

// startPatiently tries a start again, twice, when Temporal did not answer it: a busy Temporal
// answers a burst of starts late. A start that went through although its answer was lost meets
// its own run the next time, and counts as started.
func (o *Operator) startPatiently(ctx context.Context, identity string) error {
	var err error
	for attempt := range startAttempts {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt) * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err = o.start(ctx, identity)
		switch {
		case err == nil, attempt > 0 && errors.Is(err, ErrAlreadyRunning):
			return nil
		case !errors.Is(err, ErrUnreachable):
			return err
		}
	}
	return err
}
