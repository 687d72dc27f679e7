// Package monitoring holds the Grafana dashboard and the Prometheus alert rules for the
// provisioner, and their tests: every query parses and names only series the provisioner or
// the Temporal SDK exports, and promtool unit-tests every alert. A module of its own, so that
// Prometheus (promtool and its PromQL parser) never enters the product's dependency graph.
package monitoring
