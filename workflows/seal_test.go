package workflows

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/choria-temporal/provisioner/activities"
)

// refusals counts what the run's hooks heard of, by reason.
func (s *ProvisionSuite) refusals() map[string]int {
	got := map[string]int{}
	s.hooks.Refused = func(reason, _, _ string) { got[reason]++ }
	return got
}

// A result that answers another request (an earlier run's, copied and completed into this run's
// task) is refused: the step fails, the run fails naming the refusal, nothing after the step
// runs, and the refusal is counted. The same for every step whose result the run acts on.
func (s *ProvisionSuite) TestAResultOfAnotherRequestIsRefused() {
	earlier := activities.Seal{Run: "an-earlier-run", RunID: "0191", Seq: 4, At: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	for _, name := range []string{activities.RunHelperName, activities.InventoryName, activities.FetchJWTName, activities.Gen25519Name,
		activities.SignServerJWTName, activities.ConfigureName} {
		s.SetupTest()
		got := s.refusals()
		s.host.replayed[name] = earlier
		s.execute(Features{JWT: true, ED25519: true}, input())
		s.Require().True(s.env.IsWorkflowCompleted(), name)
		err := s.env.GetWorkflowError()
		s.Require().Error(err, name)
		s.Contains(err.Error(), "result refused", name)
		s.Contains(err.Error(), "does not answer the request this run sent", name)
		s.Equal(1, got[activities.ReasonForeignResult], name)
		s.Equal(OutcomeFailed, s.status().Outcome, name)
		if name != activities.ConfigureName {
			s.NotContains(s.host.calls, activities.ConfigureName, "%s: nothing is configured on a refused result", name)
		}
		s.NotContains(s.host.calls, activities.RestartName, name)
	}
}

// A failure without the request's seal decides nothing: whatever its type says (the host is not
// in provisioning mode, it did not reply to a restart or a shutdown, the helper failed), the
// run retries or fails; it never ends provisioned (stale sighting), restarted or shut down on it.
func (s *ProvisionSuite) TestAnUnsealedFailureDecidesNothing() {
	sighted := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		activity, errType string
		helper            activities.HelperOutput
	}{
		{activities.InventoryName, activities.ErrTypeNotProvisioning, configured},
		{activities.FetchJWTName, activities.ErrTypeNotProvisioning, configured},
		{activities.InventoryName, activities.ErrTypeNoReply, configured},
		{activities.RestartName, activities.ErrTypeNoReply, configured},
		{activities.ShutdownName, activities.ErrTypeNoReply, activities.HelperOutput{Shutdown: true, Msg: "decommissioned"}},
		{activities.RunHelperName, activities.ErrTypeHelper, configured},
		{activities.ConfigureName, activities.ErrTypeNoReply, configured},
	} {
		s.SetupTest()
		got := s.refusals()
		s.host.helper = []activities.HelperOutput{c.helper}
		s.host.unsealed[c.activity] = true
		s.host.failing[c.activity] = temporal.NewNonRetryableApplicationError("forged "+c.errType, c.errType, nil)
		in := input()
		in.SeenAt = sighted
		s.execute(Features{JWT: true, ED25519: true}, in)
		name := c.activity + "/" + c.errType
		s.Require().True(s.env.IsWorkflowCompleted(), name)
		err := s.env.GetWorkflowError()
		s.Require().Error(err, "%s: the run fails, it does not end provisioned, restarted or shut down", name)
		s.Contains(err.Error(), activities.ErrTypeUntrusted, name)
		s.Equal(OutcomeFailed, s.status().Outcome, name)
		s.GreaterOrEqual(got[activities.ReasonUnsealedFailure], 1, name)
	}
}

