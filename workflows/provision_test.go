package workflows

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/metrics"
)

// fakeHost stands in for the activities: it records calls and answers from scripted replies.
type fakeHost struct {
	mu         sync.Mutex
	calls      []string
	helper     []activities.HelperOutput // one per helper call; the last repeats
	failing    map[string]error          // activity name -> error returned every time
	flaky      map[string]int            // activity name -> number of leading failures
	script     map[string][]string       // activity name -> error types of its first calls
	version    string
	upgradable bool
	signed     activities.SignInput
	conf       activities.ConfigureInput
	helpIn     activities.HelperRequest
	seenAt     []time.Time // HostInput.SeenAt of each jwt, gen25519 and inventory call
	local      []string    // activities run as local activities
	queues     map[string]string
	// unsealed: activity name -> its failures go back without the request's seal (a namespace
	// client's, or one the codec could not read); replayed: -> its results answer another request
	unsealed map[string]bool
	replayed map[string]activities.Seal
	// relabelled: activity name -> its sealed failures go back under this type, non-retryable,
	// with another message (the worker's details copied into a failure of someone else's choosing)
	relabelled map[string]string
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
	if s := f.script[name]; len(s) > 0 {
		f.script[name] = s[1:]
		return activities.NewError(s[0], "scripted "+s[0], nil)
	}
	if f.flaky[name] > 0 {
		f.flaky[name]--
		return temporal.NewApplicationError("transient "+name, activities.ErrTypeRPC)
	}
	return nil
}

// register registers the activities as a worker does and mocks each by method value with the
// fake host's answer.
func (f *fakeHost) register(env *testsuite.TestWorkflowEnvironment) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	if err != nil {
		panic(err)
	}
	a := activities.New(nil, activities.Settings{Site: "lab"}, m, zap.NewNop())
	a.Register(env)
	// the worker runs the sign step with its own signer only (HostWorkflow.Signer); the test
	// environment mocks activities by registered name
	env.RegisterActivityWithOptions(a.SignServerJWT, activity.RegisterOptions{Name: activities.SignServerJWTName})
	// each activity mocked by the method value its row in the step table names
	methods := map[string]any{}
	for _, row := range stepTable() {
		methods[activityName(row)] = row.activity
	}
	reg := func(name string, fake stepFake) {
		env.OnActivity(methods[name], mock.Anything, mock.Anything).Return(fake(name))
	}
	reg(activities.FetchJWTName, answerSeeing(f, f.saw, func(activities.HostInput) *activities.JWTResult {
		return &activities.JWTResult{Claims: &tokens.ProvisioningClaims{ProtoV2: true}, ECDHPublic: "ab", HadToken: true}
	}))
	reg(activities.Gen25519Name, answerSeeing(f, f.saw, func(activities.HostInput) *activities.ED25519Result {
		return &activities.ED25519Result{PublicKey: "pk", Directory: "/etc/choria", Signature: "sig"}
	}))
	reg(activities.GencsrName, answer(f, func(activities.HostInput) *activities.CSRResult {
		return &activities.CSRResult{CSR: "csr", PublicKey: "pub", SSLDir: "/etc/choria/ssl"}
	}))
	reg(activities.InventoryName, answerSeeing(f, f.saw, func(activities.HostInput) *activities.InventoryResult {
		f.mu.Lock()
		defer f.mu.Unlock()
		v := f.version
		if v == "" {
			v = "0.30.2"
		}
		return &activities.InventoryResult{Inventory: `{"version":"` + v + `"}`, Version: v, Upgradable: f.upgradable}
	}))
	reg(activities.ReleaseUpdateName, answer(f, func(in activities.UpgradeInput) *activities.MessageResult {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.version = in.Version
		return &activities.MessageResult{Message: "Restarting Choria Server after 2s"}
	}))
	reg(activities.RunHelperName, answer(f, func(in activities.HelperRequest) *activities.HelperOutput {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.helpIn = in
		out := f.helper[0]
		if len(f.helper) > 1 {
			f.helper = f.helper[1:]
		}
		return &out
	}))
	reg(activities.SignServerJWTName, answer(f, func(in activities.SignInput) *activities.SignResult {
		f.signed = in
		return &activities.SignResult{JWT: "signed.jwt"}
	}))
	reg(activities.ConfigureName, answer(f, func(in activities.ConfigureInput) *activities.MessageResult {
		f.conf = in
		return &activities.MessageResult{Message: "Wrote 12 lines"}
	}))
	reg(activities.RestartName, answer(f, func(activities.RestartInput) *activities.MessageResult {
		return &activities.MessageResult{Message: "Restarting"}
	}))
	reg(activities.ShutdownName, answer(f, func(activities.HostInput) *activities.MessageResult {
		return &activities.MessageResult{Message: "Shutting down"}
	}))
}

