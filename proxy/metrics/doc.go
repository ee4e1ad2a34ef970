// Package metrics is mzproxy's metrics plumbing: an OpenTelemetry meter
// provider whose only reader is a Prometheus exporter, served over HTTP.
//
// # Where instruments are registered
//
// Values the process already keeps (connection counts, plan cache hits,
// read holds) are exported as observable instruments: the SDK calls a
// function at each scrape, so nothing on a hot path changes. They are
// listed in one place, the function registerInstruments in
// cmd/mzproxy/metrics.go, one line each:
//
//	m.Gauge("mzproxy.read_holds", "{hold}", "Read holds granted now.", func() int64 { ... })
//
// Values measured where they happen (statement and phase latencies) need
// synchronous instruments. Create them from [Provider.Meter] in
// cmd/mzproxy and hand them to the package that records them through its
// Config as go.opentelemetry.io/otel/metric types, so packages depend on
// the OpenTelemetry API only, never on this package or the SDK.
//
// # Names and labels
//
// Instrument names are OpenTelemetry's (dotted, "mzproxy." first, unit
// given separately); the exporter turns them into Prometheus names:
// mzproxy.connections.accepted with unit {connection} becomes
// mzproxy_connections_accepted_total, mzproxy.read_holds.oldest_age with
// unit s becomes mzproxy_read_holds_oldest_age_seconds. Attributes must
// come from a small fixed set (a phase, an outcome, a SQLSTATE class):
// never SQL text, user or database names, or session ids, which would
// give every scrape an unbounded number of series. The one exception is
// per-collection gauges (since lag), labeled by database and collection
// name: their number is that of the managed tables, which the operator
// controls.
package metrics
