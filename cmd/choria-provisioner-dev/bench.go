package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/internal/dev/bench"
)

// benchCommand is `make bench`: each scenario on a fresh dev stack with a simulated fleet.
type benchCommand struct {
	scenarios      string
	hosts          int
	dir            string
	provisionerBin string
	variant        string
	jsonFile       string
	mdFile         string
	env            []string
	devArgs        []string
}

func (b *benchCommand) register(app *fisk.Application) {
	cmd := app.Command("bench", "Measures provisioning throughput, latency and cost with a simulated fleet (make bench)").Hidden()
	names := make([]string, 0, len(bench.Scenarios))
	for _, s := range bench.Scenarios {
		names = append(names, s.Name)
	}
	cmd.Flag("scenarios", "Comma-separated scenarios: "+strings.Join(names, ", ")).Default(strings.Join(names, ",")).StringVar(&b.scenarios)
	cmd.Flag("hosts", "Override every scenario's host count").IntVar(&b.hosts)
	cmd.Flag("dir", "Working directory").Default(os.TempDir() + "/choria-bench").StringVar(&b.dir)
	cmd.Flag("provisioner-bin", "Measure this binary's run command instead (before/after comparisons)").StringVar(&b.provisionerBin)
	cmd.Flag("variant", "Label of this run in the results (e.g. before-shared-connection)").StringVar(&b.variant)
	cmd.Flag("env", "PROVISIONER_KEY=VALUE for the provisioner in every scenario (repeatable; tuning experiments)").StringsVar(&b.env)
	cmd.Flag("dev-arg", "Extra dev stack flag in every scenario (repeatable), e.g. --dev-arg=--temporal-dynamic-config=KEY=JSON").StringsVar(&b.devArgs)
	cmd.Flag("json", "Results file (merged by scenario and variant)").Default("docs/performance-results.json").StringVar(&b.jsonFile)
	cmd.Flag("markdown", "Markdown file whose generated table is rewritten").Default("docs/performance.md").StringVar(&b.mdFile)
}

func (b *benchCommand) run(ctx context.Context) error {
	want := map[string]bool{}
	for _, s := range strings.Split(b.scenarios, ",") {
		want[strings.TrimSpace(s)] = true
	}
	var results []*bench.Result
	for _, sc := range bench.Scenarios {
		if !want[sc.Name] {
			continue
		}
		delete(want, sc.Name)
		if b.hosts > 0 {
			sc.Hosts = b.hosts
		}
		sc.Env = append(append([]string{}, sc.Env...), b.env...)
		sc.DevArgs = append(append([]string{}, sc.DevArgs...), b.devArgs...)
		fmt.Printf("== %s: %d hosts\n", sc.Name, sc.Hosts)
		res, err := bench.Run(ctx, bench.Options{Self: selfPath(), ProvisionerBin: b.provisionerBin, Dir: b.dir, Log: os.Stdout}, sc, b.variant)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		results = append(results, res)
		fmt.Print(bench.Table([]*bench.Result{res}))
		if _, err := bench.Save(b.jsonFile, b.mdFile, results); err != nil {
			return err
		}
	}
	for name := range want {
		return fmt.Errorf("unknown scenario %q", name)
	}
	return nil
}
