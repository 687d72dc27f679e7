// Command choria-provisioner-dev is the development scaffolding around the product binary: the
// local provisioning network (dev), the fleet simulator, the demo fleet's servers and helper, the
// compose stack's credentials and broker, and the benchmark. None of it ships in choria-provisioner.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/choria-io/fisk"
)

// version is set at build time with -ldflags "-X main.version=..."
var version = "development"

func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}

// command is one subcommand: it declares its flags, then runs when chosen.
type command interface {
	register(app *fisk.Application)
	run(ctx context.Context) error
}

func main() {
	app := fisk.New("choria-provisioner-dev", "Development tools for the Choria Provisioner on Temporal: local network, fleet simulator, benchmark")
	app.Version(version)

	commands := map[string]command{
		"dev":            &devCommand{},
		"fleet-sim":      &fleetSimCommand{},
		"fleet-server":   &fleetServerCommand{},
		"example-helper": &exampleHelperCommand{},
		"credentials":    &credentialsCommand{},
		"broker":         &brokerCommand{},
		"bench":          &benchCommand{},
		"small-fleet":    &smallFleetCommand{},
		"replica":        &replicaCommand{},
	}
	// registration order is the help's order
	for _, name := range []string{"dev", "fleet-sim", "fleet-server", "example-helper", "credentials", "broker", "bench", "small-fleet", "replica"} {
		commands[name].register(app)
	}

	cmd := app.MustParseWithUsage(os.Args[1:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if err := commands[cmd].run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "choria-provisioner-dev %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
