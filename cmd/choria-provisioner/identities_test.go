package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/operator"
)

func TestExpiresIn(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for left, want := range map[time.Duration]string{
		-time.Hour: "expired", 0: "expired", 2*time.Minute + 59*time.Second: "2m59s",
		5*time.Hour + 20*time.Minute: "5h20m0s", 30 * 24 * time.Hour: "30d",
	} {
		require.Equal(t, want, expiresIn(now.Add(left), now), left)
	}
	require.Equal(t, "-", expiresIn(time.Time{}, now))
	require.Equal(t, "in 30d", inWords(now.Add(30*24*time.Hour), now))
}

// The --expiring table has the identity, when it expires and in how long, when it was issued
// and by whom; `hosts show` has the three identity lines.
func TestIdentityOutput(t *testing.T) {
	now := time.Now()
	hosts := []operator.Host{
		{Identity: "n1", IdentityIssued: now.Add(-time.Hour), IdentityExpires: now.Add(-time.Minute), IdentitySigner: "ed25519:ab", Expired: true},
		{Identity: "n2\x1b[31m", IdentityIssued: now.Add(-time.Hour), IdentityExpires: now.Add(3 * 24 * time.Hour), IdentitySigner: "sha256:cd"},
	}
	var out bytes.Buffer
	require.NoError(t, (&hostsCommand{out: &out}).printIdentities(hosts, now))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4)
	require.Equal(t, []string{"IDENTITY", "EXPIRES", "IN", "ISSUED", "SIGNER"}, strings.Fields(lines[0]))
	require.Contains(t, lines[1], "expired")
	require.Contains(t, lines[1], "ed25519:ab")
	require.Contains(t, lines[2], " 3d ")
	require.NotContains(t, out.String(), "\x1b")
	require.Equal(t, "2 hosts", lines[3])

	out.Reset()
	w := tabwriter.NewWriter(&out, 0, 2, 2, ' ', 0)
	identityLines(w, &operator.Detail{Host: hosts[1]}, now)
	identityLines(w, &operator.Detail{Host: operator.Host{Identity: "none"}}, now)
	require.NoError(t, w.Flush())
	require.Regexp(t, `(?m)^Identity issued:\s+\S+\nIdentity expires:\s+\S+ \(in 3d\)\nIdentity signer:\s+sha256:cd\n$`, out.String())
}

func TestAuditWindow(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	w, err := (&auditCommand{since: "1h", until: "2026-12-06T11:30:00Z", identity: "n1"}).window(now)
	require.NoError(t, err)
	require.Equal(t, now.Add(-time.Hour), w.Since)
	require.Equal(t, now.Add(-30*time.Minute), w.Until.UTC())
	require.Equal(t, "n1", w.Identity)
	_, err = (&auditCommand{since: "last week"}).window(now)
	require.Error(t, err)
}
