package workflows

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// fakeHost stands in for the activities: it records calls and answers from scripted replies.
type fakeHost struct {
	mu         sync.Mutex
	calls      []string
	helper     []activities.HelperOutput // one per helper call; the last repeats
	failing    map[string]error          // activity name -> error returned every time
	flaky      map[string]int            // activity name -> number of leading failures
	version    string
	upgradable bool
	signed     activities.SignInput
	conf       activities.ConfigureInput
	helpIn     activities.HelperRequest
	seenAt     []time.Time // HostInput.SeenAt of each jwt, gen25519 and inventory call
	local      []string    // activities run as local activities
	queues     map[string]string
}

func (f *fakeHost) saw(in activities.HostInput) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seenAt = append(f.seenAt, in.SeenAt)
}

func (f *fakeHost) record(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity {
		f.local = append(f.local, name)
	}
	if f.queues == nil {
		f.queues = map[string]string{}
	}
	f.queues[name] = info.TaskQueue
	if err, ok := f.failing[name]; ok {
		return err
	}
	if f.flaky[name] > 0 {
		f.flaky[name]--
		return temporal.NewApplicationError("transient "+name, activities.ErrTypeRPC)
	}
	return nil
}

func (f *fakeHost) register(env *testsuite.TestWorkflowEnvironment) {
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(ctx context.Context, in activities.HostInput) (*activities.JWTResult, error) {
		f.saw(in)
		if err := f.record(ctx, activities.FetchJWTName); err != nil {
			return nil, err
		}
		return &activities.JWTResult{Claims: &tokens.ProvisioningClaims{ProtoV2: true}, ECDHPublic: "ab", HadToken: true}, nil
	}, activities.FetchJWTName)
	reg(func(ctx context.Context, in activities.HostInput) (*activities.ED25519Result, error) {
		f.saw(in)
		if err := f.record(ctx, activities.Gen25519Name); err != nil {
			return nil, err
		}
		return &activities.ED25519Result{PublicKey: "pk", Directory: "/etc/choria", Signature: "sig"}, nil
	}, activities.Gen25519Name)
	reg(func(ctx context.Context, in activities.HostInput) (*activities.CSRResult, error) {
		if err := f.record(ctx, activities.GencsrName); err != nil {
			return nil, err
		}
		return &activities.CSRResult{CSR: "csr", PublicKey: "pub", SSLDir: "/etc/choria/ssl"}, nil
	}, activities.GencsrName)
	reg(func(ctx context.Context, in activities.HostInput) (*activities.InventoryResult, error) {
		f.saw(in)
		if err := f.record(ctx, activities.InventoryName); err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		v := f.version
		if v == "" {
			v = "0.30.2"
		}
		return &activities.InventoryResult{Inventory: `{"version":"` + v + `"}`, Version: v, Upgradable: f.upgradable}, nil
	}, activities.InventoryName)
	reg(func(ctx context.Context, in activities.UpgradeInput) (*activities.MessageResult, error) {
		if err := f.record(ctx, activities.ReleaseUpdateName); err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.version = in.Version
		return &activities.MessageResult{Message: "Restarting Choria Server after 2s"}, nil
	}, activities.ReleaseUpdateName)
	reg(func(ctx context.Context, in activities.HelperRequest) (*activities.HelperOutput, error) {
		if err := f.record(ctx, activities.RunHelperName); err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.helpIn = in
		out := f.helper[0]
		if len(f.helper) > 1 {
			f.helper = f.helper[1:]
		}
		return &out, nil
	}, activities.RunHelperName)
	reg(func(ctx context.Context, in activities.SignInput) (string, error) {
		if err := f.record(ctx, activities.SignServerJWTName); err != nil {
			return "", err
		}
		f.signed = in
		return "signed.jwt", nil
	}, activities.SignServerJWTName)
	reg(func(ctx context.Context, in activities.ConfigureInput) (*activities.MessageResult, error) {
		if err := f.record(ctx, activities.ConfigureName); err != nil {
			return nil, err
		}
		f.conf = in
		return &activities.MessageResult{Message: "Wrote 12 lines"}, nil
	}, activities.ConfigureName)
	reg(func(ctx context.Context, in activities.RestartInput) (*activities.MessageResult, error) {
		if err := f.record(ctx, activities.RestartName); err != nil {
			return nil, err
		}
		return &activities.MessageResult{Message: "Restarting"}, nil
	}, activities.RestartName)
	reg(func(ctx context.Context, in activities.HostInput) (*activities.MessageResult, error) {
		if err := f.record(ctx, activities.ShutdownName); err != nil {
			return nil, err
		}
		return &activities.MessageResult{Message: "Shutting down"}, nil
	}, activities.ShutdownName)
}

