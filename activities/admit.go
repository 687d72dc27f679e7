package activities

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"
)

// Reasons admit refuses a task (the reason label of choria_provisioner_refused_payloads, beside
// the codec's).
const (
	ReasonForeignWorkflow  = "foreign_workflow"  // scheduled by a workflow that is not a host's ProvisionHost
	ReasonIdentityMismatch = "identity_mismatch" // the input names another host than its workflow's
)

// admit refuses, before anything is sent or signed, a task that a host's ProvisionHost did not
// schedule for that very host. Any client that can write to the namespace can schedule an
// activity of ours on our task queue by name; the codec already refuses inputs that are not
// ours or that were written for another workflow, and this check, which costs no call, also holds
// when there is no codec (temporal.plaintext) and against a workflow of another type that took
// a host's workflow ID.
// It then refuses an input its task's run did not seal for the activity's step
// (checkRequest): one copied from another run of the same host, or written for another step.
func (a *Activities) admit(ctx context.Context, activityName, step string, in sealedInput) error {
	info := activity.GetInfo(ctx)
	wfType := ""
	if info.WorkflowType != nil {
		wfType = info.WorkflowType.Name
	}
	wfID := info.WorkflowExecution.ID
	host, isHost := strings.CutPrefix(wfID, HostWorkflowIDPrefix)
	var reason, msg string
	switch {
	case wfType != HostWorkflowType || !isHost:
		reason = ReasonForeignWorkflow
		msg = fmt.Sprintf("%s refused: scheduled by workflow %q of type %q, not by a host's %s (workflow ID %s<identity>)",
			activityName, wfID, wfType, HostWorkflowType, HostWorkflowIDPrefix)
	case in.HostIdentity() != host:
		reason = ReasonIdentityMismatch
		msg = fmt.Sprintf("%s refused: the input names host %q, its workflow %q is another host's", activityName, in.HostIdentity(), wfID)
	default:
		r, err := checkRequest(ctx, step, in.GetRequest())
		if err == nil {
			r, err = checkApproval(ctx, activityName, in)
		}
		if err == nil {
			return nil
		}
		a.refuse(r, wfID, wfType, in, activityName, err)
		return err
	}
	err := NewError(ErrTypeRefused, msg, nil)
	a.refuse(reason, wfID, wfType, in, activityName, err)
	return err
}

// refuse counts a refused task and logs it, summarised per reason and interval: whoever can
// write to the namespace can send such tasks at will.
func (a *Activities) refuse(reason, wfID, wfType string, in identified, activityName string, err error) {
	a.metrics.RefusedPayloads.WithLabelValues(a.set.Site, reason).Inc()
	fields := []zap.Field{zap.String(logging.FieldWorkflowID, wfID), zap.String(logging.FieldWorkflowType, wfType),
		zap.String(logging.FieldIdentity, in.HostIdentity()), zap.String(logging.FieldActivity, activityName), zap.Error(err)}
	if a.refusals == nil {
		a.log.Warn("task refused", append(fields, zap.String(logging.FieldReason, reason))...)
		return
	}
	a.refusals.Warn(reason, fields...)
}
