package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// `retry --failed` over 100 failed hosts, timed. The hosts are workflows whose only step fails
// while a flag is set (no Choria servers: what is measured is the operator path through
// Temporal: listing, reading each failed run's input, starting the new runs).
func TestIntegrationRetryFailedHundredHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	const hosts = 100
	ctx := context.Background()
	c, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	dc := codec.DataConverter(c)
	tc, err := client.Dial(client.Options{HostPort: temporalAddress, DataConverter: dc, Logger: logging.NewTemporal(zap.NewNop())})
	require.NoError(t, err)
	defer tc.Close()

	queue := "it-retry100"
	var broken atomic.Bool
	broken.Store(true)
	w := worker.New(tc, queue, worker.Options{})
	workflows.Register(w, workflows.Policy{Site: "bench"})
	starter := hostruns.Starter{TaskQueue: queue, Site: "bench"}
	// stand-ins answer as the activities' wrapper does: each reply and failure sealed for its request
	w.RegisterActivityWithOptions(func(ctx context.Context, in activities.HostInput) (*activities.InventoryResult, error) {
		if broken.Load() {
			return nil, activities.SealFailure(temporal.NewNonRetryableApplicationError("inventory: CMDB is down", activities.ErrTypeAborted, nil),
				activity.GetInfo(ctx).Attempt, in.Request)
		}
		r := &activities.InventoryResult{Inventory: "{}"}
		r.SetReply(in.Request)
		return r, nil
	}, activity.RegisterOptions{Name: activities.InventoryName})
	w.RegisterActivityWithOptions(func(ctx context.Context, in activities.HelperRequest) (*activities.HelperOutput, error) {
		r := &activities.HelperOutput{Configuration: map[string]string{"identity": in.Input.Identity}}
		r.SetReply(in.Request)
		return r, nil
	}, activity.RegisterOptions{Name: activities.RunHelperName})
	w.RegisterActivityWithOptions(func(ctx context.Context, in activities.ConfigureInput) (*activities.MessageResult, error) {
		r := &activities.MessageResult{}
		r.SetReply(in.Request)
		return r, nil
	}, activity.RegisterOptions{Name: activities.ConfigureName})
	w.RegisterActivityWithOptions(func(ctx context.Context, in activities.RestartInput) (*activities.MessageResult, error) {
		r := &activities.MessageResult{}
		r.SetReply(in.Request)
		return r, nil
	}, activity.RegisterOptions{Name: activities.RestartName})
	require.NoError(t, w.Start())
	defer w.Stop()

	for i := 0; i < hosts; i++ {
		id := fmt.Sprintf("retry100-node-%03d.example", i)
		in := workflows.ProvisionInput{Identity: id, Source: workflows.SourceOperator}
		_, err := tc.ExecuteWorkflow(ctx, starter.Options(in), workflows.WorkflowName, in)
		require.NoError(t, err)
	}
	op := &operator.Operator{C: tc, DC: dc, Starter: starter, TaskQueue: queue}
	require.Eventually(t, func() bool {
		l, err := op.List(ctx, operator.Filter{Outcome: workflows.OutcomeFailed})
		return err == nil && len(l) == hosts
	}, 60*time.Second, 250*time.Millisecond)

	broken.Store(false)
	start := time.Now()
	sum, err := op.RetryFailed(ctx, operator.Filter{}, nil)
	took := time.Since(start)
	require.NoError(t, err)
	require.Len(t, sum.Retried, hosts, "%v", sum.Skipped)
	t.Logf("retry --failed of %d failed hosts took %v (%.1f hosts/s)", hosts, took, float64(hosts)/took.Seconds())
	require.Eventually(t, func() bool {
		l, err := op.List(ctx, operator.Filter{Outcome: workflows.OutcomeProvisioned})
		return err == nil && len(l) == hosts
	}, 120*time.Second, 500*time.Millisecond)
}