var configured = activities.HelperOutput{Configuration: map[string]string{"identity": "n1", "plugin.choria.server.provision": "false"}, Msg: "ok"}

type ProvisionSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env  *testsuite.TestWorkflowEnvironment
	host *fakeHost
}

var fullFlowNames = []string{activities.FetchJWTName, activities.Gen25519Name, activities.InventoryName, activities.RunHelperName,
	activities.SignServerJWTName, activities.ConfigureName, activities.RestartName}

func TestProvisionSuite(t *testing.T) { suite.Run(t, new(ProvisionSuite)) }

func (s *ProvisionSuite) SetupTest() { s.setup(ProvisionHost) }

// setup gives the test a new environment with the workflow registered as wf and a fake host.
func (s *ProvisionSuite) setup(wf any) {
	s.env = s.NewTestWorkflowEnvironment()
	s.env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: WorkflowName})
	s.host = &fakeHost{helper: []activities.HelperOutput{configured}, failing: map[string]error{}, flaky: map[string]int{}}
	s.host.register(s.env)
}

func input(f Features) ProvisionInput {
	return ProvisionInput{Identity: "n1.example", Site: "lab", Features: f, Source: SourceDiscovery, DeferDelay: time.Minute}
}

func (s *ProvisionSuite) result() *ProvisionResult {
	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError())
	var res ProvisionResult
	s.Require().NoError(s.env.GetWorkflowResult(&res))
	return &res
}

func (s *ProvisionSuite) status() Status {
	v, err := s.env.QueryWorkflow(StatusQuery)
	s.Require().NoError(err)
	var st Status
	s.Require().NoError(v.Get(&st))
	return st
}

func (s *ProvisionSuite) TestED25519RunsEveryStepInOrder() {
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true, ED25519: true}))
	res := s.result()
	s.Equal(OutcomeProvisioned, res.Outcome)
	s.Equal([]string{activities.FetchJWTName, activities.Gen25519Name, activities.InventoryName, activities.RunHelperName,
		activities.SignServerJWTName, activities.ConfigureName, activities.RestartName}, s.host.calls)
	s.Equal("signed.jwt", s.host.conf.ServerJWT)
	s.Equal("pk", s.host.signed.PublicKey)
	s.True(s.host.helpIn.HadToken, "the worker must restore the redacted token for the helper")
	s.NotNil(s.host.helpIn.Input.ED25519PubKey)
	s.Equal(`{"version":"0.30.2"}`, s.host.helpIn.Input.Inventory)

	st := s.status()
	s.Equal(OutcomeProvisioned, st.Outcome)
	s.Equal(StepDone, st.Step)
	s.Equal("0.30.2", st.ServerVersion)
	s.Len(st.Timeline, 7)
}

func (s *ProvisionSuite) TestOnlyTheFirstRPCCarriesTheSightingTime() {
	in := input(Features{JWT: true, ED25519: true})
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.result()
	s.Equal([]time.Time{in.SeenAt, {}, {}}, s.host.seenAt)
}

func (s *ProvisionSuite) TestStaleSightingEndsProvisioned() {
	s.host.failing[activities.FetchJWTName] = temporal.NewNonRetryableApplicationError(
		"no reply; an earlier run completed after the sighting", activities.ErrTypeNotProvisioning, nil)
	in := input(Features{JWT: true, ED25519: true})
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.env.ExecuteWorkflow(ProvisionHost, in)
	res := s.result()
	s.Equal(OutcomeProvisioned, res.Outcome)
	s.Contains(res.Message, "stale sighting")
	s.Equal([]string{activities.FetchJWTName}, s.host.calls)
}

