package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// The production shape over mutual TLS (docs/deployment.md): the Temporal server on PostgreSQL
// with its frontend and the connections between its services requiring client certificates
// from a CA made for the test. Everything the provisioner does goes through the frontend over
// mTLS: `setup` registers the search attributes, two `run` processes provision a simulated fleet,
// `hosts list/show/retry` find and recover the hosts the helper failed. Clients without a
// certificate, with one from another CA, trusting another CA, or checking the wrong server name,
// are refused with an error that names the key at fault. One cluster for all of it.
func TestIntegrationPostgresMutualTLS(t *testing.T) {
	const hosts = 40
	began := time.Now()
	certs, err := devstack.CreateTemporalTLS(filepath.Join(t.TempDir(), "tls"))
	require.NoError(t, err)
	srv := startSQLTemporal(t, devstack.SQLTemporalOptions{Retention: 24 * time.Hour, TLS: certs, NoSearchAttributes: true})
	clusterReady := time.Since(began)
	// two hosts fail at the helper while helper-broken exists, for hosts retry
	failing := []string{"mtls-sim-00003.example", "mtls-sim-00017.example"}
	e := newEnv(t, envOptions{temporalAddress: srv.Address, temporalTLS: certs.Client(), helper: identityFailingHelper(t, failing)})
	ctx := context.Background()

	// every listener wants a client certificate from the CA: frontend gRPC and HTTP API, and
	// the history and matching services' gRPC (internode)
	for name, addr := range srv.Listeners {
		require.ErrorContains(t, tlsWithoutClientCertificate(t, addr, certs.CACert), "certificate required", "%s at %s", name, addr)
	}

	// time to connect: a new client's TLS handshake with its certificate and the first call
	var dials []time.Duration
	for range 5 {
		start := time.Now()
		c, err := service.DialTemporal(ctx, e.cfg, zap.NewNop())
		require.NoError(t, err)
		dials = append(dials, time.Since(start))
		c.Close()
	}
	sort.Slice(dials, func(i, j int) bool { return dials[i] < dials[j] })

	// setup, over mTLS, registers the search attributes the cluster started without
	start := time.Now()
	out, code := e.cliCmd("setup", "--config", e.stack.ConfigFile)
	setupTook := time.Since(start)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ready for the provisioner")
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	require.NoError(t, srv.WaitSearchAttributes(wctx, e.client))
	cancel()

	// refusals: each names what is wrong, and the operator command exits "unreachable" (3)
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"no TLS at all", []string{"PROVISIONER_TEMPORAL__TLS__CA_FILE=", "PROVISIONER_TEMPORAL__TLS__CERT_FILE=", "PROVISIONER_TEMPORAL__TLS__KEY_FILE=",
			"PROVISIONER_TEMPORAL__TLS__SERVER_NAME="}, []string{"the frontend speaks TLS, and temporal.tls is not set"}},
		{"no client certificate", []string{"PROVISIONER_TEMPORAL__TLS__CERT_FILE=", "PROVISIONER_TEMPORAL__TLS__KEY_FILE="},
			[]string{"requires a client certificate", "temporal.tls.cert_file", "certificate required"}},
		{"a client certificate from another CA", []string{"PROVISIONER_TEMPORAL__TLS__CERT_FILE=" + certs.OtherClientCert, "PROVISIONER_TEMPORAL__TLS__KEY_FILE=" + certs.OtherClientKey},
			[]string{"does not trust the CA that signed the client certificate in temporal.tls.cert_file " + certs.OtherClientCert, `issuer "CN=Untrusted Test CA"`}},
		{"the wrong server name", []string{"PROVISIONER_TEMPORAL__TLS__SERVER_NAME=wrong.example.net"},
			[]string{`does not carry the server name "wrong.example.net" (temporal.tls.server_name)`, "valid for " + devstack.TemporalFrontendName}},
		{"trusting another CA", []string{"PROVISIONER_TEMPORAL__TLS__CA_FILE=" + certs.OtherCACert},
			[]string{"not signed by a CA in temporal.tls.ca_file " + certs.OtherCACert}},
	} {
		start := time.Now()
		out, code := e.cli(c.env, "list")
		t.Logf("refused (%s) in %v: %s", c.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
		require.Equal(t, 3, code, "%s: %s", c.name, out)
		for _, w := range c.want {
			require.Contains(t, out, w, c.name)
		}
	}
	// a worker with the wrong server name does not start, and says why
	run := exec.Command(selfBinary, "run", "--config", e.stack.ConfigFile)
	run.Env = append(os.Environ(), "PROVISIONER_TEMPORAL__TLS__SERVER_NAME=wrong.example.net", "PROVISIONER_LOGFILE="+filepath.Join(e.stack.Opts.Dir, "refused.log"))
	runOut, err := runWithTimeout(run, 30*time.Second)
	require.Error(t, err, "run must fail: %s", runOut)
	require.Contains(t, runOut, `does not carry the server name "wrong.example.net"`)

	// two workers provision the fleet over mTLS
	for _, id := range failing {
		e.setFlag(helperBroken(id), true)
	}
	status := e.startFleetSim(hosts, "--prefix", "mtls-")
	provisionStart := time.Now()
	e.processProvisioner("mtls-a")
	e.processProvisioner("mtls-b")
	require.Eventually(t, func() bool {
		return simCount(status(), func(h fleetsim.HostState) bool { return h.Restarted }) == hosts-len(failing)
	}, 3*time.Minute, 500*time.Millisecond, "every host but the failing ones provisioned")
	firstPass := time.Since(provisionStart)
	for _, name := range []string{"mtls-a", "mtls-b"} {
		b, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, name+".log"))
		require.NoError(t, err)
		require.Contains(t, string(b), "worker polling", "%s connected over mTLS", name)
	}

	// hosts list, show and retry over mTLS
	require.Eventually(t, func() bool {
		out, code := e.cli(nil, "list", "--outcome", "failed")
		return code == 0 && strings.Contains(out, fmt.Sprintf("%d hosts", len(failing)))
	}, 90*time.Second, time.Second, "the failing hosts end failed")
	out, code = e.cli(nil, "list", "--outcome", "failed")
	require.Equal(t, 0, code, out)
	for _, id := range failing {
		require.Contains(t, out, id)
	}
	// a failed host is found again by discovery's next sweep, whose run fails at the helper too:
	// the host's latest run is that one's for a while, and shows the helper's reason once it has
	// run the helper
	require.Eventually(t, func() bool {
		out, code := e.cli(nil, "show", failing[0])
		return code == 0 && strings.Contains(out, "CMDB has no record") && strings.Contains(out, "Timeline:")
	}, time.Minute, time.Second, "hosts show gives the helper's reason")

	// the temporal CLI over mTLS reads the status query encrypted, and decrypted through the
	// codec server serving HTTPS with a certificate from the same CA
	tlsFlags := []string{"--address", srv.Address, "--tls-ca-path", certs.CACert, "--tls-cert-path", certs.ClientCert,
		"--tls-key-path", certs.ClientKey, "--tls-server-name", devstack.TemporalFrontendName}
	query := append([]string{"workflow", "query", "--workflow-id", workflows.WorkflowID(failing[0]), "--type", "status"}, tlsFlags...)
	cliOut := e.temporalCLIWith(nil, query...)
	require.Contains(t, cliOut, "encryption-key-id")
	require.NotContains(t, cliOut, "CMDB has no record")
	codecURL := e.startCodecServerHTTPS(certs)
	temporalBin, err := devstack.FindTemporalBinary()
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, code := runBinary(t, temporalBin, []string{"SSL_CERT_FILE=" + certs.CACert},
			append(query, "--codec-endpoint", codecURL, "--codec-auth", "Bearer "+codecToken)...)
		assert.Zero(c, code, out)
		assert.Contains(c, out, "CMDB has no record", "the codec server decrypts the helper's reason")
	}, time.Minute, time.Second)

	// retry each failed host; while a sweep's run of it is open, retry refuses it, and tries
	// again once that run has failed at the helper. The helper works for a host once retry has
	// started it (its first helper call may fail still: the step tries again).
	refused := 0
	for _, id := range failing {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, code := e.cli(nil, "retry", id)
			if code != 0 {
				refused++
				require.Contains(c, out, operator.ErrAlreadyRunning.Error(), "retry refuses a host only while a run of it is open")
			}
			assert.Zero(c, code, out)
			assert.Contains(c, out, "retrying "+id)
		}, 2*time.Minute, time.Second, "retry starts %s", id)
		e.setFlag(helperBroken(id), false)
	}
	st := waitSimRestarted(t, status, hosts, 2*time.Minute)
	provisioned := time.Since(provisionStart)
	for id, h := range st.Hosts {
		require.Equal(t, "false", h.Provision, id)
		require.True(t, h.ServerJWT, id)
		require.EqualValues(t, 1, h.Configures, "%s configured once", id)
	}
	require.Eventually(t, func() bool {
		out, code := e.cli(nil, "list", "--outcome", "provisioned")
		return code == 0 && strings.Contains(out, fmt.Sprintf("%d hosts", hosts))
	}, time.Minute, time.Second, "hosts list shows every host provisioned")

	t.Logf("MTLS Temporal on PostgreSQL with mutual TLS on the frontend and between its services: cluster with certificates ready in %v; "+
		"a client connects in %v (median of 5; fastest %v, slowest %v); setup %v; %d simulated hosts provisioned by two workers over mTLS, "+
		"%d in %v, all %d (%d failed by the helper, then retried; retry refused %d times while a sweep's run was open) in %v; test %v",
		clusterReady.Round(100*time.Millisecond), dials[2].Round(100*time.Microsecond), dials[0].Round(100*time.Microsecond), dials[4].Round(100*time.Microsecond),
		setupTook.Round(10*time.Millisecond), hosts, hosts-len(failing), firstPass.Round(100*time.Millisecond), hosts, len(failing), refused,
		provisioned.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
}

