package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/workflows"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"24h":                       now.Add(-24 * time.Hour),
		"7d":                        now.Add(-7 * 24 * time.Hour),
		"90m":                       now.Add(-90 * time.Minute),
		"2026-12-01T00:00:00Z":      time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		"2026-12-01T01:00:00+01:00": time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
	} {
		got, err := ParseTime(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %v", in, got)
	}
	for _, in := range []string{"", "yesterday", "-1h", "2026-12-01"} {
		_, err := ParseTime(in, now)
		require.ErrorIs(t, err, ErrBadWindow, in)
	}
}

func TestQuery(t *testing.T) {
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := &Reader{TaskQueue: "tq", Site: "dc1"}
	q, err := r.Query(Window{Since: since, Until: since.Add(time.Hour), Identity: "n1.example"})
	require.NoError(t, err)
	require.Equal(t, "WorkflowType = 'ProvisionHost' AND TaskQueue = 'tq' AND ExecutionStatus = 'Completed' AND ProvisionOutcome = 'provisioned'"+
		" AND IdentityExpires IS NOT NULL AND ProvisionSite = 'dc1' AND IdentityIssued >= '2026-12-01T00:00:00Z'"+
		" AND IdentityIssued < '2026-12-01T01:00:00Z' AND ProvisionIdentity = 'n1.example'", q)
	for name, w := range map[string]Window{
		"no since":           {},
		"until before since": {Since: since, Until: since.Add(-time.Second)},
		"unquotable":         {Since: since, Identity: "n1' OR 1=1"},
	} {
		_, err := r.Query(w)
		require.ErrorIs(t, err, ErrBadWindow, name)
	}
}

// events is a history of run runID of workflowID: a helper activity deferred, then one
// answered configure (or, with local, the same as local activity markers), and other
// activities' results around them, each payload bound to the workflow as the worker writes it
// and each result sealed as the reply to its request.
func events(t *testing.T, dc converter.DataConverter, workflowID, runID string, local bool) []*historypb.HistoryEvent {
	bound := converter.WithDataConverterSerializationContext(dc, converter.WorkflowSerializationContext{WorkflowID: workflowID})
	seq := 0
	answer := func(step string, o activities.HelperOutput) *commonpb.Payloads {
		seq++
		o.Reply = activities.Seal{Run: "nonce-" + runID, RunID: runID, Step: step, Seq: seq, At: time.Unix(int64(seq), 0).UTC()}
		p, err := bound.ToPayloads(o)
		require.NoError(t, err)
		return p
	}
	secret := activities.HelperOutput{Msg: "approved by the CMDB", Key: "-----BEGIN PRIVATE KEY----- secret", Configuration: map[string]string{"plugin.security.x": "y"}}
	var evs []*historypb.HistoryEvent
	id := int64(0)
	add := func(ev *historypb.HistoryEvent) { id++; ev.EventId = id; evs = append(evs, ev) }
	activity := func(name, step string, out activities.HelperOutput) {
		if local {
			data, err := bound.ToPayloads(map[string]any{"ActivityType": name})
			require.NoError(t, err)
			add(&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_MarkerRecordedEventAttributes{MarkerRecordedEventAttributes: &historypb.MarkerRecordedEventAttributes{
				MarkerName: "LocalActivity", Details: map[string]*commonpb.Payloads{"data": data, "result": answer(step, out)}}}})
			return
		}
		add(&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
			ActivityType: &commonpb.ActivityType{Name: name}}}})
		add(&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
			ScheduledEventId: id, Result: answer(step, out)}}})
	}
	activity(activities.RunHelperName, activities.StepHelper, activities.HelperOutput{Defer: true, Msg: "not yet"})
	activity(activities.RunHelperName, activities.StepHelper, secret)
	activity("Configure", "configure", activities.HelperOutput{Shutdown: true, Msg: "not the helper's"})
	return evs
}

// lastResult is the payloads of the last helper answer in evs (an activity's result or a
// marker's); setLastResult replaces them.
func lastResult(evs []*historypb.HistoryEvent, local bool) *commonpb.Payloads {
	if local {
		return evs[1].GetMarkerRecordedEventAttributes().GetDetails()["result"]
	}
	return evs[3].GetActivityTaskCompletedEventAttributes().GetResult()
}

func setLastResult(evs []*historypb.HistoryEvent, local bool, p *commonpb.Payloads) {
	if local {
		evs[1].GetMarkerRecordedEventAttributes().Details["result"] = p
		return
	}
	evs[3].GetActivityTaskCompletedEventAttributes().Result = p
}

