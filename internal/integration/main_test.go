// Package integration runs the provisioner against real components over loopback: the Temporal
// CLI's dev server, an in-process Choria broker and real go-choria servers in provisioning mode,
// each in its own process. Skipped with -short.
package integration

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
)

// A test that calls t.Parallel waits more than it works (a few servers, a helper held, a broker
// away): such tests run side by side once the serial ones are done (make test: -parallel 3),
// each on its own broker, fleet and task queue. A test that sets the environment (t.Setenv: the
// provisioner reads PROVISIONER_*), restarts Temporal or measures CPU stays serial.

// shared across the package: one Temporal server, one build of the binaries
var (
	temporalAddress string
	selfBinary      string // the product binary, choria-provisioner
	devBinary       string // choria-provisioner-dev: fleet servers, simulator, example helper
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() || os.Getenv("SKIP_INTEGRATION") != "" {
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "provisioner-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	selfBinary = filepath.Join(tmp, "choria-provisioner")
	devBinary = filepath.Join(tmp, "choria-provisioner-dev")
	build := exec.Command("go", "build", "-o", tmp, "./cmd/choria-provisioner", "./cmd/choria-provisioner-dev", "./cmd/example-helper")
	build.Dir = filepath.Join("..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building choria-provisioner:", err)
		return 1
	}

	bin, err := devstack.FindTemporalBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv, err := devstack.StartTemporal(context.Background(), devstack.TemporalOptions{Binary: bin, Output: io.Discard})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Stop()
	temporalAddress = srv.FrontendHostPort()
	return m.Run()
}
