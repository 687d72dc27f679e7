package activities

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// credentials are the caller's JWT and ed25519 seed, as go-choria's choria security provider
// reads them (plugin.security.choria.token_file and .seed_file), kept in memory between requests
// and read again when either file changes. The provider reads both files and derives the private
// key from the seed for every request it signs: two reads and a key derivation per RPC, half of
// what building a request cost. Signatures are the provider's (ed25519 is deterministic; a test
// compares the two).
type credentials struct {
	seedFile, tokenFile string

	mu         sync.Mutex
	seedStamp  stamp
	tokenStamp stamp
	key        ed25519.PrivateKey
	token      []byte
}

// stamp tells a changed file from the one read: a rewrite changes its time or size.
type stamp struct {
	mod  time.Time
	size int64
}

func stampOf(file string) (stamp, error) {
	st, err := os.Stat(file)
	if err != nil {
		return stamp{}, err
	}
	return stamp{st.ModTime(), st.Size()}, nil
}

// current returns the private key and the JWT, reading a file again when it changed.
func (c *credentials) current() (ed25519.PrivateKey, []byte, error) {
	ss, err := stampOf(c.seedFile)
	if err != nil {
		return nil, nil, err
	}
	ts, err := stampOf(c.tokenFile)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key == nil || ss != c.seedStamp {
		b, err := os.ReadFile(c.seedFile)
		if err != nil {
			return nil, nil, err
		}
		seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, nil, fmt.Errorf("seed file %s does not hold a hex ed25519 seed", c.seedFile)
		}
		c.key, c.seedStamp = ed25519.NewKeyFromSeed(seed), ss
	}
	if c.token == nil || ts != c.tokenStamp {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, nil, err
		}
		c.token, c.tokenStamp = b, ts
	}
	return c.key, c.token, nil
}
