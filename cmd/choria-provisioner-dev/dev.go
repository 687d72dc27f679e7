package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/choria-io/fisk"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
)

// devCommand runs the embedded default: Temporal dev server with its Web UI, a Choria broker, the
// provisioner, a demo fleet of real servers in provisioning mode and the example helper.
type devCommand struct {
	dir           string
	servers       int
	uiPort        int
	temporalPort  int
	monitorPort   int
	codecPort     int
	inMemory      bool
	temporalBin   string
	mode          string
	noProvisioner bool
	streams       bool
	dynamicConfig []string
	sqlitePragmas []string
	temporalEnv   []string
	failing       int
	// an external Temporal instead of the dev server, and how to reach it
	temporalAddress   string
	temporalNamespace string
	temporalTLS       config.TLS
	temporalAPIKey    string
	// temporalMetricsPort: the bench reads the dev server's persistence operations there
	temporalMetricsPort int
}

func (d *devCommand) register(app *fisk.Application) {
	cmd := app.Command("dev", "Runs a complete local provisioning network and provisions a demo fleet")
	cmd.Flag("dir", "State directory").Default(".state/dev").StringVar(&d.dir)
	cmd.Flag("servers", "Demo fleet size").Default("10").IntVar(&d.servers)
	cmd.Flag("ui-port", "Temporal Web UI port").Default("8233").IntVar(&d.uiPort)
	cmd.Flag("temporal-port", "Temporal frontend port").Default("7233").IntVar(&d.temporalPort)
	cmd.Flag("monitor-port", "Prometheus metrics port").Default("9464").IntVar(&d.monitorPort)
	cmd.Flag("codec-port", "Codec server port (decrypts payloads for the temporal CLI)").Default("8081").IntVar(&d.codecPort)
	cmd.Flag("mode", "Security mode of the demo network: issuer (ed25519 Organization Issuer) or pki (x509 CA)").Default("issuer").EnumVar(&d.mode, devstack.ModeIssuer, devstack.ModePKI)
	cmd.Flag("failing", "Demo: the example helper refuses the first N servers until you fix the cause (the banner says how)").Default("0").IntVar(&d.failing)
	cmd.Flag("in-memory", "Keep Temporal's state in memory instead of the state directory").UnNegatableBoolVar(&d.inMemory)
	cmd.Flag("temporal-bin", "Temporal CLI binary (default: beside this binary, or .bin/temporal)").StringVar(&d.temporalBin)
	cmd.Flag("temporal-dynamic-config", "KEY=JSON dynamic config value for the Temporal dev server (repeatable; tuning)").Hidden().StringsVar(&d.dynamicConfig)
	cmd.Flag("temporal-sqlite-pragma", "KEY=VALUE pragma for the Temporal dev server's database file (repeatable; tuning)").Hidden().StringsVar(&d.sqlitePragmas)
	cmd.Flag("temporal-env", "KEY=VALUE environment of the Temporal dev server, e.g. GOGC=100 (repeatable; tuning)").Hidden().StringsVar(&d.temporalEnv)
	cmd.Flag("temporal-metrics-port", "Port of the Temporal dev server's own /metrics (default: a random one)").Hidden().IntVar(&d.temporalMetricsPort)
	cmd.Flag("temporal-address", "Use this Temporal frontend instead of starting the dev server (no Web UI then)").StringVar(&d.temporalAddress)
	cmd.Flag("temporal-namespace", "Namespace on --temporal-address").Default("default").StringVar(&d.temporalNamespace)
	cmd.Flag("temporal-ca", "temporal.tls.ca_file for --temporal-address").ExistingFileVar(&d.temporalTLS.CAFile)
	cmd.Flag("temporal-cert", "temporal.tls.cert_file (client certificate) for --temporal-address").ExistingFileVar(&d.temporalTLS.CertFile)
	cmd.Flag("temporal-key", "temporal.tls.key_file for --temporal-address").ExistingFileVar(&d.temporalTLS.KeyFile)
	cmd.Flag("temporal-server-name", "temporal.tls.server_name for --temporal-address").StringVar(&d.temporalTLS.ServerName)
	cmd.Flag("temporal-tls", "TLS to --temporal-address with the system's CAs (Temporal Cloud with an API key)").UnNegatableBoolVar(&d.temporalTLS.Enabled)
	cmd.Flag("temporal-api-key-file", "temporal.api_key_file for --temporal-address (or "+config.APIKeyEnv+")").ExistingFileVar(&d.temporalAPIKey)
	cmd.Flag("streams", "Run the broker with Choria Streams and let the provisioner's credentials use the audit stream (audit.sink: stream)").Hidden().UnNegatableBoolVar(&d.streams)
	cmd.Flag("no-provisioner", "Run everything but the provisioner (run it with: run --config DIR/provisioner.yaml); benchmarks measure it alone").Hidden().UnNegatableBoolVar(&d.noProvisioner)
}

