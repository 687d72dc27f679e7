package renewal

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// ErrNoSchedule is the answer about a task queue whose renewal Schedule does not exist (renewal
// is disabled, or setup has not run since it was enabled).
var ErrNoSchedule = errors.New("no renewal Schedule")

// Status is what `hosts renewal status` shows: the Schedule and its latest completed run.
type Status struct {
	ScheduleID string        `json:"schedule_id"`
	Paused     bool          `json:"paused"`
	Note       string        `json:"note,omitempty"`
	Interval   time.Duration `json:"interval"`
	Next       time.Time     `json:"next,omitempty"`
	Recent     []RunRef      `json:"recent,omitempty"` // the Schedule's latest starts, oldest first
	Latest     *LatestRun    `json:"latest,omitempty"` // the latest completed run, with its result
}

// RunRef is one run the Schedule started.
type RunRef struct {
	WorkflowID string    `json:"workflow_id"`
	RunID      string    `json:"run_id"`
	Scheduled  time.Time `json:"scheduled"`
	Started    time.Time `json:"started"`
}

// LatestRun is the latest completed renewal run of a task queue and what it did.
type LatestRun struct {
	WorkflowID string    `json:"workflow_id"`
	RunID      string    `json:"run_id"`
	Closed     time.Time `json:"closed"`
	Result     Result    `json:"result"`
}

func scheduleError(id string, err error) error {
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return fmt.Errorf("%w %s: is renewal enabled, and has setup run since? (%v)", ErrNoSchedule, id, err)
	}
	return fmt.Errorf("renewal Schedule %s: %w", id, err)
}

// SetPaused pauses or unpauses the task queue's renewal Schedule, with note as the reason.
func SetPaused(ctx context.Context, c client.Client, taskQueue string, paused bool, note string) error {
	h := c.ScheduleClient().GetHandle(ctx, ScheduleID(taskQueue))
	var err error
	if paused {
		err = h.Pause(ctx, client.SchedulePauseOptions{Note: note})
	} else {
		err = h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: note})
	}
	if err != nil {
		return scheduleError(ScheduleID(taskQueue), err)
	}
	return nil
}

// Describe reads the task queue's renewal Schedule and the result of its latest completed run.
func Describe(ctx context.Context, c client.Client, taskQueue string) (*Status, error) {
	id := ScheduleID(taskQueue)
	d, err := c.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	if err != nil {
		return nil, scheduleError(id, err)
	}
	st := &Status{ScheduleID: id, Paused: d.Schedule.State.Paused, Note: d.Schedule.State.Note}
	if spec := d.Schedule.Spec; spec != nil && len(spec.Intervals) > 0 {
		st.Interval = spec.Intervals[0].Every
	}
	if len(d.Info.NextActionTimes) > 0 {
		st.Next = d.Info.NextActionTimes[0]
	}
	for _, a := range d.Info.RecentActions {
		ref := RunRef{Scheduled: a.ScheduleTime, Started: a.ActualTime}
		if a.StartWorkflowResult != nil {
			ref.WorkflowID, ref.RunID = a.StartWorkflowResult.WorkflowID, a.StartWorkflowResult.FirstExecutionRunID
		}
		st.Recent = append(st.Recent, ref)
	}
	if st.Latest, err = LatestResult(ctx, c, taskQueue); err != nil {
		return nil, err
	}
	return st, nil
}

// latestRunsPage is how many of a task queue's completed renewal runs LatestResult reads: the
// newest are listed first, a page is plenty.
const latestRunsPage = 100

// LatestResult is the latest completed renewal run of the task queue, with its result; nil when
// none has completed.
func LatestResult(ctx context.Context, c client.Client, taskQueue string) (*LatestRun, error) {
	if !hostruns.Quotable(taskQueue) {
		return nil, fmt.Errorf("task queue %q cannot be quoted in a visibility query", taskQueue)
	}
	query := fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s' AND ExecutionStatus = 'Completed'", WorkflowName, taskQueue)
	runs, _, err := hostruns.Page(ctx, c, query, nil, latestRunsPage)
	if err != nil {
		return nil, err
	}
	var newest *hostruns.Run
	for i := range runs {
		if runs[i].Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED && (newest == nil || runs[i].Closed.After(newest.Closed)) {
			newest = &runs[i]
		}
	}
	if newest == nil {
		return nil, nil
	}
	latest := &LatestRun{WorkflowID: newest.WorkflowID, RunID: newest.RunID, Closed: newest.Closed}
	if err := c.GetWorkflow(ctx, newest.WorkflowID, newest.RunID).Get(ctx, &latest.Result); err != nil {
		return nil, fmt.Errorf("reading the result of renewal run %s: %w", newest.WorkflowID, err)
	}
	return latest, nil
}
