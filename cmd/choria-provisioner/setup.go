package main

import (
	"context"
	"fmt"
	"time"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/service"
)

// setupCommand prepares a Temporal namespace on a real cluster; safe to run repeatedly.
type setupCommand struct {
	config    string
	retention time.Duration
}

func (s *setupCommand) register(app *fisk.Application) {
	cmd := app.Command("setup", "Registers the provisioner's search attributes (and retention) on the Temporal namespace, and the renewal Schedule")
	configFlag(cmd, "Provisioner configuration file", &s.config)
	cmd.Flag("retention", "Retention of closed host workflows (0 leaves it unchanged)").Default("0s").DurationVar(&s.retention)
}

func (s *setupCommand) run(ctx context.Context) error {
	cfg, log, err := service.LoadConfig(s.config, "", false)
	if err != nil {
		return err
	}
	tc, err := service.DialTemporal(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer tc.Close()
	if err := service.Setup(ctx, tc, cfg.Temporal.Namespace, s.retention); err != nil {
		return err
	}
	did, err := service.SetupRenewal(ctx, tc, cfg)
	if err != nil {
		return err
	}
	fmt.Println(did)
	fmt.Printf("namespace %s is ready for the provisioner\n", cfg.Temporal.Namespace)
	return nil
}

var _ = config.ErrInvalid