// relabel is a sealed failure's details under another type, flag and message.
func relabel(sealed error, as string) error {
	var app *temporal.ApplicationError
	if !errors.As(sealed, &app) {
		panic("relabel: not an application error")
	}
	var attempt int32
	var reply activities.Seal
	var verdict activities.Verdict
	if err := app.Details(&attempt, &reply, &verdict); err != nil {
		panic(err)
	}
	return temporal.NewApplicationErrorWithOptions("relabelled "+as, as, temporal.ApplicationErrorOptions{
		NonRetryable: true, Details: []any{attempt, reply, verdict}})
}

// stepFake makes a fake activity for the step it is registered as.
type stepFake func(name string) any

// answer is a fake activity: each call is recorded (which fails it where the test scripts a
// failure), then fn answers it.
func answer[I, O any](f *fakeHost, fn func(I) O) stepFake { return answerSeeing(f, nil, fn) }

// answerSeeing is answer that first shows each call's input to see, a failing call's too.
func answerSeeing[I, O any](f *fakeHost, see func(I), fn func(I) O) stepFake {
	return func(name string) any {
		return func(ctx context.Context, in I) (O, error) {
			if see != nil {
				see(in)
			}
			req := any(in).(interface{ GetRequest() activities.Seal }).GetRequest()
			f.mu.Lock()
			unsealed, other, replayed := f.unsealed[name], f.replayed[name], f.replayed[name].Run != ""
			f.mu.Unlock()
			if err := f.record(ctx, name); err != nil {
				var none O
				if unsealed {
					return none, err
				}
				sealed := activities.SealFailure(err, activity.GetInfo(ctx).Attempt, req)
				if as := f.relabelled[name]; as != "" {
					return none, relabel(sealed, as)
				}
				return none, sealed
			}
			out := fn(in)
			if r, ok := any(out).(interface{ SetReply(activities.Seal) }); ok {
				if replayed {
					req = other
				}
				r.SetReply(req)
			}
			return out, nil
		}
	}
}

var configured = activities.HelperOutput{Configuration: map[string]string{"identity": "n1", "plugin.choria.server.provision": "false"}, Msg: "ok"}

type ProvisionSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env    *testsuite.TestWorkflowEnvironment
	host   *fakeHost
	policy Policy // the worker's; execute registers the workflow with it
	hooks  Hooks
	// onUpsert sets a mock that must follow the registration (upserts)
	onUpsert func()
	// visible is what visibility holds of the run's keyword search attributes: those it started
	// with (startWith) and, when upserts records them, every upsert folded in
	visible map[string]string
}

var fullFlowNames = []string{activities.FetchJWTName, activities.Gen25519Name, activities.InventoryName, activities.RunHelperName,
	activities.SignServerJWTName, activities.ConfigureName, activities.RestartName}

func TestProvisionSuite(t *testing.T) { suite.Run(t, new(ProvisionSuite)) }

func (s *ProvisionSuite) SetupTest() {
	s.env = s.NewTestWorkflowEnvironment()
	s.startWith(testStarter.Options(input()))
	s.policy = Policy{Site: "lab", DeferDelay: time.Minute}
	s.hooks = Hooks{}
	s.host = &fakeHost{helper: []activities.HelperOutput{configured}, failing: map[string]error{}, flaky: map[string]int{}, script: map[string][]string{},
		unsealed: map[string]bool{}, replayed: map[string]activities.Seal{}, relabelled: map[string]string{}}
	s.host.register(s.env)
}

// testStarter starts the suite's runs as discovery and the operator CLI start theirs.
var testStarter = starter{TaskQueue: "choria-provisioner", Site: "lab"}

// startWith makes the next execute start its run with o, as Temporal starts a run a starter
// asked for: the test environment takes the ID and the task queue from the options, and the
// search attributes only when they are set on their own.
func (s *ProvisionSuite) startWith(o client.StartWorkflowOptions) {
	s.env.SetStartWorkflowOptions(o)
	s.Require().NoError(s.env.SetTypedSearchAttributesOnStart(o.TypedSearchAttributes))
	s.visible = map[string]string{}
	for k, v := range o.TypedSearchAttributes.GetUntypedValues() {
		if kw, ok := v.(string); ok {
			s.visible[k.GetName()] = kw
		}
	}
}

// input is what a starter of ours writes for a sighting: the host and how it was found.
func input() ProvisionInput {
	return ProvisionInput{Identity: "n1.example", Source: SourceDiscovery}
}

