package renewal

import (
	"context"
	"fmt"
	"time"

	"github.com/choria-io/go-choria/inter"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/auditlog"
	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/common/reprovision"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// Activities are the renewal run's steps, with the long-lived dependencies they share.
type Activities struct {
	temporal client.Client
	starter  hostruns.Starter // how a renewed host's run is started (task queue, site)
	// reprovision asks one provisioned server to re-enter provisioning mode
	reprovision func(ctx context.Context, identity string) error
	renewals    *prometheus.CounterVec // choria_provisioner_renewals_total{site,outcome}
	log         *zap.Logger
	// skip says why a host is not to be renewed ("": renew it): banned or retired in the audit
	skip func(ctx context.Context, identity string) (string, error)
	// records are the identities by the audit sink, when the worker has one: what renewal finds
	// there outlives every run's retention, and no namespace writer can preset it
	records     Records
	renewBefore time.Duration // renewal.renew_before: with records, Renew checks the host is due
	busy        inFlight      // the hosts being renewed (once.go)
	pace        *budget       // the worker's renewals a minute, whatever the number of runs
}

// Records lists the identities hosts hold by the audit sink (auditlog.Index).
type Records interface {
	Expiring(ctx context.Context, before time.Time, site string) ([]auditlog.HostState, error)
	State(ctx context.Context, identity string) (auditlog.HostState, error)
}

// Deps are what NewActivities needs from the worker's process.
type Deps struct {
	Temporal client.Client
	Starter  hostruns.Starter
	// Fleet is a Choria client that reaches provisioned servers (renewal.choria_config)
	Fleet      inter.Framework
	Token      string        // the provisioning token the servers expect
	RPCTimeout time.Duration // how long the reprovision request waits for its reply
	Renewals   *prometheus.CounterVec
	Log        *zap.Logger
	// Skip says why a host is not to be renewed ("": renew it); nil renews every host found
	Skip func(ctx context.Context, identity string) (string, error)
	// Records, when set, is where renewal finds the identities (else Temporal's visibility),
	// and what Renew checks a host against before it asks it anything
	Records     Records
	RenewBefore time.Duration
	// Rate is renewal.rate, hosts a minute: what this worker asks at most, however many renewal
	// runs there are (0: no bound beyond each run's own pace)
	Rate float64
}

// NewActivities binds the steps to d; every outcome's counter starts at 0, so that an alert on
// its rate sees the first failure.
func NewActivities(d Deps) *Activities {
	a := &Activities{temporal: d.Temporal, starter: d.Starter, renewals: d.Renewals, log: d.Log, skip: d.Skip, records: d.Records,
		renewBefore: d.RenewBefore, busy: inFlight{hosts: map[string]bool{}}, pace: newPace(d.Rate)}
	a.reprovision = func(ctx context.Context, identity string) error {
		res, err := reprovision.Ask(ctx, d.Fleet, d.Token, []string{identity}, d.RPCTimeout)
		if err != nil {
			return err
		}
		return res[identity]
	}
	for _, o := range []string{OutcomeRenewed, OutcomeUnreachable, OutcomeRefused, OutcomeDeferred} {
		a.renewals.WithLabelValues(d.Starter.Site, o).Add(0)
	}
	return a
}

// Register registers the steps under their names.
func (a *Activities) Register(r interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}) {
	r.RegisterActivityWithOptions(a.FindExpiring, activity.RegisterOptions{Name: FindExpiringName})
	r.RegisterActivityWithOptions(a.Renew, activity.RegisterOptions{Name: RenewName})
}

// admit refuses, before anything is listed, sent or started, a task our renewal runs did not
// schedule: any client that can write to the namespace can schedule an activity of ours on our
// task queue by name, with an input of its choosing (a host to restart into provisioning mode).
// A renewal run's tasks come from a RenewIdentities workflow on our task queue; nothing else's do.
func (a *Activities) admit(ctx context.Context, name string) error {
	info := activity.GetInfo(ctx)
	wfType := ""
	if info.WorkflowType != nil {
		wfType = info.WorkflowType.Name
	}
	if wfType == WorkflowName && info.TaskQueue == a.starter.TaskQueue {
		return nil
	}
	err := fmt.Errorf("%s refused: scheduled by workflow %q of type %q on task queue %q, not by a %s run on %q",
		name, info.WorkflowExecution.ID, wfType, info.TaskQueue, WorkflowName, a.starter.TaskQueue)
	a.log.Warn("renewal task refused", zap.String(logging.FieldWorkflowID, info.WorkflowExecution.ID),
		zap.String(logging.FieldWorkflowType, wfType), zap.String(logging.FieldActivity, name), zap.Error(err))
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeForeign, nil)
}