// upserts records the ProvisionStep and ProvisionOutcome of every search-attribute upsert.
func (s *ProvisionSuite) upserts() *[]string {
	var got []string
	s.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		step, _ := sa.GetKeyword(StepKey)
		outcome, _ := sa.GetKeyword(OutcomeKey)
		got = append(got, step+"/"+outcome)
	}).Return(nil)
	return &got
}

func (s *ProvisionSuite) TestSearchAttributesAtTransitionsOnly() {
	in := input(Features{JWT: true, ED25519: true})
	s.Require().NoError(s.env.SetTypedSearchAttributesOnStart(StartSearchAttributes(in)))
	got := s.upserts()
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.result()
	// the starter set identity, site and outcome; of seven steps only the helper is upserted
	s.Equal([]string{"helper/", "done/provisioned"}, *got)
}

func (s *ProvisionSuite) TestFailedHostKeepsTheStepItFailedIn() {
	s.host.failing[activities.ConfigureName] = temporal.NewNonRetryableApplicationError("bad config", activities.ErrTypeConfig, nil)
	in := input(Features{JWT: true, ED25519: true})
	got := s.upserts()
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.Require().Error(s.env.GetWorkflowError())
	// started without search attributes (an older starter): the run sets them itself
	s.Equal([]string{"/running", "helper/", "configure/failed"}, *got)
}

func (s *ProvisionSuite) TestLocalReadsRunTheCheapStepsAsLocalActivities() {
	in := input(Features{JWT: true, ED25519: true})
	in.LocalReads = true
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal([]string{activities.FetchJWTName, activities.Gen25519Name, activities.InventoryName, activities.SignServerJWTName}, s.host.local)
	s.Equal(fullFlowNames, s.host.calls)
}

func (s *ProvisionSuite) TestRegularActivitiesByDefault() {
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true, ED25519: true}))
	s.result()
	s.Empty(s.host.local)
}

func (s *ProvisionSuite) TestHelperOnItsOwnTaskQueueWhenRateLimited() {
	in := input(Features{JWT: true, ED25519: true})
	in.HelperTaskQueue = "tq-helper"
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.result()
	s.Equal("tq-helper", s.host.queues[activities.RunHelperName])
	s.NotEqual("tq-helper", s.host.queues[activities.ConfigureName])
}

// slots is a worker process's helper slots as the workflow sees them.
type slots bool

func (f slots) HelperSlotFree() bool { return bool(f) }

func (s *ProvisionSuite) TestHelperStaysOnTheRunsQueueWhileThisProcessHasASlot() {
	for _, free := range []bool{true, false} {
		s.setup(HostWorkflow{Helpers: slots(free)}.ProvisionHost)
		in := input(Features{JWT: true, ED25519: true})
		in.HelperTaskQueue = "tq-helper"
		s.env.ExecuteWorkflow(WorkflowName, in)
		s.Equal(OutcomeProvisioned, s.result().Outcome)
		if free {
			s.Equal(s.host.queues[activities.ConfigureName], s.host.queues[activities.RunHelperName], "a free slot here: the run's own queue")
		} else {
			s.Equal("tq-helper", s.host.queues[activities.RunHelperName], "no slot here: whichever process has room")
		}
		s.Equal(fullFlowNames, s.host.calls)
	}
}

func (s *ProvisionSuite) TestJWTOnlySkipsKeyAndSigning() {
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.result()
	s.Equal([]string{activities.FetchJWTName, activities.InventoryName, activities.RunHelperName, activities.ConfigureName, activities.RestartName}, s.host.calls)
	s.Empty(s.host.conf.ServerJWT)
}

func (s *ProvisionSuite) TestNoFeaturesStillInventoriesAndConfigures() {
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	s.result()
	s.Equal([]string{activities.InventoryName, activities.RunHelperName, activities.ConfigureName, activities.RestartName}, s.host.calls)
	s.Nil(s.host.helpIn.Input.JWT)
}