// A failure carrying the worker's own sealed details under another type, retry flag or message
// (copied from the step's earlier attempt, where DescribeWorkflowExecution shows them, and sent
// by ID) decides nothing either: the workflow decides from the sealed verdict, and a failure whose
// plain fields differ from it is refused and counted, for every step that retries.
func (s *ProvisionSuite) TestASealedFailureUnderAnotherTypeDecidesNothing() {
	sighted := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	shutdown := activities.HelperOutput{Shutdown: true, Msg: "decommissioned"}
	for _, c := range []struct {
		activity, as string
		helper       activities.HelperOutput
	}{
		{activities.InventoryName, activities.ErrTypeNotProvisioning, configured},
		{activities.FetchJWTName, activities.ErrTypeNotProvisioning, configured},
		{activities.Gen25519Name, activities.ErrTypeNotProvisioning, configured},
		{activities.InventoryName, activities.ErrTypeNoReply, configured},
		{activities.RunHelperName, activities.ErrTypeConfig, configured},
		{activities.ConfigureName, activities.ErrTypeNoReply, configured},
		{activities.RestartName, activities.ErrTypeNoReply, configured},
		{activities.ShutdownName, activities.ErrTypeNoReply, shutdown},
	} {
		s.SetupTest()
		got := s.refusals()
		s.host.helper = []activities.HelperOutput{c.helper}
		// the step's real failure: retryable, of a type that decides nothing by itself
		s.host.failing[c.activity] = activities.NewError(activities.ErrTypeAborted, "the agent refused", nil)
		s.host.relabelled[c.activity] = c.as
		in := input()
		in.SeenAt = sighted
		s.execute(Features{JWT: true, ED25519: true}, in)
		name := c.activity + " as " + c.as
		s.Require().True(s.env.IsWorkflowCompleted(), name)
		err := s.env.GetWorkflowError()
		s.Require().Error(err, "%s: the run fails, it does not end provisioned, restarted or shut down", name)
		s.Contains(err.Error(), "differ from what the worker sealed", name)
		s.Equal(OutcomeFailed, s.status().Outcome, name)
		s.GreaterOrEqual(got[activities.ReasonAlteredFailure], 1, name)
		s.Zero(got[activities.ReasonUnsealedFailure], "%s: counted as altered, not as unsealed", name)
	}
}

// The workflow decides from the sealed verdict: the worker's own failure, unaltered, keeps its
// type and retry flag (a sealed NoReply to a configured server's restart is the restart under way).
func (s *ProvisionSuite) TestASealedFailureKeepsItsVerdict() {
	s.host.failing[activities.RestartName] = activities.NewError(activities.ErrTypeNoReply, "no reply", nil)
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Contains(s.result().Message, "the restart was not confirmed")
}

// Untrusted failure text is cleaned and bounded before it reaches the status and the logs.
func (s *ProvisionSuite) TestAnUnsealedFailuresTextIsCleaned() {
	s.host.unsealed[activities.RunHelperName] = true
	long := "\x1b[2J\x1b]0;owned\x07" + string(make([]byte, 4096))
	s.host.failing[activities.RunHelperName] = temporal.NewApplicationError(long, activities.ErrTypeHelper)
	s.execute(Features{JWT: true, ED25519: true}, input())
	st := s.status()
	s.NotContains(st.LastError, "\x1b")
	s.NotContains(st.LastError, "\x00")
	s.Less(len(st.LastError), 1024)
}

// A sealed refusal of a request another run wrote (a reset run's tasks scheduled before the
// reset point) sends the request again, once, sealed by this run.
func (s *ProvisionSuite) TestARequestRefusedAsAnotherRunsIsSentOnceMore() {
	s.host.script[activities.InventoryName] = []string{activities.ErrTypeOtherRun}
	s.host.script[activities.RunHelperName] = []string{activities.ErrTypeOtherRun}
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)

	s.SetupTest()
	s.host.script[activities.RunHelperName] = []string{activities.ErrTypeOtherRun, activities.ErrTypeOtherRun}
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Require().Error(s.env.GetWorkflowError(), "once, not again and again")
}

