package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/workflows"
)

// The helper decides to shut a host down while the broker is away: the shutdown request never
// leaves, which is no sign that the server exited. The host ends failed, with the reason, not
// shut down ("the server did not confirm" is kept for silence after a request that went out).
func TestIntegrationShutdownOverDeadBrokerFails(t *testing.T) {
	e := newEnv(t, envOptions{servers: 1, extraConfig: "rpc_timeout: 2s\n", helper: func(s *devstack.Stack) string {
		script := filepath.Join(s.Opts.Dir, "shutdown-helper.sh")
		body := fmt.Sprintf("#!/bin/sh\ncat >/dev/null\nwhile [ ! -f %s/decide ]; do sleep 0.1; done\necho '{\"shutdown\":true,\"msg\":\"decommissioned\"}'\n", s.Opts.Dir)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	id := e.stack.Fleet.Identity(0)
	e.provisioner("replica-a")
	e.waitInFlight(1)

	restarted := make(chan error, 1)
	go func() { restarted <- e.stack.RestartBroker(15 * time.Second) }()
	time.Sleep(time.Second) // the broker is gone: the helper's answer now meets a dead connection
	e.setFlag("decide", true)

	d := e.waitOutcome(id, workflows.OutcomeFailed)
	require.Contains(t, d.Reason, "step shutdown")
	require.Contains(t, d.Reason, "broker connection is down")
	require.Contains(t, d.Reason, activities.ErrTypeRPC)
	require.NotContains(t, d.Reason, activities.ErrTypeNoReply)
	require.NoError(t, <-restarted)
}
