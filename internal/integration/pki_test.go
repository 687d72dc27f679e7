package integration

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/workflows"
)

var pkiFlow = []string{activities.FetchJWTName, activities.GencsrName, activities.InventoryName, activities.RunHelperName,
	activities.ConfigureName, activities.RestartName}

func readPEMCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block, file)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

// verifyCertificate checks a pki-provisioned server: a certificate for its identity signed by the
// site CA, the CA beside it, and the private key that matches the certificate.
func (e *env) verifyCertificate(m *devstack.FleetMember) {
	e.t.Helper()
	ssl := filepath.Join(m.Dir, "ssl")
	ca := readPEMCert(e.t, e.stack.Creds.PKI.CACert)
	cert := readPEMCert(e.t, filepath.Join(ssl, "certificate.pem"))
	require.Equal(e.t, m.Identity, cert.Subject.CommonName)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(e.t, err, "%s: certificate does not verify against the site CA", m.Identity)
	gotCA, err := os.ReadFile(filepath.Join(ssl, "ca.pem"))
	require.NoError(e.t, err)
	wantCA, err := os.ReadFile(e.stack.Creds.PKI.CACert)
	require.NoError(e.t, err)
	require.Equal(e.t, wantCA, gotCA)

	keyPEM, err := os.ReadFile(filepath.Join(ssl, "private.pem"))
	require.NoError(e.t, err)
	block, _ := pem.Decode(keyPEM)
	require.NotNil(e.t, block)
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	require.NoError(e.t, err)
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(e.t, err)
	certPub, err := x509.MarshalPKIXPublicKey(cert.PublicKey)
	require.NoError(e.t, err)
	require.True(e.t, bytes.Equal(pub, certPub), "%s: private.pem does not match certificate.pem", m.Identity)
}

// pki mode: each server's CSR is signed by the helper's CA; the server ends with certificate.pem
// and ca.pem and connects with them as a normal server.
func TestIntegrationPKIMode(t *testing.T) {
	e := newEnv(t, envOptions{mode: devstack.ModePKI, servers: 3})
	start := time.Now()
	e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	t.Logf("pki: 3 servers provisioned and reconnected with their certificates in %v", time.Since(start))
	for _, m := range e.stack.Fleet.Members {
		e.verifyCertificate(m)
		e.runs(m.Identity, 1)
		require.Equal(t, pkiFlow, scheduled(e.history(m.Identity)), m.Identity)
	}
	e.writeReplayHistory("provision-pki", e.stack.Fleet.Members[0].Identity)
}

// pki mode with the key made by the helper: it travels encrypted with the ECDH secret, and the
// server decrypts and stores it (and drops its own CSR).
func TestIntegrationPKIHelperSuppliedKey(t *testing.T) {
	e := newEnv(t, envOptions{mode: devstack.ModePKI, servers: 2, helper: func(s *devstack.Stack) string {
		return s.HelperCommand + " --supply-key"
	}})
	e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	for _, m := range e.stack.Fleet.Members {
		e.verifyCertificate(m)
		_, err := os.Stat(filepath.Join(m.Dir, "ssl", "csr.pem"))
		require.True(t, os.IsNotExist(err), "%s: the agent removes its CSR when it receives a key", m.Identity)
		log, err := os.ReadFile(m.LogFile)
		require.NoError(t, err)
		require.Contains(t, string(log), "Received a PRIVATE KEY over the network")
	}
}

// A CSR whose name is denied fails that host, not retried, with the reason; others go on.
func TestIntegrationPKIDeniedCSR(t *testing.T) {
	e := newEnv(t, envOptions{mode: devstack.ModePKI, servers: 2, extraConfig: "cert_deny_list:\n  - '/node-001\\.demo/'\n"})
	e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members[0])
	failed := e.waitFailed(1)[0]
	require.Equal(t, e.stack.Fleet.Identity(1), failed.Identity)
	require.Contains(t, failed.Reason, "step gencsr")
	require.Contains(t, failed.Reason, "denied certificate name")
	require.Contains(t, failed.Reason, activities.ErrTypeCSR)
	hist := e.history(failed.Identity)
	require.Equal(t, 1, strings.Count(strings.Join(scheduled(hist), ","), activities.GencsrName), "a denied CSR is not retried")
	require.False(t, devstack.Provisioned(e.stack.Fleet.Members[1]))
	e.writeReplayHistory("provision-pki-denied-csr", failed.Identity)
}

