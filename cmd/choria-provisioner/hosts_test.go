package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/workflows"
)

// What hosts and helpers wrote reaches the operator's terminal without its escape sequences.
func TestHostsOutputIsCleanOfEscapes(t *testing.T) {
	evil := "\x1b]0;owned\x07\x1b[2J\x1b[Hno reply\x1b[8m hidden\r\n$ " + strings.Repeat("x", 1<<20)
	d := &operator.Detail{
		Host: operator.Host{Identity: "n1\x1b[31m", WorkflowID: "provision:n1", Status: "Failed", Reason: evil, Started: time.Now()},
		State: &workflows.Status{HelperDecision: "configure", HelperMessage: evil, LastError: evil,
			Timeline: []workflows.StepRecord{{Step: "configure", Started: time.Now(), Error: evil}}},
		Pending: []operator.PendingStep{{Activity: "Configure", Attempt: 2, LastFailure: evil}},
	}
	var out bytes.Buffer
	h := &hostsCommand{out: &out}
	require.NoError(t, h.printDetail(d))
	require.NoError(t, h.printHosts([]operator.Host{d.Host}))
	for _, line := range strings.Split(out.String(), "\n") {
		require.Less(t, len(line), 2048, "bounded")
		for _, r := range line {
			require.False(t, unicode.IsControl(r), "%q", line)
		}
	}
	require.Contains(t, out.String(), "no reply hidden")
}
