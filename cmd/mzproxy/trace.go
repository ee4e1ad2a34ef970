package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Trace exporters (--trace-exporter).
const (
	traceNone   = "none"
	traceStdout = "stdout"
	traceOTLP   = "otlp"
)

// startTracing returns the tracer for statements, nil when tracing is off,
// and a function that flushes and stops the exporter.
func startTracing(cfg *config, stdout io.Writer) (trace.Tracer, func(context.Context) error, error) {
	var opt sdktrace.TracerProviderOption
	switch cfg.traceExporter {
	case traceNone:
		return nil, func(context.Context) error { return nil }, nil
	case traceStdout:
		exp, err := stdouttrace.New(stdouttrace.WithWriter(stdout))
		if err != nil {
			return nil, nil, fmt.Errorf("--trace-exporter stdout: %v", err)
		}
		// Synchronous: each span is written as it ends, so the output
		// follows the statements (a debugging aid, not for load).
		opt = sdktrace.WithSyncer(exp)
	case traceOTLP:
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(otlpTracesURL(cfg.traceEndpoint)))
		if err != nil {
			return nil, nil, fmt.Errorf("--trace-otlp-endpoint: %v", err)
		}
		// Batched: statements never wait for the collector.
		opt = sdktrace.WithBatcher(exp)
	default:
		return nil, nil, fmt.Errorf("--trace-exporter: want none, stdout or otlp, got %q", cfg.traceExporter)
	}
	tp := sdktrace.NewTracerProvider(opt,
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "mzproxy"))))
	return tp.Tracer("github.com/mzproxy/mzproxy"), tp.Shutdown, nil
}

// otlpTracesURL is the collector URL with OTLP's traces path when it has
// no path of its own (the exporter adds none to a URL).
func otlpTracesURL(endpoint string) string {
	u, err := url.Parse(endpoint) // validated by loadConfig
	if err != nil || strings.Trim(u.Path, "/") != "" {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}