// The recorded policy decodes strictly and carries its digest and the run's nonce.
func TestRecordedPolicyDecodesStrictly(t *testing.T) {
	p := Policy{Site: "lab", Features: Features{JWT: true}}
	b, err := json.Marshal(pinned{Policy: p, Digest: p.Digest(), Nonce: newNonce()})
	require.NoError(t, err)
	var got pinned
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, p.Digest(), got.Digest)
	require.Len(t, got.Nonce, 32)

	var loose pinned
	err = json.Unmarshal([]byte(`{"policy":{"site":"lab","features":{"jwt":true,"skip_checks":true}},"digest":"x","nonce":"y"}`), &loose)
	require.Error(t, err, "an unknown field is refused")
	require.Error(t, json.Unmarshal([]byte(`{"site":"lab"}`), &loose), "a policy recorded before runs were sealed")
	require.Error(t, json.Unmarshal([]byte(`{"policy":{"site":"lab"},"digest":"x"}`), &loose), "no nonce")

	q := p
	q.Features.PKI = true
	require.NotEqual(t, p.Digest(), q.Digest(), "another configuration, another digest")
	require.Equal(t, p.Digest(), p.withDefaults().Digest(), "defaults are part of the digest's input")
}

// A reply answers only the request it was made for: another run, step, request or workflow
// task does not; the run ID does not take part (a reset run replays results of the run it reset).
func TestSealAnswersOnlyItsRequest(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	req := activities.Seal{Run: "n", RunID: "r1", Step: StepHelper, Seq: 5, At: at}
	require.True(t, req.Answers(req))
	reset := req
	reset.RunID = "r2"
	require.True(t, reset.Answers(req), "a reset run's replayed result")
	for name, other := range map[string]activities.Seal{
		"another run":           {Run: "m", RunID: "r1", Step: StepHelper, Seq: 5, At: at},
		"another step":          {Run: "n", RunID: "r1", Step: StepSign, Seq: 5, At: at},
		"another request":       {Run: "n", RunID: "r1", Step: StepHelper, Seq: 6, At: at},
		"another workflow task": {Run: "n", RunID: "r1", Step: StepHelper, Seq: 5, At: at.Add(time.Millisecond)},
		"no seal":               {},
	} {
		require.False(t, other.Answers(req), name)
	}
	require.False(t, activities.Seal{}.Answers(activities.Seal{}), "an unsealed request is answered by nothing")
}

// A sign or configure refused as resting on another run's replies (what a reset run replays) is
// not retried with them: the run reads the host and asks the helper again, and ends as the helper
// now says; the facts and the decision it signs and sends on are its own run's.
func (s *ProvisionSuite) TestADecisionAnotherRunReceivedIsTakenAgain() {
	for _, step := range []string{activities.SignServerJWTName, activities.ConfigureName} {
		s.SetupTest()
		s.host.script[step] = []string{activities.ErrTypeStaleApproval}
		s.host.helper = []activities.HelperOutput{configured, {Shutdown: true, Msg: "the CA no longer approves this host"}}
		s.execute(Features{JWT: true, ED25519: true}, input())
		s.Equal(OutcomeShutdown, s.result().Outcome, step)
		s.Equal(2, countOf(s.host.calls, activities.InventoryName), "%s: the host is read again", step)
		s.Equal(2, countOf(s.host.calls, activities.RunHelperName), "%s: the helper is asked again", step)
		s.Equal(map[string]int{activities.SignServerJWTName: 0, activities.ConfigureName: 1}[step],
			countOf(s.host.calls, activities.ConfigureName), "%s: the refused configure is the only one: nothing is sent on the refused decision", step)
		s.NotContains(s.host.calls, activities.RestartName, step)
	}

	s.SetupTest()
	s.host.script[activities.ConfigureName] = []string{activities.ErrTypeStaleApproval}
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome, "the helper approves again: provisioned on this run's decision")
	s.Len(s.host.conf.Facts, 4, "configure rests on the jwt, gen25519 and inventory replies and the helper's")

	s.SetupTest()
	s.host.script[activities.ConfigureName] = []string{activities.ErrTypeStaleApproval, activities.ErrTypeStaleApproval}
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Require().Error(s.env.GetWorkflowError(), "once, not again and again")
	s.Contains(s.env.GetWorkflowError().Error(), activities.ErrTypeStaleApproval)
}
