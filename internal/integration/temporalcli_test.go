package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// temporalCLI runs the Temporal CLI built from tools/go.mod against the test's server.
func (e *env) temporalCLI(args ...string) string {
	e.t.Helper()
	return e.temporalCLIWith(nil, append(args, "--address", e.stack.TemporalAddress)...)
}

// temporalCLIWith runs the Temporal CLI with args as given (address included) and extra environment.
func (e *env) temporalCLIWith(env []string, args ...string) string {
	e.t.Helper()
	bin, err := devstack.FindTemporalBinary()
	require.NoError(e.t, err)
	out, code := runBinary(e.t, bin, env, args...)
	require.Zero(e.t, code, "temporal %v: %s", args, out)
	return out
}

// The `temporal` CLI commands docs/operations.md gives for operators do what it says: list failed
// hosts by search attribute, describe one, read its status through the codec server, and
// batch-reset every failed host once the helper works again.
func TestIntegrationTemporalCLIForOperators(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 2, helper: switchableHelper(t)})
	e.setFlag("helper-broken", true)
	e.provisioner("replica-a")
	e.waitFailed(2)
	failedQuery := fmt.Sprintf(`ProvisionOutcome="failed" AND TaskQueue="%s"`, e.cfg.Temporal.TaskQueue)

	out := e.temporalCLI("workflow", "list", "--query", failedQuery, "--output", "json")
	for _, m := range e.stack.Fleet.Members {
		require.Contains(t, out, workflows.WorkflowID(m.Identity))
	}

	id := workflows.WorkflowID(e.stack.Fleet.Identity(0))
	out = e.temporalCLI("workflow", "describe", "--workflow-id", id)
	require.Contains(t, strings.ToLower(out), "failed")
	_, cd, err := service.DataConverter(e.cfg)
	require.NoError(t, err)
	token := "operator-token-0123456789"
	srv := httptest.NewServer(codec.Handler(cd, codec.ServerOptions{Token: token}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	// failure messages are encrypted like payloads: the history names each helper failure
	// through the codec server only
	out = e.temporalCLI("workflow", "show", "--workflow-id", id)
	require.NotContains(t, out, "CA is down")
	out = e.temporalCLI("workflow", "show", "--workflow-id", id, "--codec-endpoint", "http://"+addr, "--codec-auth", "Bearer "+token, "--output", "json")
	require.Contains(t, strings.Join(encodedAttributes(t, out), "\n"), "CA is down", "the history names each helper failure")

	// status query: encrypted without the codec server, readable with it and its token
	out = e.temporalCLI("workflow", "query", "--workflow-id", id, "--type", "status")
	require.Contains(t, out, "encryption-key-id")
	require.NotContains(t, out, "helper_message")
	out = e.temporalCLI("workflow", "query", "--workflow-id", id, "--type", "status",
		"--codec-endpoint", "http://"+addr, "--codec-auth", "Bearer "+token, "--output", "json")
	require.Contains(t, out, `CA is down`)
	var parsed struct {
		QueryResult []workflows.Status `json:"queryResult"`
	}
	if json.Unmarshal([]byte(out), &parsed) == nil && len(parsed.QueryResult) > 0 {
		require.Equal(t, workflows.OutcomeFailed, parsed.QueryResult[0].Outcome)
	}

	// batch reset of every failed host to its first workflow task: each runs again from the start
	e.setFlag("helper-broken", false)
	out = e.temporalCLI("workflow", "reset", "--query", failedQuery, "--type", "FirstWorkflowTask", "--reason", "helper fixed", "--yes")
	require.True(t, strings.Contains(strings.ToLower(out), "batch") || strings.Contains(out, "job"), out)
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
	}
}

// encodedAttributes are the failures' texts in `temporal workflow show --output json` through the
// codec server: each failure's encodedAttributes decoded, a JSON payload in base64.
func encodedAttributes(t *testing.T, out string) []string {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	var texts []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ea, ok := x["encodedAttributes"].(map[string]any); ok {
				if data, ok := ea["data"].(string); ok {
					b, err := base64.StdEncoding.DecodeString(data)
					require.NoError(t, err)
					texts = append(texts, string(b))
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc)
	return texts
}
