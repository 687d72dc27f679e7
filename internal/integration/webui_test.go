package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/workflows"
)

// chromium renders url headless and returns the DOM after the page's scripts ran; with shot set
// it also saves a screenshot. Debian's chromium is installed by .ci/run.
func chromium(t *testing.T, page string, shot string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	require.NoError(t, err, "the Web UI test needs Debian's chromium: apt-get install chromium")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--disable-quic", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=15000",
		"--window-size=1400,1000"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if shot != "" {
		out, err := exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, page)...).CombinedOutput()
		require.NoError(t, err, string(out))
		require.FileExists(t, shot)
	}
	dom, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", page)...).Output()
	require.NoError(t, err)
	return string(dom)
}

// The Temporal Web UI, in real headless Chromium, shows the host workflows filtered by the custom
// search attributes, and the failed host's reason.
func TestIntegrationWebUIShowsHostsAndFailures(t *testing.T) {
	var broken string
	e := newEnv(t, envOptions{ownTemporalWithUI: true, servers: 3, helper: func(s *devstack.Stack) string {
		broken = s.Fleet.Identity(2)
		script := filepath.Join(s.Opts.Dir, "helper.sh")
		body := fmt.Sprintf(`#!/bin/sh
input=$(cat)
case "$input" in *'"identity":"%s"'*) echo "CA refused the CSR for this host" >&2; exit 1;; esac
printf '%%s' "$input" | %s
`, broken, s.HelperCommand)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	e.provisioner("replica-a")
	good := e.stack.Fleet.Members[:2]
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

	dom := chromium(t, list(`ProvisionOutcome="failed"`), filepath.Join(shots, "ui-failed-hosts.png"))
	require.Contains(t, dom, workflows.WorkflowID(broken))
	require.Contains(t, dom, "Failed")
	for _, m := range good {
		require.NotContains(t, dom, workflows.WorkflowID(m.Identity), "the failed filter must hide provisioned hosts")
	}

	dom = chromium(t, list(`ProvisionOutcome="provisioned" AND ProvisionSite="dev"`), filepath.Join(shots, "ui-provisioned-hosts.png"))
	for _, m := range good {
		require.Contains(t, dom, workflows.WorkflowID(m.Identity))
	}
	require.NotContains(t, dom, workflows.WorkflowID(broken))

	page := fmt.Sprintf("%s/%s/%s/history", ui, url.PathEscape(failed.WorkflowID), failed.RunID)
	dom = chromium(t, page, filepath.Join(shots, "ui-failed-host.png"))
	require.Contains(t, dom, "CA refused the CSR for this host", "the failure reason must be on the workflow page")
	require.True(t, strings.Contains(dom, "step helper"), "the failed step must be named")
}