func (s *ProvisionSuite) TestDeferWaitsOnATimerAndRunsTheStepsAgain() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "not in CMDB yet"}, configured}
	var during Status
	s.env.RegisterDelayedCallback(func() { during = s.status() }, 30*time.Second)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(OutcomeDeferred, during.Outcome)
	s.Equal(StepDeferred, during.Step)
	s.Contains(during.Message, "not in CMDB yet")
	s.Equal(2, countOf(s.host.calls, activities.RunHelperName))
	s.Equal(1, s.status().Defers)
}

func (s *ProvisionSuite) TestShutdownCallsShutdownAndEnds() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true, ED25519: true}))
	res := s.result()
	s.Equal(OutcomeShutdown, res.Outcome)
	s.Contains(res.Message, "decommissioned")
	s.Equal(activities.ShutdownName, s.host.calls[len(s.host.calls)-1])
	s.Zero(countOf(s.host.calls, activities.ConfigureName))
}

func (s *ProvisionSuite) TestPolicyFailureIsNotRetriedAndIsVisible() {
	s.host.failing[activities.FetchJWTName] = temporal.NewNonRetryableApplicationError("provisioning JWT is not valid: bad signature", activities.ErrTypeInvalidJWT, nil)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.True(s.env.IsWorkflowCompleted())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	var app *temporal.ApplicationError
	s.Require().True(errors.As(err, &app))
	s.Equal(ErrTypeProvisionFailed, app.Type())
	s.Contains(app.Error(), "step jwt")
	s.Contains(app.Error(), "bad signature")
	s.Equal(1, countOf(s.host.calls, activities.FetchJWTName))
	st := s.status()
	s.Equal(OutcomeFailed, st.Outcome)
	s.Equal(StepJWT, st.Step)
}

func (s *ProvisionSuite) TestTransientFailureRecoversByRetry() {
	s.host.flaky[activities.InventoryName] = 2
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(3, countOf(s.host.calls, activities.InventoryName))
}

func (s *ProvisionSuite) TestRetryBudgetRunsOutThenFails() {
	s.host.failing[activities.ConfigureName] = temporal.NewApplicationError("no reply", activities.ErrTypeNoReply)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.Require().Error(s.env.GetWorkflowError())
	s.Equal(5, countOf(s.host.calls, activities.ConfigureName))
	s.Zero(countOf(s.host.calls, activities.RestartName))
	s.Contains(s.status().LastError, "no reply")
}

func (s *ProvisionSuite) TestTooManyDefersFail() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "later"}}
	in := input(Features{})
	in.MaxDefers = 3
	s.env.ExecuteWorkflow(ProvisionHost, in)
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "deferred the host 3 times")
}

func (s *ProvisionSuite) TestLongDeferralContinuesAsNew() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "later"}}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	err := s.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	s.Require().True(errors.As(err, &can), "got %v", err)
	var next ProvisionInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Equal(continueAsNewDefers, next.Defers)
	s.Equal("n1.example", next.Identity)
}

func (s *ProvisionSuite) TestSightingsAreAbsorbed() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "wait"}, configured}
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SeenSignal, Sighting{Source: SourceEvent, At: time.Unix(100, 0).UTC()})
		s.env.SignalWorkflow(SeenSignal, Sighting{Source: SourceDiscovery, At: time.Unix(200, 0).UTC()})
	}, 10*time.Second)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	s.result()
	st := s.status()
	s.Equal(3, st.Sightings)
	s.Equal(time.Unix(200, 0).UTC(), st.LastSeen.UTC())
}

func (s *ProvisionSuite) TestInvalidIdentityIsRejected() {
	in := input(Features{})
	in.Identity = "bad>identity"
	s.env.ExecuteWorkflow(ProvisionHost, in)
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "invalid identity")
	s.Empty(s.host.calls)
}

func countOf(calls []string, name string) int {
	n := 0
	for _, c := range calls {
		if c == name {
			n++
		}
	}
	return n
}

func TestValidateIdentity(t *testing.T) {
	for _, bad := range []string{"", "a b", "a\x00b", "a*", "x.>", string(make([]byte, 300)), "tab\there"} {
		require.Error(t, ValidateIdentity(bad), "%q", bad)
	}
	for _, good := range []string{"n1.example.net", "web-01", "host_1.dc2.example.com"} {
		require.NoError(t, ValidateIdentity(good))
	}
	require.Equal(t, "provision:n1", WorkflowID("n1"))
}

