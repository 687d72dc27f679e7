// Command example-helper is the demo site's provisioning helper, built on its own so that it
// starts in milliseconds: the helper contract's JSON on stdin, the reply on stdout.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/choria-temporal/provisioner/internal/dev/examplehelper"
)

func main() {
	var o examplehelper.Options
	flag.StringVar(&o.BrokerURL, "broker", "", "Broker URL provisioned servers connect to")
	flag.StringVar(&o.IssuerPublic, "issuer", "", "Organization Issuer public key (hex)")
	flag.StringVar(&o.CACert, "ca-cert", "", "pki mode: CA certificate that signs CSRs")
	flag.StringVar(&o.CAKey, "ca-key", "", "pki mode: CA private key")
	flag.BoolVar(&o.SupplyKey, "supply-key", false, "pki mode: make the server's private key here and send it")
	flag.StringVar(&o.Upgrade, "upgrade", "", "Ask for this server version first (features.upgrades)")
	flag.BoolVar(&o.Policies, "policies", false, "Also send an action policy and an OPA policy")
	flag.StringVar(&o.SSLDirBase, "ssldir-base", "", "pki without a CSR: servers keep their ssl in <base>/<identity>/ssl")
	flag.StringVar(&o.LogLevel, "loglevel", "info", "Server log level")
	refuse := flag.String("refuse", "", "Demo: comma-separated identities to fail until --fix-file exists")
	flag.StringVar(&o.FixFile, "fix-file", "", "Demo: the file whose existence approves the --refuse identities")
	delay := flag.Duration("delay", 0, "Bench: wait this long before answering, as a helper that asks a CMDB or an API does")
	flag.Parse()
	if *refuse != "" {
		o.Refuse = strings.Split(*refuse, ",")
	}
	if o.BrokerURL == "" || (o.IssuerPublic == "" && o.CACert == "") {
		fmt.Fprintln(os.Stderr, "example-helper: --broker and either --issuer or --ca-cert/--ca-key are required")
		os.Exit(2)
	}
	time.Sleep(*delay)
	if err := examplehelper.Run(o, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "example-helper:", err)
		os.Exit(1)
	}
}
