package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/renewal"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// withRenewal rewrites the site's configuration before it is loaded: the server JWTs' validity,
// and a renewal section whose choria_config is what choriaConfig returns for the stack.
func withRenewal(validity, section string, choriaConfig func(t *testing.T, s *devstack.Stack) string) func(t *testing.T, s *devstack.Stack) {
	return func(t *testing.T, s *devstack.Stack) {
		b, err := os.ReadFile(s.ConfigFile)
		require.NoError(t, err)
		conf := regexp.MustCompile(`(?m)^server_jwt_validity:.*$`).ReplaceAllString(string(b), "server_jwt_validity: "+validity)
		conf += fmt.Sprintf("renewal:\n  enabled: true\n  choria_config: %q\n%s", choriaConfig(t, s), section)
		require.NoError(t, os.WriteFile(s.ConfigFile, []byte(conf), 0o600))
	}
}

// adminConfig reaches the real servers once provisioned: the fleet's collective and account.
func adminConfig(_ *testing.T, s *devstack.Stack) string { return s.AdminConfig }

// simFleetConfig reaches the simulated hosts, which live on the provisioning subjects only (a
// renewable host answers reprovision there, as a provisioned server would on its collective).
func simFleetConfig(t *testing.T, s *devstack.Stack) string {
	b, err := os.ReadFile(s.ClientConfig)
	require.NoError(t, err)
	f := filepath.Join(s.Opts.Dir, "renewal-sim.conf")
	body := string(b) + fmt.Sprintf("plugin.nats.user = provisioner\nplugin.nats.pass = %s\n", s.Creds.ProvisioningPassword)
	require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
	return f
}

// setupRenewal runs `choria-provisioner setup` (the Schedule) and deletes the Schedule when the
// test ends: the tests share one Temporal.
func (e *env) setupRenewal() {
	e.t.Helper()
	out, code := e.cliCmd("setup", "--config", e.stack.ConfigFile)
	require.Equal(e.t, 0, code, out)
	require.Contains(e.t, out, "the renewal Schedule "+renewal.ScheduleID(e.cfg.Temporal.TaskQueue))
	e.t.Cleanup(func() {
		_, err := renewal.EnsureSchedule(context.Background(), e.client, e.cfg.Temporal.TaskQueue, 0, false)
		require.NoError(e.t, err)
	})
}

// serverToken reads a real server's JWT and its claims (unverified: verifyServerJWT verifies).
func serverToken(t *testing.T, m *devstack.FleetMember) (string, *tokens.ServerClaims) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(m.Dir, "server.jwt"))
	require.NoError(t, err)
	claims, err := tokens.ParseServerTokenUnverified(string(raw))
	require.NoError(t, err)
	return string(raw), claims
}

// connectedWith says whether the server's status file shows it connected, out of provisioning
// mode, with a token expiring at exp: the restarted process, on the renewed identity.
func connectedWith(m *devstack.FleetMember, exp time.Time) bool {
	b, err := os.ReadFile(filepath.Join(m.Dir, "status.json"))
	if err != nil {
		return false
	}
	var st struct {
		ConnectedServer  string    `json:"connected_server"`
		ProvisioningMode bool      `json:"provisioning_mode"`
		TokenExpires     time.Time `json:"token_expires"`
	}
	return json.Unmarshal(b, &st) == nil && !st.ProvisioningMode && st.ConnectedServer != "" && st.TokenExpires.Equal(exp)
}

// hostRuns lists every run of a host's workflow, oldest first.
func (e *env) hostRuns(identity string) []hostruns.Run {
	e.t.Helper()
	var runs []hostruns.Run
	err := hostruns.Each(context.Background(), e.client, fmt.Sprintf("WorkflowId = '%s'", workflows.WorkflowID(identity)),
		func(r hostruns.Run) bool { runs = append(runs, r); return true })
	require.NoError(e.t, err)
	sort.Slice(runs, func(i, j int) bool { return runs[i].Started.Before(runs[j].Started) })
	return runs
}

