package activities

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/internal/metrics"
)

type announcements struct {
	mu  sync.Mutex
	ids []string
}

func (a *announcements) HelperRunning(_ context.Context, workflowID, runID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids = append(a.ids, workflowID+"/"+runID)
	return nil
}

func (a *announcements) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids)
}

// A helper step that asks for it tells its run once when it has run HelperAnnounceAfter; a
// quicker one, or one that did not ask, tells nobody.
func TestLongHelperStepIsAnnouncedOnce(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	slow := script(t, `cat >/dev/null; sleep 2.6; echo '{"defer":true,"msg":"later"}'`)
	quick := script(t, `cat >/dev/null; echo '{"defer":true,"msg":"later"}'`)
	for _, tc := range []struct {
		name     string
		cmd      []string
		announce bool
		want     int
	}{
		{"slow", slow, true, 1},
		{"slow, not asked", slow, false, 0},
		{"quick", quick, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			an := &announcements{}
			a := New(nil, Settings{Site: "lab", HelperCommand: tc.cmd, HelperTimeout: 10 * time.Second}, m, zap.NewNop(), WithAnnouncer(an))
			env := (&testsuite.WorkflowTestSuite{}).NewTestActivityEnvironment()
			env.RegisterActivity(a.RunHelper)
			_, err := env.ExecuteActivity(a.RunHelper, HelperRequest{Input: HelperInput{Identity: "n1.example"}, Announce: tc.announce})
			require.NoError(t, err)
			if tc.want == 0 {
				time.Sleep(HelperAnnounceAfter + 200*time.Millisecond) // a timer left running would fire by now
			}
			require.Equal(t, tc.want, an.count())
		})
	}
}
