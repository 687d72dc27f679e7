package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
)

// startFleetSim runs `choria-provisioner fleet-sim` in its own process against the test's broker.
func (e *env) startFleetSim(count int, args ...string) func() fleetsim.Status {
	e.t.Helper()
	return e.startFleetSimAs("fleetsim", count, args...)
}

// startFleetSimAs is startFleetSim for one of several simulators of a test, each with its own
// status and output files named after it.
func (e *env) startFleetSimAs(name string, count int, args ...string) func() fleetsim.Status {
	e.t.Helper()
	status := filepath.Join(e.stack.Opts.Dir, name+".json")
	p := e.spawn(name, devBinary, append([]string{"fleet-sim", "--broker", e.stack.Broker.URL, "--provisioning-jwt", e.stack.Creds.ProvisioningJWT,
		"--token", e.stack.Creds.Token, "--count", fmt.Sprint(count), "--status", status}, args...))
	go func() {
		<-p.exited
		if !p.ended.Load() {
			b, _ := os.ReadFile(filepath.Join(e.stack.Opts.Dir, name+".out"))
			why := fmt.Sprintf("fleet-sim %s exited: %v; its output: %s", name, p.err, b)
			e.simErr.CompareAndSwap(nil, &why)
		}
	}()
	return func() fleetsim.Status {
		var st fleetsim.Status
		b, err := os.ReadFile(status)
		if err == nil {
			_ = json.Unmarshal(b, &st)
		}
		return st
	}
}

// provisionFleetSim starts count simulated hosts and one provisioner, and waits (a minute) until
// every host has been restarted out of provisioning mode.
func (e *env) provisionFleetSim(count int, args ...string) fleetsim.Status {
	e.t.Helper()
	status := e.startFleetSim(count, args...)
	start := time.Now()
	e.provisioner("replica-a")
	st := waitSimRestarted(e.t, status, count, 60*time.Second)
	e.t.Logf("%d simulated hosts %v provisioned in %v", count, args, time.Since(start).Round(10*time.Millisecond))
	return st
}

// The simulator's hosts are found and provisioned by the real provisioner through the real
// broker, each by one workflow, and leave provisioning mode after restart.
func TestIntegrationFleetSimProvisions(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0})
	st := e.provisionFleetSim(20, "--prefix", "simprov-")
	for id, h := range st.Hosts {
		require.Equal(t, "false", h.Provision, id)
		require.True(t, h.ServerJWT, id)
		e.runs(id, 1)
	}
}
