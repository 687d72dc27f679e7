package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/internal/audit"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/workflows"
)

// expiring runs `hosts list --expiring d --json` and returns the hosts it listed.
func (e *env) expiring(d string) []operator.Host {
	e.t.Helper()
	out, code := e.cli(nil, "--json", "list", "--expiring", d)
	require.Equal(e.t, 0, code, out)
	return jsonLines[operator.Host](e.t, out)
}

// auditJSON runs `audit --json` with args and returns its records.
func (e *env) auditJSON(args ...string) []audit.Record {
	e.t.Helper()
	out, code := e.cliCmd(append([]string{"audit", "--config", e.stack.ConfigFile, "--json"}, args...)...)
	require.Equal(e.t, 0, code, out)
	return jsonLines[audit.Record](e.t, out)
}

// jwtExpiry is the exp of the server JWT a fleet member holds.
func jwtExpiry(t *testing.T, m *devstack.FleetMember) time.Time {
	exp, _ := jwtIssue(t, m)
	return exp
}

// jwtIssue is the exp of the server JWT a fleet member holds and the key ID of its signer, the
// public key its chained issuer names ("C-<id>.<hex public key>").
func jwtIssue(t *testing.T, m *devstack.FleetMember) (time.Time, string) {
	raw, err := os.ReadFile(filepath.Join(m.Dir, "server.jwt"))
	require.NoError(t, err)
	claims, err := tokens.ParseServerTokenUnverified(string(raw))
	require.NoError(t, err)
	require.NotNil(t, claims.ExpiresAt)
	dot := strings.LastIndex(claims.Issuer, ".")
	require.True(t, strings.HasPrefix(claims.Issuer, tokens.ChainIssuerPrefix) && dot > 0, claims.Issuer)
	return claims.ExpiresAt.Time, "ed25519:" + claims.Issuer[dot+1:]
}

