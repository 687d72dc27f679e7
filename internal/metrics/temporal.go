package metrics

import (
	"context"
	"fmt"

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

// TemporalHandler is a Temporal SDK metrics handler whose series (temporal_*: schedule-to-start
// latencies, task slots available and used, pollers, workflow task replay and execution
// latencies, ...) are collected on reg beside the choria_provisioner_* series, through
// OpenTelemetry's Prometheus exporter. Set it as the Temporal client's MetricsHandler; the
// workers made from that client report through it. Shutdown stops the meter provider.
func TemporalHandler(reg prometheus.Registerer, log *zap.Logger) (handler client.MetricsHandler, shutdown func(), err error) {
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
	return h, func() { _ = provider.Shutdown(context.Background()) }, nil
}
