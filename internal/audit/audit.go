package audit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// ErrBadWindow is a window or a time the audit cannot use.
var ErrBadWindow = errors.New("bad audit window")

// ParseTime reads a window's end: an RFC 3339 time, or a duration ago (config.ParseDuration:
// "24h", "7d").
func ParseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, strings.TrimSpace(s)); err == nil {
		return t, nil
	}
	d, err := config.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%w: %q is neither an RFC 3339 time nor a duration ago (24h, 7d)", ErrBadWindow, s)
	}
	return now.Add(-d), nil
}

// Query is the visibility query of the window's issuances (superseded ones included).
func (r *Reader) Query(w Window) (string, error) {
	if w.Since.IsZero() || (!w.Until.IsZero() && !w.Until.After(w.Since)) {
		return "", fmt.Errorf("%w: since %v, until %v", ErrBadWindow, w.Since, w.Until)
	}
	cond := hostruns.IssuedBetween(w.Since, w.Until)
	if w.Identity != "" {
		if !hostruns.Quotable(w.Identity) {
			return "", fmt.Errorf("%w: identity %q cannot be quoted in a visibility query", ErrBadWindow, w.Identity)
		}
		cond += fmt.Sprintf(" AND %s = '%s'", workflows.IdentityKey.GetName(), w.Identity)
	}
	q, err := hostruns.IssuedQuery(r.TaskQueue, r.Site, cond)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadWindow, err)
	}
	return q, nil
}

// Records lists the window's issuances, oldest first, each with the helper's decision read from
// its run's history (one read each, HistoryReads at once) when the reader has a data converter.
func (r *Reader) Records(ctx context.Context, w Window) ([]Record, error) {
	q, err := r.Query(w)
	if err != nil {
		return nil, err
	}
	var recs []Record
	err = hostruns.Each(ctx, r.C, q, func(run hostruns.Run) bool {
		recs = append(recs, recordOf(run))
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("listing issuances: %w", err)
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Issued.Before(recs[j].Issued) })
	if r.DC != nil {
		r.readDecisions(ctx, recs)
	}
	return recs, nil
}

func recordOf(run hostruns.Run) Record {
	return Record{Identity: run.HostIdentity(), Site: run.Site, Issued: run.Issued, Expires: run.Expires, Signer: run.Signer, Source: run.Source,
		WorkflowID: run.WorkflowID, RunID: run.RunID}
}

func (r *Reader) readDecisions(ctx context.Context, recs []Record) {
	sem := make(chan struct{}, HistoryReads)
	var wg sync.WaitGroup
	for i := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func(rec *Record) {
			defer func() { <-sem; wg.Done() }()
			d, err := r.decision(ctx, rec.WorkflowID, rec.RunID)
			var refused *RefusedError
			if errors.As(err, &refused) {
				rec.Refused = refused.Reason
			}
			if err != nil {
				rec.Note = err.Error()
				return
			}
			rec.Decision, rec.Message = d.decision(), d.Msg
		}(&recs[i])
	}
	wg.Wait()
}

func (a Answer) decision() string {
	switch {
	case a.Shutdown:
		return workflows.DecisionShutdown
	case a.Defer:
		return workflows.DecisionDefer
	}
	return workflows.DecisionConfigure
}

// decision reads a run's history once and returns the last answer of its helper.
func (r *Reader) decision(ctx context.Context, workflowID, runID string) (Answer, error) {
	it := r.C.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return Answer{}, fmt.Errorf("reading the run's history: %w", err)
		}
		events = append(events, ev)
	}
	return LastHelperAnswer(events, r.DC, workflowID, runID)
}

// Converter is the data converter the audit reads history with: the worker's rules (codec
// Worker), so a payload not encrypted under the codec key for the host's workflow is refused
// rather than read as the operators' codec would (which passes plaintext through).
func Converter(c *codec.Codec) converter.DataConverter {
	return codec.DataConverter(c.Worker(nil))
}

// errNoAnswer is a run whose history holds no helper answer (a run made by no provisioner).
var errNoAnswer = errors.New("no helper answer in the run's history")

// LastHelperAnswer finds the helper's last answer in the events of run runID of workflowID:
// the result of its last RunHelper activity, or, in fast mode, of its last RunHelper local
// activity (a marker). Each payload is decoded for the workflow, so with Converter one that is
// not the workflow's own is a RefusedError (RefusedPayload), and so is an answer sealed as the
// reply to another run's request or another step's (RefusedReply): a run's helper answer is
// one its own request received (a reset run asks the helper again before it signs).
func LastHelperAnswer(events []*historypb.HistoryEvent, dc converter.DataConverter, workflowID, runID string) (Answer, error) {
	dc = converter.WithDataConverterSerializationContext(dc, converter.WorkflowSerializationContext{WorkflowID: workflowID})
	helper := map[int64]bool{}
	var last *historypb.HistoryEvent
	for _, ev := range events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activities.RunHelperName {
			helper[ev.GetEventId()] = true
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && helper[a.GetScheduledEventId()] {
			last = ev
		}
		if m := ev.GetMarkerRecordedEventAttributes(); m.GetMarkerName() == localActivityMarker && m.GetDetails()[markerResult] != nil {
			var data struct{ ActivityType string }
			err := dc.FromPayloads(m.GetDetails()[markerData], &data)
			if errors.Is(err, codec.ErrRefused) {
				return Answer{}, &RefusedError{Reason: RefusedPayload, Detail: fmt.Sprintf("local activity marker %d: %v", ev.GetEventId(), err)}
			}
			if err == nil && data.ActivityType == activities.RunHelperName {
				last = ev
			}
		}
	}
	if last == nil {
		return Answer{}, errNoAnswer
	}
	result := last.GetActivityTaskCompletedEventAttributes().GetResult()
	if m := last.GetMarkerRecordedEventAttributes(); m != nil {
		result = m.GetDetails()[markerResult]
	}
	var a Answer
	err := dc.FromPayloads(result, &a)
	switch {
	case errors.Is(err, codec.ErrRefused):
		return Answer{}, &RefusedError{Reason: RefusedPayload, Detail: fmt.Sprintf("event %d: %v", last.GetEventId(), err)}
	case err != nil:
		return Answer{}, fmt.Errorf("decoding the helper's answer (the codec key reads it): %w", err)
	case sealed(a.Reply) && (a.Reply.RunID != runID || a.Reply.Step != activities.StepHelper):
		return Answer{}, &RefusedError{Reason: RefusedReply, Detail: fmt.Sprintf(
			"event %d is sealed as the reply to %s of run %s, not to a helper request of this run %s", last.GetEventId(), a.Reply, a.Reply.RunID, runID)}
	}
	return a, nil
}

// sealed is true for a reply seal that says anything (the activities seal every result).
func sealed(s activities.Seal) bool { return s.Run != "" || s.RunID != "" || s.Step != "" }

// The SDK's local activity marker: its name and detail keys.
const (
	localActivityMarker = "LocalActivity"
	markerData          = "data"
	markerResult        = "result"
)
