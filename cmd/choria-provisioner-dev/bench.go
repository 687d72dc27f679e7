package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
	baselineBin    string
	baselineLabel  string
	originalBin    string
	originalWorker int
	variant        string
	jsonFile       string
	mdFile         string
	env            []string
	devArgs        []string
	simArgs        []string
	merge          []string
	bracket        bool
	rounds         int
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
	cmd.Flag("baseline-bin", "Also run an older build of choria-provisioner on every scenario, in this invocation, and print this build's metrics as ratios of its").StringVar(&b.baselineBin)
	cmd.Flag("baseline-label", "The baseline's name in the results (default: its file name)").StringVar(&b.baselineLabel)
	cmd.Flag("original-bin", "Also run the Choria Provisioner (its binary) on every scenario, and print ratios of its metrics").StringVar(&b.originalBin)
	cmd.Flag("original-workers", "The Choria Provisioner's workers (0: its default, the number of CPUs)").IntVar(&b.originalWorker)
	cmd.Flag("variant", "Label of this run in the results (e.g. before-shared-connection)").StringVar(&b.variant)
	cmd.Flag("env", "PROVISIONER_KEY=VALUE for the provisioner in every scenario (repeatable; tuning experiments)").StringsVar(&b.env)
	cmd.Flag("sim-arg", "Extra fleet-sim flag in every scenario (repeatable), e.g. --sim-arg=--go-choria-wire").StringsVar(&b.simArgs)
	cmd.Flag("dev-arg", "Extra dev stack flag in every scenario (repeatable), e.g. --dev-arg=--temporal-dynamic-config=KEY=JSON").StringsVar(&b.devArgs)
	cmd.Flag("bracket", "Run this build again after the others on each scenario and compare the mean of its two runs (the machine drifts within an invocation)").UnNegatableBoolVar(&b.bracket)
	cmd.Flag("rounds", "Run every build this many times on each scenario, in turns, and report medians and the range of this build's ratios (with --baseline-bin or --original-bin)").Default("1").IntVar(&b.rounds)
	cmd.Flag("merge", "Merge the results of another invocation (its JSON file; repeatable) into --json and --markdown, and run nothing").StringsVar(&b.merge)
	cmd.Flag("json", "Results file (merged by scenario and variant)").Default("bench-results/performance-results.json").StringVar(&b.jsonFile)
	cmd.Flag("markdown", "Markdown file whose generated sections (between their markers) are rewritten").Default("bench-results/comparison.md").StringVar(&b.mdFile)
}

