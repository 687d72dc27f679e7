package integration

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/workflows"
)

// pki mode against the simulator: the provisioner speaks protocol v1 to simulated hosts, which
// make a CSR for their identity, receive a certificate and the helper's key (decrypted with the
// ECDH secret of their jwt reply); one host of three fails its first two RPCs transiently and is
// provisioned all the same, by retries in its own workflow.
func TestIntegrationFleetSimPKI(t *testing.T) {
	e := newEnv(t, envOptions{mode: devstack.ModePKI, servers: 0, helper: func(s *devstack.Stack) string {
		return s.HelperCommand + " --supply-key"
	}})
	st := e.provisionFleetSim(3, "--prefix", "simpki-", "--flaky", "0.34", "--flaky-requests", "2", "--flaky-mode", "error")
	for id, h := range st.Hosts {
		require.Equal(t, "false", h.Provision, id)
		require.Equal(t, id, h.CertCN, "%s: certificate for its identity", id)
		require.True(t, h.KeyReceived, "%s: the helper's key decrypted", id)
		require.Equal(t, int32(1), h.Configures, id)
		e.runs(id, 1)
	}
	// the flaky host's reads (jwt, gencsr, inventory, scheduled together) took two attempts more
	// than one each between them: its two transient failures, whichever reads they hit
	d := e.waitOutcome("simpki-sim-00002.example", workflows.OutcomeProvisioned)
	require.NotEmpty(t, d.State.Timeline)
	retries := int32(0)
	for _, r := range d.State.Timeline {
		require.Positive(t, r.Attempts, "%+v", r)
		retries += r.Attempts - 1
	}
	require.Equal(t, int32(2), retries, "%+v", d.State.Timeline)
}
