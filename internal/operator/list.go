package operator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// ErrBadFilter is a filter or page token the listing cannot use.
var ErrBadFilter = errors.New("bad filter")

// Outcomes a filter may name: the search attribute's values, where "failed" is every run that
// closed without completing (failed, timed out, terminated or canceled: what retry starts again).
var outcomes = []string{workflows.OutcomeRunning, workflows.OutcomeDeferred, workflows.OutcomeFailed, workflows.OutcomeProvisioned, workflows.OutcomeShutdown}

// failedStatuses are the closes `--outcome failed` selects: the ones a retry may start over.
const failedStatuses = "ExecutionStatus IN ('Failed', 'TimedOut', 'Terminated', 'Canceled')"

// Query builds the visibility query of the runs of ours that may be f's hosts' latest runs:
// what `temporal workflow list --query` takes too. A run it selects is a host's only when it is
// the host's latest run, which List confirms.
func (o *Operator) Query(f Filter) string {
	q := hostruns.HostsQuery{TaskQueue: o.TaskQueue, Step: f.Step, Site: f.Site}
	switch f.Outcome {
	case "":
	case workflows.OutcomeFailed:
		return q.String() + " AND " + failedStatuses
	case workflows.OutcomeRunning, workflows.OutcomeDeferred:
		q.Outcome, q.Running = f.Outcome, true // a terminated run keeps the attribute it had
	default:
		q.Outcome = f.Outcome
	}
	return q.String()
}

func (f Filter) validate() error {
	if f.Outcome == "" {
		return nil
	}
	for _, o := range outcomes {
		if o == f.Outcome {
			return nil
		}
	}
	return fmt.Errorf("%w: outcome %q is none of %s", ErrBadFilter, f.Outcome, strings.Join(outcomes, ", "))
}

// Page is the part of a listing a call returns: at most Limit hosts (0: all) from Token (""
// the first, else a Listing's Next).
type Page struct {
	Limit int
	Token string
	// NoReasons skips reading failed hosts' reasons: a history read each (not in visibility),
	// what a listing of thousands of failed hosts spends most of its time on
	NoReasons bool
	// FullReasons reads every failed host's reason from its history, also where visibility has
	// its error type (workflows.ErrorKey), which is otherwise the reason shown
	FullReasons bool
}

// Listing is one page of hosts and the token of the next ("" after the last).
type Listing struct {
	Hosts []Host
	Next  string
}

// cursor is where a listing stopped: a visibility page's token and how many of its runs were
// read, for the query it was made for.
type cursor struct {
	Visibility []byte `json:"v,omitempty"`
	Skip       int    `json:"s,omitempty"`
	Query      uint64 `json:"q"`
}

func queryDigest(q string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(q))
	return h.Sum64()
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(token, query string) (cursor, error) {
	c := cursor{Query: queryDigest(query)}
	if token == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	var got cursor
	if err == nil {
		err = json.Unmarshal(b, &got)
	}
	if err != nil || got.Skip < 0 {
		return c, fmt.Errorf("%w: the page token is not one a listing printed", ErrBadFilter)
	}
	if got.Query != c.Query {
		return c, fmt.Errorf("%w: the page token is of a listing with other filters", ErrBadFilter)
	}
	return got, nil
}

// candidate is a run the query selected, with what visibility holds of its workflow ID, and the
// cursor just past it.
type candidate struct {
	run    hostruns.Run
	latest hostruns.Latest
	after  cursor
}

// latestRun says whether the candidate is its host's latest run (visibility lists a new run a
// moment after it starts: one not found yet is taken as the latest).
func (c candidate) latestRun() bool { return c.latest.Runs == 0 || c.latest.Run.RunID == c.run.RunID }

// candidates calls fn with the runs of f's query from cur on, page by page, each with its
// workflow ID's latest run, until fn returns false. Its cost in visibility requests is one a
// page of candidates and one a page of their hosts' runs: it grows with the runs that match,
// not with the fleet or every run ever made.
func (o *Operator) candidates(ctx context.Context, f Filter, cur cursor, fn func(candidate) bool) error {
	query := o.Query(f)
	for {
		runs, next, err := hostruns.Page(ctx, o.C, query, cur.Visibility, hostruns.PageSize)
		if err != nil {
			return unreachable(err)
		}
		runs = runs[min(cur.Skip, len(runs)):]
		latest, err := hostruns.LatestOf(ctx, o.C, quotableIDs(runs))
		if err != nil {
			return unreachable(err)
		}
		for i, r := range runs {
			after := cursor{Visibility: cur.Visibility, Skip: cur.Skip + i + 1, Query: cur.Query}
			if i == len(runs)-1 {
				after = cursor{Visibility: next, Query: cur.Query}
			}
			if !fn(candidate{run: r, latest: latest[r.WorkflowID], after: after}) {
				return nil
			}
		}
		if len(next) == 0 {
			return nil
		}
		cur = cursor{Visibility: next, Query: cur.Query}
	}
}

