package devstack

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/choria-io/go-choria/build"
	"github.com/choria-io/go-choria/choria"
	"github.com/choria-io/go-choria/config"
	"github.com/choria-io/go-choria/plugin"
	agents "github.com/choria-io/go-choria/providers/agent/mcorpc/golang"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/provision"
	"github.com/choria-io/go-choria/providers/provtarget"
	"github.com/choria-io/go-choria/server"
	"github.com/choria-io/tokens"
	"github.com/sirupsen/logrus"
)

// FleetServerOptions describe one real Choria Server process of the demo fleet.
type FleetServerOptions struct {
	Identity        string
	ConfigFile      string // written by the provisioner's configure; absent at first start
	ProvisioningJWT string
	LogFile         string
}

// RunFleetServer runs one go-choria server the way `choria server run` does: in provisioning mode
// until a configuration that turns provisioning off has been written, then as a normal server.
// It must be the only Choria server in its process (go-choria keeps process-wide provisioning
// state), and restart after configure re-executes this same process with the same arguments.
func RunFleetServer(ctx context.Context, o FleetServerOptions) error {
	if err := plugin.Register("golangmco", agents.ChoriaPlugin()); err != nil {
		return err
	}
	if err := plugin.Register("choria_provision", provision.ChoriaPlugin()); err != nil {
		return err
	}

	bi := &build.Info{}
	bi.SetProvisionJWTFile(o.ProvisioningJWT)

	cfg, err := fleetServerConfig(ctx, bi, o)
	if err != nil {
		return err
	}
	cfg.Identity = o.Identity
	cfg.LogFile = o.LogFile
	cfg.ApplyBuildSettings(bi)

	fw, err := choria.NewWithConfig(cfg)
	if err != nil {
		return fmt.Errorf("server framework: %w", err)
	}
	fw.ConfigureProvisioning(ctx)

	instance, err := server.NewInstance(fw)
	if err != nil {
		return fmt.Errorf("server instance: %w", err)
	}

	ctx, cancel := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	wg := &sync.WaitGroup{}
	wg.Add(1)
	if err := instance.Run(ctx, wg); err != nil {
		return err
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

func fleetServerConfig(ctx context.Context, bi *build.Info, o FleetServerOptions) (*config.Config, error) {
	if _, err := os.Stat(o.ConfigFile); err == nil {
		cfg, err := config.NewSystemConfig(o.ConfigFile, true)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", o.ConfigFile, err)
		}
		provtarget.Configure(ctx, cfg, logrus.NewEntry(logrus.New()))
		if !shouldProvision(cfg, bi) {
			return cfg, nil
		}
	}

	cfg, err := config.NewDefaultSystemConfig(true)
	if err != nil {
		return nil, err
	}
	cfg.ConfigFile = o.ConfigFile
	// As go-choria's server run: no security material exists yet; ConfigureProvisioning sets
	// the provisioning security up from the provisioning JWT.
	cfg.Choria.SecurityProvider = "file"
	cfg.DisableSecurityProviderVerify = true
	return cfg, nil
}

// shouldProvision mirrors go-choria's server run: a written config stays in force unless it
// asks for provisioning or its server JWT does not match its seed.
func shouldProvision(cfg *config.Config, bi *build.Info) bool {
	if bi.ProvisionJWTFile() == "" {
		return false
	}
	if cfg.Choria.SecurityProvider == "choria" {
		tok, err := tokens.ParseServerTokenFileUnverified(cfg.Choria.ChoriaSecurityTokenFile)
		if err != nil || tok.IsExpired() {
			return true
		}
		if ok, err := tok.IsMatchingSeedFile(cfg.Choria.ChoriaSecuritySeedFile); err != nil || !ok {
			return true
		}
	}
	if cfg.HasOption("plugin.choria.server.provision") {
		return cfg.Choria.Provision
	}
	return bi.ProvisionDefault()
}
