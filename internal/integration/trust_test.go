package integration

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// attack is one activity of ours scheduled by a workflow that is not ours: with a plaintext
// input of the attacker's making, or with a payload copied from a history.
type attack struct {
	Activity  string            `json:"activity"`
	TaskQueue string            `json:"task_queue"`
	Plain     map[string]any    `json:"plain,omitempty"`
	Copied    *commonpb.Payload `json:"copied,omitempty"`
}

// attackOutcome is what the attacker learns: whether the activity completed, and the failure's
// type, which is not encrypted (its message is).
type attackOutcome struct {
	Completed    bool              `json:"completed"`
	Result       *commonpb.Payload `json:"result,omitempty"`
	ErrType      string            `json:"err_type"`
	NonRetryable bool              `json:"non_retryable"`
}

// intruder is the attacker's workflow, on the attacker's own worker and task queue: it schedules
// an activity of ours by name on our task queue, three attempts allowed.
func intruder(ctx workflow.Context, a attack) (attackOutcome, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: a.TaskQueue, StartToCloseTimeout: 20 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3, InitialInterval: 100 * time.Millisecond}})
	var arg any = a.Plain
	if a.Copied != nil {
		arg = converter.NewRawValue(a.Copied)
	}
	var raw converter.RawValue
	err := workflow.ExecuteActivity(ctx, a.Activity, arg).Get(ctx, &raw)
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		return attackOutcome{Completed: true, Result: raw.Payload()}, nil
	case errors.As(err, &app):
		return attackOutcome{ErrType: app.Type(), NonRetryable: app.NonRetryable()}, nil
	}
	return attackOutcome{ErrType: err.Error()}, nil
}

// attacker is a namespace client without the codec key, with a worker of its own.
func (e *env) attacker(queue string) client.Client {
	e.t.Helper()
	c, err := client.Dial(client.Options{HostPort: e.cfg.Temporal.Address, Namespace: e.cfg.Temporal.Namespace})
	require.NoError(e.t, err)
	e.t.Cleanup(c.Close)
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(intruder, workflow.RegisterOptions{Name: "Intruder"})
	// and one of the host workflow's name, on the attacker's queue
	w.RegisterWorkflowWithOptions(intruder, workflow.RegisterOptions{Name: workflows.WorkflowName})
	require.NoError(e.t, w.Start())
	e.t.Cleanup(w.Stop)
	return c
}

func (e *env) launch(c client.Client, queue, id string, a attack) attackOutcome {
	e.t.Helper()
	return e.launchAs(c, queue, id, "Intruder", a)
}

func (e *env) launchAs(c client.Client, queue, id, wfType string, a attack) attackOutcome {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, wfType, a)
	require.NoError(e.t, err)
	var out attackOutcome
	require.NoError(e.t, run.Get(ctx, &out), "%s", a.Activity)
	return out
}

// copiedInputs are the encrypted inputs a host's run gave each activity, taken from its history;
// an activity the run did not schedule gets the run's first activity input.
func (e *env) copiedInputs(identity string, names []string) map[string]*commonpb.Payload {
	e.t.Helper()
	out := map[string]*commonpb.Payload{}
	var first *commonpb.Payload
	for _, ev := range e.history(identity) {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && len(a.GetInput().GetPayloads()) == 1 {
			p := a.GetInput().GetPayloads()[0]
			require.Equal(e.t, workflows.WorkflowID(identity), string(p.GetMetadata()[codec.MetadataBinding]), "bound to its run's workflow")
			out[a.GetActivityType().GetName()] = p
			if first == nil {
				first = p
			}
		}
	}
	require.NotNil(e.t, first)
	for _, n := range names {
		if out[n] == nil {
			out[n] = first
		}
	}
	return out
}

// sampleCount is how many observations a summary of the replica holds, every label.
func sampleCount(t *testing.T, svc *service.Service, name string) uint64 {
	t.Helper()
	families, err := svc.Registry().Gather()
	require.NoError(t, err)
	n := uint64(0)
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetSummary().GetSampleCount()
			}
		}
	}
	return n
}

