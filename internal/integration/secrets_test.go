package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// historyDump is every history of the test's task queue as Temporal stores it: the events as
// JSON and, separately, the raw bytes of every payload (protojson shows those base64-encoded, so
// they are searched as bytes), and the payloads themselves.
func (e *env) historyDump() (events []byte, payloads [][]byte, whole []*commonpb.Payload) {
	e.t.Helper()
	ctx := context.Background()
	resp, err := e.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("TaskQueue = '%s'", e.cfg.Temporal.TaskQueue)})
	require.NoError(e.t, err)
	require.NotEmpty(e.t, resp.Executions)
	var buf bytes.Buffer
	for _, ex := range resp.Executions {
		hist := &historypb.History{}
		it := e.client.GetWorkflowHistory(ctx, ex.Execution.WorkflowId, ex.Execution.RunId, false, 0)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(e.t, err)
			hist.Events = append(hist.Events, ev)
		}
		b, err := protojson.Marshal(hist)
		require.NoError(e.t, err)
		buf.Write(b)
		require.NoError(e.t, proxy.VisitPayloads(ctx, hist, proxy.VisitPayloadsOptions{
			Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
				for _, p := range ps {
					whole = append(whole, p)
					payloads = append(payloads, p.GetData())
					for _, m := range p.GetMetadata() {
						payloads = append(payloads, m)
					}
				}
				return ps, nil
			},
		}))
	}
	return buf.Bytes(), payloads, whole
}

// identityOutputs is what the identity record shows: every run's search attributes as
// visibility holds them, `hosts list --expiring` and the audit as a table and as JSON lines, each
// checked to hold what it should (the hosts' identities, issued in the last hour).
func (e *env) identityOutputs() map[string][]byte {
	e.t.Helper()
	resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("TaskQueue = '%s'", e.cfg.Temporal.TaskQueue)})
	require.NoError(e.t, err)
	var attrs bytes.Buffer
	for _, ex := range resp.Executions {
		b, err := protojson.Marshal(ex.GetSearchAttributes())
		require.NoError(e.t, err)
		attrs.Write(b)
		for _, p := range ex.GetSearchAttributes().GetIndexedFields() {
			attrs.Write(p.GetData()) // as bytes too: protojson shows them base64-encoded
		}
	}
	require.Contains(e.t, attrs.String(), workflows.ExpiresKey.GetName())
	out := map[string][]byte{"the search attributes": attrs.Bytes()}
	for what, args := range map[string][]string{
		"hosts list --expiring":      {"hosts", "--config", e.stack.ConfigFile, "list", "--expiring", "100y"},
		"hosts list --expiring JSON": {"hosts", "--config", e.stack.ConfigFile, "--json", "list", "--expiring", "100y"},
		"the audit":                  {"audit", "--config", e.stack.ConfigFile, "--since", "1h"},
		"the audit's JSON lines":     {"audit", "--config", e.stack.ConfigFile, "--since", "1h", "--json"},
	} {
		text, code := e.cliCmd(args...)
		require.Equal(e.t, 0, code, text)
		for _, m := range e.stack.Fleet.Members {
			require.Contains(e.t, text, m.Identity, what)
		}
		out[what] = []byte(text)
	}
	require.Contains(e.t, string(out["the audit's JSON lines"]), `"decision":"configure"`)
	return out
}

func (e *env) secrets(m []*devstack.FleetMember) map[string]string {
	e.t.Helper()
	c := e.stack.Creds
	s := map[string]string{"provisioning token": c.Token, "broker provisioning password": c.ProvisioningPassword}
	read := func(name, file string) {
		b, err := os.ReadFile(file)
		require.NoError(e.t, err, file)
		s[name] = string(bytes.TrimSpace(b))
	}
	if c.Mode == devstack.ModePKI {
		read("CA key", c.PKI.CAKey)
		read("provisioner key", c.PKI.ProvisionerKey)
		read("provisioning JWT signer key", c.PKI.SignerKey)
		for _, x := range m {
			read(x.Identity+" private key", filepath.Join(x.Dir, "ssl", "private.pem"))
		}
	} else {
		read("issuer seed", c.IssuerSeed)
		read("provisioner seed", c.ProvisionerSeed)
		for _, x := range m {
			read(x.Identity+" seed", filepath.Join(x.Dir, "server.seed"))
			read(x.Identity+" signed server JWT", filepath.Join(x.Dir, "server.jwt"))
		}
	}
	s["helper configuration key"] = "plugin.security."
	s["private key PEM header"] = "PRIVATE KEY-----"
	return s
}

// Provisioning in both security modes leaves none of the token, any private key or seed, a
// signed server JWT or a helper configuration value in plain text in history or in the
// provisioner's log; the codec server shows payloads to a caller with its token only.
func TestIntegrationNoSecretsInHistoryOrLogs(t *testing.T) {
	for _, mode := range []string{devstack.ModeIssuer, devstack.ModePKI} {
		t.Run(mode, func(t *testing.T) {
			opts := envOptions{mode: mode, servers: 2}
			if mode == devstack.ModePKI {
				// the helper makes the keys: they travel through history (encrypted) to configure
				opts.helper = func(s *devstack.Stack) string { return s.HelperCommand + " --supply-key" }
			}
			e := newEnv(t, opts)
			e.provisioner("replica-a")
			e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
			for _, m := range e.stack.Fleet.Members {
				e.runs(m.Identity, 1)
			}

			events, payloads, whole := e.historyDump()
			log, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "replica-a.log"))
			require.NoError(t, err)
			require.NotEmpty(t, log)
			identity := e.identityOutputs()
			for name, secret := range e.secrets(e.stack.Fleet.Members) {
				require.NotEmpty(t, secret, name)
				require.False(t, bytes.Contains(events, []byte(secret)), "%s is in plain text in history", name)
				for _, p := range payloads {
					require.False(t, bytes.Contains(p, []byte(secret)), "%s is in plain text in a history payload", name)
				}
				require.False(t, bytes.Contains(log, []byte(secret)), "%s is in the provisioner's log", name)
				for what, out := range identity {
					require.False(t, bytes.Contains(out, []byte(secret)), "%s is in %s", name, what)
				}
			}

			// an authorised codec-server caller does see what history holds, e.g. the helper's configuration
			_, cd, err := service.DataConverter(e.cfg)
			require.NoError(t, err)
			var decoded bytes.Buffer
			for _, p := range whole {
				out, err := cd.Decode([]*commonpb.Payload{p})
				require.NoError(t, err)
				decoded.Write(out[0].GetData())
			}
			require.Contains(t, decoded.String(), "plugin.security.", "the codec key reads the history back")
			if mode == devstack.ModePKI {
				// what a viewer of the codec server can see is what the codec key decodes: the
				// helper's keys are there sealed under the workers' own key, by fingerprint only
				require.Contains(t, decoded.String(), `"sealed_key"`)
				require.NotContains(t, decoded.String(), "PRIVATE KEY-----", "a viewer decodes no private key")
				for name, secret := range e.secrets(e.stack.Fleet.Members) {
					if strings.HasSuffix(name, "private key") {
						require.NotContains(t, decoded.String(), secret, "%s decoded by the codec key", name)
					}
				}
			}
		})
	}
}