func (s *ProvisionSuite) TestHelperFailuresAreEachRecordedThenRecover() {
	s.host.flaky[activities.RunHelperName] = 2
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(3, countOf(s.host.calls, activities.RunHelperName))
	var failed []string
	for _, r := range s.status().Timeline {
		if r.Step == StepHelper && r.Error != "" {
			failed = append(failed, r.Error)
		}
	}
	s.Len(failed, 2)
	s.Contains(failed[0], "transient RunHelper")
}

func (s *ProvisionSuite) TestHelperGivesUpAfterFiveAttempts() {
	s.host.failing[activities.RunHelperName] = temporal.NewApplicationError("helper exited with a non-zero status", activities.ErrTypeHelper)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step helper")
	s.Equal(5, countOf(s.host.calls, activities.RunHelperName))
}

func (s *ProvisionSuite) TestPauseHoldsTheHostBeforeItsNextStep() {
	var paused Status
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(PauseSignal, nil) }, 0)
	s.env.RegisterDelayedCallback(func() { paused = s.status() }, time.Hour)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(ResumeSignal, nil) }, 2*time.Hour)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.True(paused.Paused)
	s.Len(paused.Timeline, 1, "only the step in flight when the pause came may run")
	s.False(s.status().Paused)
}

func (s *ProvisionSuite) TestTimelineCarriesAttemptsAndDecision() {
	s.host.flaky[activities.InventoryName] = 1
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.result()
	st := s.status()
	s.Equal(DecisionConfigure, st.HelperDecision)
	for _, r := range st.Timeline {
		s.False(r.Ended.Before(r.Started))
	}
}

func TestControlWorkflowPausesAndResumes(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ProvisionerControl, workflow.RegisterOptions{Name: ControlWorkflowName})
	var states []ControlState
	query := func() {
		v, err := env.QueryWorkflow(ControlStateQuery)
		require.NoError(t, err)
		var st ControlState
		require.NoError(t, v.Get(&st))
		states = append(states, st)
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(PauseSignal, ControlRequest{By: "ops", Reason: "CA maintenance"}) }, time.Second)
	env.RegisterDelayedCallback(query, 2*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(ResumeSignal, ControlRequest{By: "ops"}) }, 3*time.Second)
	env.RegisterDelayedCallback(query, 4*time.Second)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 5*time.Second)
	env.ExecuteWorkflow(ProvisionerControl, ControlState{})
	require.Len(t, states, 2)
	require.True(t, states[0].Paused)
	require.Equal(t, "CA maintenance", states[0].Reason)
	require.False(t, states[1].Paused)
}

func (s *ProvisionSuite) TestStaleSightingOfAProvisionedServerIsNotAFailure() {
	s.host.failing[activities.FetchJWTName] = temporal.NewNonRetryableApplicationError("choria_provision#jwt: Cannot reconfigure a server that is not in provisioning mode", activities.ErrTypeNotProvisioning, nil)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	res := s.result()
	s.Equal(OutcomeProvisioned, res.Outcome)
	s.Contains(res.Message, "stale sighting")
}

func (s *ProvisionSuite) TestNotInProvisioningModeLaterIsAFailure() {
	s.host.failing[activities.ConfigureName] = temporal.NewNonRetryableApplicationError("choria_provision#configure: Cannot reconfigure a server that is not in provisioning mode", activities.ErrTypeNotProvisioning, nil)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	s.Require().Error(s.env.GetWorkflowError())
}

func upgradeTo(v string) activities.HelperOutput {
	out := configured
	out.Upgrade = v
	return out
}

func (s *ProvisionSuite) TestUpgradeThenProvisionTheNewVersion() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true, Upgrades: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(1, countOf(s.host.calls, activities.ReleaseUpdateName))
	s.Equal(2, countOf(s.host.calls, activities.InventoryName), "the steps run again against the upgraded server")
	s.Equal(1, countOf(s.host.calls, activities.ConfigureName))
	st := s.status()
	s.Equal("0.99.0", st.Upgraded)
	s.Equal("0.99.0", st.ServerVersion)
}