// execute runs the workflow as a worker registers it (Register), with the policy's features f.
func (s *ProvisionSuite) execute(f Features, in any) {
	s.policy.Features = f
	HostWorkflow{Policy: s.policy, Hooks: s.hooks}.Register(s.env)
	if s.onUpsert != nil {
		s.onUpsert()
	}
	s.env.ExecuteWorkflow(WorkflowName, in)
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
	s.execute(Features{JWT: true, ED25519: true}, input())
	res := s.result()
	s.Equal(OutcomeProvisioned, res.Outcome)
	s.ElementsMatch(fullFlowNames[:3], s.host.calls[:3], "the reads run together")
	s.Equal(fullFlowNames[3:], s.host.calls[3:])
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

// The first pass's reads carry the sighting time (a stale sighting shows there); a later
// pass's, after a defer, do not.
func (s *ProvisionSuite) TestOnlyTheFirstReadsCarryTheSightingTime() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "later"}, configured}
	in := input()
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.execute(Features{JWT: true, ED25519: true}, in)
	s.result()
	s.ElementsMatch([]time.Time{in.SeenAt, {}, {}}, s.host.seenAt[:3], "the inventory read alone makes the stale check")
	s.Equal([]time.Time{{}, {}, {}}, s.host.seenAt[3:])
}

// A stale sighting, found by any read of the first pass, ends the run provisioned, not failed.
func (s *ProvisionSuite) TestStaleSightingEndsProvisioned() {
	for _, read := range []string{activities.InventoryName, activities.FetchJWTName} {
		s.SetupTest()
		s.host.failing[read] = temporal.NewNonRetryableApplicationError(
			"no reply; an earlier run completed after the sighting", activities.ErrTypeNotProvisioning, nil)
		in := input()
		in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
		s.execute(Features{JWT: true, ED25519: true}, in)
		res := s.result()
		s.Equal(OutcomeProvisioned, res.Outcome, read)
		s.Contains(res.Message, "stale sighting")
		s.NotContains(s.host.calls, activities.RunHelperName)
		s.Contains(s.host.seenAt, in.SeenAt, "the inventory read carries the sighting")
	}
}

// upserts records the ProvisionStep and ProvisionOutcome of every search-attribute upsert of the
// next execute (a mock, so it is set after the registration).
func (s *ProvisionSuite) upserts() *[]string {
	var got []string
	s.onUpsert = func() {
		s.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
			sa := args.Get(0).(temporal.SearchAttributes)
			step, _ := sa.GetKeyword(StepKey)
			outcome, _ := sa.GetKeyword(OutcomeKey)
			got = append(got, step+"/"+outcome)
			for k, v := range sa.GetUntypedValues() {
				if kw, ok := v.(string); ok {
					s.visible[k.GetName()] = kw
				} else {
					delete(s.visible, k.GetName()) // an unset
				}
			}
		}).Return(nil)
	}
	return &got
}

// The suite starts its runs as the starters do (Starter.Options), so its runs take the branches
// production's take.
func (s *ProvisionSuite) TestSearchAttributesAtTransitionsOnly() {
	f, in := Features{JWT: true, ED25519: true}, input()
	got := s.upserts()
	s.execute(f, in)
	s.result()
	// the starter set identity, site and outcome; of seven steps only the helper is upserted
	s.Equal([]string{"helper/", "done/provisioned"}, *got)
}

func (s *ProvisionSuite) TestFailedHostKeepsTheStepItFailedIn() {
	s.host.failing[activities.ConfigureName] = temporal.NewNonRetryableApplicationError("bad config", activities.ErrTypeConfig, nil)
	f, in := Features{JWT: true, ED25519: true}, input()
	s.startWith(client.StartWorkflowOptions{ID: WorkflowID(in.Identity)}) // an older starter's: no search attributes
	got := s.upserts()
	s.execute(f, in)
	s.Require().Error(s.env.GetWorkflowError())
	// started without search attributes: the run sets them itself
	s.Equal([]string{"/running", "helper/", "configure/failed"}, *got)
}

func (s *ProvisionSuite) TestRegularActivitiesByDefaultButSigning() {
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.result()
	s.Equal([]string{activities.SignServerJWTName}, s.host.local, "a computation is a local activity")
}

func (s *ProvisionSuite) TestHelperOnItsOwnTaskQueueWhenRateLimited() {
	s.policy.HelperQueue = true
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.result()
	runQueue := s.host.queues[activities.ConfigureName]
	s.Equal(HelperTaskQueue(runQueue), s.host.queues[activities.RunHelperName], "derived from the run's own queue")
}

