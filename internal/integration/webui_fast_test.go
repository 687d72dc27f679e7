package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// What the Web UI shows of a host provisioned in fast mode (temporal.fast_mode): no activity
// rows, the steps as local-activity markers in the history, and the status query's timeline
// with every step, as in the default mode.
func TestIntegrationWebUIFastModeHost(t *testing.T) {
	codecPort, err := devstack.FreePort()
	require.NoError(t, err)
	codecURL := fmt.Sprintf("http://127.0.0.1:%d", codecPort)
	e := newEnv(t, envOptions{ownTemporalWithUI: true, servers: 1, uiCodecEndpoint: codecURL})
	e.cfg.Temporal.FastMode = true
	_, cd, err := service.DataConverter(e.cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, err = codec.Serve(ctx, fmt.Sprintf("127.0.0.1:%d", codecPort), cd, codec.ServerOptions{
		Token: codec.NewKey(), Origins: []string{e.stack.UIURL()}, DevTrustOrigins: true})
	require.NoError(t, err)

	e.provisioner("replica-a")
	m := e.stack.Fleet.Members[0]
	e.waitProvisioned(60*time.Second, m)
	host := e.runs(m.Identity, 1)[0].Executions[0].Execution
	e.waitOutcome(m.Identity, workflows.OutcomeProvisioned)

	shots := t.TempDir()
	if os.Getenv("WRITE_SCREENSHOTS") != "" {
		shots = filepath.Join("..", "..", "docs", "images")
	}
	page := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s", e.stack.UIURL(), url.PathEscape(host.WorkflowId), host.RunId)
	b := newBrowser(t)
	b.open(page+"/history", `//h2[contains(., "Input")]`)
	text := b.waitText("RunHelper")
	// a tall window: the event history with the steps is below the fold of the usual one
	_, err = chromedp.Run(b.ctx, chromedp.EmulateViewport(1400, 1900))
	require.NoError(t, err)
	time.Sleep(time.Second) // the UI lays the history out again
	b.shot(filepath.Join(shots, "ui-fast-host.png"))
	require.Contains(t, text, "Local Activity")
	for _, step := range []string{"FetchJWT", "Gen25519", "Inventory", "SignServerJWT", "Configure", "Restart"} {
		require.Contains(t, text, step, "every step is in the history, as a local activity")
	}
	requireDecoded(t, b)

	b.open(page+"/query", uiRunQuery)
	b.click(uiRunQuery)
	text = b.waitText(`"timeline"`)
	for _, want := range []string{`"outcome": "provisioned"`, `"step": "jwt"`, `"step": "helper"`, `"step": "sign"`, `"step": "restart"`} {
		require.Contains(t, text, want)
	}
}