func quotableIDs(runs []hostruns.Run) []string {
	seen := make(map[string]struct{}, len(runs))
	ids := make([]string, 0, len(runs))
	for _, r := range runs {
		if _, ok := seen[r.WorkflowID]; !ok && hostruns.Quotable(r.WorkflowID) {
			seen[r.WorkflowID] = struct{}{}
			ids = append(ids, r.WorkflowID)
		}
	}
	return ids
}

// List returns the latest run of every host matching f, in visibility's order (open runs
// first, then the most recently closed).
func (o *Operator) List(ctx context.Context, f Filter) ([]Host, error) {
	l, err := o.ListPage(ctx, f, Page{})
	if err != nil {
		return nil, err
	}
	return l.Hosts, nil
}

// ListPage returns a page of the hosts whose latest run matches f. Outcome, step and site are
// matched on the latest run only, so a host that failed once and was provisioned later is not
// "failed": the query selects the matching runs, and each is kept only when visibility holds
// no newer run of its workflow ID.
func (o *Operator) ListPage(ctx context.Context, f Filter, p Page) (*Listing, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	if p.Limit < 0 {
		return nil, fmt.Errorf("%w: a limit of %d hosts", ErrBadFilter, p.Limit)
	}
	cur, err := decodeCursor(p.Token, o.Query(f))
	if err != nil {
		return nil, err
	}
	if f.Outcome == "" && f.Step == "" && f.Site == "" && p.Limit == 0 && p.Token == "" {
		return o.listAll(ctx, f, p)
	}
	l := &Listing{}
	err = o.candidates(ctx, f, cur, func(c candidate) bool {
		if !c.latestRun() || (f.Text != "" && !strings.Contains(c.run.Identity, f.Text)) {
			return true
		}
		h := o.hostOf(c.run)
		h.Runs = max(c.latest.Runs, 1)
		l.Hosts = append(l.Hosts, h)
		if p.Limit > 0 && len(l.Hosts) == p.Limit {
			if len(c.after.Visibility) > 0 || c.after.Skip > 0 {
				l.Next = c.after.encode()
			}
			return false
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("listing hosts: %w", err)
	}
	if !p.NoReasons {
		o.fillReasons(ctx, l.Hosts, p.FullReasons)
	}
	return l, nil
}

// listAll is the whole listing without filters: every run of ours is a candidate, so it reads
// them all once and keeps each workflow ID's newest (by start time), instead of reading each
// page's hosts' runs again to confirm them.
func (o *Operator) listAll(ctx context.Context, f Filter, p Page) (*Listing, error) {
	latest := map[string]*Host{}
	var order []string
	err := hostruns.Each(ctx, o.C, o.Query(f), func(r hostruns.Run) bool {
		cur, seen := latest[r.WorkflowID]
		switch {
		case !seen:
			h := o.hostOf(r)
			latest[r.WorkflowID], order = &h, append(order, r.WorkflowID)
		case r.Started.After(cur.Started):
			h := o.hostOf(r)
			h.Runs = cur.Runs
			*cur = h
		}
		latest[r.WorkflowID].Runs++
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("listing hosts: %w", unreachable(err))
	}
	l := &Listing{}
	for _, id := range order {
		if h := latest[id]; f.Text == "" || strings.Contains(h.Identity, f.Text) {
			l.Hosts = append(l.Hosts, *h)
		}
	}
	if !p.NoReasons {
		o.fillReasons(ctx, l.Hosts, p.FullReasons)
	}
	return l, nil
}

// hostOf is a host as its run says.
func (o *Operator) hostOf(r hostruns.Run) Host {
	h := Host{WorkflowID: r.WorkflowID, RunID: r.RunID, Status: r.StatusName(), Started: r.Started, Closed: r.Closed,
		Site: r.Site, Outcome: r.Outcome, Step: r.Step}
	h.Identity, _ = workflows.IdentityFromWorkflowID(h.WorkflowID)
	switch r.Status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
	default:
		if h.Outcome != workflows.OutcomeFailed {
			h.Outcome = strings.ToLower(h.Status) // closed before it could say: canceled, terminated, timedout
		}
	}
	if r.Error != "" && h.Outcome == workflows.OutcomeFailed {
		h.Reason = fmt.Sprintf("%s at %s (hosts show: why)", r.Error, r.Step)
	}
	if !r.Ours(o.TaskQueue) {
		h.Foreign = foreign(r)
	}
	if !r.Expires.IsZero() {
		h.setIdentity(r.Issued, r.Expires, r.Signer, o.now())
	}
	return h
}

// foreign says whose a run that is not ours is.
func foreign(r hostruns.Run) string {
	return fmt.Sprintf("not a provisioner's run: workflow type %q on task queue %q", r.Type, r.TaskQueue)
}