// Servers provisioned with a 3-minute JWT are listed as expiring within 3m and not within 1m;
// `hosts show` says when each identity was issued, when it expires (the exp of the JWT the server
// holds) and by whom; the audit has one issuance per host, and a second for a host provisioned
// again, whose newest identity alone is listed as expiring; a host closed by hand as gone for good
// is listed no more, and its issuance stays in the audit.
func TestIntegrationIdentitiesExpiringShowAndAudit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 3, prepare: func(t *testing.T, s *devstack.Stack) {
		b, err := os.ReadFile(s.ConfigFile)
		require.NoError(t, err)
		require.Contains(t, string(b), "server_jwt_validity: 365d\n")
		require.NoError(t, os.WriteFile(s.ConfigFile, []byte(strings.Replace(string(b), "server_jwt_validity: 365d\n", "server_jwt_validity: 3m\n", 1)), 0o600))
	}})
	e.provisioner("replica-a")
	members := e.stack.Fleet.Members
	e.waitProvisioned(90*time.Second, members...)
	for _, m := range members {
		e.runs(m.Identity, 1)
	}

	require.Len(t, e.expiring("3m"), len(members), "every server's identity expires within 3m")
	require.Empty(t, e.expiring("1m"), "none within 1m")
	out, code := e.cli(nil, "list", "--expiring", "3m")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("%d hosts", len(members)))
	require.Contains(t, out, "ed25519:")

	for _, m := range members {
		exp, signer := jwtIssue(t, m)
		out, code := e.cli(nil, "--json", "show", m.Identity)
		require.Equal(t, 0, code, out)
		var d operator.Detail
		require.NoError(t, json.Unmarshal([]byte(out), &d))
		require.True(t, exp.Equal(d.IdentityExpires), "%s: expires %v, its JWT %v", m.Identity, d.IdentityExpires, exp)
		require.WithinDuration(t, exp.Add(-3*time.Minute), d.IdentityIssued, 5*time.Second)
		require.Equal(t, signer, d.IdentitySigner, "the key that signed the JWT")
		out, code = e.cli(nil, "show", m.Identity)
		require.Equal(t, 0, code, out)
		require.Regexp(t, `(?m)^Identity issued:\s+\S+$`, out)
		require.Regexp(t, `(?m)^Identity expires:\s+\S+ \(in \S+\)$`, out)
		require.Regexp(t, `(?m)^Identity signer:\s+ed25519:[0-9a-f]{64}$`, out)
	}

	recs := e.auditJSON("--since", "1h")
	require.Len(t, recs, len(members), "one issuance per host")
	first := map[string]audit.Record{}
	for _, r := range recs {
		first[r.Identity] = r
		require.Equal(t, workflows.DecisionConfigure, r.Decision, "%+v", r)
		require.Contains(t, []string{workflows.SourceDiscovery, workflows.SourceEvent}, r.Source)
		require.NotEmpty(t, r.RunID)
		require.Equal(t, workflows.WorkflowID(r.Identity), r.WorkflowID)
		require.Empty(t, r.Note)
	}
	require.Len(t, first, len(members))

	// provisioned again: a new issuance, and the newest identity is the one it holds
	m := members[0]
	out, code = e.cli(nil, "reprovision", m.Identity, "--choria-config", e.stack.AdminConfig)
	require.Equal(t, 0, code, out)
	before := first[m.Identity]
	require.Eventually(t, func() bool {
		return devstack.Provisioned(m) && runningProvisioned(m) && !jwtExpiry(t, m).Equal(before.Expires)
	}, 90*time.Second, 500*time.Millisecond, "reprovisioned server should hold a new JWT")
	e.runs(m.Identity, 2)
	var again []audit.Record
	require.Eventually(t, func() bool {
		again = e.auditJSON("--since", "1h", "--identity", m.Identity)
		return len(again) == 2
	}, 20*time.Second, 500*time.Millisecond, "two issuances of %s", m.Identity)
	require.Equal(t, before.RunID, again[0].RunID, "oldest first")
	require.NotEqual(t, before.RunID, again[1].RunID)
	require.True(t, jwtExpiry(t, m).Equal(again[1].Expires))
	require.Len(t, e.auditJSON("--since", "1h"), len(members)+1)

	hosts := e.expiring("3m")
	require.Len(t, hosts, len(members), "a host once, with its newest identity")
	for _, h := range hosts {
		if h.Identity == m.Identity {
			require.Equal(t, again[1].RunID, h.RunID)
			require.True(t, again[1].Expires.Equal(h.IdentityExpires))
		}
	}
	table, code := e.cliCmd("audit", "--config", e.stack.ConfigFile, "--since", "1h")
	require.Equal(t, 0, code, table)
	require.Contains(t, table, fmt.Sprintf("%d issuances", len(members)+1))

	// a host gone for good, closed by hand as docs/operations.md says: a run of another type
	// under its workflow ID, newer than its provisioned one, takes its identity out of what the
	// hosts hold now (the listing here, renewal and the gauges share it); the audit keeps it
	gone := members[2]
	id := workflows.WorkflowID(gone.Identity)
	e.temporalCLI("workflow", "start", "--type", "HostRetired", "--workflow-id", id, "--task-queue", "retired-hosts")
	e.temporalCLI("workflow", "terminate", "--workflow-id", id, "--reason", "decommissioned")
	require.Eventually(t, func() bool {
		out, code := e.cli(nil, "--json", "list", "--expiring", "3m")
		return code == 0 && !strings.Contains(out, gone.Identity)
	}, 20*time.Second, 500*time.Millisecond, "%s is no longer listed as expiring", gone.Identity)
	require.Len(t, e.expiring("3m"), len(members)-1, "the others still are")
	require.Len(t, e.auditJSON("--since", "1h", "--identity", gone.Identity), 1, "its issuance stays on record")
	out, code = e.cli(nil, "show", gone.Identity)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `not a provisioner's run: workflow type "HostRetired"`)
}

// seedInput is what the seeding workflow records as its host's identity.
type seedInput struct {
	Issued  time.Time
	Expires time.Time
}

// seedIdentity stands in for a provisioned run: it upserts what a provisioned run upserts with its
// outcome, and completes.
func seedIdentity(ctx workflow.Context, in seedInput) error {
	return workflow.UpsertTypedSearchAttributes(ctx, workflows.StepKey.ValueSet(workflows.StepDone),
		workflows.OutcomeKey.ValueSet(workflows.OutcomeProvisioned), workflows.IssuedKey.ValueSet(in.Issued),
		workflows.ExpiresKey.ValueSet(in.Expires), workflows.SignerKey.ValueSet("ed25519:seeded"))
}

