// Package sdkmetrics puts the Temporal SDK's own series on the provisioner's Prometheus
// registry. It stands apart from package metrics because it is client code (a Temporal client's
// MetricsHandler): the activities and, through them, the deterministic workflows package count
// through package metrics, and so import no Temporal client.
package sdkmetrics

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.uber.org/zap"
)

// LatencyBuckets are the bounds, in seconds, of the Temporal SDK's latency histograms on
// /metrics: OpenTelemetry's default bounds (0 to 10,000) suit milliseconds, and the SDK records
// seconds, which would put every schedule-to-start latency in the first bucket.
var LatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Handler is a Temporal SDK metrics handler whose series (temporal_*: schedule-to-start
// latencies, task slots available and used, pollers, workflow task replay and execution
// latencies, ...) are collected on reg beside the choria_provisioner_* series, through
// OpenTelemetry's Prometheus exporter. Set it as the Temporal client's MetricsHandler; the
// workers made from that client report through it. Shutdown stops the meter provider.
func Handler(reg prometheus.Registerer, log *zap.Logger) (handler client.MetricsHandler, shutdown func(), err error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("registering the Temporal SDK's metrics: %w", err)
	}
	seconds := sdkmetric.NewView(
		sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: LatencyBuckets}},
	)
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(seconds))
	h := temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: provider.Meter("temporal-sdk-go"),
		// the SDK's counters only grow; monotonic ones are Prometheus counters, not gauges
		UseMonotonicCounters: true,
		// an instrument the exporter refuses is a missing series, not a reason to stop the worker
		// (the handler's default is to panic)
		OnError: func(err error) { log.Warn("Temporal SDK metric not exported", zap.Error(err)) },
	})
	return &selective{inner: h}, func() { _ = provider.Shutdown(context.Background()) }, nil
}

// perRequest are the SDK's series of every gRPC call to Temporal, the bulk of its recording
// (~9 % of the provisioner's CPU in a burst, most of it building OpenTelemetry attribute sets
// for the tags of each call). They say nothing the tuning signals and our rpc series do not;
// failed and throttled requests (temporal_request_failure, ..._resource_exhausted) are kept.
var perRequest = map[string]bool{
	"temporal_request": true, "temporal_request_latency": true,
	"temporal_request_attempt": true, "temporal_request_latency_attempt": true,
	"temporal_long_request": true, "temporal_long_request_latency": true,
	"temporal_long_request_attempt": true, "temporal_long_request_latency_attempt": true,
}

// selective is a metrics handler that drops the per-request series, and applies tags only when
// a series it keeps is made from it: the SDK tags a handler for every call before it knows which
// series it will record.
type selective struct {
	inner client.MetricsHandler
	tags  map[string]string

	once   sync.Once
	tagged client.MetricsHandler
}

func (s *selective) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(s.tags)+len(tags))
	for k, v := range s.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &selective{inner: s.inner, tags: merged}
}

func (s *selective) handler() client.MetricsHandler {
	s.once.Do(func() {
		s.tagged = s.inner
		if len(s.tags) > 0 {
			s.tagged = s.inner.WithTags(s.tags)
		}
	})
	return s.tagged
}

func (s *selective) Counter(name string) client.MetricsCounter {
	if perRequest[name] {
		return client.MetricsNopHandler.Counter(name)
	}
	return s.handler().Counter(name)
}

func (s *selective) Gauge(name string) client.MetricsGauge {
	return s.handler().Gauge(name)
}

func (s *selective) Timer(name string) client.MetricsTimer {
	if perRequest[name] {
		return client.MetricsNopHandler.Timer(name)
	}
	return s.handler().Timer(name)
}