// The helper's last answer is read, decrypted with the codec key, from an activity or a local
// activity marker; its key and configuration are not decoded into anything the audit keeps.
func TestLastHelperAnswer(t *testing.T) {
	c, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	dc := Converter(c)
	for _, local := range []bool{false, true} {
		a, err := LastHelperAnswer(events(t, dc, "provision:n1", "r1", local), dc, "provision:n1", "r1")
		require.NoError(t, err, "local %v", local)
		require.Equal(t, "approved by the CMDB", a.Msg)
		require.Equal(t, "r1", a.Reply.RunID)
		require.Equal(t, workflows.DecisionConfigure, a.decision())
	}
	other, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	_, err = LastHelperAnswer(events(t, dc, "provision:n1", "r1", false), Converter(other), "provision:n1", "r1")
	var refused *RefusedError
	require.ErrorAs(t, err, &refused, "another key's answer")
	require.Equal(t, RefusedPayload, refused.Reason)
	_, err = LastHelperAnswer(nil, dc, "provision:n1", "r1")
	require.ErrorIs(t, err, errNoAnswer)
	require.Equal(t, workflows.DecisionDefer, Answer{Defer: true}.decision())
	require.Equal(t, workflows.DecisionShutdown, Answer{Shutdown: true}.decision())
}

// A history that looks like a run's but whose helper answer the worker would not have taken is
// reported, never read as a decision: a plaintext answer, one written for another workflow, one
// altered, and a genuine answer of another run of the same workflow (copied into this one).
func TestLookAlikeHistoriesAreRefused(t *testing.T) {
	c, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	dc := Converter(c)
	forged := activities.HelperOutput{Msg: "approved, honest", Attempted: activities.Attempted{
		Reply: activities.Seal{Run: "nonce-r1", RunID: "r1", Step: activities.StepHelper, Seq: 2}}}
	plain, err := converter.GetDefaultDataConverter().ToPayloads(forged)
	require.NoError(t, err)
	foreign := events(t, dc, "provision:n2", "r1", false)

	for _, local := range []bool{false, true} {
		for name, tc := range map[string]struct {
			change func(evs []*historypb.HistoryEvent)
			runID  string
			reason string
			says   string
		}{
			"plaintext":          {func(evs []*historypb.HistoryEvent) { setLastResult(evs, local, plain) }, "r1", RefusedPayload, "not encrypted"},
			"another workflow's": {func(evs []*historypb.HistoryEvent) { setLastResult(evs, local, lastResult(foreign, false)) }, "r1", RefusedPayload, `written for workflow "provision:n2"`},
			"altered": {func(evs []*historypb.HistoryEvent) {
				data := lastResult(evs, local).Payloads[0].Data
				data[len(data)-1] ^= 1
			}, "r1", RefusedPayload, "does not decrypt"},
			"another run's": {func([]*historypb.HistoryEvent) {}, "r2", RefusedReply, "not to a helper request of this run r2"},
		} {
			evs := events(t, dc, "provision:n1", "r1", local)
			tc.change(evs)
			a, err := LastHelperAnswer(evs, dc, "provision:n1", tc.runID)
			var refused *RefusedError
			require.ErrorAs(t, err, &refused, "%s (local %v): %+v", name, local, a)
			require.Equal(t, tc.reason, refused.Reason, name)
			require.ErrorContains(t, err, tc.says, name)
		}
	}

	// a local activity marker that is not the workflow's own is refused too
	evs := events(t, dc, "provision:n1", "r1", true)
	evs[1].GetMarkerRecordedEventAttributes().Details["data"] = plain
	_, err = LastHelperAnswer(evs, dc, "provision:n1", "r1")
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)

	// the reply of another step of this run is no helper answer either
	evs = events(t, dc, "provision:n1", "r1", false)
	setLastResult(evs, false, evs[5].GetActivityTaskCompletedEventAttributes().GetResult())
	_, err = LastHelperAnswer(evs, dc, "provision:n1", "r1")
	require.ErrorAs(t, err, &refused)
	require.Equal(t, RefusedReply, refused.Reason)

	// the records: the issuance listed, refused, without a decision, in the table and the JSON
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	f := &fake{runs: []*workflowpb.WorkflowExecutionInfo{run(t, "n1", "r1", workflows.SourceDiscovery, t0)},
		history: func(workflowID, runID string) []*historypb.HistoryEvent {
			evs := events(t, dc, workflowID, runID, false)
			setLastResult(evs, false, plain)
			return evs
		}}
	recs, err := (&Reader{C: f, TaskQueue: "tq", DC: dc}).Records(context.Background(), Window{Since: t0.Add(-time.Hour)})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, RefusedPayload, recs[0].Refused)
	require.Empty(t, recs[0].Decision)
	require.Empty(t, recs[0].Message)
	require.Contains(t, recs[0].Note, "refused")
	var js, table bytes.Buffer
	require.NoError(t, WriteJSON(&js, recs))
	require.NoError(t, WriteTable(&table, recs))
	require.Contains(t, js.String(), `"refused":"payload"`)
	require.NotContains(t, js.String(), "honest")
	require.Contains(t, table.String(), "REFUSED")
	require.NotContains(t, table.String(), "honest")
}

