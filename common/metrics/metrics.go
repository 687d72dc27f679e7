// Package metrics holds the choria_provisioner_* series that Choria Provisioner dashboards use, on
// a registry the caller owns.
package metrics

import (
	"context"
	"fmt"
	"net/http"
	httppprof "net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/choria-temporal/provisioner/common/httpserve"
)

// Metrics are the provisioner's series. Every one carries the site label.
type Metrics struct {
	Site string

	Discovered       *prometheus.CounterVec
	EventDiscovered  *prometheus.CounterVec
	DiscoverCycles   *prometheus.CounterVec
	DiscoveryErrors  *prometheus.CounterVec
	Provisioned      *prometheus.CounterVec
	ProvisionErrors  *prometheus.CounterVec
	RPCTime          *prometheus.SummaryVec
	RPCErrors        *prometheus.CounterVec
	HelperTime       *prometheus.SummaryVec
	HelperErrors     *prometheus.CounterVec
	ShutdownRequests *prometheus.CounterVec
	Paused           *prometheus.GaugeVec
	BusyWorkers      *prometheus.GaugeVec
	WorkQueueEntries *prometheus.GaugeVec
	WaitingNodes     *prometheus.GaugeVec
	// ours: of WaitingNodes, the hosts the helper deferred (they wait by design)
	DeferredNodes *prometheus.GaugeVec
	// ours: sweep sightings of hosts provisioned since the sweep began, not started again
	StaleSightings *prometheus.CounterVec
	// ours: when jwt_signing_token expires (Unix seconds); absent without one that expires
	SignerExpiry *prometheus.GaugeVec
	// ours: payloads and tasks the worker refused (not ours, or not for the workflow at hand)
	RefusedPayloads *prometheus.CounterVec
	// ours: issuances the audit sink could not take (their identity not sent, unless fail_open)
	AuditFailures *prometheus.CounterVec
	// ours: signatures and configurations refused to banned hosts
	BannedRefused *prometheus.CounterVec
	PolicyDrift   *prometheus.CounterVec
	// ours: sightings discovery refused before anything was queued or started, by reason
	SightingsRefused *prometheus.CounterVec
	// ours: host runs that ended failed, by the step they failed at (provision_errors without it)
	FailedRuns *prometheus.CounterVec
	// ours: pause and resume signals refused (not a sealed, recent request for their action and queue)
	RefusedSignals *prometheus.CounterVec
	// ours: 1 while the control state cannot be read or is not ours (discovery then holds new runs)
	ControlUnreadable *prometheus.GaugeVec
	// ours: the identities hosts hold now (their latest provisioned runs), by how soon they
	// expire (within="7d", "30d"; expired ones included), and the soonest expiry among them
	IdentitiesExpiring *prometheus.GaugeVec
	IdentityNextExpiry *prometheus.GaugeVec
	// ours: renewal as this replica's configuration has it (1 enabled) and its renew_before
	RenewalEnabled     *prometheus.GaugeVec
	RenewBeforeSeconds *prometheus.GaugeVec
	// ours: hosts the renewal runs asked to re-enter provisioning mode, by outcome (renewed,
	// unreachable, refused; renewal/api.go), once per host and run
	Renewals *prometheus.CounterVec
}

// Reasons discovery refuses a sighting, the reason label of SightingsRefused.
const (
	RefusedSize    = "size"    // a startup event or discovery reply larger than discovery reads
	RefusedInvalid = "invalid" // not a startup event or reply of a valid identity
	RefusedRate    = "rate"    // over new_hosts_rate: the next sweep finds the host again
	RefusedFull    = "full"    // a bounded queue of discovery's was full: likewise
	// Temporal could not say whether a run provisioned the host since the sighting (it was
	// unreachable): starting one could repeat a finished run on a host gone from provisioning
	// mode, so the sighting waits for a sweep that Temporal can judge
	RefusedUnjudged = "unjudged"
)

// RefusedReasons are every reason label SightingsRefused carries.
func RefusedReasons() []string {
	return []string{RefusedSize, RefusedInvalid, RefusedRate, RefusedFull, RefusedUnjudged}
}