func (s *ProvisionSuite) TestNoUpgradeWhenTheVersionMatchesOrTheFeatureIsOff() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.30.2")}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{Upgrades: true}))
	s.result()
	s.Zero(countOf(s.host.calls, activities.ReleaseUpdateName))
}

func (s *ProvisionSuite) TestUpgradeFeatureOffIgnoresTheHelpersVersion() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	s.result()
	s.Zero(countOf(s.host.calls, activities.ReleaseUpdateName))
}

func (s *ProvisionSuite) TestNotUpgradableFailsUnlessOptional() {
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{Upgrades: true}))
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "not upgradable")
	s.Zero(countOf(s.host.calls, activities.ConfigureName))
}

func (s *ProvisionSuite) TestNotUpgradableGoesOnWhenOptional() {
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{Upgrades: true, UpgradesOptional: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Contains(s.status().LastError, "not upgradable")
}

func (s *ProvisionSuite) TestFailedUpgradeAbortsUnlessOptional() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.host.failing[activities.ReleaseUpdateName] = temporal.NewApplicationError("Update to version 0.99.0 failed, release rolled back", activities.ErrTypeAborted)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{Upgrades: true}))
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step upgrade")
	s.Equal(3, countOf(s.host.calls, activities.ReleaseUpdateName))
}

func (s *ProvisionSuite) TestFailedUpgradeGoesOnWhenOptional() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.host.failing[activities.ReleaseUpdateName] = temporal.NewApplicationError("rolled back", activities.ErrTypeAborted)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{Upgrades: true, UpgradesOptional: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(1, countOf(s.host.calls, activities.ConfigureName))
}

func (s *ProvisionSuite) TestShutdownWithoutAReplyIsStillAShutdown() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.host.failing[activities.ShutdownName] = temporal.NewApplicationError("choria_provision#shutdown: no reply from n1 within 10s", activities.ErrTypeNoReply)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	res := s.result()
	s.Equal(OutcomeShutdown, res.Outcome)
	s.Contains(res.Message, "did not confirm")
	s.Equal(2, countOf(s.host.calls, activities.ShutdownName))
}

// A shutdown that could not reach the broker is no confirmation of anything: the host fails.
func (s *ProvisionSuite) TestShutdownOverADeadBrokerFails() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.host.failing[activities.ShutdownName] = activities.NewError(activities.ErrTypeRPC,
		"choria_provision#shutdown: no reply from n1 within 10s: the broker connection is down", nil)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step shutdown")
	s.Equal(OutcomeFailed, s.status().Outcome)
}

func (s *ProvisionSuite) TestShutdownRefusedIsAFailure() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true}}
	s.host.failing[activities.ShutdownName] = temporal.NewNonRetryableApplicationError("Incorrect provision token supplied", activities.ErrTypeAborted, nil)
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{}))
	s.Require().Error(s.env.GetWorkflowError())
}

// The result says when the restart RPC succeeded, so discovery can judge a later sighting by
// when the host left provisioning mode rather than by when the run closed.
func (s *ProvisionSuite) TestResultCarriesTheRestartTime() {
	var restartedAt time.Time
	s.env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
		if info.ActivityType.Name == activities.RestartName {
			restartedAt = s.env.Now()
		}
	})
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true, ED25519: true}))
	res := s.result()
	s.False(res.RestartedAt.IsZero())
	s.WithinDuration(restartedAt, res.RestartedAt, time.Second)
	s.Equal(DefaultRestartSplay, res.RestartSplay)
	s.Equal(res.RestartedAt.Add(3*time.Second), res.LeftProvisioningBy())
}

func (s *ProvisionSuite) TestNoRestartTimeWithoutARestart() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.env.ExecuteWorkflow(ProvisionHost, input(Features{JWT: true}))
	res := s.result()
	s.Equal(OutcomeShutdown, res.Outcome)
	s.True(res.RestartedAt.IsZero())
	s.True(res.LeftProvisioningBy().IsZero())
}

func lean(f Features) ProvisionInput {
	in := input(f)
	in.Version = CurrentVersion
	return in
}

