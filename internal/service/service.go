// Package service wires the provisioner process: the Choria client framework, the Temporal client
// and worker, discovery and the metrics endpoint.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/choria-io/go-choria/choria"
	cconfig "github.com/choria-io/go-choria/config"
	"github.com/choria-io/go-choria/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/common/metrics/sdkmetrics"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/discovery"
	"github.com/choria-temporal/provisioner/internal/control"
	"github.com/choria-temporal/provisioner/internal/health"
	"github.com/choria-temporal/provisioner/internal/signalgate"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// NewChoriaFramework connects as the provisioner: the Choria client config file, NATS user
// "provisioner" with broker_provisioning_password, on the provisioning collective.
func NewChoriaFramework(cfg *config.Config, log *zap.Logger) (*choria.Framework, error) {
	return NewChoriaClientFramework(cfg, discovery.ProvisioningCollective)
}

// NewFleetClientFramework is a Choria client that reaches provisioned servers: the client
// configuration file (their collective and account), not the provisioning account's password.
// `hosts reprovision` and the renewal steps ask servers with it.
func NewFleetClientFramework(cfg *config.Config, choriaConfig string) (*choria.Framework, error) {
	fleet := *cfg
	fleet.ChoriaConfig = choriaConfig
	fleet.BrokerProvisioningPassword = "" // a fleet client, not the provisioning account's
	return NewChoriaClientFramework(&fleet, "")
}

// NewChoriaClientFramework is a Choria client from cfg.ChoriaConfig; collective, when set,
// replaces the file's collectives (the provisioner lives on "provisioning"; the operator's
// reprovision reaches provisioned servers on the file's own collective).
func NewChoriaClientFramework(cfg *config.Config, collective string) (*choria.Framework, error) {
	file := cfg.ChoriaConfig
	if file == "" {
		// the Choria Provisioner's --choria-config default: the user's Choria client config
		file = choria.UserConfig()
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("%w: choria_config: not set (nor --choria-config), and the default Choria client configuration %s: %v",
				config.ErrInvalid, file, err)
		}
	}
	// go-choria's choria security provider names a client after $USER and refuses to start
	// without it; services under systemd have no $USER, and the caller ID comes from the JWT anyway.
	if _, ok := os.LookupEnv("USER"); !ok {
		_ = os.Setenv("USER", "choria-provisioner")
	}
	// read as the Choria Provisioner read it (a client configuration, project files included)
	ccfg, err := cconfig.NewConfig(file)
	if err != nil {
		return nil, fmt.Errorf("choria_config %s: %w", file, err)
	}
	if cfg.Insecure {
		// as the Choria Provisioner's choria_insecure: a plain connection to the broker and
		// unsigned requests (go-choria's switch for that is process-wide)
		ccfg.DisableTLS = true
		ccfg.Choria.SecurityProvider = "file"
		protocol.Secure = "false"
	}
	if cfg.BrokerProvisioningPassword != "" {
		ccfg.Choria.NatsUser = "provisioner"
		ccfg.Choria.NatsPass = cfg.BrokerProvisioningPassword
	}
	if collective != "" {
		ccfg.Collectives = []string{collective}
		ccfg.MainCollective = collective
	}
	if ccfg.Identity == "" {
		host, _ := os.Hostname()
		ccfg.Identity = host
	}
	// go-choria logs through logrus; keep it quiet unless debugging, our own logs say what matters
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	if strings.EqualFold(cfg.Loglevel, "debug") {
		l.SetLevel(logrus.DebugLevel)
	}
	ccfg.CustomLogger = l
	fw, err := choria.NewWithConfig(ccfg)
	if err != nil {
		return nil, fmt.Errorf("choria framework: %w", err)
	}
	return fw, nil
}

// Options choose which parts of the service run in this process.
type Options struct {
	Worker    bool
	Discovery bool
	Registry  *prometheus.Registry
	// WorkerOptions override the Temporal worker's defaults (tests, tuning).
	WorkerOptions *worker.Options
	// Version is announced in the provisioner's startup lifecycle event.
	Version string
	// IdentityRefresh is how often the identity gauges are counted (0: IdentityRefresh).
	IdentityRefresh time.Duration
}

// Service is one provisioner process.
type Service struct {
	cfg     *config.Config
	log     *zap.Logger
	opts    Options
	Metrics *metrics.Metrics
	// MonitorAddress is where /metrics listens, once Run has started it.
	MonitorAddress string
	// Health is what /healthz and /readyz report; HealthAddress is where they listen, once Run
	// has started them.
	Health        *health.Monitor
	HealthAddress string
	discoverer    atomic.Pointer[discovery.Discoverer]
	// audit is the worker's audit sink once it runs (nil: none): bans and retirements
	audit atomic.Pointer[Audit]
	// refusals logs refused payloads and results once per reason and interval (counters exact)
	refusals *logging.Summary
}

