package devstack

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServerEnvSetsGOGCUnlessTheCallerDid(t *testing.T) {
	t.Setenv("GOGC", "")
	require.NoError(t, os.Unsetenv("GOGC"))
	env, err := serverEnv([]string{"GODEBUG=gctrace=1"})
	require.NoError(t, err)
	require.Equal(t, []string{"GOGC=400", "GODEBUG=gctrace=1"}, env)

	// later entries win in exec.Cmd.Env: an experiment's GOGC overrides the default
	env, err = serverEnv([]string{"GOGC=100"})
	require.NoError(t, err)
	require.Equal(t, []string{"GOGC=400", "GOGC=100"}, env)

	t.Setenv("GOGC", "50")
	env, err = serverEnv(nil)
	require.NoError(t, err)
	require.Empty(t, env)

	_, err = serverEnv([]string{"GOGC"})
	require.ErrorContains(t, err, `"GOGC": want KEY=VALUE`)
}

// A dev server that exits at once (here: a program that is not one) is reported with its last
// output, without waiting the minute a slow start may take.
func TestStartDevServerReportsAnEarlyExit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "temporal")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho \"no such command: $*\" >&2\nexit 3\n"), 0o755))
	port, err := FreePort()
	require.NoError(t, err)
	began := time.Now()
	_, err = StartTemporal(context.Background(), TemporalOptions{Binary: bin, Port: port, Output: io.Discard})
	require.Error(t, err)
	require.Contains(t, err.Error(), "exited before it answered")
	require.Contains(t, err.Error(), "no such command: server start-dev")
	require.Less(t, time.Since(began), 30*time.Second)
	require.Contains(t, err.Error(), "exit status 3")
}
