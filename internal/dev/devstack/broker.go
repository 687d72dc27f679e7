package devstack

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/choria-io/go-choria/broker/network"
	"github.com/choria-io/go-choria/choria"
	"github.com/choria-io/go-choria/config"
	"github.com/sirupsen/logrus"
)

// Broker is an in-process Choria Network Broker with a provisioning account, listening on loopback.
type Broker struct {
	Port      int
	StatsPort int
	URL       string
	srv       *network.Server
}

// FreePort asks the kernel for an unused loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartBroker writes a broker config into dir and starts the broker; it stops when ctx ends.
// The broker may share the dev process with the provisioner: it is a NATS server, not a Choria
// server instance, and keeps none of the process-wide provisioning state.
// listen is 127.0.0.1 everywhere but in containers.
func StartBroker(ctx context.Context, wg *sync.WaitGroup, dir string, listen string, port int, creds *Credentials, logLevel string, logFile string) (*Broker, error) {
	statsPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "broker.conf")
	cfg := fmt.Sprintf(`identity = broker.local
loglevel = %s
logfile = %s
plugin.choria.broker_network = true
plugin.choria.network.listen_address = %s
plugin.choria.network.client_port = %d
plugin.choria.network.peer_port = 0
plugin.choria.stats_address = 127.0.0.1
plugin.choria.stats_port = %d
%splugin.choria.network.provisioning.client_password = %s
plugin.choria.use_srv = false
`, logLevel, logFile, listen, port, statsPort, creds.BrokerSecurity(), creds.ProvisioningPassword)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}

	bcfg, err := config.NewSystemConfig(cfgFile, true)
	if err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	if logFile == "" {
		l := logrus.New()
		l.SetLevel(logrus.WarnLevel)
		bcfg.CustomLogger = l
	}
	fw, err := choria.NewWithConfig(bcfg)
	if err != nil {
		return nil, fmt.Errorf("broker framework: %w", err)
	}
	srv, err := network.NewServer(fw, fw.BuildInfo(), false)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	wg.Add(1)
	go srv.Start(ctx, wg)

	b := &Broker{Port: port, StatsPort: statsPort, URL: fmt.Sprintf("nats://127.0.0.1:%d", port), srv: srv}
	return b, waitForPort(ctx, port, 20*time.Second)
}

func waitForPort(ctx context.Context, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d did not open within %v: %w", port, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