func (s *ProvisionSuite) TestHelperStaysOnTheRunsQueueWithoutARateLimit() {
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.result()
	s.Equal(s.host.queues[activities.ConfigureName], s.host.queues[activities.RunHelperName])
}

// A client of the namespace that starts ProvisionHost with an input of its own (the fields
// runs once took from their input: features, a helper queue) gets a failed run, and nothing ran.
func (s *ProvisionSuite) TestForeignInputIsRefused() {
	foreign := map[string]any{"identity": "n1.example", "source": "event",
		"features": map[string]bool{"jwt": false, "ed25519": true}, "helper_task_queue": "elsewhere"}
	s.execute(Features{JWT: true, ED25519: true}, foreign)
	s.True(s.env.IsWorkflowCompleted())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.ErrorContains(err, "refused input")
	s.ErrorContains(err, "features")
	s.Empty(s.host.calls, "no step ran")
}

// The site is the worker's policy's; the status says how the run's sighting was made.
func (s *ProvisionSuite) TestStatusTakesTheSiteFromThePolicy() {
	in := input()
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.execute(Features{JWT: true}, in)
	s.result()
	st := s.status()
	s.Equal("lab", st.Site)
	s.Equal(SourceDiscovery, st.Source)
	s.Equal(in.SeenAt, st.SeenAt.UTC())
}

func (s *ProvisionSuite) TestJWTOnlySkipsKeyAndSigning() {
	s.execute(Features{JWT: true}, input())
	s.result()
	s.ElementsMatch([]string{activities.FetchJWTName, activities.InventoryName}, s.host.calls[:2], "read together")
	s.Equal([]string{activities.RunHelperName, activities.ConfigureName, activities.RestartName}, s.host.calls[2:])
	s.Empty(s.host.conf.ServerJWT)
}

func (s *ProvisionSuite) TestNoFeaturesStillInventoriesAndConfigures() {
	s.execute(Features{}, input())
	s.result()
	s.Equal([]string{activities.InventoryName, activities.RunHelperName, activities.ConfigureName, activities.RestartName}, s.host.calls)
	s.Nil(s.host.helpIn.Input.JWT)
}

func (s *ProvisionSuite) TestDeferWaitsOnATimerAndRunsTheStepsAgain() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "not in CMDB yet"}, configured}
	var during Status
	s.env.RegisterDelayedCallback(func() { during = s.status() }, 30*time.Second)
	s.execute(Features{JWT: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(OutcomeDeferred, during.Outcome)
	s.Equal(StepDeferred, during.Step)
	s.Contains(during.Message, "not in CMDB yet")
	s.Equal(2, countOf(s.host.calls, activities.RunHelperName))
	s.Equal(1, s.status().Defers)
}

func (s *ProvisionSuite) TestShutdownCallsShutdownAndEnds() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.execute(Features{JWT: true, ED25519: true}, input())
	res := s.result()
	s.Equal(OutcomeShutdown, res.Outcome)
	s.Contains(res.Message, "decommissioned")
	s.Equal(activities.ShutdownName, s.host.calls[len(s.host.calls)-1])
	s.Zero(countOf(s.host.calls, activities.ConfigureName))
}

func (s *ProvisionSuite) TestPolicyFailureIsNotRetriedAndIsVisible() {
	s.host.failing[activities.FetchJWTName] = temporal.NewNonRetryableApplicationError("provisioning JWT is not valid: bad signature", activities.ErrTypeInvalidJWT, nil)
	s.execute(Features{JWT: true}, input())
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
	s.execute(Features{JWT: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(3, countOf(s.host.calls, activities.InventoryName))
}

func (s *ProvisionSuite) TestRetryBudgetRunsOutThenFails() {
	s.host.failing[activities.ConfigureName] = temporal.NewApplicationError("no reply", activities.ErrTypeNoReply)
	s.execute(Features{JWT: true}, input())
	s.Require().Error(s.env.GetWorkflowError())
	s.Equal(5, countOf(s.host.calls, activities.ConfigureName))
	s.Zero(countOf(s.host.calls, activities.RestartName))
	s.Contains(s.status().LastError, "no reply")
}

func (s *ProvisionSuite) TestTooManyDefersFail() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "later"}}
	f, in := Features{}, input()
	s.policy.MaxDefers = 3
	s.execute(f, in)
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "deferred the host 3 times")
}

func (s *ProvisionSuite) TestLongDeferralContinuesAsNew() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "later"}}
	s.execute(Features{}, input())
	err := s.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	s.Require().True(errors.As(err, &can), "got %v", err)
	var next ProvisionInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Equal(continueAsNewDefers, next.Defers)
	s.Equal("n1.example", next.Identity)
}

