package renewal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// A renewal run takes no input and any namespace writer can start one, so several may renew at
// once (started at will, N at a time). What keeps each host renewed once, and the fleet at the
// configured rate, lives in the worker, where no such client reaches: a host is asked only when
// no other renewal of it is under way, and each worker asks at most the configured rate whatever
// the number of runs.

// inFlight are the hosts this worker is renewing now.
type inFlight struct {
	mu    sync.Mutex
	hosts map[string]bool
}

// claim makes this attempt the host's one renewal: refused while this worker renews it already
// or while the host's workflow has an open run (a renewal asked it before, and its new run,
// started with a delay, will provision it). The release ends the claim.
func (a *Activities) claim(ctx context.Context, h Expiring) (release func(), err error) {
	a.busy.mu.Lock()
	if a.busy.hosts[h.Identity] {
		a.busy.mu.Unlock()
		return nil, a.refused(h, errors.New("not renewed: another renewal of this host is under way"))
	}
	a.busy.hosts[h.Identity] = true
	a.busy.mu.Unlock()
	release = func() {
		a.busy.mu.Lock()
		delete(a.busy.hosts, h.Identity)
		a.busy.mu.Unlock()
	}
	d, err := a.temporal.DescribeWorkflowExecution(ctx, workflows.WorkflowID(h.Identity), "")
	var missing *serviceerror.NotFound
	switch {
	case errors.As(err, &missing):
		return release, nil // its runs are gone (retention): the record is what there is
	case err != nil:
		release()
		return nil, temporal.NewApplicationError(fmt.Sprintf("the host's workflow cannot be read: %v", err), ErrTypeUnreachable)
	}
	if run := hostruns.Decode(d.GetWorkflowExecutionInfo()); run.Running() {
		release()
		return nil, a.refused(h, fmt.Errorf("not renewed: its run %s is open (renewed already, or being provisioned)", run.RunID))
	}
	return release, nil
}

// budget is the worker's renewals: perMinute hosts a minute, with room for two of a run's batches
// (its timers and a busy worker bunch them).
type budget struct {
	mu     sync.Mutex
	bucket *rate.Limiter
	latest time.Time // the latest attempt's start spent on
}

// newPace is the worker's budget; nil without a positive rate.
func newPace(perMinute float64) *budget {
	if perMinute <= 0 {
		return nil
	}
	batch, _ := Policy{Rate: perMinute}.Pace()
	return &budget{bucket: rate.NewLimiter(rate.Limit(perMinute/60), 2*batch)}
}

// spend takes one renewal at the attempt's start. Attempts of runs side by side arrive out of
// their start order; one that started before the latest is spent at the latest, as the bucket
// would credit the time between the two again.
func (b *budget) spend(started time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if started.Before(b.latest) {
		started = b.latest
	}
	b.latest = started
	return b.bucket.AllowN(started, 1)
}

// paced spends one of the worker's renewals on the attempt that started at started (the server's
// time of it, which no client sets). One run, paced by its own timers, never runs short; when
// runs renew side by side the budget runs out and the host is deferred: not asked, counted, and
// found by the next run.
func (a *Activities) paced(h Expiring, started time.Time) error {
	if a.pace == nil || a.pace.spend(started) {
		return nil
	}
	a.renewals.WithLabelValues(a.starter.Site, OutcomeDeferred).Inc()
	a.log.Warn("renewal deferred: the renewal rate is spent (more than one renewal run is renewing)",
		zap.String(logging.FieldIdentity, h.Identity))
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("not asked: this worker's renewal rate (%v a minute) is spent by renewal runs renewing side by side; the next run finds the host", float64(a.pace.bucket.Limit())*60),
		ErrTypeDeferred, nil)
}
