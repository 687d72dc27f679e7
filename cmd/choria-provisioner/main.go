// Command choria-provisioner provisions Choria Servers through Temporal workflows.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
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
	app := fisk.New("choria-provisioner", "Provisions Choria Servers, one durable Temporal workflow per host")
	app.Version(version)

	hosts := &hostsCommand{}
	hosts.register(app)
	commands := map[string]command{
		"run":            &runCommand{},
		"dev":            &devCommand{},
		"setup":          &setupCommand{},
		"codec-server":   &codecServerCommand{},
		"fleet-sim":      &fleetSimCommand{},
		"fleet-server":   &fleetServerCommand{},
		"example-helper": &exampleHelperCommand{},
		"credentials":    &credentialsCommand{},
		"broker":         &brokerCommand{},
		"bench":          &benchCommand{},
	}
	// registration order is the help's order
	for _, name := range []string{"run", "dev", "setup", "codec-server", "fleet-sim", "fleet-server", "example-helper", "credentials", "broker", "bench"} {
		commands[name].register(app)
	}

	cmd := app.MustParseWithUsage(os.Args[1:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if strings.HasPrefix(cmd, "hosts ") {
		os.Exit(hosts.run(ctx, cmd))
	}
	if err := commands[cmd].run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "choria-provisioner %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
