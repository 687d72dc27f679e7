package auditlog

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"
)

// HostState is what the audit says of one identity now: its ban or retirement and its latest
// issuance.
type HostState struct {
	Identity  string    `json:"identity"`
	Banned    bool      `json:"banned"`
	Retired   bool      `json:"retired"`
	Reason    string    `json:"reason,omitempty"` // of the ban or retirement
	By        string    `json:"by,omitempty"`
	Since     time.Time `json:"since,omitzero"` // of the ban or retirement
	Site      string    `json:"site,omitempty"`
	Signer    string    `json:"signer,omitempty"`
	Issued    time.Time `json:"issued,omitzero"`
	Expires   time.Time `json:"expires,omitzero"`
	LastRunID string    `json:"last_run_id,omitempty"`
}

// Index is the audit read as each identity's state, from the entries whose MAC verifies only:
// an entry written without the key (a forged unban) decides nothing, and is counted.
type Index struct {
	key   []byte
	store Store
	every time.Duration

	mu       sync.Mutex
	read     time.Time
	hosts    map[string]HostState
	unproven int
	offset   int64 // how far a store that tails (a file) has been read
}

// NewIndex reads store at most once per every (0: at every look).
func NewIndex(key []byte, store Store, every time.Duration) *Index {
	return &Index{key: key, store: store, every: every}
}

// State is identity's state, the store read again when it was read longer ago than the index's
// interval. An error means the audit could not be read: the caller fails closed.
func (x *Index) State(ctx context.Context, identity string) (HostState, error) {
	hosts, err := x.all(ctx)
	if err != nil {
		return HostState{}, err
	}
	st, ok := hosts[identity]
	if !ok {
		st.Identity = identity
	}
	return st, nil
}

// All is every identity the audit names.
func (x *Index) All(ctx context.Context) (map[string]HostState, error) { return x.all(ctx) }

// Unproven is how many entries of the last read did not verify under the key.
func (x *Index) Unproven() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.unproven
}

func (x *Index) all(ctx context.Context) (map[string]HostState, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.hosts != nil && x.every > 0 && time.Since(x.read) < x.every {
		return x.hosts, nil
	}
	tail, ok := x.store.(interface {
		EachFrom(ctx context.Context, from int64, fn func(raw []byte) error) (int64, error)
	})
	if !ok || x.hosts == nil {
		x.hosts, x.unproven, x.offset = map[string]HostState{}, 0, 0
	}
	var err error
	if ok {
		// what was appended since the last read only: the index follows the file's end
		x.offset, err = tail.EachFrom(ctx, x.offset, x.apply)
		if errors.Is(err, ErrRewound) {
			x.hosts, x.unproven = map[string]HostState{}, 0
			x.offset, err = tail.EachFrom(ctx, 0, x.apply)
		}
	} else {
		err = x.store.Each(ctx, x.apply)
	}
	if err != nil {
		x.hosts = nil // read again whole next time
		return nil, err
	}
	x.read = time.Now()
	return x.hosts, nil
}

// apply takes one entry into the index, when its MAC verifies.
func (x *Index) apply(raw []byte) error {
	var e Entry
	if json.Unmarshal(raw, &e) != nil || macOf(x.key, e) != e.MAC {
		x.unproven++
		return nil
	}
	if e.Identity == "" {
		return nil
	}
	st := x.hosts[e.Identity]
	st.Identity = e.Identity
	switch e.Kind {
	case KindIssued:
		st.Issued, st.Expires, st.LastRunID, st.Signer, st.Site = e.Time, e.Expires, e.RunID, e.Signer, e.Site
		st.Retired = false // issued again after its retirement: it is back
	case KindBanned:
		st.Banned, st.Reason, st.By, st.Since = true, e.Reason, e.By, e.Time
	case KindUnbanned:
		st.Banned, st.Reason, st.By, st.Since = false, e.Reason, e.By, e.Time
	case KindRetired:
		st.Retired, st.Reason, st.By, st.Since = true, e.Reason, e.By, e.Time
	}
	x.hosts[e.Identity] = st
	return nil
}

// Expiring is every identity a host holds by the audit (issued, not retired since) that expires
// before before, of site (every site when empty), the soonest first: the identity record, as
// long-lived as the sink's entries, whatever Temporal's retention deleted.
func (x *Index) Expiring(ctx context.Context, before time.Time, site string) ([]HostState, error) {
	all, err := x.all(ctx)
	if err != nil {
		return nil, err
	}
	var out []HostState
	for _, st := range all {
		if st.Retired || st.Expires.IsZero() || !st.Expires.Before(before) || (site != "" && st.Site != site) {
			continue
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Expires.Equal(out[j].Expires) {
			return out[i].Expires.Before(out[j].Expires)
		}
		return out[i].Identity < out[j].Identity
	})
	return out, nil
}
