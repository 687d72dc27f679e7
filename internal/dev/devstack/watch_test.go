package devstack

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/stretchr/testify/require"
)

// takenPort is a loopback port another listener holds until the test ends.
func takenPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

func testStack(t *testing.T) *Stack {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "credentials"), 0o700))
	creds, err := LoadOrCreateCredentials(filepath.Join(dir, "credentials"), "nats://127.0.0.1:1")
	require.NoError(t, err)
	s := &Stack{Opts: StackOptions{Dir: dir}, Creds: creds, exits: make(chan ChildExit, 64)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { s.cancel(); s.brokerWG.Wait() })
	return s
}

// A broker whose port is taken fails at once with its last output (go-choria's logger would
// have exited the whole process), and the error says the port was lost.
func TestStartBrokerOnATakenPortFailsAtOnce(t *testing.T) {
	s := testStack(t)
	port := takenPort(t)
	began := time.Now()
	var wg sync.WaitGroup
	_, err := StartBroker(s.ctx, &wg, s.Opts.Dir, "127.0.0.1", port, s.Creds, "warn", filepath.Join(s.Opts.Dir, "broker.log"))
	require.ErrorIs(t, err, ErrPortInUse)
	require.ErrorContains(t, err, "address already in use")
	require.Less(t, time.Since(began), 15*time.Second, "reported at once, not after a timeout")
	log, rerr := os.ReadFile(filepath.Join(s.Opts.Dir, "broker.log"))
	require.NoError(t, rerr)
	require.Contains(t, string(log), "address already in use", "the broker's log file keeps its output")
	wg.Wait() // a failed broker is not the caller's to wait for
}

// A lost port race is retried on another port, and the servers' provisioning JWT names it.
func TestStackBrokerMovesOffATakenPort(t *testing.T) {
	s := testStack(t)
	port := takenPort(t)
	require.NoError(t, s.startBroker(port, true))
	require.NotEqual(t, port, s.Broker.Port)
	b, err := os.ReadFile(s.Creds.ProvisioningJWT)
	require.NoError(t, err)
	seed, err := os.ReadFile(s.Creds.IssuerSeed)
	require.NoError(t, err)
	raw, err := hex.DecodeString(string(seed))
	require.NoError(t, err)
	claims, err := tokens.ParseProvisioningToken(string(b), ed25519.NewKeyFromSeed(raw).Public())
	require.NoError(t, err, "signed again by the issuer")
	require.Equal(t, s.Broker.URL, claims.URLs)
	require.True(t, claims.ProtoV2)
	saved, err := os.ReadFile(filepath.Join(s.Opts.Dir, "credentials", "broker.port"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(s.Broker.Port), string(saved))
}

// A port fixed by a reused state directory is not moved: the error says why.
func TestStackBrokerKeepsAFixedPort(t *testing.T) {
	s := testStack(t)
	require.ErrorIs(t, s.startBroker(takenPort(t), false), ErrPortInUse)
	require.Nil(t, s.Broker)
}

// The stack reports a child that ends on its own, and not one it stopped.
func TestStackReportsAChildThatEnds(t *testing.T) {
	s := testStack(t)
	port, err := FreePort()
	require.NoError(t, err)
	require.NoError(t, s.startBroker(port, true))
	s.Broker.end(context.Background(), errors.New("simulated fatal error"))
	e := waitExit(t, s)
	require.Equal(t, "broker", e.Child)
	require.True(t, e.Essential)
	require.ErrorContains(t, e.Err, "simulated fatal error")

	// a broker the stack restarts is not reported
	require.NoError(t, s.RestartBroker(0))
	noExit(t, s)
}

func TestStackReportsAnEndedDevServer(t *testing.T) {
	s := testStack(t)
	srv := &DevServer{hostPort: "127.0.0.1:1", tail: &tailWriter{max: 100}, exited: make(chan struct{}), waitErr: errors.New("exit status 2")}
	_, _ = srv.tail.Write([]byte("panic: out of disk"))
	go s.watchTemporal(srv)
	close(srv.exited)
	e := waitExit(t, s)
	require.Equal(t, "Temporal dev server", e.Child)
	require.ErrorContains(t, e.Err, "exit status 2")
	require.ErrorContains(t, e.Err, "panic: out of disk")

	stopped := &DevServer{exited: make(chan struct{})}
	stopped.stopping.Store(true)
	go s.watchTemporal(stopped)
	close(stopped.exited)
	noExit(t, s)
}

// A fleet server that exits is reported with its last output; one killed by the stack is not.
func TestFleetReportsAServerThatExits(t *testing.T) {
	s := testStack(t)
	bin := filepath.Join(t.TempDir(), "server")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho \"cannot read $4\"\nexit 3\n"), 0o755))
	f := &Fleet{Self: bin, Dir: t.TempDir(), JWTFile: "jwt", OnExit: s.report}
	_, err := f.Start(0)
	require.NoError(t, err)
	e := waitExit(t, s)
	require.Equal(t, "server node-000.demo.example", e.Child)
	require.False(t, e.Essential)
	require.ErrorContains(t, e.Err, "exit status 3")
	require.True(t, strings.Contains(e.Err.Error(), "cannot read"), e.Err.Error())

	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\nsleep 60\n"), 0o755))
	m, err := f.Start(1)
	require.NoError(t, err)
	m.Kill()
	noExit(t, s)
}

func waitExit(t *testing.T, s *Stack) ChildExit {
	t.Helper()
	select {
	case e := <-s.Exits():
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("the exit was not reported")
		return ChildExit{}
	}
}

func noExit(t *testing.T, s *Stack) {
	t.Helper()
	select {
	case e := <-s.Exits():
		t.Fatalf("reported: %v", e)
	case <-time.After(500 * time.Millisecond):
	}
}
