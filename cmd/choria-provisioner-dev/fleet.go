package main

import (
	"context"
	"os"
	"strings"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/examplehelper"
)

// fleetServerCommand runs one real go-choria server of the demo fleet; `dev` and the tests start
// it, one process per server.
type fleetServerCommand struct {
	opts devstack.FleetServerOptions
}

func (f *fleetServerCommand) register(app *fisk.Application) {
	cmd := app.Command("fleet-server", "Runs one Choria Server in provisioning mode (demo fleet)").Hidden()
	cmd.Flag("identity", "Server identity").Required().StringVar(&f.opts.Identity)
	cmd.Flag("config", "Server configuration file; written by provisioning").Required().StringVar(&f.opts.ConfigFile)
	cmd.Flag("provisioning-jwt", "Provisioning JWT").Required().StringVar(&f.opts.ProvisioningJWT)
	cmd.Flag("logfile", "Server log file").StringVar(&f.opts.LogFile)
}

func (f *fleetServerCommand) run(ctx context.Context) error {
	return devstack.RunFleetServer(ctx, f.opts)
}

// exampleHelperCommand is the demo site's helper: the Choria Provisioner helper contract on
// stdin and stdout.
type exampleHelperCommand struct {
	opts   examplehelper.Options
	refuse string
}

func (h *exampleHelperCommand) register(app *fisk.Application) {
	cmd := app.Command("example-helper", "Example provisioning helper for Organization Issuer mode (JSON on stdin and stdout)")
	cmd.Flag("broker", "Broker URL provisioned servers connect to").Required().StringVar(&h.opts.BrokerURL)
	cmd.Flag("issuer", "Organization Issuer public key (hex)").StringVar(&h.opts.IssuerPublic)
	cmd.Flag("ca-cert", "pki mode: CA certificate that signs CSRs").StringVar(&h.opts.CACert)
	cmd.Flag("ca-key", "pki mode: CA private key").StringVar(&h.opts.CAKey)
	cmd.Flag("supply-key", "pki mode: make the server's private key here and send it").UnNegatableBoolVar(&h.opts.SupplyKey)
	cmd.Flag("upgrade", "Ask for this server version first").StringVar(&h.opts.Upgrade)
	cmd.Flag("policies", "Also send an action policy and an OPA policy").UnNegatableBoolVar(&h.opts.Policies)
	cmd.Flag("ssldir-base", "pki without a CSR: servers keep their ssl in <base>/<identity>/ssl").StringVar(&h.opts.SSLDirBase)
	cmd.Flag("loglevel", "Server log level").Default("info").StringVar(&h.opts.LogLevel)
	cmd.Flag("refuse", "Demo: comma-separated identities to fail until --fix-file exists").StringVar(&h.refuse)
	cmd.Flag("fix-file", "Demo: the file whose existence approves the --refuse identities").StringVar(&h.opts.FixFile)
}

func (h *exampleHelperCommand) run(context.Context) error {
	if h.refuse != "" {
		h.opts.Refuse = strings.Split(h.refuse, ",")
	}
	return examplehelper.Run(h.opts, os.Stdin, os.Stdout)
}