// `hosts list --expiring 30d` on many identities (AUDIT_IDENTITIES, 1,000 by default; 10,000 for
// the measurement in the docs) with expiries spread over a year lists exactly those within 30
// days, in seconds. The identities are seeded by a test workflow under the provisioner's workflow
// type and task queue (real provisioning of 10,000 hosts takes too long), with no provisioner.
func TestIntegrationExpiringAtScale(t *testing.T) {
	n := 1000
	if s := os.Getenv("AUDIT_IDENTITIES"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	e := newEnv(t, envOptions{})
	w := worker.New(e.client, e.cfg.Temporal.TaskQueue, worker.Options{MaxConcurrentWorkflowTaskExecutionSize: 64})
	w.RegisterWorkflowWithOptions(seedIdentity, workflow.RegisterOptions{Name: workflows.WorkflowName})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	t0 := time.Now().Truncate(time.Minute)
	expiry := func(i int) time.Time { // from 5 days ago to 360 days ahead, every few hours
		return t0.Add(-5*24*time.Hour + time.Duration(i)*(365*24*time.Hour/time.Duration(n)) + 7*time.Minute)
	}
	start := time.Now()
	e.seed(n, t0, expiry)
	seeding := time.Since(start)
	t.Logf("seeded %d identities in %v (%.0f a second)", n, seeding.Round(time.Millisecond), float64(n)/seeding.Seconds())

	before := func(at time.Time) (c int) {
		for i := range n {
			if expiry(i).Before(at) {
				c++
			}
		}
		return c
	}
	within := func(at time.Time) int { return before(at.Add(30 * 24 * time.Hour)) }
	var hosts []operator.Host
	var took time.Duration
	var asked time.Time
	require.Eventually(t, func() bool { // visibility catches up with the last upserts
		asked = time.Now()
		hosts = e.expiring("30d")
		took = time.Since(asked)
		return len(hosts) == within(asked) && within(asked) == within(time.Now())
	}, 60*time.Second, time.Second, "identities expiring within 30d")
	t.Logf("hosts list --expiring 30d on %d identities: %d listed in %v (wall time of the command)", n, len(hosts), took.Round(time.Millisecond))
	require.Less(t, took, 10*time.Second, "answers in seconds")
	require.InDelta(t, float64(n)*35/365, float64(len(hosts)), 2, "35 of the 365 days: 5 expired, 30 ahead")
	expired := 0
	for i, h := range hosts {
		if h.Expired {
			expired++
		}
		require.True(t, i == 0 || !h.IdentityExpires.Before(hosts[i-1].IdentityExpires), "soonest first")
	}
	require.Equal(t, before(asked), expired, "the expired ones are listed and marked")
	require.Positive(t, expired)

	started := time.Now()
	recs := e.auditJSON("--since", "2h")
	auditTook := time.Since(started)
	require.Len(t, recs, n, "every issuance of the window")
	t.Logf("audit --since 2h on %d issuances: %v (%.2f s per 1,000, one history read each)", n, auditTook.Round(time.Millisecond), auditTook.Seconds()*1000/float64(n))
}

// seed starts n seeding runs, 32 at once, each issued in the last hour, and waits for them all.
func (e *env) seed(n int, t0 time.Time, expiry func(int) time.Time) {
	e.t.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				id := fmt.Sprintf("seed-%05d.example", i)
				run, err := e.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.WorkflowID(id), TaskQueue: e.cfg.Temporal.TaskQueue,
					TypedSearchAttributes: workflows.StartSearchAttributes(id, e.cfg.Site, workflows.SourceDiscovery)},
					workflows.WorkflowName, seedInput{Issued: t0.Add(-time.Duration(i%60) * time.Minute), Expires: expiry(i)})
				if err == nil {
					err = run.Get(ctx, nil)
				}
				if err != nil {
					errs <- fmt.Errorf("seeding %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(e.t, err)
	}
}
