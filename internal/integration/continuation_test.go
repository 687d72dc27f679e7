package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// A host whose helper defers it ten times continues as new (history stays bounded): on real
// Temporal the continuation is running again in visibility (ProvisionOutcome=running, not the
// "deferred" its run ended with) while its helper call is under way, and it keeps the source of
// the sighting that started the chain (an operator's here), then provisions the host.
func TestIntegrationContinuationIsRunningWithItsSource(t *testing.T) {
	t.Parallel() // one host: mostly waiting
	var dir string
	e := newEnv(t, envOptions{servers: 1, helper: func(s *devstack.Stack) string {
		dir = s.Opts.Dir
		script := filepath.Join(dir, "defer-ten-helper.sh")
		body := fmt.Sprintf(`#!/bin/sh
# defer ten times, then hold the call until the test releases it, then the real helper
input=$(cat)
n=$(cat %[1]s/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/count
if [ $n -le 10 ]; then echo '{"defer":true,"msg":"not yet"}'; exit 0; fi
touch %[1]s/held
while [ ! -e %[1]s/release ]; do sleep 0.2; done
printf '%%s' "$input" | %[2]s
`, dir, s.HelperCommand)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	e.cfg.DeferDelayDuration = 300 * time.Millisecond
	// a worker without discovery: the test starts the host's run as the operator CLI does
	e.replica("replica-a", service.Options{Worker: true})
	m := e.stack.Fleet.Members[0]
	in := workflows.ProvisionInput{Identity: m.Identity, Source: workflows.SourceOperator}
	starter := hostruns.Starter{TaskQueue: e.cfg.Temporal.TaskQueue, Site: e.cfg.Site}
	first, err := e.client.ExecuteWorkflow(context.Background(), starter.Options(in), workflows.WorkflowName, in)
	require.NoError(t, err)

	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "held")); return err == nil },
		3*time.Minute, 200*time.Millisecond, "the helper was not called an eleventh time")
	d := e.waitOutcome(m.Identity, workflows.OutcomeRunning)
	require.NotEqual(t, first.GetRunID(), d.RunID, "the run held in the helper is the continuation")
	require.Equal(t, workflows.SourceOperator, d.State.Source, "the continuation keeps its sighting's source")
	require.Equal(t, 10, d.State.Defers)
	desc, err := e.client.DescribeWorkflowExecution(context.Background(), first.GetID(), first.GetRunID())
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, desc.WorkflowExecutionInfo.Status)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "release"), nil, 0o600))
	e.waitProvisioned(90*time.Second, m)
	e.waitOutcome(m.Identity, workflows.OutcomeProvisioned)
}