// A client of the namespace without the codec key runs a workflow of its own, on a task queue
// of its own, that schedules each of our activities on our task queue by name: with plaintext
// inputs naming a real server in provisioning mode (and, for the signature, a name and public key
// of its choosing); with encrypted inputs copied from a provisioned host's history; and with
// those copies again from a workflow that took that host's workflow ID. Every task is refused
// before it acts, not retried, logged and counted: nothing is signed, no RPC leaves, no helper
// runs, and the server is still waiting to be provisioned.
func TestIntegrationForeignTasksRefused(t *testing.T) {
	t.Parallel() // a handful of hosts and refused tasks: mostly waiting
	e := newEnv(t, envOptions{servers: 1})
	e.refusals = true
	svc := e.provisioner("replica-a")
	done := e.stack.Fleet.Members[0]
	e.waitProvisioned(90*time.Second, done)
	e.runs(done.Identity, 1)
	// hold discovery, so that the victim is not provisioned by us while it is attacked
	_, err := e.operator().SetPaused(context.Background(), true, "test", "attack")
	require.NoError(t, err)
	victim, err := e.stack.Fleet.Start(1)
	require.NoError(t, err)

	names := []string{activities.FetchJWTName, activities.Gen25519Name, activities.GencsrName, activities.InventoryName,
		activities.RunHelperName, activities.SignServerJWTName, activities.ConfigureName, activities.RestartName,
		activities.ReleaseUpdateName, activities.ShutdownName}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	host := map[string]any{"identity": victim.Identity}
	plain := map[string]map[string]any{
		activities.RunHelperName:     {"input": host, "had_token": true},
		activities.SignServerJWTName: {"identity": "intruder.example", "public_key": hex.EncodeToString(pub), "claims": map[string]any{"collectives": []string{"choria"}}},
		activities.ConfigureName:     {"identity": victim.Identity, "configuration": map[string]string{"plugin.choria.server.provision": "false"}},
		activities.ReleaseUpdateName: {"identity": victim.Identity, "version": "0.99.0"},
		activities.RestartName:       {"identity": victim.Identity, "splay": 0},
	}
	copied := e.copiedInputs(done.Identity, names)
	rpcs, helpers := sampleCount(t, svc, "choria_provisioner_rpc_time"), sampleCount(t, svc, "choria_provisioner_helper_time")

	const queue = "intruder-queue"
	evil := e.attacker(queue)
	for i, name := range names {
		in := plain[name]
		if in == nil {
			in = host
		}
		for variant, a := range map[string]struct {
			id string
			attack
		}{
			"plaintext":              {fmt.Sprintf("intruder-plain-%d", i), attack{Activity: name, TaskQueue: e.cfg.Temporal.TaskQueue, Plain: in}},
			"copied":                 {fmt.Sprintf("intruder-copied-%d", i), attack{Activity: name, TaskQueue: e.cfg.Temporal.TaskQueue, Copied: copied[name]}},
			"copied, the host's ID":  {workflows.WorkflowID(done.Identity), attack{Activity: name, TaskQueue: e.cfg.Temporal.TaskQueue, Copied: copied[name]}},
			"plaintext, victim's ID": {workflows.WorkflowID(victim.Identity), attack{Activity: name, TaskQueue: e.cfg.Temporal.TaskQueue, Plain: in}},
		} {
			out := e.launch(evil, queue, a.id, a.attack)
			require.False(t, out.Completed, "%s %s completed", variant, name)
			if name == activities.SignServerJWTName {
				// not registered: the workflow signs in a local activity of its own worker only
				require.Contains(t, out.ErrType, "NotRegistered", "%s %s", variant, name)
				continue
			}
			require.Equal(t, codec.ErrTypeRefused, out.ErrType, "%s %s", variant, name)
			require.True(t, out.NonRetryable, "%s %s", variant, name)
		}
	}

	n := float64(len(names) - 1) // SignServerJWT finds no activity: nothing decoded, nothing to refuse
	refused := func(reason string) float64 {
		return testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", reason))
	}
	require.Equal(t, 2*n, refused(codec.ReasonPlaintext), "plaintext inputs, once each: not retried")
	require.Equal(t, n, refused(codec.ReasonForeignBinding), "another host's payloads")
	require.Equal(t, n, refused(activities.ReasonForeignWorkflow), "the host's own payloads in a workflow that is not its ProvisionHost")
	// logged summarised: the first of each reason in an interval in full, the rest as a count
	for _, reason := range []string{codec.ReasonPlaintext, codec.ReasonForeignBinding} {
		lines := e.logLines("replica-a", `"level":"warn"`, `"msg":"payload refused"`, `"reason":"`+reason+`"`)
		require.GreaterOrEqual(t, lines, 1, reason)
		require.Less(t, lines, int(n), "%s: not one line per refusal", reason)
	}
	lines := e.logLines("replica-a", `"level":"warn"`, `"msg":"task refused"`, `"reason":"foreign_workflow"`)
	require.GreaterOrEqual(t, lines, 1)
	require.Less(t, lines, int(n), "not one line per refusal")

	require.Equal(t, rpcs, sampleCount(t, svc, "choria_provisioner_rpc_time"), "no RPC was sent")
	require.Equal(t, helpers, sampleCount(t, svc, "choria_provisioner_helper_time"), "no helper ran")
	require.Zero(t, e.logLines("replica-a", "intruder.example"), "nothing was signed for the intruder's name")
	require.False(t, devstack.Provisioned(victim), "the victim was not configured")
	require.False(t, victim.Exited(), "the victim was not restarted or shut down")

	// A workflow of the host workflow's name under a host's workflow ID (its own run closed),
	// with that run's input for a step: the input was sealed by another run, the task is refused
	// before the step runs (issue #42), and the refusal is counted.
	out := e.launchAs(evil, queue, workflows.WorkflowID(done.Identity), workflows.WorkflowName,
		attack{Activity: activities.RunHelperName, TaskQueue: e.cfg.Temporal.TaskQueue, Copied: copied[activities.RunHelperName]})
	require.False(t, out.Completed, "%+v", out)
	require.Equal(t, activities.ErrTypeOtherRun, out.ErrType)
	require.True(t, out.NonRetryable)
	require.Equal(t, helpers, sampleCount(t, svc, "choria_provisioner_helper_time"), "the helper did not run")
	require.Equal(t, 1.0, refused(activities.ReasonForeignRequest))
}

