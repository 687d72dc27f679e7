package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/procstat"
)

// Shapes of Temporal a scenario runs on (Scenario.Temporal).
const (
	// ShapeDevServer is the Temporal CLI's dev server on a WAL SQLite file: `make run`'s.
	ShapeDevServer = ""
	// ShapePostgres is the Temporal server binary on PostgreSQL, histories and visibility both,
	// as docs/deployment.md tells a site to run it (one process for the four services).
	ShapePostgres = "postgres"
)

// PostgresTuning is a variant of the production shape: what deployment.md recommends a site
// tune, each measured against the plain shape.
type PostgresTuning struct {
	Settings      []string // PostgreSQL -c KEY=VALUE, e.g. synchronous_commit=off
	HistoryShards int      // persistence.numHistoryShards (default 4)
	StoreConns    int      // each service's pool to the temporal database (default 20)
	DynamicConfig []string // server dynamic config KEY=VALUE, e.g. history.persistenceMaxQPS=20000
}

// productionShape is a Temporal server on a fresh PostgreSQL cluster in dir, its /metrics on
// metricsPort, the namespace and the provisioner's search attributes registered.
func productionShape(ctx context.Context, dir string, t PostgresTuning, metricsPort int) (*devstack.SQLTemporal, error) {
	server, err := devstack.FindTool("temporal-server")
	if err != nil {
		return nil, err
	}
	tool, err := devstack.FindTool("temporal-sql-tool")
	if err != nil {
		return nil, err
	}
	pg, err := devstack.FindPostgres()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	s, err := devstack.StartSQLTemporal(ctx, devstack.SQLTemporalOptions{
		Dir: filepath.Join(dir, "temporal-server"), ServerBin: server, SQLToolBin: tool, PostgresBin: pg,
		Retention: 24 * time.Hour, HistoryShards: t.HistoryShards, StoreConns: t.StoreConns,
		PostgresSettings: t.Settings, DynamicConfig: t.DynamicConfig, MetricsPort: metricsPort,
	})
	if err != nil {
		return nil, fmt.Errorf("the production shape (Temporal server on PostgreSQL): %w", err)
	}
	return s, nil
}

// database is what the bench reads of the production shape's PostgreSQL: CPU of the postmaster
// and every backend, the peak of their proportional memory, and transactions.
type database struct {
	pg      *devstack.Postgres
	peakPSS float64
}

func (d *database) cpu() time.Duration {
	if d == nil {
		return 0
	}
	return procstat.TreeCPU(d.pg.PID())
}

// sample keeps the highest memory seen; the bench calls it every second.
func (d *database) sample() {
	if d != nil {
		d.peakPSS = max(d.peakPSS, procstat.TreePSSMiB(d.pg.PID()))
	}
}

func (d *database) transactions(ctx context.Context) (int64, error) {
	if d == nil {
		return 0, nil
	}
	return d.pg.Transactions(ctx)
}