// A run of the current version schedules its reads together and signs in a local activity; its
// steps and its result are those of a run before it.
func (s *ProvisionSuite) TestLeanRunReadsTogetherAndSignsLocally() {
	s.env.ExecuteWorkflow(ProvisionHost, lean(Features{JWT: true, ED25519: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.ElementsMatch(fullFlowNames[:3], s.host.calls[:3])
	s.Equal(fullFlowNames[3:], s.host.calls[3:])
	s.Equal([]string{activities.SignServerJWTName}, s.host.local)
	s.Equal("signed.jwt", s.host.conf.ServerJWT)
	s.NotNil(s.host.helpIn.Input.ED25519PubKey)
	s.Zero(s.host.helpIn.Input.ED25519PubKey.Attempt, "the helper contract has no attempt")
	s.Equal([]time.Time{{}, {}, {}}, s.host.seenAt)
	st := s.status()
	s.Len(st.Timeline, 7)
	s.Equal(StepDone, st.Step)
}

func (s *ProvisionSuite) TestLeanRunWithPKIReadsTheCSRWithTheOthers() {
	s.env.ExecuteWorkflow(ProvisionHost, lean(Features{JWT: true, PKI: true}))
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.ElementsMatch([]string{activities.FetchJWTName, activities.GencsrName, activities.InventoryName}, s.host.calls[:3])
	s.NotNil(s.host.helpIn.Input.CSR)
}

func (s *ProvisionSuite) TestLeanRunStaleSightingOfAnyFirstRead() {
	s.host.failing[activities.InventoryName] = temporal.NewNonRetryableApplicationError(
		"no reply; an earlier run completed after the sighting", activities.ErrTypeNotProvisioning, nil)
	in := lean(Features{JWT: true, ED25519: true})
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.env.ExecuteWorkflow(ProvisionHost, in)
	res := s.result()
	s.Equal(OutcomeProvisioned, res.Outcome)
	s.Contains(res.Message, "stale sighting")
	s.Equal([]time.Time{in.SeenAt, in.SeenAt, in.SeenAt}, s.host.seenAt)
}

func (s *ProvisionSuite) TestLeanRunFailsAtTheReadThatFailed() {
	s.host.failing[activities.Gen25519Name] = temporal.NewNonRetryableApplicationError("bad", activities.ErrTypeBadSignature, nil)
	s.env.ExecuteWorkflow(ProvisionHost, lean(Features{JWT: true, ED25519: true}))
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step gen25519")
	s.Equal(StepGen25519, s.status().Step)
	s.Zero(countOf(s.host.calls, activities.RunHelperName))
}

func (s *ProvisionSuite) TestLeanRunShutdownWithoutAReply() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.host.failing[activities.ShutdownName] = temporal.NewApplicationError("no reply", activities.ErrTypeNoReply)
	s.env.ExecuteWorkflow(ProvisionHost, lean(Features{}))
	s.Equal(OutcomeShutdown, s.result().Outcome)
}

// Fast mode: every step a local activity, the same steps, results and status.
func (s *ProvisionSuite) TestFastModeRunsEveryStepLocally() {
	in := lean(Features{JWT: true, ED25519: true})
	in.Fast = true
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.ElementsMatch(fullFlowNames, s.host.local)
	s.Len(s.status().Timeline, 7)
}

func (s *ProvisionSuite) TestFastModeRetriesTheHelperAndKeepsItsPolicy() {
	s.host.flaky[activities.RunHelperName] = 2
	s.host.failing[activities.ConfigureName] = temporal.NewApplicationError("no reply", activities.ErrTypeNoReply)
	in := lean(Features{})
	in.Fast = true
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.Require().Error(s.env.GetWorkflowError())
	s.Equal(3, countOf(s.host.calls, activities.RunHelperName))
	s.Equal(5, countOf(s.host.calls, activities.ConfigureName), "the same retry policy as a regular activity")
}

func (s *ProvisionSuite) TestFastModeKeepsARateLimitedHelperRegular() {
	in := lean(Features{})
	in.Fast, in.HelperTaskQueue = true, "tq-helper"
	s.env.ExecuteWorkflow(ProvisionHost, in)
	s.result()
	s.NotContains(s.host.local, activities.RunHelperName)
	s.Equal("tq-helper", s.host.queues[activities.RunHelperName])
}
