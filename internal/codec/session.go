package codec

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// DefaultSessionTTL is how long a browser session lasts (codec-server --session-ttl): a working
// day, so a browser left logged in does not decode for ever.
const DefaultSessionTTL = 8 * time.Hour

// MaxSessions bounds the sessions a codec server holds. Logging in takes the token, so only its
// holders can open sessions; past the bound the session closest to its end makes room, and a
// flood of logins costs a few kilobytes, never more.
const MaxSessions = 1024

// sessionIDBytes is a session's random ID: as hard to guess as the token itself.
const sessionIDBytes = 32

// sessions are the browser sessions of one codec server, in its memory only: a restart ends
// them all, and so does a new token (it takes a restart). The cookie carries a random ID; the
// server holds its digest and its end, so a session ends when it expires or is logged out,
// whatever the browser keeps.
type sessions struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	ends map[[sha256.Size]byte]time.Time // by the digest of the cookie's value
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	if now == nil {
		now = time.Now
	}
	return &sessions{ttl: ttl, max: MaxSessions, now: now, ends: map[[sha256.Size]byte]time.Time{}}
}

// open starts a session and returns the cookie value that stands for it, and when it ends.
func (s *sessions) open() (string, time.Time) {
	id := make([]byte, sessionIDBytes)
	if _, err := rand.Read(id); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	value := base64.RawURLEncoding.EncodeToString(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	end := now.Add(s.ttl)
	if len(s.ends) >= s.max {
		s.evict(now)
	}
	s.ends[sha256.Sum256([]byte(value))] = end
	return value, end
}

// evict drops the expired sessions and, when none was, the one that ends soonest.
func (s *sessions) evict(now time.Time) {
	var soonest [sha256.Size]byte
	var soonestEnd time.Time
	dropped := false
	for k, end := range s.ends {
		if !now.Before(end) {
			delete(s.ends, k)
			dropped = true
			continue
		}
		if soonestEnd.IsZero() || end.Before(soonestEnd) {
			soonest, soonestEnd = k, end
		}
	}
	if !dropped && !soonestEnd.IsZero() {
		delete(s.ends, soonest)
	}
}

// valid is true for the cookie value of a session this server opened, not yet ended. The value
// is looked up by its digest, so the lookup's timing says nothing of the IDs held.
func (s *sessions) valid(value string) bool {
	if len(value) != base64.RawURLEncoding.EncodedLen(sessionIDBytes) {
		return false
	}
	k := sha256.Sum256([]byte(value))
	s.mu.Lock()
	defer s.mu.Unlock()
	end, ok := s.ends[k]
	if ok && !s.now().Before(end) {
		delete(s.ends, k)
		return false
	}
	return ok
}

// close ends the session of the cookie value (logout); an unknown value is nothing to end.
func (s *sessions) close(value string) {
	k := sha256.Sum256([]byte(value))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ends, k)
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ends)
}
