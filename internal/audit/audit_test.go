package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
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

// events is a run's history: a helper activity deferred, then one answered configure (or, with
// local, the same as local activity markers), and other activities' results around them.
func events(t *testing.T, dc converter.DataConverter, local bool) []*historypb.HistoryEvent {
	answer := func(o activities.HelperOutput) *commonpb.Payloads {
		p, err := dc.ToPayloads(o)
		require.NoError(t, err)
		return p
	}
	secret := activities.HelperOutput{Msg: "approved by the CMDB", Key: "-----BEGIN PRIVATE KEY----- secret", Configuration: map[string]string{"plugin.security.x": "y"}}
	var evs []*historypb.HistoryEvent
	id := int64(0)
	add := func(ev *historypb.HistoryEvent) { id++; ev.EventId = id; evs = append(evs, ev) }
	activity := func(name string, out activities.HelperOutput) {
		if local {
			data, err := dc.ToPayloads(map[string]any{"ActivityType": name})
			require.NoError(t, err)
			add(&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_MarkerRecordedEventAttributes{MarkerRecordedEventAttributes: &historypb.MarkerRecordedEventAttributes{
				MarkerName: "LocalActivity", Details: map[string]*commonpb.Payloads{"data": data, "result": answer(out)}}}})
			return
		}
		add(&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
			ActivityType: &commonpb.ActivityType{Name: name}}}})
		add(&historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
			ScheduledEventId: id, Result: answer(out)}}})
	}
	activity(activities.RunHelperName, activities.HelperOutput{Defer: true, Msg: "not yet"})
	activity(activities.RunHelperName, secret)
	activity("Configure", activities.HelperOutput{Shutdown: true, Msg: "not the helper's"})
	return evs
}

// The helper's last answer is read, decrypted with the codec key, from an activity or a local
// activity marker; its key and configuration are not decoded into anything the audit keeps.
func TestLastHelperAnswer(t *testing.T) {
	c, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	dc := codec.DataConverter(c)
	for _, local := range []bool{false, true} {
		a, err := LastHelperAnswer(events(t, dc, local), dc)
		require.NoError(t, err, "local %v", local)
		require.Equal(t, Answer{Msg: "approved by the CMDB"}, a)
		require.Equal(t, workflows.DecisionConfigure, a.decision())
	}
	other, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	_, err = LastHelperAnswer(events(t, dc, false), codec.DataConverter(other))
	require.ErrorContains(t, err, "codec key")
	_, err = LastHelperAnswer(nil, dc)
	require.ErrorIs(t, err, errNoAnswer)
	require.Equal(t, workflows.DecisionDefer, Answer{Defer: true}.decision())
	require.Equal(t, workflows.DecisionShutdown, Answer{Shutdown: true}.decision())
}

// fake answers the issuance query with runs, and each run's history with evs.
type fake struct {
	client.Client
	runs  []*workflowpb.WorkflowExecutionInfo
	evs   []*historypb.HistoryEvent
	reads int
}

func (f *fake) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: f.runs}, nil
}

func (f *fake) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.reads++
	return &iter{evs: f.evs}
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
	dc := codec.DataConverter(c)
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	f := &fake{evs: events(t, dc, false), runs: []*workflowpb.WorkflowExecutionInfo{
		run(t, "n1", "r2", workflows.SourceRenewal, t0.Add(time.Hour)), run(t, "n1", "r1", workflows.SourceDiscovery, t0),
		run(t, "n2", "r3", workflows.SourceOperator, t0.Add(time.Minute))}}
	recs, err := (&Reader{C: f, TaskQueue: "tq", DC: dc}).Records(context.Background(), Window{Since: t0.Add(-time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 3, f.reads, "one history read an issuance")
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
	f.reads = 0
	recs, err = (&Reader{C: f, TaskQueue: "tq"}).Records(context.Background(), Window{Since: t0.Add(-time.Hour)})
	require.NoError(t, err)
	require.Zero(t, f.reads)
	require.Empty(t, recs[0].Decision)
}
