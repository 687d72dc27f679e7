package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
)

// credentialsCommand makes an Organization Issuer site's credentials and the provisioner's
// configuration files: the one-shot service of docker-compose.yaml. It is idempotent.
type credentialsCommand struct {
	dir, brokerURL, brokerHost, temporal, helper, monitorAddress string
	monitorPort                                                  int
}

func (c *credentialsCommand) register(app *fisk.Application) {
	cmd := app.Command("credentials", "Creates Organization Issuer credentials and provisioner configuration for a site (docker-compose)").Hidden()
	cmd.Flag("dir", "Where to write them").Required().StringVar(&c.dir)
	cmd.Flag("broker-url", "Broker URL the servers and the provisioner use").Required().StringVar(&c.brokerURL)
	cmd.Flag("broker-host", "Extra host name for the broker's TLS certificate").StringVar(&c.brokerHost)
	cmd.Flag("temporal", "Temporal frontend address").Default("127.0.0.1:7233").StringVar(&c.temporal)
	cmd.Flag("helper", "Helper command line (default: the example helper)").StringVar(&c.helper)
	cmd.Flag("monitor-address", "Metrics bind address").Default("127.0.0.1").StringVar(&c.monitorAddress)
	cmd.Flag("monitor-port", "Metrics port").Default("9464").IntVar(&c.monitorPort)
}

func (c *credentialsCommand) run(context.Context) error {
	var hosts []string
	if c.brokerHost != "" {
		hosts = append(hosts, c.brokerHost)
	}
	creds, err := devstack.LoadOrCreateCredentials(c.dir+"/credentials", c.brokerURL, hosts...)
	if err != nil {
		return err
	}
	helper := c.helper
	if helper == "" {
		helper = devstack.ExampleHelperCommand(selfPath(), c.brokerURL, creds)
	}
	files, err := devstack.WriteSiteFiles(creds, devstack.SiteOptions{Dir: c.dir, BrokerURL: c.brokerURL, TemporalAddress: c.temporal,
		Helper: helper, MonitorPort: c.monitorPort, MonitorAddress: c.monitorAddress})
	if err != nil {
		return err
	}
	// the bearer token of the stack's codec server (temporal CLI users present it)
	tokenFile := filepath.Join(c.dir, "codec-server.token")
	if _, err := os.Stat(tokenFile); err != nil {
		if err := os.WriteFile(tokenFile, []byte(codec.NewKey()+"\n"), 0o600); err != nil {
			return err
		}
	}
	fmt.Printf("provisioner configuration: %s\nprovisioning JWT for servers: %s\ncodec server token: %s\n", files.ConfigFile, creds.ProvisioningJWT, tokenFile)
	return nil
}

// brokerCommand runs a Choria broker with the provisioning account from a credentials directory.
type brokerCommand struct {
	dir, listen, workDir string
	port                 int
}

func (b *brokerCommand) register(app *fisk.Application) {
	cmd := app.Command("broker", "Runs a Choria broker with a provisioning account from `credentials` output (docker-compose)").Hidden()
	cmd.Flag("dir", "Directory given to credentials").Required().StringVar(&b.dir)
	cmd.Flag("listen", "Listen address").Default("127.0.0.1").StringVar(&b.listen)
	cmd.Flag("port", "Client port").Default("4222").IntVar(&b.port)
	cmd.Flag("work-dir", "Where the broker writes its configuration (default: --dir; --dir may then be read-only)").StringVar(&b.workDir)
}

func (b *brokerCommand) run(ctx context.Context) error {
	creds, err := devstack.LoadOrCreateCredentials(b.dir+"/credentials", "")
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	work := b.workDir
	if work == "" {
		work = b.dir
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	if _, err := devstack.StartBroker(ctx, &wg, work, b.listen, b.port, creds, "info", ""); err != nil {
		return err
	}
	fmt.Printf("broker listening on %s:%d\n", b.listen, b.port)
	<-ctx.Done()
	wg.Wait()
	return nil
}