// identityFailingHelper is the example helper, except that it fails for each of the given
// identities while helper-broken-<identity> exists in the state directory.
func identityFailingHelper(t *testing.T, identities []string) func(s *devstack.Stack) string {
	return func(s *devstack.Stack) string {
		script := filepath.Join(s.Opts.Dir, "identity-failing-helper.sh")
		var b strings.Builder
		b.WriteString("#!/bin/sh\ninput=$(cat)\n")
		for _, id := range identities {
			fmt.Fprintf(&b, "if [ -f %s ] && printf '%%s' \"$input\" | grep -Fq '\"%s\"'; then echo \"CMDB has no record of this host\" >&2; exit 1; fi\n",
				filepath.Join(s.Opts.Dir, helperBroken(id)), id)
		}
		fmt.Fprintf(&b, "printf '%%s' \"$input\" | %s\n", s.HelperCommand)
		require.NoError(t, os.WriteFile(script, []byte(b.String()), 0o755))
		return script
	}
}

// helperBroken names the flag that makes identityFailingHelper fail for the identity.
func helperBroken(identity string) string { return "helper-broken-" + identity }

const codecToken = "mtls-codec-token-0123456789abcdef0123456789"

// startCodecServerHTTPS runs `choria-provisioner codec-server` serving HTTPS with the codec
// certificate and returns its URL.
func (e *env) startCodecServerHTTPS(certs *devstack.TemporalTLS) string {
	e.t.Helper()
	port, err := devstack.FreePort()
	require.NoError(e.t, err)
	cmd := exec.Command(selfBinary, "codec-server", "--config", e.stack.ConfigFile, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--tls-cert", certs.CodecCert, "--tls-key", certs.CodecKey)
	cmd.Env = append(os.Environ(), codec.ServerTokenEnv+"="+codecToken)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(e.t, cmd.Start())
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(e.t, func() bool { return strings.Contains(out.String(), "codec server on https://") }, 20*time.Second, 100*time.Millisecond,
		"codec server did not start: %s", &out)
	return fmt.Sprintf("https://127.0.0.1:%d", port) // the certificate names 127.0.0.1 too
}

// syncBuffer is a strings.Builder safe for a process's output and a test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tlsWithoutClientCertificate makes a TLS connection trusting caFile, without a client
// certificate, and reads: a server requiring client certificates answers with an alert.
func tlsWithoutClientCertificate(t *testing.T, addr, caFile string) error {
	pool, err := config.ReadCAFile(caFile)
	require.NoError(t, err)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// runWithTimeout runs cmd and returns its combined output; a command still running after
// timeout is killed.
func runWithTimeout(cmd *exec.Cmd, timeout time.Duration) (string, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("still running after %v", timeout)
	}
}
