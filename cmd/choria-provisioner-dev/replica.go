package main

import (
	"context"

	"github.com/choria-io/fisk"
	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/internal/dev/nextbuild"
	"github.com/choria-temporal/provisioner/internal/service"
)

// replicaCommand runs the product's service (worker and discovery) as a build of another version,
// optionally with the next build's workflow change (internal/dev/nextbuild): the replicas of the
// rolling-upgrade test, each in its own process as a site's are.
type replicaCommand struct {
	config string
	build  string
	next   bool
}

func (r *replicaCommand) register(app *fisk.Application) {
	cmd := app.Command("replica", "Runs the provisioner as a given build (the rolling-upgrade test)")
	cmd.Flag("config", "Provisioner configuration file").Required().StringVar(&r.config)
	cmd.Flag("build", "Version this replica runs as: its Worker Deployment build ID").Required().StringVar(&r.build)
	cmd.Flag("next", "Run the next build's host workflow (internal/dev/nextbuild)").UnNegatableBoolVar(&r.next)
}

func (r *replicaCommand) run(ctx context.Context) error {
	cfg, log, err := service.LoadConfig(r.config, "", false)
	if err != nil {
		return err
	}
	defer log.Sync()
	wo := service.WorkerOptions(cfg)
	if r.next {
		wo.Interceptors = []interceptor.WorkerInterceptor{nextbuild.Interceptor()}
	}
	svc, err := service.New(cfg, log, service.Options{Worker: true, Discovery: true, Version: r.build, WorkerOptions: &wo})
	if err != nil {
		return err
	}
	log.Info("replica starting", zap.String("build", r.build), zap.Bool("next", r.next))
	return svc.Run(ctx, nil)
}