func (d *devCommand) run(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if d.temporalBin == "" && d.temporalAddress == "" {
		if d.temporalBin, err = devstack.FindTemporalBinary(); err != nil {
			return err
		}
	}
	dir, err := filepath.Abs(d.dir)
	if err != nil {
		return err
	}
	if d.failing < 0 || d.failing > d.servers {
		return fmt.Errorf("--failing %d: must be between 0 and --servers (%d)", d.failing, d.servers)
	}
	// a new demo of failing hosts starts unfixed
	if err := os.Remove(filepath.Join(dir, "ca-approved")); err != nil && !os.IsNotExist(err) {
		return err
	}
	started := time.Now()
	fmt.Printf("Starting Temporal, the Choria broker and %d servers in %s ...\n", d.servers, dir)
	codecURL := fmt.Sprintf("http://127.0.0.1:%d", d.codecPort)
	stack, err := devstack.StartStack(ctx, devstack.StackOptions{
		Dir: dir, Self: self, TemporalBin: d.temporalBin, Servers: d.servers, Persist: !d.inMemory,
		UI: d.temporalAddress == "", UIPort: d.uiPort, TemporalPort: d.temporalPort, MonitorPort: d.monitorPort, UICodecEndpoint: codecURL, Mode: d.mode,
		TemporalDynamicConfig: d.dynamicConfig, TemporalSQLitePragmas: d.sqlitePragmas, TemporalEnv: d.temporalEnv, TemporalMetricsPort: d.temporalMetricsPort, Failing: d.failing,
		TemporalAddress: d.temporalAddress, TemporalNamespace: d.temporalNamespace, TemporalTLS: d.temporalTLS, TemporalAPIKeyFile: d.temporalAPIKey,
		Streams: d.streams,
	})
	if err != nil {
		return err
	}
	defer stack.Stop()

	cfg, log, err := service.LoadConfig(stack.ConfigFile, "", false)
	if err != nil {
		return err
	}
	defer log.Sync()

	tokenFile := filepath.Join(dir, "codec-server.token")
	if _, err := os.Stat(tokenFile); err != nil {
		if err := os.WriteFile(tokenFile, []byte(codec.NewKey()+"\n"), 0o600); err != nil {
			return err
		}
	}
	token, err := codec.ReadToken(tokenFile)
	if err != nil {
		return err
	}
	_, cd, err := service.DataConverter(cfg)
	if err != nil {
		return err
	}
	// the Web UI has no login here, so it cannot pass a token: the codec server trusts its origin
	// for this user's browser (loopback only, CORS for that origin only, the peer's socket of this
	// user); the temporal CLI still presents the token
	uiOrigins := []string{stack.UIURL(), fmt.Sprintf("http://localhost:%d", d.uiPort)}
	if _, err := codec.Serve(ctx, fmt.Sprintf("127.0.0.1:%d", d.codecPort), cd, codec.ServerOptions{Token: token, Origins: uiOrigins, DevTrustOrigins: true}); err != nil {
		return fmt.Errorf("codec server: %w", err)
	}

	svc, err := service.New(cfg, log, service.Options{Worker: true, Discovery: true, Version: version})
	if err != nil {
		return err
	}
	// the operator commands are the product binary's, built beside this one
	product := filepath.Join(filepath.Dir(self), "choria-provisioner")

	fmt.Printf(`
  Temporal Web UI   %s/namespaces/default/workflows
  Temporal frontend %s   (temporal workflow list --address %s --query 'ProvisionOutcome="provisioned"')
  Metrics           http://127.0.0.1:%d/metrics
  Provisioner log   %s
  Configuration     %s
  Fleet             %s
  Operator CLI      %s hosts list --config %s
                    %s hosts reprovision NODE --config %s --choria-config %s
  Codec server      %s (bearer token in %s; DEV MODE: the Web UI's origin is served without it)
                    temporal workflow query --address %s --workflow-id provision:NODE --type status \
                      --codec-endpoint %s --codec-auth "Bearer $(cat %s)"
`, stack.UIURL(), stack.TemporalAddress, stack.TemporalAddress, d.monitorPort, cfg.Logfile, stack.ConfigFile, stack.Fleet.Dir,
		product, stack.ConfigFile, product, stack.ConfigFile, stack.AdminConfig,
		codecURL, tokenFile, stack.TemporalAddress, codecURL, tokenFile)
	if len(stack.Refused) > 0 {
		fmt.Printf(`  Failing hosts     the example helper refuses %s
                    until you fix the cause; each ends failed after its 5 helper attempts (~15 s).
                    Find them:  %s hosts list --outcome failed --config %s
                                %s/namespaces/default/workflows?query=%s
                    The fix:    touch %s
                    Then:       %s hosts retry --failed --config %s
`, strings.Join(stack.Refused, ", "), product, stack.ConfigFile, stack.UIURL(), url.QueryEscape(`ProvisionOutcome="failed"`),
			stack.FixFile, product, stack.ConfigFile)
	}
	fmt.Print("\nPress Ctrl-C to stop everything.\n")

	ctx, failed := context.WithCancelCause(ctx)
	defer failed(nil)
	go watchStack(ctx, stack, failed)
	go reportProgress(ctx, stack, started, log)
	if d.noProvisioner {
		<-ctx.Done()
		return stackFailure(ctx)
	}
	if err := svc.Run(ctx, nil); err != nil {
		return err
	}
	return stackFailure(ctx)
}

