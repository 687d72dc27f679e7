package integration

import (
	"context"
	"fmt"
	"net"
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

// UI strings (Temporal UI 2.42) the test reads: the codec status icon's test IDs and the banner.
const (
	uiCodecOK     = `data-testid="data-encoder-status-success"`
	uiCodecError  = `data-testid="data-encoder-status-error"`
	uiCodecBanner = "Codec Server could not connect"
	uiRunQuery    = `//button[contains(., "Run Query")]`
)

// The Temporal Web UI, in real headless Chromium and decoding through the codec server as the dev
// stack wires it (the UI's origin trusted without a token): host workflows filtered by the custom
// search attributes, a host page with its decoded input and no codec error, the Queries tab
// answering `status` with the step timeline, and the `--failing` demo's refused host with its
// reason readable, fixed and retried as the README walks through it.
func TestIntegrationWebUIShowsHostsAndFailures(t *testing.T) {
	e := newUIEnv(t, envOptions{servers: 3, failing: 1})

	e.provisioner("replica-a")
	broken := e.stack.Refused[0]
	require.Equal(t, e.stack.Fleet.Identity(0), broken)
	good := e.stack.Fleet.Members[1:]
	e.waitProvisioned(60*time.Second, good...)
	failed := e.waitFailed(1)[0]
	require.Equal(t, broken, failed.Identity)
	e.runs(good[0].Identity, 1)
	e.runs(good[1].Identity, 1)

	shots := t.TempDir()
	if os.Getenv("WRITE_SCREENSHOTS") != "" {
		shots = filepath.Join("..", "..", "docs", "images")
		require.NoError(t, os.MkdirAll(shots, 0o755))
	}
	ui := e.stack.UIURL() + "/namespaces/default/workflows"
	list := func(query string) string { return ui + "?query=" + url.QueryEscape(query) }
	b := newBrowser(t)

	b.open(list(`ProvisionOutcome="failed"`), fmt.Sprintf(`//a[contains(., %q)]`, workflows.WorkflowID(broken)))
	b.shot(filepath.Join(shots, "ui-failed-hosts.png"))
	page := b.text()
	require.Contains(t, page, "Failed")
	for _, m := range good {
		require.NotContains(t, page, workflows.WorkflowID(m.Identity), "the failed filter must hide provisioned hosts")
	}

	b.open(list(`ProvisionOutcome="provisioned" AND ProvisionSite="dev"`), fmt.Sprintf(`//a[contains(., %q)]`, workflows.WorkflowID(good[0].Identity)))
	b.shot(filepath.Join(shots, "ui-provisioned-hosts.png"))
	page = b.text()
	for _, m := range good {
		require.Contains(t, page, workflows.WorkflowID(m.Identity))
	}
	require.NotContains(t, page, workflows.WorkflowID(broken))

	// a provisioned host: Input decoded by the codec server, no codec error
	host := e.runs(good[0].Identity, 1)[0].Executions[0].Execution
	hostPage := fmt.Sprintf("%s/%s/%s", ui, url.PathEscape(host.WorkflowId), host.RunId)
	b.open(hostPage+"/history", `//h2[contains(., "Input")]`)
	b.waitText(fmt.Sprintf(`"identity": %q`, good[0].Identity))
	b.waitFor(`[data-testid="data-encoder-status-success"]`)
	b.shot(filepath.Join(shots, "ui-host-decoded.png"))
	requireDecoded(t, b)

	// its Queries tab answers status with the step timeline, decoded
	b.open(hostPage+"/query", uiRunQuery)
	b.click(uiRunQuery)
	page = b.waitText(`"timeline"`)
	b.shot(filepath.Join(shots, "ui-host-query.png"))
	for _, want := range []string{`"outcome": "provisioned"`, `"helper_decision": "configure"`, `"step": "jwt"`, `"step": "helper"`, `"step": "configure"`, `"step": "restart"`} {
		require.Contains(t, page, want)
	}
	requireDecoded(t, b)

	// the refused host: its reason readable on its page, its input decoded
	failedPage := fmt.Sprintf("%s/%s/%s", ui, url.PathEscape(failed.WorkflowID), failed.RunID)
	b.open(failedPage+"/history", `//h2[contains(., "Input")]`)
	b.waitText(fmt.Sprintf(`"identity": %q`, broken))
	// the failure's message is encrypted like the payloads: the UI decodes it through the codec
	// ("step helper" is the failure's own: the retry timers' summaries quote the helper too)
	page = b.waitText("step helper")
	b.shot(filepath.Join(shots, "ui-failed-host.png"))
	require.Contains(t, page, "step helper", "the failed step must be named")
	require.Contains(t, page, "the demo CA has not approved this host", "the failure reason must be on the workflow page")
	require.Contains(t, page, "touch "+e.stack.FixFile, "the reason names the fix")
	requireDecoded(t, b)

	b.open(failedPage+"/query", uiRunQuery)
	b.click(uiRunQuery)
	page = b.waitText(`"timeline"`)
	require.Contains(t, page, `"outcome": "failed"`)
	require.Contains(t, page, "the demo CA has not approved this host")

	// the README's walkthrough: fix the cause, retry the failed hosts, all provisioned
	require.NoError(t, os.WriteFile(e.stack.FixFile, nil, 0o600))
	out, code := e.cli(nil, "retry", "--failed")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "retried 1 host")
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members...)
	e.waitOutcome(broken, workflows.OutcomeProvisioned)
}

