package activities

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	choriasec "github.com/choria-io/go-choria/providers/security/choria"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

func TestCredentialsSignAsGoChoriasProviderAndFollowTheFiles(t *testing.T) {
	dir := t.TempDir()
	seedFile, tokenFile := filepath.Join(dir, "c.seed"), filepath.Join(dir, "c.jwt")
	writeSeed := func() {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(seedFile, []byte(hex.EncodeToString(priv.Seed())), 0o600))
	}
	writeSeed()
	require.NoError(t, os.WriteFile(tokenFile, []byte("a.b.c"), 0o600))

	sec, err := choriasec.New(choriasec.WithConfig(&choriasec.Config{SeedFile: seedFile, TokenFile: tokenFile, Identity: "p"}),
		choriasec.WithLog(logrus.NewEntry(logrus.New())))
	require.NoError(t, err)
	c := &credentials{seedFile: seedFile, tokenFile: tokenFile}
	msg := []byte(`{"protocol":"io.choria.protocol.v2.request"}`)
	check := func() {
		t.Helper()
		key, token, err := c.current()
		require.NoError(t, err)
		want, err := sec.SignBytes(msg)
		require.NoError(t, err)
		require.Equal(t, want, ed25519.Sign(key, msg))
		wantToken, err := sec.TokenBytes()
		require.NoError(t, err)
		require.Equal(t, string(wantToken), string(token))
	}
	check()
	check() // from memory

	// a new seed and JWT (same size, so the time must tell)
	future := time.Now().Add(time.Minute)
	writeSeed()
	require.NoError(t, os.WriteFile(tokenFile, []byte("d.e.f"), 0o600))
	require.NoError(t, os.Chtimes(seedFile, future, future))
	require.NoError(t, os.Chtimes(tokenFile, future, future))
	check()

	require.NoError(t, os.WriteFile(seedFile, []byte("not hex"), 0o600))
	_, _, err = c.current()
	require.ErrorContains(t, err, "does not hold a hex ed25519 seed")
}