// New registers the series on reg.
func New(reg prometheus.Registerer, site string) (*Metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "choria_provisioner_" + name, Help: help}, append([]string{"site"}, labels...))
	}
	summary := func(name, help string, labels ...string) *prometheus.SummaryVec {
		return prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "choria_provisioner_" + name, Help: help}, append([]string{"site"}, labels...))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "choria_provisioner_" + name, Help: help}, []string{"site"})
	}
	m := &Metrics{
		Site:             site,
		Discovered:       counter("discovered", "Nodes a discovery sweep handed over for provisioning (not those a run already works on)"),
		EventDiscovered:  counter("event_discovered", "Nodes handed over for provisioning on their lifecycle startup event"),
		StaleSightings:   counter("stale_sightings", "Sweep sightings dropped: the host was provisioned after the sweep began"),
		SightingsRefused: counter("sightings_refused_total", "Startup events and discovery replies refused before anything was queued or started, by reason", "reason"),
		RefusedPayloads:  counter("refused_payloads", "Payloads and tasks the worker refused: not encrypted by its key, written for another workflow, or of a workflow that is not a host's", "reason"),
		BannedRefused:    counter("banned_refused_total", "Signatures and configurations refused to a banned host (hosts ban), whatever its helper said"),
		AuditFailures:    counter("audit_failures_total", "Issuances the audit sink could not take, and ban checks that could not read it: their identity was not signed or sent (unless audit.fail_open, for issuances)"),
		PolicyDrift:      counter("policy_drift_total", "Runs that decide with a policy recorded under another configuration than this worker's (a run that outlived a configuration change, a reset run)"),
		DiscoverCycles:   counter("discover_cycles", "Discovery sweeps run"),
		DiscoveryErrors:  counter("discovery_errors", "Discovery sweeps that failed"),
		Provisioned:      counter("provisioned", "Nodes provisioned: host runs that restarted their server into its configuration, once each"),
		ProvisionErrors:  counter("provision_errors", "Host runs that ended failed, once each (a run's steps retry before it fails)"),
		FailedRuns:       counter("failed_runs_total", "Host runs that ended failed, by the step they failed at", "step"),
		RefusedSignals: counter("refused_signals_total", "Pause and resume signals refused, by reason: not sealed with the provisioner's key for "+
			"the task queue's control scope, empty, not a request for their action and queue, or stale", "reason"),
		ControlUnreadable: gauge("control_unreadable", "1 while the fleet-wide pause state cannot be read or the control workflow is not "+
			"the provisioner's: discovery then takes the fleet as paused and starts no host"),
		RPCTime:          summary("rpc_time", "Time taken by RPC requests to nodes", "rpc"),
		RPCErrors:        counter("rpc_errors", "RPC requests that failed", "rpc"),
		HelperTime:       summary("helper_time", "Time taken by the helper"),
		HelperErrors:     counter("helper_errors", "Helper runs that failed"),
		ShutdownRequests: counter("helper_shutdown_requests", "Shutdowns the helper asked for"),
		Paused:           gauge("paused", "1 when provisioning is paused"),
		BusyWorkers:      gauge("busy_workers", "Provisioning steps executing in this worker now"),
		WorkQueueEntries: gauge("work_queue_entries", "Hosts waiting for a worker (tasks in the site's task queues)"),
		WaitingNodes:     gauge("waiting_nodes", "Hosts found and not yet done (running host workflows)"),
		DeferredNodes:    gauge("deferred_nodes", "Of waiting_nodes, the hosts the helper deferred: they wait by design (running host workflows whose outcome is deferred)"),
		Renewals: counter("renewals_total", "Hosts the renewal runs asked to re-enter provisioning mode before their identity lapses, "+
			"by outcome: renewed (a run was started for it), unreachable (no reply, after retries), refused (an error reply)", "outcome"),
		SignerExpiry: gauge("signer_expiry_timestamp_seconds", "When jwt_signing_token expires, in Unix seconds: no server can be provisioned after it"),
		IdentitiesExpiring: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "choria_provisioner_identities_expiring",
			Help: "Identities hosts hold now (their latest provisioned runs) that expire within the window, those expired included"}, []string{"site", "within"}),
		IdentityNextExpiry: gauge("identity_next_expiry_timestamp_seconds", "When the soonest-expiring identity a host holds now expires, in Unix seconds (absent when none expires within 30 days or renew_before)"),
		RenewalEnabled:     gauge("renewal_enabled", "1 when this replica's configuration enables identity renewal"),
		RenewBeforeSeconds: gauge("renewal_renew_before_seconds", "renewal.renew_before: how long before its expiry an identity is renewed"),
	}
	if err := m.register(reg); err != nil {
		return nil, err
	}
	m.zero(site)
	return m, nil
}