// requireDecoded fails when the page carries the UI's codec error or an undecoded payload.
func requireDecoded(t *testing.T, b *browser) {
	t.Helper()
	dom := b.html()
	require.Contains(t, dom, uiCodecOK, "the UI must report the codec server converted the payloads")
	require.NotContains(t, dom, uiCodecError)
	require.NotContains(t, dom, uiCodecBanner)
	require.NotContains(t, b.text(), codec.EncodingName, "a payload is still encrypted")
}

// What the Web UI shows of a host provisioned in fast mode (temporal.fast_mode): no activity
// rows, the steps as local-activity markers in the history, and the status query's timeline
// with every step, as in the default mode.
func TestIntegrationWebUIFastModeHost(t *testing.T) {
	e := newUIEnv(t, envOptions{servers: 1})
	e.cfg.Temporal.FastMode = true

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
	_, err := chromedp.Run(b.ctx, chromedp.EmulateViewport(1400, 1900))
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

// newUIEnv is an environment with its own Temporal and Web UI, and a codec server for the UI as
// the dev stack wires it (the UI's origin trusted without a token).
func newUIEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	// bound now and held: a port only probed here could be taken by the stack's own processes
	// before the codec server binds it
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	o.ownTemporalWithUI, o.uiCodecEndpoint = true, "http://"+l.Addr().String()
	e := newEnv(t, o)
	_, cd, err := service.DataConverter(e.cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, err = codec.ServeListener(ctx, l, cd, codec.ServerOptions{
		Token: codec.NewKey(), Origins: []string{e.stack.UIURL()}, DevTrustOrigins: true})
	require.NoError(t, err)
	return e
}

// The Web UI tells each host's story: a host's page shows its run's summary (identity, site, how
// it was found), what the run is doing now (the workflow's current details: a deferred host
// until when and why), and the steps' and timers' summaries. All of it
// is user metadata, decoded through the codec server; a failed host's failure names the step
// and why. The list shows each host's step, outcome and site in columns of its own: Temporal's
// list API returns no user metadata (no UI can show a run's summary in the list), but its
// search attributes, which the list's column picker adds.
func TestIntegrationWebUIShowsWhatEachHostIsDoing(t *testing.T) {
	var deferred string
	e := newUIEnv(t, envOptions{servers: 3, failing: 1, helper: func(s *devstack.Stack) string {
		deferred = s.Fleet.Identity(2)
		return cmdbDeferHelper(t, s, deferred)
	}})
	e.cfg.DeferDelayDuration = 10 * time.Minute // the deferred host's run stays open
	e.provisioner("replica-a")
	good, broken := e.stack.Fleet.Members[1], e.stack.Refused[0]
	e.waitProvisioned(60*time.Second, good)
	failed := e.waitFailed(1)[0]
	e.waitOutcome(deferred, workflows.OutcomeDeferred)

	shots := t.TempDir()
	if os.Getenv("WRITE_SCREENSHOTS") != "" {
		shots = filepath.Join("..", "..", "docs", "images")
	}
	ui := e.stack.UIURL() + "/namespaces/default/workflows"
	b := newBrowser(t)
	b.open(ui+"?query="+url.QueryEscape(`ProvisionSite="dev"`), fmt.Sprintf(`//a[contains(., %q)]`, workflows.WorkflowID(good.Identity)))
	list := b.text()
	for _, id := range []string{good.Identity, broken, deferred} {
		require.Contains(t, list, workflows.WorkflowID(id))
	}
	// what each host is doing, in its row: the search-attribute columns an operator adds once
	// with the list's column picker (saved in the browser's localStorage, as here)
	b.store("namespace-workflow-table-columns", hostColumns)
	b.open(ui+"?query="+url.QueryEscape(`ProvisionSite="dev"`), fmt.Sprintf(`//a[contains(., %q)]`, workflows.WorkflowID(good.Identity)))
	row := func(id string) string {
		return b.textOf(fmt.Sprintf(`//tr[.//a[contains(., %q)]]`, workflows.WorkflowID(id)))
	}
	require.Regexp(t, `(?s)provisioned.*dev`, row(good.Identity), "a provisioned host's row")
	require.Regexp(t, `(?s)helper.*failed.*dev`, row(broken), "a failed host's row: the step it failed at")
	require.Regexp(t, `(?s)deferred.*dev`, row(deferred), "a deferred host's row")
	b.shot(filepath.Join(shots, "ui-host-list.png"))

	d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(deferred), "")
	require.NoError(t, err)
	run := d.GetWorkflowExecutionInfo().GetExecution()
	b.open(fmt.Sprintf("%s/%s/%s/history", ui, url.PathEscape(run.GetWorkflowId()), run.GetRunId()), `//h2[contains(., "Input")]`)
	text := b.waitText("deferred by the helper until")
	b.shot(filepath.Join(shots, "ui-deferred-host.png"))
	require.Contains(t, text, deferred+" · site dev · found by", "the run's summary")
	require.Contains(t, text, "CMDB has no record", "why it waits")
	require.Regexp(t, `until \d\d:\d\d:\d\d UTC`, text, "until when")
	requireDecoded(t, b)

	b.open(fmt.Sprintf("%s/%s/%s/history", ui, url.PathEscape(failed.WorkflowID), failed.RunID), `//h2[contains(., "Input")]`)
	text = b.waitText("step helper") // the failure: at which step
	b.shot(filepath.Join(shots, "ui-failed-host-details.png"))
	require.Contains(t, text, "the demo CA has not approved this host")
	require.Contains(t, text, "waiting for the site's helper to decide the configuration", "the steps carry their summaries")
	requireDecoded(t, b)
}

// hostColumns is the list's columns as the Web UI's column picker saves them for the default
// namespace: its own, then the host's search attributes.
const hostColumns = `{"default":[{"label":"Status","pinned":false},{"label":"Workflow ID","pinned":false},` +
	`{"label":"ProvisionStep","pinned":false},{"label":"ProvisionOutcome","pinned":false},` +
	`{"label":"ProvisionSite","pinned":false},{"label":"Start","pinned":false},{"label":"End","pinned":false}]}`
