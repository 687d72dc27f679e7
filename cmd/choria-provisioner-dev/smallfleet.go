package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/internal/dev/bench"
)

// smallFleetCommand is `make bench-small-fleet`: the time from a provisioner's start to a small
// fleet of real servers, already waiting, all connected as normal servers.
type smallFleetCommand struct {
	servers   int
	runs      int
	dir       string
	targets   []string
	originals []string
	breakdown bool
	devArgs   []string
}

func (c *smallFleetCommand) register(app *fisk.Application) {
	cmd := app.Command("small-fleet", "Measures provisioner start to N real waiting servers connected, against other builds (make bench-small-fleet)").Hidden()
	cmd.Flag("servers", "Real servers started before the provisioner").Default("10").IntVar(&c.servers)
	cmd.Flag("runs", "Runs per provisioner").Default("5").IntVar(&c.runs)
	cmd.Flag("dir", "Working directory").Default(os.TempDir() + "/choria-small-fleet").StringVar(&c.dir)
	cmd.Flag("target", "NAME=BINARY of a build of this project to measure (repeatable; default: this build); NAME=BINARY,KEY=VALUE,... adds PROVISIONER_* environment").StringsVar(&c.targets)
	cmd.Flag("breakdown", "Also print where each run of this project's builds spent its time (from the hosts' histories)").UnNegatableBoolVar(&c.breakdown)
	cmd.Flag("dev-arg", "Extra dev stack flag (repeatable), e.g. --dev-arg=--in-memory").StringsVar(&c.devArgs)
	cmd.Flag("original", "NAME=BINARY of a Choria Provisioner build, run with its own command line (repeatable)").StringsVar(&c.originals)
}

func (c *smallFleetCommand) run(ctx context.Context) error {
	var targets []bench.SmallFleetTarget
	add := func(specs []string, original bool) error {
		for _, s := range specs {
			name, rest, ok := strings.Cut(s, "=")
			parts := strings.Split(rest, ",")
			bin := parts[0]
			if !ok || name == "" || bin == "" {
				return fmt.Errorf("%q: want NAME=BINARY", s)
			}
			if _, err := os.Stat(bin); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			targets = append(targets, bench.SmallFleetTarget{Name: name, Bin: bin, Original: original, Env: parts[1:]})
		}
		return nil
	}
	if len(c.targets) == 0 {
		c.targets = []string{"this build=" + filepath.Join(filepath.Dir(selfPath()), "choria-provisioner")}
	}
	if err := add(c.targets, false); err != nil {
		return err
	}
	if err := add(c.originals, true); err != nil {
		return err
	}
	res, err := bench.SmallFleet(ctx, bench.SmallFleetOptions{Self: selfPath(), Dir: c.dir, Servers: c.servers, Runs: c.runs, Log: os.Stdout, Breakdown: c.breakdown, DevArgs: c.devArgs}, targets)
	if err != nil {
		return err
	}
	fmt.Print(bench.SmallFleetTable(c.servers, res))
	return nil
}
