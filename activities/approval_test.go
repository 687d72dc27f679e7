package activities

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
)

// A sign or configure request resting on a reply that another run received (a reset run replays
// the helper's answer and the reads from the history it copied) is refused before anything is
// signed or sent, as the sealed, non-retryable StaleApproval the workflow answers by reading the
// host and asking the helper again; an input that names no reply at all is refused too.
func TestSignAndConfigureActOnlyOnTheirOwnRunsReplies(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	a := &Activities{metrics: m, log: zap.NewNop(), set: Settings{Site: "lab"}}
	ran := 0
	sign := wrapNamed(a, SignServerJWTName, StepSign, func(ctx context.Context, in SignInput) (*SignResult, error) {
		ran++
		return &SignResult{JWT: "signed"}, nil
	})
	configure := wrapNamed(a, ConfigureName, StepConfigure, func(ctx context.Context, in ConfigureInput) (*MessageResult, error) {
		ran++
		return &MessageResult{Message: "configured"}, nil
	})
	earlier := Seal{Run: "n1", RunID: "0191-the-run-before-the-reset", Step: StepHelper, Seq: 4}
	ours := Seal{Run: "n1", RunID: thisRun, Step: StepInventory, Seq: 3}
	for name, approval := range map[string]Approval{
		"the helper's answer of the run before a reset": {Facts: []Seal{ours, earlier}},
		"no reply at all": {Facts: []Seal{}},
	} {
		_, err := runAs[SignResult](t, HostWorkflowType, "provision:n1.example", sign, SignInput{Identity: "n1.example", PublicKey: "ab", Approval: approval})
		requireStaleApproval(t, err, name)
		_, err = runAs[MessageResult](t, HostWorkflowType, "provision:n1.example", configure, ConfigureInput{Identity: "n1.example", Approval: approval})
		requireStaleApproval(t, err, name)
	}
	require.Zero(t, ran, "nothing signed or sent")
	require.Equal(t, 4.0, testutil.ToFloat64(m.RefusedPayloads.WithLabelValues("lab", ReasonStaleApproval)))

	_, err = runAs[SignResult](t, HostWorkflowType, "provision:n1.example", sign, SignInput{Identity: "n1.example", PublicKey: "ab",
		Approval: Approval{Facts: []Seal{ours, {Run: "n1", RunID: thisRun, Step: StepHelper, Seq: 4}}}})
	require.NoError(t, err, "replies its own run received")
	require.Equal(t, 1, ran)
}

func requireStaleApproval(t *testing.T, err error, name string) {
	t.Helper()
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app), "%s: %v", name, err)
	require.Equal(t, ErrTypeStaleApproval, app.Type(), name)
	require.True(t, app.NonRetryable(), name)
	_, _, verdict, ok := FailureSeal(err)
	require.True(t, ok, "%s: the refusal is sealed", name)
	require.Equal(t, ErrTypeStaleApproval, verdict.Type, name)
}