// A helper that prints a private key and fails (one exits 0 with the key for output, one prints
// it and exits 1) leaves no byte of the key readable in history without the codec key, nor in the
// provisioner's log; operators read why it failed through the codec. The helper ran with a clean
// environment: none of the provisioner's keys set in the provisioner's environment.
func TestIntegrationHelperSecretsStayOutOfHistory(t *testing.T) {
	const keyLine = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
	e := newEnv(t, envOptions{servers: 2, helper: func(s *devstack.Stack) string {
		script := filepath.Join(s.Opts.Dir, "leaky-helper.sh")
		body := fmt.Sprintf(`#!/bin/sh
input=$(cat)
env > %[1]s/helper-env.txt
printf '%%s\n' '-----BEGIN PRIVATE KEY-----' '%[2]s' '-----END PRIVATE KEY-----'
case "$input" in
*'"identity":"%[3]s"'*) exit 0;;
esac
echo "could not reach the CA" >&2
exit 1
`, s.Opts.Dir, keyLine, s.Fleet.Identity(0))
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	key, err := os.ReadFile(e.stack.CodecKeyFile)
	require.NoError(t, err)
	// the provisioner's environment holds its keys (the codec key as it may come from there)
	secrets := map[string]string{config.CodecKeyEnv: strings.TrimSpace(string(key)),
		"PROVISIONER_TEMPORAL__API_KEY": "temporal-api-key-not-for-helpers", "PROVISIONER_TOKEN": e.stack.Creds.Token}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	e.provisioner("replica-a")
	failed := e.waitFailed(2)

	// what an operator with the codec key reads
	for _, h := range failed {
		require.Contains(t, h.Reason, "step helper", h.Identity)
		require.NotContains(t, h.Reason, "PRIVATE", h.Identity)
		require.NotContains(t, h.Reason, keyLine[:12], h.Identity)
		if h.Identity == e.stack.Fleet.Identity(0) {
			require.Contains(t, h.Reason, "not a JSON object", h.Identity)
		} else {
			require.Contains(t, h.Reason, "could not reach the CA", h.Identity)
		}
	}

	// what a namespace client without the codec key reads: every event as stored
	plain, err := client.Dial(client.Options{HostPort: e.cfg.Temporal.Address, Namespace: e.cfg.Temporal.Namespace})
	require.NoError(t, err)
	defer plain.Close()
	messages := 0
	for _, m := range e.stack.Fleet.Members {
		hist := &historypb.History{}
		it := plain.GetWorkflowHistory(context.Background(), workflows.WorkflowID(m.Identity), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			hist.Events = append(hist.Events, ev)
			if f := ev.GetActivityTaskFailedEventAttributes().GetFailure(); f != nil {
				require.Equal(t, "Encoded failure", f.GetMessage())
				messages++
			}
		}
		raw, err := proto.Marshal(hist)
		require.NoError(t, err)
		js, err := protojson.Marshal(hist)
		require.NoError(t, err)
		for _, b := range [][]byte{raw, js} {
			for _, s := range []string{"PRIVATE KEY", keyLine[:12], keyLine[20:32], "could not reach the CA"} {
				require.False(t, bytes.Contains(b, []byte(s)), "%s: %q readable in history without the codec key", m.Identity, s)
			}
		}
	}
	require.GreaterOrEqual(t, messages, 10, "five helper attempts a host, each failed")
	log, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "replica-a.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "could not reach the CA", "the helper's stderr is logged")
	for _, s := range []string{"PRIVATE KEY", keyLine[:12]} {
		require.NotContains(t, string(log), s)
	}

	env, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "helper-env.txt"))
	require.NoError(t, err)
	require.Contains(t, string(env), "PATH=")
	require.NotContains(t, string(env), "PROVISIONER_")
	for name, v := range secrets {
		require.NotContains(t, string(env), v, "the helper saw %s", name)
	}
}

// A client of the namespace that holds no codec key starts ProvisionHost for a real server in
// provisioning mode with an input of its own: the JWT check switched off, then the helper call
// sent to a queue it polls and answers with claims of its choosing; then with an encrypted input
// copied from another host's history. Every run fails naming the refusal before its first step:
// no helper of the attacker's is asked, nothing is signed, the server is not configured.
func TestIntegrationForeignInputRefused(t *testing.T) {
	e := newEnv(t, envOptions{servers: 2})
	e.refusals = true                                              // this test's runs are refused on purpose
	svc := e.replica("worker-only", service.Options{Worker: true}) // no discovery: only these runs start
	victim, other := e.stack.Fleet.Members[0], e.stack.Fleet.Members[1]
	ctx := context.Background()

	plain, err := client.Dial(client.Options{HostPort: e.cfg.Temporal.Address, Namespace: e.cfg.Temporal.Namespace})
	require.NoError(t, err)
	defer plain.Close()
	var asked atomic.Int32
	const attackerQueue = "attacker-helper"
	w := worker.New(plain, attackerQueue, worker.Options{})
	w.RegisterActivityWithOptions(func(context.Context, map[string]any) (map[string]any, error) {
		asked.Add(1)
		return map[string]any{"configuration": map[string]string{"identity": "intruder.example"},
			"server_claims": map[string]any{"collectives": []string{"choria"}}}, nil
	}, activity.RegisterOptions{Name: activities.RunHelperName})
	require.NoError(t, w.Start())
	defer w.Stop()

	refused := func(what string, start func() (client.WorkflowRun, error)) {
		t.Helper()
		run, err := start()
		require.NoError(t, err, what)
		// the failure is read through the codec, as an operator reads it
		err = e.client.GetWorkflow(ctx, run.GetID(), run.GetRunID()).Get(ctx, nil)
		require.Error(t, err, what)
		require.Contains(t, strings.ToLower(err.Error()), "refused", "%s: the failure names the refusal: %v", what, err)
		for _, ev := range e.historyOfRun(run.GetID(), run.GetRunID()) {
			require.Nil(t, ev.GetActivityTaskScheduledEventAttributes(), "%s: no step was scheduled", what)
			require.Nil(t, ev.GetMarkerRecordedEventAttributes(), "%s: nothing ran, not even the policy's side effect", what)
		}
		t.Logf("FOREIGN %s: refused: %v", what, err)
	}
	opts := client.StartWorkflowOptions{ID: workflows.WorkflowID(victim.Identity), TaskQueue: e.cfg.Temporal.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE}
	refused("features.jwt=false", func() (client.WorkflowRun, error) {
		return plain.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, map[string]any{"identity": victim.Identity, "source": "event",
			"features": map[string]bool{"jwt": false, "ed25519": true}})
	})
	refused("helper_task_queue of the attacker's", func() (client.WorkflowRun, error) {
		return plain.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, map[string]any{"identity": victim.Identity, "source": "event",
			"helper_task_queue": attackerQueue})
	})

	// another host provisioned by a run of ours; its encrypted input copied into a run of the victim
	in := workflows.ProvisionInput{Identity: other.Identity, Source: workflows.SourceOperator}
	good, err := e.client.ExecuteWorkflow(ctx, service.Starter(e.cfg).Options(in), workflows.WorkflowName, in)
	require.NoError(t, err)
	require.NoError(t, good.Get(ctx, nil))
	var copied *commonpb.Payloads
	for _, ev := range e.historyOfRun(good.GetID(), good.GetRunID()) {
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			copied = a.GetInput()
		}
	}
	require.NotNil(t, copied)
	refused("another host's encrypted input", func() (client.WorkflowRun, error) {
		resp, err := plain.WorkflowService().StartWorkflowExecution(ctx, &workflowservice.StartWorkflowExecutionRequest{
			Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(victim.Identity), RequestId: "copied-input",
			WorkflowType: &commonpb.WorkflowType{Name: workflows.WorkflowName}, TaskQueue: &taskqueuepb.TaskQueue{Name: e.cfg.Temporal.TaskQueue},
			Input: copied, WorkflowIdReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE})
		if err != nil {
			return nil, err
		}
		return plain.GetWorkflow(ctx, workflows.WorkflowID(victim.Identity), resp.GetRunId()), nil
	})

	require.Zero(t, asked.Load(), "the attacker's helper queue got no task")
	// the victim's three runs (no discovery here: only these) are closed, each without a step
	// scheduled: no configure was sent, nor can one be sent later
	e.runs(victim.Identity, 3)
	require.False(t, devstack.Provisioned(victim), "the victim was not configured")
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.Provisioned.WithLabelValues("dev")), "only the host of our own run")
	require.GreaterOrEqual(t, refusedTotal(t, svc), 3.0, "each refusal counted")
}

// historyOfRun is one run's history, as the server holds it (payloads not decoded).
func (e *env) historyOfRun(workflowID, runID string) []*historypb.HistoryEvent {
	e.t.Helper()
	var events []*historypb.HistoryEvent
	it := e.client.GetWorkflowHistory(context.Background(), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(e.t, err)
		events = append(events, ev)
	}
	return events
}