// A continue-as-new starts the continuation with the search attributes its run has at the end
// (the SDK sends them with the command): the continuation is running again, and its sighting
// keeps the source it had.
func (s *ProvisionSuite) TestContinuationIsRunningWithTheSourceOfItsSighting() {
	s.host.helper = []activities.HelperOutput{{Defer: true, Msg: "later"}}
	in := input()
	in.Source = SourceEvent
	s.startWith(testStarter.Options(in))
	s.upserts()
	s.execute(Features{}, in)
	var can *workflow.ContinueAsNewError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &can)
	var next ProvisionInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Equal(SourceEvent, next.Source, "the continuation waits on the same sighting")
	carried := s.visible
	s.Equal(OutcomeRunning, carried[OutcomeKey.GetName()], "the continuation starts with what visibility shows at the end of its run")
	s.Equal(in.Identity, carried[IdentityKey.GetName()])

	// the continuation, started as Temporal starts it: with the carried attributes
	s.SetupTest()
	o := client.StartWorkflowOptions{ID: WorkflowID(in.Identity), TaskQueue: testStarter.TaskQueue}
	var sa []temporal.SearchAttributeUpdate
	for k, v := range carried {
		sa = append(sa, temporal.NewSearchAttributeKeyKeyword(k).ValueSet(v))
	}
	o.TypedSearchAttributes = temporal.NewSearchAttributes(sa...)
	s.startWith(o)
	got := s.upserts()
	s.execute(Features{}, next)
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	st := s.status()
	s.Equal(SourceEvent, st.Source)
	s.Equal(continueAsNewDefers, st.Defers)
	s.Equal([]string{"helper/", "done/provisioned"}, *got, "nothing to correct at its start")
}

// A continuation that a worker before the fix made carries its run's "deferred": its first
// workflow task shows it running.
func (s *ProvisionSuite) TestRunStartedWithAnotherOutcomeIsRunning() {
	in := input()
	o := testStarter.Options(in)
	o.TypedSearchAttributes = temporal.NewSearchAttributes(IdentityKey.ValueSet(in.Identity), SiteKey.ValueSet("lab"),
		StepKey.ValueSet(StepDeferred), OutcomeKey.ValueSet(OutcomeDeferred))
	s.startWith(o)
	got := s.upserts()
	s.execute(Features{}, ProvisionInput{Identity: in.Identity, Source: SourceDiscovery, Defers: continueAsNewDefers})
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal([]string{"/running", "helper/", "done/provisioned"}, *got)
}
func (s *ProvisionSuite) TestInvalidIdentityIsRejected() {
	f, in := Features{}, input()
	in.Identity = "bad>identity"
	s.execute(f, in)
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "invalid identity")
	s.Empty(s.host.calls)
}

// An input copied from another host's run names that host: the run of this host refuses it.
func (s *ProvisionSuite) TestInputOfAnotherHostIsRefused() {
	in := input()
	in.Identity = "other.example"
	s.execute(Features{JWT: true}, in)
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.ErrorContains(err, "refused input")
	s.ErrorContains(err, "other.example")
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
	s.execute(Features{}, input())
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
	s.execute(Features{}, input())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step helper")
	s.Equal(5, countOf(s.host.calls, activities.RunHelperName))
}

func (s *ProvisionSuite) TestPauseHoldsTheHostBeforeItsNextStep() {
	var paused Status
	admitControlSignals(s.env, nil)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(PauseSignal, s.hostRequest(PauseSignal)) }, 0)
	s.env.RegisterDelayedCallback(func() { paused = s.status() }, time.Hour)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(ResumeSignal, s.hostRequest(ResumeSignal)) }, 2*time.Hour)
	s.execute(Features{JWT: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.True(paused.Paused)
	s.Len(paused.Timeline, 2, "only the reads in flight when the pause came may run (jwt and inventory)")
	s.NotContains(s.host.calls[:2], activities.RunHelperName)
	s.False(s.status().Paused)
}

func (s *ProvisionSuite) TestTimelineCarriesAttemptsAndDecision() {
	s.host.flaky[activities.InventoryName] = 1
	s.execute(Features{JWT: true}, input())
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
	admitControlSignals(env, nil)
	env.RegisterDelayedCallback(func() {
		req := controlRequest(env, PauseSignal)
		req.By, req.Reason = "ops", "CA maintenance"
		env.SignalWorkflow(PauseSignal, req)
	}, time.Second)
	env.RegisterDelayedCallback(query, 2*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(ResumeSignal, controlRequest(env, ResumeSignal)) }, 3*time.Second)
	env.RegisterDelayedCallback(query, 4*time.Second)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 5*time.Second)
	env.ExecuteWorkflow(ProvisionerControl, ControlState{})
	require.Len(t, states, 2)
	require.True(t, states[0].Paused)
	require.Equal(t, "CA maintenance", states[0].Reason)
	require.False(t, states[1].Paused)
}

