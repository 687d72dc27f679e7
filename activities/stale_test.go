package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
)

type fakeRuns struct {
	closed time.Time
	found  bool
	err    error
	asked  *int
}

func (f fakeRuns) CompletedAfter(_ context.Context, _, _ string, after time.Time) (time.Time, bool, error) {
	*f.asked++
	return f.closed, f.found && f.closed.After(after), f.err
}

func TestStaleSightingNeedsAnEarlierRunCompletedAfterIt(t *testing.T) {
	seen := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	noReply := temporal.NewApplicationError("choria_provision#jwt: no reply from n1 within 10s", ErrTypeNoReply)
	locked := temporal.NewApplicationError("choria_provision#jwt: locked", ErrTypeLocked)
	hostSays := temporal.NewApplicationError("choria_provision#jwt: Cannot reconfigure a server that is not in provisioning mode", ErrTypeHostNotProvisioning)

	cases := []struct {
		name     string
		runs     *fakeRuns
		seenAt   time.Time
		in       error
		wantType string
		asks     int
	}{
		{"provisioned after the sighting", &fakeRuns{closed: seen.Add(5 * time.Second), found: true}, seen, noReply, ErrTypeNotProvisioning, 1},
		{"provisioned before the sighting", &fakeRuns{closed: seen.Add(-5 * time.Second), found: true}, seen, noReply, ErrTypeNoReply, 1},
		{"no earlier run", &fakeRuns{}, seen, noReply, ErrTypeNoReply, 1},
		{"visibility unavailable", &fakeRuns{err: errors.New("rate limited")}, seen, noReply, ErrTypeNoReply, 1},
		{"not the first RPC", &fakeRuns{closed: seen.Add(time.Second), found: true}, time.Time{}, noReply, ErrTypeNoReply, 0},
		{"the host answered", &fakeRuns{closed: seen.Add(time.Second), found: true}, seen, locked, ErrTypeLocked, 0},
		// a host's own "not in provisioning mode" counts only with Temporal's record
		{"the host says so, provisioned after", &fakeRuns{closed: seen.Add(5 * time.Second), found: true}, seen, hostSays, ErrTypeNotProvisioning, 1},
		{"the host says so, no earlier run", &fakeRuns{}, seen, hostSays, ErrTypeHostNotProvisioning, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			asked := 0
			c.runs.asked = &asked
			a := &Activities{runs: c.runs, log: zap.NewNop()}
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			env.RegisterActivityWithOptions(func(ctx context.Context, in HostInput) error {
				return a.stale(ctx, in, c.in)
			}, activity.RegisterOptions{Name: "probe"})
			_, err := env.ExecuteActivity("probe", HostInput{Identity: "n1", SeenAt: c.seenAt})
			var app *temporal.ApplicationError
			require.True(t, errors.As(err, &app), "%v", err)
			require.Equal(t, c.wantType, app.Type())
			require.Equal(t, c.wantType == ErrTypeNotProvisioning, app.NonRetryable())
			require.Equal(t, c.asks, asked)
			if c.wantType == ErrTypeNotProvisioning {
				require.Contains(t, app.Error(), "after the sighting at 2026-11-30T10:00:00Z")
			}
		})
	}
}

// Every read that carries the sighting time recognises a stale sighting (gencsr once did not).
func TestEveryFirstReadRecognisesAStaleSighting(t *testing.T) {
	seen := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	asked := 0
	a := &Activities{set: Settings{RPCTimeout: 10 * time.Millisecond}, fw: &fakeConn{up: true}, caller: silentCaller{}, metrics: m,
		log: zap.NewNop(), runs: fakeRuns{closed: seen.Add(time.Second), found: true, asked: &asked}}
	reads := map[string]func(context.Context, HostInput) error{
		StepJWT:       func(ctx context.Context, in HostInput) error { _, err := a.FetchJWT(ctx, in); return err },
		StepGen25519:  func(ctx context.Context, in HostInput) error { _, err := a.Gen25519(ctx, in); return err },
		StepGencsr:    func(ctx context.Context, in HostInput) error { _, err := a.Gencsr(ctx, in); return err },
		StepInventory: func(ctx context.Context, in HostInput) error { _, err := a.Inventory(ctx, in); return err },
	}
	for step, read := range reads {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		env.RegisterActivityWithOptions(read, activity.RegisterOptions{Name: "read"})
		_, err := env.ExecuteActivity("read", HostInput{Identity: "n1", SeenAt: seen})
		var app *temporal.ApplicationError
		require.True(t, errors.As(err, &app), "%s: %v", step, err)
		require.Equal(t, ErrTypeNotProvisioning, app.Type(), step)
	}
	require.Equal(t, len(reads), asked)
}
