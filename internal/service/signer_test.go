package service

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
)

// writeSigner writes a signer client JWT to file, expiring at exp (never, when exp is zero).
func writeSigner(t *testing.T, file string, exp time.Time) {
	t.Helper()
	pub, pri, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	claims := &tokens.ClientIDClaims{CallerID: "choria=provisioner", StandardClaims: tokens.StandardClaims{
		Purpose: tokens.ClientIDPurpose, TrustChainSignature: "tcs", PublicKey: hex.EncodeToString(pub),
	}}
	if !exp.IsZero() {
		claims.ExpiresAt = jwt.NewNumericDate(exp)
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(pri)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, []byte(signed+"\n"), 0o600))
}

func signerService(t *testing.T, token string) (*Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	svc, err := New(&config.Config{Site: "dc1", JWTSigningToken: token}, zap.NewNop(), Options{Registry: reg})
	require.NoError(t, err)
	return svc, reg
}

const signerSeries = "choria_provisioner_signer_expiry_timestamp_seconds"

// The gauge is the token's expiry, follows a renewed token without a restart, and is absent
// while there is no expiry to alert on: a token that never expires, or one that cannot be read.
func TestSignerExpiryGaugeFollowsTheToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "signer.jwt")
	svc, reg := signerService(t, file)
	gauge := svc.Metrics.SignerExpiry.WithLabelValues("dc1")

	first := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	writeSigner(t, file, first)
	require.Equal(t, "", svc.refreshSigner(""))
	require.Equal(t, float64(first.Unix()), testutil.ToFloat64(gauge))

	renewed := first.AddDate(1, 0, 0)
	writeSigner(t, file, renewed)
	require.Equal(t, "", svc.refreshSigner(""))
	require.Equal(t, float64(renewed.Unix()), testutil.ToFloat64(svc.Metrics.SignerExpiry.WithLabelValues("dc1")))

	require.NoError(t, os.WriteFile(file, []byte("not a JWT"), 0o600))
	reason := svc.refreshSigner("")
	require.Contains(t, reason, "parsing jwt_signing_token")
	n, err := testutil.GatherAndCount(reg, signerSeries)
	require.NoError(t, err)
	require.Zero(t, n, "an unreadable token exports no expiry")

	writeSigner(t, file, time.Time{})
	require.Equal(t, "", svc.refreshSigner(reason))
	n, err = testutil.GatherAndCount(reg, signerSeries)
	require.NoError(t, err)
	require.Zero(t, n, "a token that never expires exports no expiry")
}

// The watcher sets the gauge at once, not a refresh period later, and does nothing without a
// jwt_signing_token.
func TestWatchSignerSetsTheGaugeAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "signer.jwt")
	exp := time.Now().Add(20 * 24 * time.Hour).Truncate(time.Second)
	writeSigner(t, file, exp)
	svc, reg := signerService(t, file)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.watchSigner(ctx, time.Hour); close(done) }()
	require.Eventually(t, func() bool {
		n, err := testutil.GatherAndCount(reg, signerSeries)
		return err == nil && n == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, float64(exp.Unix()), testutil.ToFloat64(svc.Metrics.SignerExpiry.WithLabelValues("dc1")))
	cancel()
	<-done

	none, reg := signerService(t, "")
	none.watchSigner(context.Background(), time.Hour) // returns: nothing to watch
	n, err := testutil.GatherAndCount(reg, signerSeries)
	require.NoError(t, err)
	require.Zero(t, n)
}
