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

func main() {
	app := fisk.New("choria-provisioner", "Provisions Choria Servers, one durable Temporal workflow per host")
	app.Version(version)

	run := &runCommand{}
	run.register(app)
	dev := &devCommand{}
	dev.register(app)
	setup := &setupCommand{}
	setup.register(app)
	fleet := &fleetServerCommand{}
	fleet.register(app)
	helper := &exampleHelperCommand{}
	helper.register(app)
	hosts := &hostsCommand{}
	hosts.register(app)
	creds := &credentialsCommand{}
	creds.register(app)
	broker := &brokerCommand{}
	broker.register(app)
	codecSrv := &codecServerCommand{}
	codecSrv.register(app)
	sim := &fleetSimCommand{}
	sim.register(app)

	cmd := app.MustParseWithUsage(os.Args[1:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if strings.HasPrefix(cmd, "hosts ") {
		os.Exit(hosts.run(ctx, cmd))
	}

	var err error
	switch cmd {
	case "run":
		err = run.run(ctx)
	case "dev":
		err = dev.run(ctx)
	case "setup":
		err = setup.run(ctx)
	case "fleet-server":
		err = fleet.run(ctx)
	case "example-helper":
		err = helper.run()
	case "credentials":
		err = creds.run()
	case "broker":
		err = broker.run(ctx)
	case "codec-server":
		err = codecSrv.run(ctx)
	case "fleet-sim":
		err = sim.run(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "choria-provisioner %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