// watchStack prints every child of the stack that ends on its own, at once, and ends the dev
// command when the stack cannot go on without it (a benchmark waiting for the stack sees the
// process exit instead of waiting out its timeout).
func watchStack(ctx context.Context, stack *devstack.Stack, failed context.CancelCauseFunc) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-stack.Exits():
			fmt.Fprintln(os.Stderr, e.Error())
			if e.Essential {
				failed(e)
				return
			}
		}
	}
}

// stackFailure is the child exit that ended the command, if one did.
func stackFailure(ctx context.Context) error {
	var e devstack.ChildExit
	if errors.As(context.Cause(ctx), &e) {
		return e
	}
	return nil
}

// reportProgress prints once when every demo server has been provisioned (with --failing, also
// when all but the refused ones are).
func reportProgress(ctx context.Context, stack *devstack.Stack, started time.Time, log *zap.Logger) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	saidFailing := len(stack.Refused) == 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		done := 0
		for _, m := range stack.Fleet.Members {
			if devstack.Provisioned(m) {
				done++
			}
		}
		if !saidFailing && done == len(stack.Fleet.Members)-len(stack.Refused) {
			saidFailing = true
			fmt.Printf("%d demo servers provisioned in %.1fs; %d are refused by the helper until: touch %s\n",
				done, time.Since(started).Seconds(), len(stack.Refused), stack.FixFile)
		}
		if done == len(stack.Fleet.Members) {
			fmt.Printf("All %d demo servers provisioned in %.1fs (each holds a server.jwt and its written server.conf).\n", done, time.Since(started).Seconds())
			log.Info("demo fleet provisioned", zap.Int("servers", done), zap.Duration("elapsed", time.Since(started)))
			return
		}
	}
}