// A host that says it is not in provisioning mode, with no record in Temporal that it was
// provisioned since the sighting, is not taken at its word: the read retries, then the run fails.
func (s *ProvisionSuite) TestAHostsOwnWordIsNotAStaleSighting() {
	s.host.failing[activities.FetchJWTName] = temporal.NewApplicationError(
		"choria_provision#jwt: Cannot reconfigure a server that is not in provisioning mode", activities.ErrTypeHostNotProvisioning)
	in := input()
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.execute(Features{JWT: true}, in)
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.ErrorContains(err, "step jwt")
	s.Equal(OutcomeFailed, s.status().Outcome)
	s.Equal(5, countOf(s.host.calls, activities.FetchJWTName), "retried within its budget")
}

// A restart that gets no reply after the run configured the server ends provisioned, and says
// the restart was not confirmed (a worker killed after the restart reached the server).
func (s *ProvisionSuite) TestUnconfirmedRestartOfAConfiguredServerIsProvisioned() {
	s.host.failing[activities.RestartName] = temporal.NewApplicationError("choria_provision#restart: no reply", activities.ErrTypeNoReply)
	s.execute(Features{JWT: true, ED25519: true}, input())
	res := s.result()
	s.Equal(OutcomeProvisioned, res.Outcome)
	s.Contains(res.Message, "restart was not confirmed")
	s.False(res.RestartedAt.IsZero())
}

// A restart refused by the broker (ours, not the host's silence) fails the run.
func (s *ProvisionSuite) TestRestartOverADeadBrokerFails() {
	s.host.failing[activities.RestartName] = activities.NewError(activities.ErrTypeRPC, "choria_provision#restart: not sent: the broker connection is down", nil)
	s.execute(Features{JWT: true}, input())
	s.Require().Error(s.env.GetWorkflowError())
	s.Equal(StepRestart, s.status().Step)
}

// A server out of provisioning mode at configure, past the first pass's reads, is no stale
// sighting (only those reads carry the sighting time): the run fails at that step, at once.
func (s *ProvisionSuite) TestNotInProvisioningModeLaterIsAFailure() {
	s.host.failing[activities.ConfigureName] = temporal.NewNonRetryableApplicationError("choria_provision#configure: Cannot reconfigure a server that is not in provisioning mode", activities.ErrTypeNotProvisioning, nil)
	s.execute(Features{JWT: true}, input())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	var types []string
	for e := err; e != nil; e = errors.Unwrap(e) {
		if app, ok := e.(*temporal.ApplicationError); ok {
			types = append(types, app.Type())
		}
	}
	s.Equal(ErrTypeProvisionFailed, types[0], "the run's own failure, not the activity's error as such")
	s.Contains(types, activities.ErrTypeNotProvisioning, "the cause the run failed on")
	s.ErrorContains(err, "step configure")
	st := s.status()
	s.Equal(OutcomeFailed, st.Outcome)
	s.Equal(StepConfigure, st.Step)
	s.Equal(1, countOf(s.host.calls, activities.ConfigureName), "not retried")
	s.Zero(countOf(s.host.calls, activities.RestartName))
}

func upgradeTo(v string) activities.HelperOutput {
	out := configured
	out.Upgrade = v
	return out
}

func (s *ProvisionSuite) TestUpgradeThenProvisionTheNewVersion() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.execute(Features{JWT: true, Upgrades: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(1, countOf(s.host.calls, activities.ReleaseUpdateName))
	s.Equal(2, countOf(s.host.calls, activities.InventoryName), "the steps run again against the upgraded server")
	s.Equal(1, countOf(s.host.calls, activities.ConfigureName))
	st := s.status()
	s.Equal("0.99.0", st.Upgraded)
	s.Equal("0.99.0", st.ServerVersion)
}

// The helper's version is the server's (0.30.2), or upgrades are off: no update is asked for,
// and the host is provisioned at the version it runs. Off, even a server that could not be
// upgraded (which fails the run with the feature on) is provisioned.
func (s *ProvisionSuite) TestNoUpgradeWhenTheVersionMatchesOrTheFeatureIsOff() {
	for _, c := range []struct {
		name       string
		features   Features
		version    string
		upgradable bool
	}{
		{"the version matches", Features{JWT: true, Upgrades: true}, "0.30.2", true},
		{"the feature is off", Features{JWT: true}, "0.99.0", true},
		{"the feature is off, the server not upgradable", Features{JWT: true}, "0.99.0", false},
	} {
		s.SetupTest()
		s.host.upgradable = c.upgradable
		s.host.helper = []activities.HelperOutput{upgradeTo(c.version)}
		s.execute(c.features, input())
		s.Equal(OutcomeProvisioned, s.result().Outcome, c.name)
		s.Zero(countOf(s.host.calls, activities.ReleaseUpdateName), c.name)
		s.Equal(1, countOf(s.host.calls, activities.InventoryName), "%s: the steps ran once, against the server as it was", c.name)
		st := s.status()
		s.Equal(StepDone, st.Step, c.name)
		s.Equal(OutcomeProvisioned, st.Outcome, c.name)
		s.Empty(st.Upgraded, c.name)
		s.Equal("0.30.2", st.ServerVersion, c.name)
		s.Empty(st.LastError, "%s: no error on the way", c.name)
	}
}

func (s *ProvisionSuite) TestUpgradeFeatureOffIgnoresTheHelpersVersion() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.execute(Features{}, input())
	s.result()
	s.Zero(countOf(s.host.calls, activities.ReleaseUpdateName))
}