// fake answers the issuance query with runs, and each run's history with evs.
type fake struct {
	client.Client
	runs    []*workflowpb.WorkflowExecutionInfo
	history func(workflowID, runID string) []*historypb.HistoryEvent
	reads   atomic.Int64
}

func (f *fake) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: f.runs}, nil
}

func (f *fake) GetWorkflowHistory(_ context.Context, workflowID, runID string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.reads.Add(1)
	return &iter{evs: f.history(workflowID, runID)}
}

type iter struct{ evs []*historypb.HistoryEvent }

func (i *iter) HasNext() bool { return len(i.evs) > 0 }
func (i *iter) Next() (*historypb.HistoryEvent, error) {
	ev := i.evs[0]
	i.evs = i.evs[1:]
	return ev, nil
}

func run(t *testing.T, identity, runID, source string, issued time.Time) *workflowpb.WorkflowExecutionInfo {
	fields := map[string]*commonpb.Payload{}
	for name, v := range map[string]any{workflows.IdentityKey.GetName(): identity, workflows.SourceKey.GetName(): source,
		workflows.IssuedKey.GetName(): issued, workflows.ExpiresKey.GetName(): issued.Add(3 * time.Minute), workflows.SignerKey.GetName(): "ed25519:ab"} {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		fields[name] = p
	}
	return &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: workflows.WorkflowID(identity), RunId: runID},
		Type: &commonpb.WorkflowType{Name: workflows.WorkflowName}, TaskQueue: "tq", StartTime: timestamppb.New(issued),
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, SearchAttributes: &commonpb.SearchAttributes{IndexedFields: fields}}
}

// Every issuance is a record, superseded ones too, oldest first, each with one history read;
// the JSON lines and the table carry no secret of the helper's answer.
func TestRecordsAndTheirOutput(t *testing.T) {
	c, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	dc := Converter(c)
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	f := &fake{history: func(workflowID, runID string) []*historypb.HistoryEvent {
		return events(t, dc, workflowID, runID, false)
	}, runs: []*workflowpb.WorkflowExecutionInfo{
		run(t, "n1", "r2", workflows.SourceRenewal, t0.Add(time.Hour)), run(t, "n1", "r1", workflows.SourceDiscovery, t0),
		run(t, "n2", "r3", workflows.SourceOperator, t0.Add(time.Minute))}}
	recs, err := (&Reader{C: f, TaskQueue: "tq", DC: dc}).Records(context.Background(), Window{Since: t0.Add(-time.Hour)})
	require.NoError(t, err)
	require.EqualValues(t, 3, f.reads.Load(), "one history read an issuance")
	require.Equal(t, []string{"r1", "r3", "r2"}, []string{recs[0].RunID, recs[1].RunID, recs[2].RunID})
	require.Equal(t, Record{Identity: "n1", Issued: t0, Expires: t0.Add(3 * time.Minute), Signer: "ed25519:ab", Source: workflows.SourceDiscovery,
		Decision: workflows.DecisionConfigure, Message: "approved by the CMDB", WorkflowID: "provision:n1", RunID: "r1"}, recs[0])

	var js, table bytes.Buffer
	require.NoError(t, WriteJSON(&js, recs))
	require.NoError(t, WriteTable(&table, recs))
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	require.Len(t, lines, 3)
	var back Record
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &back))
	require.Equal(t, recs[2], back)
	require.Contains(t, table.String(), "renewal")
	require.Contains(t, table.String(), "3 issuances\n")
	for _, out := range []string{js.String(), table.String()} {
		require.NotContains(t, out, "PRIVATE KEY")
		require.NotContains(t, out, "plugin.security")
	}

	// without the codec key's converter no history is read
	f.reads.Store(0)
	recs, err = (&Reader{C: f, TaskQueue: "tq"}).Records(context.Background(), Window{Since: t0.Add(-time.Hour)})
	require.NoError(t, err)
	require.Zero(t, f.reads.Load())
	require.Empty(t, recs[0].Decision)
}
