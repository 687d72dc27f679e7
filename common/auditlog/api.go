// Package auditlog is the provisioner's own record of what it did to an identity: every
// issuance (appended before the identity is sent), ban, unban and retire, in a chain of entries
// each authenticated with a key only the workers hold (HMAC-SHA256 over the entry and the
// previous entry's MAC). It lives outside the Temporal namespace, in a sink the site chooses (a
// JSON-lines file, standard output for the log pipeline, or a Choria Streams stream), so that no
// namespace writer can erase or alter it, and Verify names an entry edited, removed or inserted.
package auditlog

import (
	"context"
	"errors"
	"time"
)

// Kinds of entries.
const (
	KindIssued   = "issued"   // an identity signed for a host, before it is sent
	KindBanned   = "banned"   // no identity is issued to the host until it is unbanned
	KindUnbanned = "unbanned" // the ban lifted
	KindRetired  = "retired"  // the host is gone for good: no renewal, no alert
	KindOpened   = "opened"   // a writer began a chain it cannot read back (standard output)
)

// Entry is one line of the audit: what happened to which identity, by whom, and its place in
// the chain. It holds no secret: a public key's fingerprint, never a key, a JWT or the token.
type Entry struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Identity string    `json:"identity,omitempty"`
	Site     string    `json:"site,omitempty"`     // the issuing worker's site
	Workflow string    `json:"workflow,omitempty"` // the workflow the run belongs to
	RunID    string    `json:"run_id,omitempty"`   // the run that asked for it
	Signer   string    `json:"signer,omitempty"`   // the signer's public key ID or CA fingerprint
	Subject  string    `json:"subject,omitempty"`  // SHA-256 of the public key the identity was issued for
	Expires  time.Time `json:"expires,omitzero"`
	Reason   string    `json:"reason,omitempty"`
	By       string    `json:"by,omitempty"` // the operator or process that made the entry
	Prev     string    `json:"prev"`         // the previous entry's MAC: "" for a chain's first
	MAC      string    `json:"mac"`          // HMAC-SHA256, hex, over the entry with mac empty
}

// Store is where a chain's entries are kept, in order.
type Store interface {
	// Last is the newest entry, nil when there is none; it reads what the store holds.
	Last(ctx context.Context) (*Entry, error)
	// Write appends e durably. A store that several writers share refuses an entry whose Seq is
	// not the next (ErrConflict); the writer reads the newest entry and tries again.
	Write(ctx context.Context, e Entry) error
	// Each hands every entry to fn in order, with its bytes as stored (Verify checks those).
	Each(ctx context.Context, fn func(raw []byte) error) error
	Close() error
}

// ErrConflict: another writer appended the entry of that sequence number first.
var ErrConflict = errors.New("another writer appended that entry first")

// ErrRewound: the store holds less than a reader had read (a file rotated): read it again whole.
var ErrRewound = errors.New("the audit store was replaced: read it again from its start")

// ErrUnwritable: the sink could not take the entry; the identity it records is not sent.
var ErrUnwritable = errors.New("the audit sink cannot be written")