func (s *ProvisionSuite) TestNotUpgradableFailsUnlessOptional() {
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.execute(Features{Upgrades: true}, input())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "not upgradable")
	s.Zero(countOf(s.host.calls, activities.ConfigureName))
}

func (s *ProvisionSuite) TestNotUpgradableGoesOnWhenOptional() {
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.execute(Features{Upgrades: true, UpgradesOptional: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Contains(s.status().LastError, "not upgradable")
}

func (s *ProvisionSuite) TestFailedUpgradeAbortsUnlessOptional() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.host.failing[activities.ReleaseUpdateName] = temporal.NewApplicationError("Update to version 0.99.0 failed, release rolled back", activities.ErrTypeAborted)
	s.execute(Features{Upgrades: true}, input())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step upgrade")
	s.Equal(3, countOf(s.host.calls, activities.ReleaseUpdateName))
}

func (s *ProvisionSuite) TestFailedUpgradeGoesOnWhenOptional() {
	s.host.upgradable = true
	s.host.helper = []activities.HelperOutput{upgradeTo("0.99.0")}
	s.host.failing[activities.ReleaseUpdateName] = temporal.NewApplicationError("rolled back", activities.ErrTypeAborted)
	s.execute(Features{Upgrades: true, UpgradesOptional: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(1, countOf(s.host.calls, activities.ConfigureName))
}

func (s *ProvisionSuite) TestShutdownWithoutAReplyIsStillAShutdown() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.host.failing[activities.ShutdownName] = temporal.NewApplicationError("choria_provision#shutdown: no reply from n1 within 10s", activities.ErrTypeNoReply)
	s.execute(Features{}, input())
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
	s.execute(Features{}, input())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step shutdown")
	s.Equal(OutcomeFailed, s.status().Outcome)
}

func (s *ProvisionSuite) TestShutdownRefusedIsAFailure() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true}}
	s.host.failing[activities.ShutdownName] = temporal.NewNonRetryableApplicationError("Incorrect provision token supplied", activities.ErrTypeAborted, nil)
	s.execute(Features{}, input())
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
	s.execute(Features{JWT: true, ED25519: true}, input())
	res := s.result()
	s.False(res.RestartedAt.IsZero())
	s.WithinDuration(restartedAt, res.RestartedAt, time.Second)
	s.Equal(DefaultRestartSplay, res.RestartSplay)
	s.Equal(res.RestartedAt.Add(3*time.Second), res.LeftProvisioningBy())
}

