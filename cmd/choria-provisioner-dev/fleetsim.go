package main

import (
	"context"
	"fmt"
	"time"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
)

// fleetSimCommand runs many simulated servers in provisioning mode in one process. It must run in
// a process of its own: go-choria keeps process-wide state that a provisioner beside it tramples.
type fleetSimCommand struct {
	opts       fleetsim.Options
	rate       float64
	status     string
	replyDelay map[string]string
}

func (f *fleetSimCommand) register(app *fisk.Application) {
	cmd := app.Command("fleet-sim", "Simulates N Choria Servers in provisioning mode (benchmarks and tests)")
	cmd.Flag("broker", "Broker URL").Required().StringVar(&f.opts.BrokerURL)
	cmd.Flag("provisioning-jwt", "The fleet's provisioning JWT").Required().StringVar(&f.opts.ProvisioningJWT)
	cmd.Flag("token", "Provisioning token the servers expect").StringVar(&f.opts.Token)
	cmd.Flag("count", "Number of servers").Default("1000").IntVar(&f.opts.Count)
	cmd.Flag("prefix", "Identity prefix").StringVar(&f.opts.Prefix)
	cmd.Flag("rate", "Arrivals per second (0: all at once)").Default("0").Float64Var(&f.rate)
	cmd.Flag("latency", "Added to every reply").Default("0s").DurationVar(&f.opts.Latency)
	cmd.Flag("silent", "Share of servers that never answer (0..1)").Default("0").Float64Var(&f.opts.Silent)
	cmd.Flag("lock-errors", "Share of servers answering their first locked RPCs with the lock error (0..1)").Default("0").Float64Var(&f.opts.LockErrors)
	cmd.Flag("flaky", "Share of servers whose RPCs fail transiently (0..1)").Default("0").Float64Var(&f.opts.Flaky)
	cmd.Flag("flaky-requests", "A flaky server fails its first N RPCs").Default("0").IntVar(&f.opts.FlakyRequests)
	cmd.Flag("flaky-for", "A flaky server also fails every RPC within this long of its first").Default("0s").DurationVar(&f.opts.FlakyFor)
	cmd.Flag("flaky-mode", "How a flaky server fails: drop (no reply) or error (an aborted reply)").Default(fleetsim.FlakyDrop).EnumVar(&f.opts.FlakyMode, fleetsim.FlakyDrop, fleetsim.FlakyError)
	cmd.Flag("server-version", "Server version reported by inventory and lifecycle events").Default("0.30.2").StringVar(&f.opts.Version)
	cmd.Flag("key-pool", "gencsr shares this many RSA keys among all servers (0: a fresh 2048-bit key per CSR, as real servers)").Default("0").IntVar(&f.opts.KeyPool)
	cmd.Flag("scratch-dir", "Where release_update downloads releases (removed after each)").StringVar(&f.opts.ScratchDir)
	cmd.Flag("no-restart-splay", "Restart at once instead of after go-choria's 2-11 s splay").UnNegatableBoolVar(&f.opts.NoRestartSplay)
	cmd.Flag("go-choria-wire", "Read and write protocol v2 messages with go-choria's constructors, compiling its JSON schemas for every message as a server does (~5x the CPU)").UnNegatableBoolVar(&f.opts.GoChoriaWire)
	cmd.Flag("renewable", "Provisioned servers answer choria_provision#reprovision (as reached on their fleet collective) and go back into provisioning mode").UnNegatableBoolVar(&f.opts.Renewable)
	cmd.Flag("status", "Write the fleet's state to this file every 500 ms").StringVar(&f.status)
	f.replyDelay = map[string]string{} // fisk adds to the map it is given
	cmd.Flag("reply-delay", "ACTION=DURATION: hold the reply of that choria_provision action this long after it took effect (repeatable; fault tests)").StringMapVar(&f.replyDelay)
}

func (f *fleetSimCommand) run(ctx context.Context) error {
	for action, v := range f.replyDelay {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("--reply-delay %s=%s: %w", action, v, err)
		}
		if f.opts.ReplyDelay == nil {
			f.opts.ReplyDelay = map[string]time.Duration{}
		}
		f.opts.ReplyDelay[action] = d
	}
	sim, err := fleetsim.Start(ctx, f.opts, f.rate)
	if err != nil {
		return err
	}
	fmt.Printf("simulating %d servers on %s\n", f.opts.Count, f.opts.BrokerURL)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if f.status != "" {
			if err := sim.WriteStatusIfChanged(f.status); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
