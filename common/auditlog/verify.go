package auditlog

import (
	"context"
	"encoding/json"
	"fmt"
)

// Problem is what Verify found wrong at one entry of the store.
type Problem struct {
	Line int    `json:"line"` // 1-based, in the store's order
	Seq  uint64 `json:"seq,omitempty"`
	What string `json:"problem"`
}

// Report is what Verify read.
type Report struct {
	Entries  int       `json:"entries"`
	Last     uint64    `json:"last_seq"`
	Problems []Problem `json:"problems"`
}

// Verify reads every entry of store and checks each one's MAC under key and its place in the
// chain: an edited entry fails its MAC; a removed one leaves a gap in the sequence and an entry
// that does not follow its predecessor; an inserted one, made without the key, fails its MAC,
// and one copied from elsewhere in the chain does not follow. What the chain cannot show: entries
// removed from its end (compare Last with what you expect, e.g. the stream's own sequence).
func Verify(ctx context.Context, key []byte, store Store) (Report, error) {
	var r Report
	var prev *Entry
	line := 0
	err := store.Each(ctx, func(raw []byte) error {
		line++
		var e Entry
		if err := json.Unmarshal(raw, &e); err != nil {
			r.Problems = append(r.Problems, Problem{Line: line, What: fmt.Sprintf("not an audit entry: %v", err)})
			return nil
		}
		r.Entries++
		if macOf(key, e) != e.MAC {
			r.Problems = append(r.Problems, Problem{Line: line, Seq: e.Seq, What: "its MAC does not verify: altered, or not written by the provisioner"})
		}
		switch {
		case e.Kind == KindOpened && e.Seq == 1 && e.Prev == "":
			// a writer that cannot read its store back (standard output) began a chain here
		case prev == nil && (e.Seq != 1 || e.Prev != ""):
			r.Problems = append(r.Problems, Problem{Line: line, Seq: e.Seq, What: fmt.Sprintf("the chain does not start here: entries before %d are missing", e.Seq)})
		case prev != nil && e.Seq > prev.Seq+1:
			r.Problems = append(r.Problems, Problem{Line: line, Seq: e.Seq, What: fmt.Sprintf("entries %d to %d are missing", prev.Seq+1, e.Seq-1)})
		case prev != nil && e.Seq <= prev.Seq:
			r.Problems = append(r.Problems, Problem{Line: line, Seq: e.Seq, What: fmt.Sprintf("out of order: after entry %d", prev.Seq)})
		case prev != nil && e.Prev != prev.MAC:
			r.Problems = append(r.Problems, Problem{Line: line, Seq: e.Seq, What: fmt.Sprintf("does not follow entry %d: an entry between them was removed or replaced", prev.Seq)})
		}
		prev = &e
		r.Last = e.Seq
		return nil
	})
	return r, err
}

// Entries is every entry of store whose MAC verifies under key, in order, and how many did not.
func Entries(ctx context.Context, key []byte, store Store) ([]Entry, int, error) {
	var out []Entry
	unproven := 0
	err := store.Each(ctx, func(raw []byte) error {
		var e Entry
		if json.Unmarshal(raw, &e) != nil || macOf(key, e) != e.MAC {
			unproven++
			return nil
		}
		out = append(out, e)
		return nil
	})
	return out, unproven, err
}
