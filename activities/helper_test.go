package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
)

func script(t *testing.T, body string) []string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "helper.sh")
	require.NoError(t, os.WriteFile(f, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return []string{f}
}

func runHelper(t *testing.T, body string, timeout time.Duration) (*HelperOutput, error) {
	t.Helper()
	h := &HelperRunner{Command: script(t, body), Timeout: timeout, Env: []string{"PATH"}}
	return h.Run(context.Background(), HelperInput{Identity: "n1.example", Inventory: `{"version":"1"}`})
}

func TestHelperContractInputAndOutput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "stdin.json")
	out, err := runHelper(t, fmt.Sprintf(`cat > %s
echo '{"defer":false,"msg":"ok","configuration":{"identity":"n1.example"},"server_claims":{"exp":1900000000,"collectives":["c1"]}}'`, in), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "ok", out.Msg)
	require.Equal(t, "n1.example", out.Configuration["identity"])
	require.Equal(t, []string{"c1"}, out.ServerClaims.Collectives)
	require.EqualValues(t, 1900000000, out.ServerClaims.ExpiresAt.Unix())

	got, err := os.ReadFile(in)
	require.NoError(t, err)
	// the Choria Provisioner's input keys, with null for features that are off
	require.JSONEq(t, `{"identity":"n1.example","csr":null,"ed25519_pubkey":null,"inventory":"{\"version\":\"1\"}","jwt":null}`, string(got))
}

func TestHelperFailuresAreDistinct(t *testing.T) {
	cases := []struct {
		body string
		want error
		text string
	}{
		{"echo 'no CA' >&2; exit 3", ErrHelperExit, "no CA"},
		{"exit 0", ErrHelperEmpty, ""},
		{"echo '   '", ErrHelperEmpty, ""},
		{"echo 'garbage'", ErrHelperDecode, "not JSON at byte 1"},
		{`echo '{"defer":true} {"x":1}'`, ErrHelperDecode, "trailing"},
		{`echo '["a"]'`, ErrHelperDecode, ""},
		{"head -c 5000000 /dev/zero | tr '\\0' 'a'", ErrHelperTooLarge, ""},
	}
	for _, c := range cases {
		_, err := runHelper(t, c.body, 5*time.Second)
		require.ErrorIs(t, err, c.want, c.body)
		require.Contains(t, err.Error(), c.text, c.body)
		require.NotContains(t, err.Error(), "garbage", "no byte of stdout in the error")
	}
}

func TestHelperOutputThatNeverEndsIsCutOff(t *testing.T) {
	_, err := runHelper(t, "yes", 2*time.Second)
	require.Error(t, err)
	require.True(t, errors.Is(err, ErrHelperTimeout) || errors.Is(err, ErrHelperTooLarge), "%v", err)
}

func TestHelperReplyAfterTheTimeoutIsNotUsed(t *testing.T) {
	_, err := runHelper(t, `sleep 2; echo '{"configuration":{"a":"b"}}'`, 300*time.Millisecond)
	require.ErrorIs(t, err, ErrHelperTimeout)
}

var helperErrorForms = regexp.MustCompile(`^(helper printed nothing|helper output is not a JSON object: (not JSON at byte \d+|` +
	`a value of the wrong kind at byte \d+ \([\w.*\[\]]+ expected\)|the JSON ends early|not the helper contract's object, near byte \d+|` +
	`trailing data after the JSON object at byte \d+) \(\d+ bytes of output\))$`)

func FuzzDecodeHelperOutput(f *testing.F) {
	f.Add([]byte(`{"defer":false,"msg":"ok","configuration":{"identity":"n1"},"server_claims":{"exp":1900000000}}`))
	f.Add([]byte(`{"defer":true,"msg":"later"}`))
	f.Add([]byte(`{"shutdown":true}`))
	f.Add([]byte(`garbage`))
	f.Add([]byte(`{"configuration":{"a":1}}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := DecodeHelperOutput(data)
		if err != nil {
			require.True(t, errors.Is(err, ErrHelperDecode) || errors.Is(err, ErrHelperEmpty), "%v", err)
			// the error is one of a few fixed forms, quoting nothing of the output
			require.Regexp(t, helperErrorForms, err.Error())
			return
		}
		require.NotNil(t, out)
	})
}

// workers bounds the helper runs of one process, as it bounded the Choria Provisioner's hosts at
// work: eight hosts' helpers with workers 2 run two at a time.
func TestHelperRunsAreBoundedByWorkers(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	dir := t.TempDir()
	log := filepath.Join(dir, "runs.log")
	cmd := script(t, fmt.Sprintf(`cat >/dev/null
echo "start $(date +%%s%%N)" >> %[1]s
sleep 0.3
echo "end $(date +%%s%%N)" >> %[1]s
echo '{"defer":true,"msg":"later"}'`, log))
	a := New(nil, Settings{Site: "lab", HelperCommand: cmd, HelperTimeout: 10 * time.Second}, m, zap.NewNop(), WithHelperSlots(NewHelperSlots(2)))

	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := a.RunHelper(context.Background(), HelperRequest{Input: HelperInput{Identity: fmt.Sprintf("n%d.example", i)}})
			require.NoError(t, err)
		}(i)
	}
	wg.Wait()

	b, err := os.ReadFile(log)
	require.NoError(t, err)
	type mark struct {
		at    int64
		delta int
	}
	var marks []mark
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		kind, ts, _ := strings.Cut(l, " ")
		n, err := strconv.ParseInt(ts, 10, 64)
		require.NoError(t, err)
		d := 1
		if kind == "end" {
			d = -1
		}
		marks = append(marks, mark{n, d})
	}
	require.Len(t, marks, 16)
	sort.Slice(marks, func(i, j int) bool {
		return marks[i].at < marks[j].at || (marks[i].at == marks[j].at && marks[i].delta < marks[j].delta)
	})
	running, most := 0, 0
	for _, mk := range marks {
		running += mk.delta
		most = max(most, running)
	}
	require.Equal(t, 2, most, "helpers at once")
}
