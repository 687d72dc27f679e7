package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
)

// Hostile lifecycle events, published on the broker as any server in provisioning mode could:
// not JSON, the wrong type, and identities that are empty, 10 kB long, full of control characters
// or NATS wildcards. None becomes a workflow, the service keeps running, and a real server that
// arrives afterwards is provisioned.
func TestIntegrationHostileLifecycleEvents(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0})
	e.provisioner("replica-a")
	require.Eventually(t, func() bool { return strings.Contains(tail(t, e, "replica-a.log"), "listening for startup events") },
		20*time.Second, 100*time.Millisecond, "discovery did not subscribe to startup events")

	jwt, err := os.ReadFile(e.stack.Creds.ProvisioningJWT)
	require.NoError(t, err)
	nc, err := nats.Connect(e.stack.Broker.URL, nats.Token(string(jwt)), nats.Secure(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // as a server in provisioning mode connects
	require.NoError(t, err)
	defer nc.Close()

	event := func(typ, identity, component string) []byte {
		b, err := json.Marshal(map[string]any{"protocol": "io.choria.lifecycle.v1." + typ, "identity": identity, "component": component,
			"id": "2aYh6yTFZxkqg9nV4gOO7tM2Dn3", "timestamp": time.Now().Unix(), "version": "0.30.2"})
		require.NoError(t, err)
		return b
	}
	subject := "choria.lifecycle.event.startup.provision_mode_server"
	hostile := [][]byte{
		[]byte("this is not JSON"),
		{},
		event("shutdown", "hostile-shutdown.example", "provision_mode_server"),
		event("startup", "", "provision_mode_server"),
		event("startup", strings.Repeat("a", 10<<10), "provision_mode_server"),
		event("startup", "bad\x07\x1b[2Jname", "provision_mode_server"),
		event("startup", "wild.*", "provision_mode_server"),
		event("startup", ">", "provision_mode_server"),
		event("startup", "two words", "provision_mode_server"),
	}
	for _, data := range hostile {
		require.NoError(t, nc.Publish(subject, data))
	}
	require.NoError(t, nc.Flush())

	// a real server afterwards is provisioned: the service survived
	require.NoError(t, e.stack.Fleet.StartN(1))
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	e.runs(e.stack.Fleet.Members[0].Identity, 1)

	resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "TaskQueue = '" + e.cfg.Temporal.TaskQueue + "'"})
	require.NoError(t, err)
	require.Len(t, resp.Executions, 1, "no workflow may start for a hostile event")

	log := tail(t, e, "replica-a.log")
	require.Contains(t, log, "dropping lifecycle event")
	require.Contains(t, log, "invalid identity")
}

func tail(t *testing.T, e *env, name string) string {
	t.Helper()
	b, err := os.ReadFile(e.stack.Opts.Dir + "/" + name)
	require.NoError(t, err)
	return string(b)
}
