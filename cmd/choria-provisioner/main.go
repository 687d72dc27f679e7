// Command choria-provisioner provisions Choria Servers through Temporal workflows. It is the
// product binary: the dev stack, simulator and benchmark live in choria-provisioner-dev.
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
		"run":          &runCommand{},
		"setup":        &setupCommand{},
		"codec-server": &codecServerCommand{},
	}
	// registration order is the help's order
	for _, name := range []string{"run", "setup", "codec-server"} {
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
