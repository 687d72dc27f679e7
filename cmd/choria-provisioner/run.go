package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/choria-io/fisk"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/internal/service"
)

// runCommand is the Choria Provisioner's command line: run --config FILE --choria-config FILE
// [--pid FILE] [--debug], and the default command.
type runCommand struct {
	config       string
	choriaConfig string
	pidFile      string
	debug        bool
	noDiscovery  bool
	noWorker     bool
}

func (r *runCommand) register(app *fisk.Application) {
	cmd := app.Command("run", "Runs the provisioner: Temporal worker and discovery").Default()
	configFlag(cmd, "Provisioner configuration file (the Choria Provisioner's YAML plus a temporal section)", &r.config)
	cmd.Flag("choria-config", "Choria client configuration file").StringVar(&r.choriaConfig)
	cmd.Flag("pid", "Write the process ID to this file").StringVar(&r.pidFile)
	// the Choria Provisioner's --debug is the application's: before or after the command
	app.Flag("debug", "Log at debug level").UnNegatableBoolVar(&r.debug)
	cmd.Flag("no-discovery", "Run only the Temporal worker").UnNegatableBoolVar(&r.noDiscovery)
	cmd.Flag("no-worker", "Run only discovery").UnNegatableBoolVar(&r.noWorker)
}

func (r *runCommand) run(ctx context.Context) error {
	cfg, log, err := service.LoadConfig(r.config, r.choriaConfig, r.debug)
	if err != nil {
		return err
	}
	defer log.Sync()
	if r.pidFile != "" {
		if err := os.WriteFile(r.pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("writing pid file: %w", err)
		}
		defer os.Remove(r.pidFile)
	}
	svc, err := service.New(cfg, log, service.Options{Worker: !r.noWorker, Discovery: !r.noDiscovery, Version: version})
	if err != nil {
		return err
	}
	log.Info("choria provisioner starting", zap.String("config", r.config), zap.String("temporal", cfg.Temporal.Address),
		zap.String("task_queue", cfg.Temporal.TaskQueue), zap.Duration("interval", cfg.IntervalDuration))
	return svc.Run(ctx, nil)
}
