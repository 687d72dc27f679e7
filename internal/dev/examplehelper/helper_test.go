package examplehelper

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The --failing demo: a refused identity fails, naming the fix, until the fix file exists; other
// hosts are configured as usual.
func TestRefusedUntilFixed(t *testing.T) {
	fix := filepath.Join(t.TempDir(), "ca-approved")
	o := Options{BrokerURL: "nats://127.0.0.1:4222", IssuerPublic: "aa", Refuse: []string{"bad.example"}, FixFile: fix}
	req := func(id string) *strings.Reader {
		return strings.NewReader(`{"identity":"` + id + `","ed25519_pubkey":{"public_key":"bb","directory":"/var/lib/x"}}`)
	}
	var out bytes.Buffer
	err := Run(o, req("bad.example"), &out)
	require.ErrorIs(t, err, ErrRefused)
	require.Contains(t, err.Error(), "touch "+fix)
	require.Empty(t, out.String())

	require.NoError(t, Run(o, req("good.example"), &out))
	require.Contains(t, out.String(), `"defer":false`)

	require.NoError(t, os.WriteFile(fix, nil, 0o600))
	out.Reset()
	require.NoError(t, Run(o, req("bad.example"), &out))
	require.Contains(t, out.String(), `"identity":"bad.example"`)
}