// jwt-only: no gen25519, no CSR; the helper makes the key, which travels encrypted with the ECDH
// secret from the jwt step, with the certificate and CA; action and OPA policies pass through.
func TestIntegrationJWTOnlyModeWithHelperKeyAndPolicies(t *testing.T) {
	t.Setenv("PROVISIONER_FEATURES__PKI", "false")
	e := newEnv(t, envOptions{mode: devstack.ModePKI, servers: 2, helper: func(s *devstack.Stack) string {
		return s.HelperCommand + " --supply-key --policies --ssldir-base " + s.Fleet.Dir
	}})
	require.False(t, e.cfg.Features.PKI)
	require.True(t, e.cfg.Features.JWT)
	e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	for _, m := range e.stack.Fleet.Members {
		e.verifyCertificate(m)
		require.Equal(t, []string{activities.FetchJWTName, activities.InventoryName, activities.RunHelperName,
			activities.ConfigureName, activities.RestartName}, scheduled(e.history(m.Identity)))
		policy, err := os.ReadFile(filepath.Join(m.Dir, "policies", "rpcutil.policy"))
		require.NoError(t, err)
		require.Equal(t, "policy default allow\n", string(policy))
		_, err = os.Stat(filepath.Join(m.Dir, "policies", "rego", "default.rego"))
		require.NoError(t, err)
	}
}

// The helper's shutdown decision shuts that server down (it exits, no restart) and ends its
// workflow as shutdown; the other server is provisioned.
func TestIntegrationHelperShutdown(t *testing.T) {
	t.Parallel()
	var doomed string
	e := newEnv(t, envOptions{servers: 2, helper: func(s *devstack.Stack) string {
		doomed = s.Fleet.Identity(0)
		script := filepath.Join(s.Opts.Dir, "helper.sh")
		body := "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *'\"identity\":\"" + doomed + "\"'*) echo '{\"shutdown\":true,\"msg\":\"decommissioned in the CMDB\"}'; exit 0;; esac\nprintf '%s' \"$input\" | " + s.HelperCommand + "\n"
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	svc := e.provisioner("replica-a")
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members[1])
	d := e.waitOutcome(doomed, workflows.OutcomeShutdown)
	require.Contains(t, d.State.HelperMessage, "decommissioned in the CMDB")
	require.Eventually(t, func() bool { return e.stack.Fleet.Members[0].Exited() }, 30*time.Second, 200*time.Millisecond, "the server process exits")
	require.False(t, devstack.Provisioned(e.stack.Fleet.Members[0]))
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.ShutdownRequests.WithLabelValues("dev")))
	e.writeReplayHistory("provision-shutdown", doomed)
}

// The helper decides to shut a host down while the broker is away: the shutdown request never
// leaves, which is no sign that the server exited. The host ends failed, with the reason, not
// shut down ("the server did not confirm" is kept for silence after a request that went out).
func TestIntegrationShutdownOverDeadBrokerFails(t *testing.T) {
	t.Parallel()
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
	// the broker is gone (its port refuses): the helper's answer now meets a dead connection
	brokerAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(e.stack.Broker.Port))
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", brokerAddr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 15*time.Second, 20*time.Millisecond, "the broker stopped")
	e.setFlag("decide", true)

	d := e.waitOutcome(id, workflows.OutcomeFailed)
	require.Contains(t, d.Reason, "step shutdown")
	require.Contains(t, d.Reason, "broker connection is down")
	require.Contains(t, d.Reason, activities.ErrTypeRPC)
	require.NotContains(t, d.Reason, activities.ErrTypeNoReply)
	require.NoError(t, <-restarted)
}
