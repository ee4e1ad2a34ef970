package metrics

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Provider owns the meter provider and the Prometheus registry it exports
// to. Register instruments at start, from one goroutine; Handler and the
// instruments themselves are safe for concurrent use.
type Provider struct {
	reg   *prometheus.Registry
	mp    *sdkmetric.MeterProvider
	meter metric.Meter
	err   error // the first registration error, reported by Err
}

// New returns a Provider. Its registry also has the Go runtime and process
// collectors (memory, goroutines, file descriptors, CPU).
func New() (*Provider, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		// Prometheus-style names (underscores, unit and _total suffixes)
		// whatever the global name validation scheme is.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// There is one instrumentation scope; its labels on every series
		// would only add noise.
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %v", err)
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exp),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "mzproxy"))),
	)
	return &Provider{reg: reg, mp: mp, meter: mp.Meter("github.com/mzproxy/mzproxy")}, nil
}

// Meter is the meter for mzproxy's instruments.
func (p *Provider) Meter() metric.Meter { return p.meter }

// Handler serves the metrics in Prometheus' text format.
func (p *Provider) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{})
}

// Gauge registers an integer gauge whose value read() returns at each
// scrape. read must be cheap and must not block.
func (p *Provider) Gauge(name, unit, help string, read func() int64) {
	_, err := p.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(help),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(read())
			return nil
		}))
	p.keep(name, err)
}

// FloatGauge is Gauge for a fractional value (seconds, ratios).
func (p *Provider) FloatGauge(name, unit, help string, read func() float64) {
	_, err := p.meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(help),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(read())
			return nil
		}))
	p.keep(name, err)
}

// FloatGaugeSet registers a fractional gauge with one series per label
// set: read calls observe once per series at each scrape. The labels must
// come from a bounded set (see the package doc).
func (p *Provider) FloatGaugeSet(name, unit, help string, read func(observe func(v float64, labels ...attribute.KeyValue))) {
	_, err := p.meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(help),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			read(func(v float64, labels ...attribute.KeyValue) { o.Observe(v, metric.WithAttributes(labels...)) })
			return nil
		}))
	p.keep(name, err)
}

// Counter registers a monotonic counter whose running total read() returns
// at each scrape (a count the process keeps since it started).
func (p *Provider) Counter(name, unit, help string, read func() int64) {
	_, err := p.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(help),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(read())
			return nil
		}))
	p.keep(name, err)
}

func (p *Provider) keep(name string, err error) {
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("metrics: instrument %s: %v", name, err)
	}
}

// Err returns the first error from registering an instrument (a bad name
// or unit): a programming error, which the caller should treat as fatal at
// start.
func (p *Provider) Err() error { return p.err }

// Shutdown stops the meter provider.
func (p *Provider) Shutdown(ctx context.Context) error { return p.mp.Shutdown(ctx) }