func (s *ProvisionSuite) TestNoRestartTimeWithoutARestart() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.execute(Features{JWT: true}, input())
	res := s.result()
	s.Equal(OutcomeShutdown, res.Outcome)
	s.True(res.RestartedAt.IsZero())
	s.True(res.LeftProvisioningBy().IsZero())
}
func (s *ProvisionSuite) TestReadsTogetherAndSignsLocally() {
	s.execute(Features{JWT: true, ED25519: true}, input())
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

func (s *ProvisionSuite) TestWithPKIReadsTheCSRWithTheOthers() {
	s.execute(Features{JWT: true, PKI: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.ElementsMatch([]string{activities.FetchJWTName, activities.GencsrName, activities.InventoryName}, s.host.calls[:3])
	s.NotNil(s.host.helpIn.Input.CSR)
}

func (s *ProvisionSuite) TestFailsAtTheReadThatFailed() {
	s.host.failing[activities.Gen25519Name] = temporal.NewNonRetryableApplicationError("bad", activities.ErrTypeBadSignature, nil)
	s.execute(Features{JWT: true, ED25519: true}, input())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), "step gen25519")
	s.Equal(StepGen25519, s.status().Step)
	s.Zero(countOf(s.host.calls, activities.RunHelperName))
}

func (s *ProvisionSuite) TestShutdownWithoutAReply() {
	s.host.helper = []activities.HelperOutput{{Shutdown: true, Msg: "decommissioned"}}
	s.host.failing[activities.ShutdownName] = temporal.NewApplicationError("no reply", activities.ErrTypeNoReply)
	s.execute(Features{}, input())
	s.Equal(OutcomeShutdown, s.result().Outcome)
}

// Fast mode: every step a local activity, the same steps, results and status.
func (s *ProvisionSuite) TestFastModeRunsEveryStepLocally() {
	s.policy.Fast = true
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.ElementsMatch(without(fullFlowNames, activities.ConfigureName), s.host.local, "configure acts on what the run decided: regular")
	s.Contains(s.host.calls, activities.ConfigureName)
	s.Len(s.status().Timeline, 7)
}

func (s *ProvisionSuite) TestFastModeRetriesTheHelperAndKeepsItsPolicy() {
	s.host.flaky[activities.RunHelperName] = 2
	s.host.failing[activities.ConfigureName] = temporal.NewApplicationError("no reply", activities.ErrTypeNoReply)
	s.policy.Fast = true
	s.execute(Features{}, input())
	s.Require().Error(s.env.GetWorkflowError())
	s.Equal(3, countOf(s.host.calls, activities.RunHelperName))
	s.Equal(5, countOf(s.host.calls, activities.ConfigureName), "the same retry policy as a regular activity")
}

func (s *ProvisionSuite) TestFastModeKeepsARateLimitedHelperRegular() {
	s.policy.Fast, s.policy.HelperQueue = true, true
	s.execute(Features{}, input())
	s.result()
	s.NotContains(s.host.local, activities.RunHelperName)
	s.Equal(HelperTaskQueue(s.host.queues[activities.ConfigureName]), s.host.queues[activities.RunHelperName])
}

func without(names []string, drop string) []string {
	var out []string
	for _, n := range names {
		if n != drop {
			out = append(out, n)
		}
	}
	return out
}

// A name that never answers (a forged sighting, a host gone) costs two tries of each read, not
// five, and one stale check; a host that answered one read gets the rest of its tries.
func (s *ProvisionSuite) TestNeverAnsweredGivesUpAfterTwoTries() {
	nr := activities.ErrTypeNoReply
	five := []string{nr, nr, nr, nr, nr}
	s.host.script = map[string][]string{activities.FetchJWTName: five, activities.Gen25519Name: five, activities.InventoryName: five}
	in := input()
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.execute(Features{JWT: true, ED25519: true}, in)
	s.Require().Error(s.env.GetWorkflowError())
	for _, read := range []string{activities.FetchJWTName, activities.Gen25519Name, activities.InventoryName} {
		s.Equal(2, countOf(s.host.calls, read), read)
	}
}

func (s *ProvisionSuite) TestAnsweredHostGetsTheRestOfItsTries() {
	nr := activities.ErrTypeNoReply
	s.host.script = map[string][]string{activities.InventoryName: {nr, nr, nr, nr}}
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(5, countOf(s.host.calls, activities.InventoryName))
	s.Equal(1, countOf(s.host.calls, activities.FetchJWTName))
}

// A failure of ours (the broker) is no sign of the host: every try.
func (s *ProvisionSuite) TestOurFailuresGetEveryTry() {
	rpc := activities.ErrTypeRPC
	four := []string{rpc, rpc, rpc, rpc}
	s.host.script = map[string][]string{activities.FetchJWTName: four, activities.Gen25519Name: four, activities.InventoryName: four}
	s.execute(Features{JWT: true, ED25519: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Equal(5, countOf(s.host.calls, activities.InventoryName))
}

// The stale verdict ends the run as provisioned even when the other reads, in front of it, got
// no reply.
func (s *ProvisionSuite) TestStaleVerdictWinsOverTheOthersSilence() {
	nr := activities.ErrTypeNoReply
	s.host.script = map[string][]string{activities.FetchJWTName: {nr, nr}, activities.Gen25519Name: {nr, nr},
		activities.InventoryName: {activities.ErrTypeNotProvisioning}}
	in := input()
	in.SeenAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s.execute(Features{JWT: true, ED25519: true}, in)
	res := s.result()
	s.Equal(OutcomeProvisioned, res.Outcome)
	s.Contains(res.Message, "stale sighting")
	s.Equal(1, countOf(s.host.calls, activities.InventoryName))
}
