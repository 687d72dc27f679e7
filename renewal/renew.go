package renewal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/common/reprovision"
	"github.com/choria-temporal/provisioner/workflows"
)

// StartDelay is how long after the server accepted the reprovision request its new run starts:
// by then the server has restarted into provisioning mode (RestartWindow), and a startup-event
// or discovery start of the same workflow ID in the meantime finds the delayed run and dedupes
// to it (Starter.Options: an open run is used as it is).
func StartDelay() time.Duration { return workflows.RestartWindow(0) + time.Second }

// Renew asks one provisioned server to re-enter provisioning mode (choria_provision#reprovision
// with the provisioning token, as `hosts reprovision`), then starts its run with source renewal,
// which provisions it with a new key and JWT. No reply is ErrTypeUnreachable (retried); an error
// reply, or a run that cannot be started, ErrTypeRefused. An identity that had lapsed already is
// still asked (a server runs on until its next reconnect) and reported Expired.
func (a *Activities) Renew(ctx context.Context, in RenewInput) (*HostRenewal, error) {
	if err := a.admit(ctx, RenewName); err != nil {
		return nil, err
	}
	h := in.Host
	if err := workflows.ValidateIdentity(h.Identity); err != nil {
		return nil, a.refused(h, fmt.Errorf("not renewed: %w", err))
	}
	if err := a.due(ctx, h.Identity, time.Now()); err != nil {
		return nil, err
	}
	release, err := a.claim(ctx, h)
	if err != nil {
		return nil, err
	}
	defer release()
	if info := activity.GetInfo(ctx); info.Attempt == 1 { // a retry is of a host already paced
		if err := a.paced(h, info.StartedTime); err != nil {
			return nil, err
		}
	}
	done := HostRenewal{Identity: h.Identity, RunID: h.RunID, Expires: h.Expires, Expired: !h.Expires.After(in.Now), At: time.Now().UTC()}
	err = a.reprovision(ctx, h.Identity)
	switch {
	case errors.Is(err, reprovision.ErrErrorReply):
		return nil, a.refused(h, fmt.Errorf("the server refused to re-enter provisioning mode: %w", err))
	case err != nil:
		return nil, a.unreachable(ctx, h, err)
	}
	pin := workflows.ProvisionInput{Identity: h.Identity, Source: workflows.SourceRenewal}
	opts := a.starter.Options(pin)
	opts.StartDelay = StartDelay()
	run, err := a.temporal.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, pin)
	if err != nil {
		// the server is in provisioning mode now: discovery provisions it when it announces itself
		return nil, a.refused(h, fmt.Errorf("the server re-entered provisioning mode, but its run could not be started: %w", err))
	}
	done.Outcome = OutcomeRenewed
	a.renewals.WithLabelValues(a.starter.Site, OutcomeRenewed).Inc()
	a.log.Info("renewal started", zap.String(logging.FieldIdentity, h.Identity), zap.String(logging.FieldWorkflowID, run.GetID()),
		zap.Time("expires", h.Expires), zap.Bool("expired", done.Expired))
	return &done, nil
}

// refused counts and logs a host that will not be asked again in this run.
func (a *Activities) refused(h Expiring, err error) error {
	a.renewals.WithLabelValues(a.starter.Site, OutcomeRefused).Inc()
	a.log.Warn("renewal refused", zap.String(logging.FieldIdentity, h.Identity), zap.Error(err))
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefused, nil)
}

// unreachable counts a host that did not answer once its last attempt has not either: a host
// counts once per run, whatever its attempts.
func (a *Activities) unreachable(ctx context.Context, h Expiring, err error) error {
	info := activity.GetInfo(ctx)
	if info.Attempt >= RenewRetry.MaximumAttempts {
		a.renewals.WithLabelValues(a.starter.Site, OutcomeUnreachable).Inc()
		a.log.Warn("renewal: server unreachable", zap.String(logging.FieldIdentity, h.Identity),
			zap.Int32(logging.FieldAttempt, info.Attempt), zap.Error(err))
	}
	return temporal.NewApplicationError(fmt.Sprintf("the server did not answer the reprovision request: %v", err), ErrTypeUnreachable)
}

// due refuses to renew a host the records say is not due: its recorded identity expires beyond
// renew_before, or it is banned or retired, whatever the task's input says (an input copied from
// an earlier renewal run, a run started at will). Without records, or for a host the sink has
// no issuance of yet, the input is the finding.
func (a *Activities) due(ctx context.Context, identity string, now time.Time) error {
	if a.records == nil {
		return nil
	}
	st, err := a.records.State(ctx, identity)
	h := Expiring{Identity: identity}
	switch {
	case err != nil:
		return temporal.NewApplicationError(fmt.Sprintf("the audit sink's records cannot be read: %v", err), ErrTypeUnreachable)
	case st.Banned || st.Retired:
		return a.refused(h, fmt.Errorf("not renewed: banned or retired (%s)", st.Reason))
	case st.Issued.IsZero():
		return nil // issued before the sink was on: its run's record decided (FindExpiring)
	case st.Expires.After(now.Add(a.renewBefore)):
		return a.refused(h, fmt.Errorf("not renewed: its identity expires %s, beyond renew_before", st.Expires.UTC().Format(time.RFC3339)))
	}
	return nil
}
