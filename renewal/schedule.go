package renewal

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// ScheduleSpec is the Schedule's timing: a run every interval.
func scheduleSpec(interval time.Duration) client.ScheduleSpec {
	return client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: interval}}}
}

// scheduleAction starts RenewIdentities on the task queue, without input: the worker's policy
// decides everything (Policy).
func scheduleAction(taskQueue string) *client.ScheduleWorkflowAction {
	return &client.ScheduleWorkflowAction{ID: RunWorkflowID(taskQueue), Workflow: WorkflowName, TaskQueue: taskQueue,
		WorkflowRunTimeout: 24 * time.Hour}
}

// EnsureSchedule makes the task queue's one renewal Schedule what the configuration says: created
// or updated (interval, action, overlap skip) when enabled, deleted when not. A pause an
// operator set survives it. It is idempotent, whatever the number of replicas running setup.
// It returns what it did.
func EnsureSchedule(ctx context.Context, c client.Client, taskQueue string, interval time.Duration, enabled bool) (string, error) {
	id := ScheduleID(taskQueue)
	if !enabled {
		err := c.ScheduleClient().GetHandle(ctx, id).Delete(ctx)
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			return "renewal is disabled: no Schedule " + id, nil
		case err != nil:
			return "", fmt.Errorf("deleting the renewal Schedule %s: %w", id, err)
		}
		return "renewal is disabled: deleted the Schedule " + id, nil
	}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: id, Spec: scheduleSpec(interval), Action: scheduleAction(taskQueue),
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, Note: "renews the identities of " + taskQueue + " before they lapse (renewal: in the configuration)"})
	if err == nil {
		return fmt.Sprintf("created the renewal Schedule %s, every %v", id, interval), nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return "", fmt.Errorf("creating the renewal Schedule %s: %w", id, err)
	}
	err = c.ScheduleClient().GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			spec := scheduleSpec(interval)
			s.Spec, s.Action = &spec, scheduleAction(taskQueue)
			if s.Policy == nil {
				s.Policy = &client.SchedulePolicies{}
			}
			s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if err != nil {
		return "", fmt.Errorf("updating the renewal Schedule %s: %w", id, err)
	}
	return fmt.Sprintf("updated the renewal Schedule %s, every %v", id, interval), nil
}