// Registry is where the service's series are collected (served on /metrics).
func (s *Service) Registry() *prometheus.Registry { return s.opts.Registry }

// Sweep runs a discovery sweep now (operators and tests; Run sweeps every interval anyway).
func (s *Service) Sweep(ctx context.Context) (int, error) {
	d := s.discoverer.Load()
	if d == nil {
		return 0, errors.New("discovery is not running in this process")
	}
	return d.Sweep(ctx)
}

// New prepares a service; Run starts it.
func New(cfg *config.Config, log *zap.Logger, opts Options) (*Service, error) {
	// before any helper runs: none may read this process's environment or memory
	if err := hardenProcess(); err != nil {
		return nil, err
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	m, err := metrics.New(opts.Registry, cfg.Site)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, opts: opts, Metrics: m, Health: health.New(), refusals: logging.NewSummary(log, "payload refused", 0)}
	s.expectComponents()
	return s, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Run runs the worker and discovery until ctx ends.
func (s *Service) Run(ctx context.Context, ready func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := s.serveHealth(ctx); err != nil {
		return err
	}
	if err := s.serveMetrics(ctx); err != nil {
		return err
	}
	fw, err := NewChoriaFramework(s.cfg, s.log)
	if err != nil {
		return err
	}
	// the SDK's own signals (schedule-to-start, slots, pollers) beside ours on /metrics
	mh, stopMetrics, err := sdkmetrics.Handler(s.opts.Registry, s.log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	var polls *pollWatch
	if s.opts.Worker {
		polls = newPollWatch(s.Health.Watch("worker", WorkerStall))
	}
	tc, err := s.dialWorker(ctx, mh, polls)
	if err != nil {
		return err
	}
	defer tc.Close()

	var rpcFw *activities.SharedFramework
	if s.opts.Worker {
		var stop func()
		if stop, rpcFw, err = s.runWorker(ctx, fw, tc); err != nil {
			return err
		}
		defer stop()
		go s.watchSigner(ctx, SignerRefresh)
		go s.watchIdentities(ctx, tc, RenewalPolicy(s.cfg), cmp.Or(s.opts.IdentityRefresh, IdentityRefresh))
	}
	go s.probeTemporal(ctx, tc, polls)
	errc := make(chan error, 1)
	if s.opts.Discovery {
		s.runDiscovery(ctx, fw, tc, errc)
	}
	go s.Health.Probe(ctx, health.Broker, HealthEvery, HealthTimeout, (&brokerWatch{rpc: rpcFw, disc: s.discoverer.Load}).probe)
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		<-ctx.Done()
	}
	return nil
}

// probeTemporal keeps the Temporal component's health: with a worker, whether it polls (polls);
// without, whether the frontend answers discovery's client.
func (s *Service) probeTemporal(ctx context.Context, tc client.Client, polls *pollWatch) {
	if polls != nil {
		s.Health.Probe(ctx, health.Temporal, HealthEvery, HealthTimeout, polls.polling)
		return
	}
	s.Health.Probe(ctx, health.Temporal, HealthEvery, HealthTimeout, func(ctx context.Context) error {
		_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	})
}

// runDiscovery starts discovery, its loop watched (it is up from its first turn), and the fleet
// gauges; Run's error goes to errc.
func (s *Service) runDiscovery(ctx context.Context, fw *choria.Framework, tc client.Client, errc chan<- error) {
	opts := s.discoveryOptions(tc)
	turn := s.Health.Watch(health.Discovery, DiscoveryStall(opts.Interval))
	opts.Turn = func() { turn(); s.Health.Set(health.Discovery, nil) }
	d := discovery.New(fw, tc, opts, s.Metrics, s.log.Named("discovery"))
	s.discoverer.Store(d)
	go func() {
		err := d.Run(ctx)
		s.Health.Unwatch(health.Discovery)
		if err != nil {
			s.Health.Set(health.Discovery, err)
		}
		errc <- err
	}()
	go s.fleetGauges(ctx, tc)
}

// discoveryOptions are discovery's options from the configuration.
func (s *Service) discoveryOptions(tc client.Client) discovery.Options {
	return discovery.Options{
		Interval:  s.cfg.IntervalDuration,
		Component: s.cfg.LifecycleComponent,
		Start:     Starter(s.cfg),
		Pause:     control.New(tc, s.cfg.Temporal.Namespace, s.cfg.Temporal.TaskQueue, nil),
		Version:   s.opts.Version,
		// per process: n replicas admit up to n times this rate (docs/configuration.md)
		NewHostsRate:  s.cfg.NewHostsRate,
		NewHostsBurst: s.cfg.NewHostsBurst,
	}
}

// serveMetrics starts /metrics when monitor_port is set: as the Choria Provisioner, on all
// interfaces unless monitor_address narrows it, with the process-wide series too (go-choria's
// choria_connector_* and the Go and process ones).
func (s *Service) serveMetrics(ctx context.Context) error {
	if s.cfg.MonitorPort <= 0 {
		return nil
	}
	addr, err := metrics.Serve(ctx, net.JoinHostPort(s.cfg.MonitorAddress, strconv.Itoa(s.cfg.MonitorPort)),
		prometheus.Gatherers{s.opts.Registry, prometheus.DefaultGatherer}, s.cfg.MonitorPprof)
	if err != nil {
		return err
	}
	s.MonitorAddress = addr
	s.log.Info("metrics listening", zap.String("url", "http://"+addr+"/metrics"))
	if s.cfg.MonitorPprof && !loopback(s.cfg.MonitorAddress) {
		s.log.Warn("monitor_pprof serves Go profiles on every address the monitor listens on; set monitor_address: 127.0.0.1",
			zap.String("address", addr))
	}
	return nil
}

// workerOptions are the configuration's worker options (or the caller's), with the
// provision_errors interceptor; the workflow cache is sized here, before the first worker.
func (s *Service) workerOptions() worker.Options {
	wo := WorkerOptions(s.cfg)
	if s.opts.WorkerOptions != nil {
		wo = *s.opts.WorkerOptions
	}
	wo.Interceptors = append(wo.Interceptors, ProvisionErrors(s.Metrics))
	if n := s.cfg.Temporal.WorkflowCacheSize; n > 0 {
		// the SDK keeps one cache per process, sized before its first worker starts
		worker.SetStickyWorkflowCacheSize(n)
	}
	return wo
}

// runWorker starts the workers with the service's activities and, with worker versioning,
// settles this build's place in the deployment before discovery starts; stop stops them.
func (s *Service) runWorker(ctx context.Context, fw *choria.Framework, tc client.Client) (stop func(), rpc *activities.SharedFramework, err error) {
	wo := s.workerOptions()
	signals, err := s.controlSignalConverter()
	if err != nil {
		return nil, nil, err
	}
	// pause and resume reach a run only as requests sealed for this queue's control scope
	wo.Interceptors = append(wo.Interceptors, signalgate.Interceptor(workflows.ControlSignals(signals, s.refusedSignal).Watch))
	acts, rpcFw, release, err := s.newActivities(fw, tc)
	if err != nil {
		return nil, nil, err
	}
	stopWorkers, err := s.startWorkers(tc, wo, acts)
	if err != nil {
		release()
		return nil, nil, err
	}
	if s.cfg.Temporal.WorkerVersioning {
		s.settleVersion(ctx, tc)
	} else {
		s.warnUnversioned(ctx, tc)
	}
	return func() { stopWorkers(); release() }, rpcFw, nil
}

// newActivities builds the worker's activities over their long-lived dependencies: the RPC
// connection, the secrets box, the audit sink; release lets go of what they hold.
func (s *Service) newActivities(fw *choria.Framework, tc client.Client) (acts *activities.Activities, rpcFw *activities.SharedFramework, release func(), err error) {
	secrets, err := secretBox(s.cfg.SecretsKeyFile)
	if err != nil {
		return nil, nil, nil, err
	}
	set, err := ActivitySettings(s.cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := []activities.Option{activities.WithRunHistory(RunHistory{Client: tc}),
		activities.WithHelperSlots(activities.NewHelperSlots(s.cfg.Workers)), activities.WithSecretBox(secrets)}
	audit, err := OpenAudit(s.cfg, auditWriter())
	if err != nil {
		return nil, nil, nil, err
	}
	if audit != nil {
		s.audit.Store(audit)
		opts = append(opts, activities.WithAudit(audit.Log, s.cfg.Audit.FailOpen))
		if audit.Index != nil {
			opts = append(opts, activities.WithBans(audit.Index))
		}
	}
	rpcFw = activities.NewSharedFramework(fw)
	release = func() {
		rpcFw.Close()
		if audit != nil {
			_ = audit.Close()
		}
	}
	return activities.New(rpcFw, set, s.Metrics, s.log, opts...), rpcFw, release, nil
}

// startWorkers starts the worker on the task queue and, with helper_rate_limit, the helper
// worker on the helper task queue, whose dispatch rate Temporal's matching service limits
// across every process (each takes at most HelperTaskSlots at once); stop stops both.
func (s *Service) startWorkers(tc client.Client, wo worker.Options, acts *activities.Activities) (stop func(), err error) {
	hwo := worker.Options{WorkerStopTimeout: DrainTimeout,
		MaxConcurrentActivityExecutionSize: HelperTaskSlots(s.cfg.Workers), TaskQueueActivitiesPerSecond: s.cfg.HelperRateLimit}
	if s.cfg.Temporal.WorkerVersioning {
		// both queues in the one version: a run's helper call goes to the helper workers of its build
		wo.DeploymentOptions = deploymentOptions(s.cfg.Temporal.TaskQueue, s.opts.Version)
		hwo.DeploymentOptions = wo.DeploymentOptions
	}
	w := worker.New(tc, s.cfg.Temporal.TaskQueue, wo)
	workflows.HostWorkflow{Policy: Policy(s.cfg), Hooks: s.workflowHooks(), Signer: acts.LocalSigner()}.Register(w)
	acts.Register(w)
	if err := s.registerRenewal(w, tc); err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("starting Temporal worker: %w", err)
	}
	s.log.Info("worker polling", zap.String("task_queue", s.cfg.Temporal.TaskQueue), zap.String("namespace", s.cfg.Temporal.Namespace),
		zap.String("build", wo.DeploymentOptions.Version.BuildID))
	if s.cfg.HelperRateLimit <= 0 {
		return w.Stop, nil
	}
	hq := workflows.HelperTaskQueue(s.cfg.Temporal.TaskQueue)
	hw := worker.New(tc, hq, hwo)
	acts.Register(hw)
	if err := hw.Start(); err != nil {
		w.Stop()
		return nil, fmt.Errorf("starting the helper worker: %w", err)
	}
	s.log.Info("helper worker polling", zap.String("task_queue", hq), zap.Int("workers", s.cfg.Workers),
		zap.Float64("per_second", s.cfg.HelperRateLimit))
	return func() { hw.Stop(); w.Stop() }, nil
}

// fleetGauges keeps the Choria Provisioner's queue gauges from Temporal: waiting_nodes was the
// hosts in its list (found, not yet done), here the running host workflows (deferred_nodes: those
// of them the helper deferred); work_queue_entries
// was the hosts in its work queue waiting for a worker, here the tasks waiting in this site's
// task queues for a worker (Temporal's approximate backlog).
func (s *Service) fleetGauges(ctx context.Context, tc client.Client) {
	running := hostruns.HostsQuery{TaskQueue: s.cfg.Temporal.TaskQueue, Running: true}
	// the hosts of running that wait by the helper's decision: ProvisionerNoProgress leaves them out
	deferred := hostruns.HostsQuery{TaskQueue: s.cfg.Temporal.TaskQueue, Running: true, Outcome: workflows.OutcomeDeferred}
	queues := []struct {
		name string
		kind enumspb.TaskQueueType
	}{
		{s.cfg.Temporal.TaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW},
		{s.cfg.Temporal.TaskQueue, enumspb.TASK_QUEUE_TYPE_ACTIVITY},
		{workflows.HelperTaskQueue(s.cfg.Temporal.TaskQueue), enumspb.TASK_QUEUE_TYPE_ACTIVITY},
	}
	backlog := func() (float64, bool) {
		total := int64(0)
		for _, q := range queues {
			resp, err := tc.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
				Namespace: s.cfg.Temporal.Namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: q.name, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
				TaskQueueType: q.kind, ReportStats: true})
			if err != nil || resp.GetStats() == nil {
				return 0, false
			}
			total += resp.GetStats().GetApproximateBacklogCount()
		}
		return float64(total), true
	}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		if resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: running.String()}); err == nil {
			s.Metrics.WaitingNodes.WithLabelValues(s.cfg.Site).Set(float64(resp.GetCount()))
		}
		if resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: deferred.String()}); err == nil {
			s.Metrics.DeferredNodes.WithLabelValues(s.cfg.Site).Set(float64(resp.GetCount()))
		}
		if n, ok := backlog(); ok {
			s.Metrics.WorkQueueEntries.WithLabelValues(s.cfg.Site).Set(n)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// secretBox is the workers' box for the helper's private keys (secrets_key_file); none is
// configured: nil, and a helper that returns a key fails its host with how to fix it.
func secretBox(file string) (*activities.SecretBox, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("secrets_key_file: %w", err)
	}
	box, err := activities.NewSecretBox(string(b))
	if err != nil {
		return nil, fmt.Errorf("secrets_key_file %s: %w", file, err)
	}
	return box, nil
}