// Real go-choria servers with 3-minute JWTs and renew_before 2m: each is asked to re-enter
// provisioning mode by a Schedule run once its identity is within 2 minutes of expiry, is
// provisioned again by a run with source renewal, and runs connected on a new JWT (a new key,
// chained to the issuer) issued before its first one expired; never two runs of a host at once,
// exactly two provisioned runs each.
func TestIntegrationRenewalRealServers(t *testing.T) {
	t.Parallel() // most of its minute and a half waits for the JWTs to near their expiry
	const servers = 3
	e := newEnv(t, envOptions{servers: servers, prepare: withRenewal("3m", "  renew_before: 2m\n  interval: 5s\n  rate: 600\n", adminConfig)})
	require.Equal(t, 2*time.Minute, e.cfg.Renewal.RenewBeforeDuration)
	start := time.Now()
	svc := e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	t.Logf("%d servers provisioned in %v", servers, time.Since(start).Round(time.Millisecond))
	first := map[string]*tokens.ServerClaims{}
	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
		_, first[m.Identity] = serverToken(t, m)
	}
	e.setupRenewal()

	renewedAt := map[string]time.Time{}
	require.Eventually(t, func() bool {
		for _, m := range e.stack.Fleet.Members {
			if _, seen := renewedAt[m.Identity]; seen {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(m.Dir, "server.jwt"))
			if err != nil {
				continue
			}
			claims, err := tokens.ParseServerTokenUnverified(string(raw))
			if err != nil || claims.PublicKey == first[m.Identity].PublicKey || !connectedWith(m, claims.ExpiresAt.Time) {
				continue
			}
			renewedAt[m.Identity] = time.Now()
		}
		return len(renewedAt) == servers
	}, 150*time.Second, 250*time.Millisecond, "every server renewed and connected on its new JWT")
	out, code := e.cli(nil, "renewal", "pause", "--reason", "the test has seen every renewal")
	require.Equal(t, 0, code, out)
	t.Logf("all %d renewed and connected %v after the start", servers, time.Since(start).Round(time.Millisecond))

	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m) // the new JWT: signed through the issuer's chain, of the server's new seed
		_, now := serverToken(t, m)
		old := first[m.Identity]
		require.NotEqual(t, old.PublicKey, now.PublicKey, "%s: a new key", m.Identity)
		require.True(t, now.IssuedAt.Time.Before(old.ExpiresAt.Time), "%s: renewed before the first JWT expired", m.Identity)
		runs := e.hostRuns(m.Identity)
		require.Len(t, runs, 2, m.Identity)
		for i, r := range runs {
			require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, r.Status, m.Identity)
			require.Equal(t, workflows.OutcomeProvisioned, r.Outcome, m.Identity)
			if i > 0 {
				require.False(t, r.Started.Before(runs[i-1].Closed), "%s: run %s started before run %s closed", m.Identity, r.RunID, runs[i-1].RunID)
			}
		}
		require.Equal(t, workflows.SourceRenewal, runs[1].Source, m.Identity)
		t.Logf("%s: first JWT issued %s expires %s; renewal run started %s (%v before expiry), connected on the new JWT %v after it",
			m.Identity, old.IssuedAt.Time.Format(time.TimeOnly), old.ExpiresAt.Time.Format(time.TimeOnly), runs[1].Started.Format(time.TimeOnly),
			old.ExpiresAt.Time.Sub(runs[1].Started).Round(time.Second), renewedAt[m.Identity].Sub(runs[1].Started).Round(100*time.Millisecond))
		require.Less(t, renewedAt[m.Identity].Sub(runs[1].Started), 45*time.Second, "%s: connected within seconds of its renewal", m.Identity)
	}
	require.Equal(t, float64(servers), testutil.ToFloat64(svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeRenewed)))
	require.Zero(t, testutil.ToFloat64(svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeUnreachable)))
	out, code = e.cli(nil, "renewal", "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "paused")
	require.Contains(t, out, "latest completed run")
	t.Logf("hosts renewal status:\n%s", out)
}