func (b *benchCommand) run(ctx context.Context) error {
	if len(b.merge) > 0 {
		var results []*bench.Result
		for _, f := range b.merge {
			rs, err := bench.Load(f)
			if err != nil {
				return err
			}
			results = append(results, rs...)
		}
		_, err := bench.Save(b.jsonFile, b.mdFile, results)
		return err
	}
	want := map[string]bool{}
	var order []string
	for _, s := range strings.Split(b.scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" && !want[s] {
			want[s] = true
			order = append(order, s)
		}
	}
	byName := map[string]bench.Scenario{}
	for _, sc := range bench.Scenarios {
		byName[sc.Name] = sc
	}
	for _, name := range order {
		if _, ok := byName[name]; !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
	}
	ours := bench.Target{Kind: bench.KindOurs, Bin: b.provisionerBin, Label: b.variant}
	var others []bench.Target
	if b.baselineBin != "" {
		label := b.baselineLabel
		if label == "" {
			label = filepath.Base(b.baselineBin)
		}
		others = append(others, bench.Target{Kind: bench.KindOurs, Bin: b.baselineBin, Label: label})
	}
	if b.originalBin != "" {
		label := "Choria Provisioner"
		if b.originalWorker > 0 {
			label += fmt.Sprintf(" workers=%d", b.originalWorker)
		} else {
			label += fmt.Sprintf(" workers=%d (default)", runtime.NumCPU())
		}
		others = append(others, bench.Target{Kind: bench.KindOriginal, Bin: b.originalBin, Label: label, Workers: b.originalWorker})
	}
	prepare := func(sc bench.Scenario) bench.Scenario {
		if b.hosts > 0 {
			sc.Hosts = b.hosts
		}
		sc.Env = append(append([]string{}, sc.Env...), b.env...)
		sc.DevArgs = append(append([]string{}, sc.DevArgs...), b.devArgs...)
		sc.SimArgs = append(append([]string{}, sc.SimArgs...), b.simArgs...)
		return sc
	}
	if b.rounds < 1 {
		return fmt.Errorf("--rounds %d: at least one", b.rounds)
	}
	var results []*bench.Result
	save := func(res *bench.Result) error {
		results = append(results, res)
		fmt.Print(bench.Table([]*bench.Result{res}))
		_, err := bench.Save(b.jsonFile, b.mdFile, results)
		return err
	}
	runOne := func(sc bench.Scenario, tg bench.Target) (*bench.Result, error) {
		who := tg.Label
		if who == "" {
			who = "this build"
		}
		fmt.Printf("== %s: %d hosts, %s\n", sc.Name, sc.Hosts, who)
		res, err := bench.Run(ctx, bench.Options{Self: selfPath(), Dir: b.dir, Log: os.Stdout}, sc, tg)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", sc.Name, who, err)
		}
		return res, save(res)
	}
	// the others' runs of a scenario in a round, kept for the scenarios compared with it (CompareWith)
	theirs := map[string][]*bench.Result{}
	round := func(sc bench.Scenario, n int) (bench.Comparison, error) {
		labelled := func(tg bench.Target) bench.Target {
			tg.Label = bench.RoundVariant(tg.Label, n, b.rounds)
			return tg
		}
		mine, err := runOne(sc, labelled(ours))
		if err != nil {
			return bench.Comparison{}, err
		}
		ref := sc.Name
		if sc.CompareWith != "" {
			ref = sc.CompareWith
		}
		key := fmt.Sprintf("%s#%d", ref, n)
		if _, done := theirs[key]; !done && len(others) > 0 {
			rsc := prepare(byName[ref])
			for _, tg := range others {
				res, err := runOne(rsc, labelled(tg))
				if err != nil {
					return bench.Comparison{}, err
				}
				theirs[key] = append(theirs[key], res)
			}
		}
		if b.bracket && len(others) > 0 {
			again := ours
			again.Label = strings.TrimSpace(ours.Label + " again")
			after, err := runOne(sc, labelled(again))
			if err != nil {
				return bench.Comparison{}, err
			}
			mine = bench.Bracketed(mine, after)
			mine.Variant = bench.RoundVariant(strings.TrimSpace(ours.Label+" mean of before and after"), n, b.rounds)
			if err := save(mine); err != nil {
				return bench.Comparison{}, err
			}
		}
		c := bench.Comparison{Scenario: sc.Name, Ours: mine}
		for _, r := range theirs[key] {
			if r.Kind == bench.KindOriginal {
				c.Original = r
			} else {
				c.Baseline = r
			}
		}
		return c, nil
	}
	var generated []string
	for _, name := range order {
		sc := prepare(byName[name])
		var rounds []bench.Comparison
		for n := 1; n <= b.rounds; n++ {
			c, err := round(sc, n)
			if err != nil {
				return err
			}
			rounds = append(rounds, c)
			if len(others) > 0 {
				fmt.Print(bench.Ratios([]bench.Comparison{c}))
			}
		}
		if len(others) == 0 {
			continue
		}
		text := bench.Ratios(rounds)
		if b.rounds > 1 {
			text = bench.Rounds(rounds)
			fmt.Print(text)
		}
		generated = append(generated, text)
		if err := bench.SaveRatios(b.mdFile, strings.Join(generated, "")); err != nil {
			return err
		}
	}
	return nil
}