// zero exports every series without a label of its own at 0 from the start.
func (m *Metrics) zero(site string) {
	// Every series without a label of its own is exported at 0 from the start, as the Choria
	// Provisioner exports discovered, provisioned, waiting_nodes, work_queue_entries and paused:
	// a dashboard of a fresh or failing site shows 0, not "no data".
	for _, c := range []*prometheus.CounterVec{m.Discovered, m.EventDiscovered, m.DiscoverCycles, m.DiscoveryErrors, m.Provisioned,
		m.ProvisionErrors, m.HelperErrors, m.ShutdownRequests, m.StaleSightings, m.AuditFailures, m.BannedRefused} {
		c.WithLabelValues(site).Add(0)
	}
	for _, g := range []*prometheus.GaugeVec{m.Paused, m.BusyWorkers, m.WorkQueueEntries, m.WaitingNodes, m.DeferredNodes, m.ControlUnreadable} {
		g.WithLabelValues(site).Set(0)
	}
	// and every reason of a refusal, so that an alert on its rate sees the first one
	for _, r := range RefusedReasons() {
		m.SightingsRefused.WithLabelValues(site, r).Add(0)
	}
}

// register puts every series of m on reg.
func (m *Metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Discovered, m.EventDiscovered, m.DiscoverCycles, m.DiscoveryErrors, m.Provisioned, m.ProvisionErrors, m.RPCTime, m.RPCErrors, m.HelperTime, m.HelperErrors, m.ShutdownRequests, m.Paused, m.BusyWorkers, m.WorkQueueEntries, m.WaitingNodes, m.DeferredNodes, m.StaleSightings, m.SignerExpiry, m.SightingsRefused, m.RefusedPayloads, m.AuditFailures, m.BannedRefused, m.FailedRuns, m.RefusedSignals, m.ControlUnreadable, m.PolicyDrift, m.Renewals,
		m.IdentitiesExpiring, m.IdentityNextExpiry, m.RenewalEnabled, m.RenewBeforeSeconds} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}

// SetSignerExpiry exports when jwt_signing_token expires. The zero time removes the series: a
// signer that never expires, or none at all, has no expiry to alert on (and 0 would read as
// expired in 1970).
func (m *Metrics) SetSignerExpiry(exp time.Time) {
	if exp.IsZero() {
		m.SignerExpiry.DeleteLabelValues(m.Site)
		return
	}
	m.SignerExpiry.WithLabelValues(m.Site).Set(float64(exp.Unix()))
}

// ObserveRPC records one RPC's duration and, when err is set, its failure.
func (m *Metrics) ObserveRPC(rpc string, start time.Time, err error) {
	m.RPCTime.WithLabelValues(m.Site, rpc).Observe(time.Since(start).Seconds())
	if err != nil {
		m.RPCErrors.WithLabelValues(m.Site, rpc).Inc()
	}
}

// Serve exposes /metrics from gatherer on addr until ctx ends. It returns the bound address
// (useful with port 0) once listening.
func Serve(ctx context.Context, addr string, gatherer prometheus.Gatherer, pprof bool) (string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	if pprof {
		// profiles for tuning (make bench); the monitor listens on loopback unless told otherwise
		mux.HandleFunc("/debug/pprof/", httppprof.Index)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	}
	return httpserve.Serve(ctx, "monitor", addr, mux)
}
