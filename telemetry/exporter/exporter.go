// Package exporter installs an OpenTelemetry span exporter for Weft's
// telemetry (package telemetry) from environment variables. It is apart
// from package telemetry so that an application embedding Weft's runner
// without exporting spans neither links nor requires the OTLP exporter and
// the gRPC modules it depends on.
//
// Setup installs an exporter from environment variables; a process that
// never calls it exports nothing:
//
//	WEFT_OTEL                           none (default), stdout or otlp
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  full traces URL, used as is
//	OTEL_EXPORTER_OTLP_ENDPOINT         base URL; /v1/traces is appended
//	                                    (default http://localhost:4318)
//	OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL only http/protobuf is supported
//	OTEL_SERVICE_NAME                   resource service.name (default weft)
//
// The exporter also reads OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, _TIMEOUT,
// _COMPRESSION and _CERTIFICATE from the process environment. The
// shutdown function Setup returns flushes batched spans; call it before
// exit.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The environment variables Setup reads.
const (
	// EnvExporter selects the span exporter: "stdout", "otlp", or
	// "none"/unset for no exporter.
	EnvExporter = "WEFT_OTEL"
	// EnvOTLPEndpoint is the standard base URL of an OTLP/HTTP collector;
	// "/v1/traces" is appended to its path.
	EnvOTLPEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	// EnvOTLPTracesEndpoint is the standard full URL traces are posted to,
	// used as is; it wins over EnvOTLPEndpoint.
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	// EnvOTLPProtocol is the standard OTLP protocol variable; only
	// "http/protobuf" (the default) is supported.
	EnvOTLPProtocol = "OTEL_EXPORTER_OTLP_PROTOCOL"
	// EnvOTLPTracesProtocol is the traces-specific protocol variable; it
	// wins over EnvOTLPProtocol.
	EnvOTLPTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	// EnvServiceName is the standard service name of the exported spans'
	// resource (default "weft").
	EnvServiceName = "OTEL_SERVICE_NAME"
)

// ShutdownTimeout bounds the flush of Setup's shutdown when its context has
// no deadline.
const ShutdownTimeout = 5 * time.Second

// DefaultOTLPEndpoint is the traces URL used when WEFT_OTEL=otlp and no
// endpoint variable is set: the OTLP/HTTP default of a local collector.
const DefaultOTLPEndpoint = "http://localhost:4318/v1/traces"

// Setup installs a global tracer provider (and the W3C trace-context
// propagator) from the environment read through getenv:
//
//   - WEFT_OTEL unset, empty or "none": nothing is installed; spans go to
//     the global no-op provider.
//   - WEFT_OTEL=stdout: spans are exported as JSON lines to stderr.
//   - WEFT_OTEL=otlp: spans are exported as OTLP/HTTP protobuf to
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (a full URL, used as is), else
//     OTEL_EXPORTER_OTLP_ENDPOINT + "/v1/traces", else
//     DefaultOTLPEndpoint. An http:// URL is sent in clear, https:// over
//     TLS.
//
// Any other WEFT_OTEL value, an endpoint that is not an http(s) URL, or an
// OTLP protocol other than http/protobuf is an error: a typo never
// silently disables tracing. The exporter itself also honours the other
// standard OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression,
// certificates), read from the process environment. OTEL_SERVICE_NAME names
// the resource (default "weft").
//
// Spans are batched. The returned shutdown flushes every span ended so far
// to the exporter and stops it; call it once, before the process exits. A
// ctx without a deadline is bounded by ShutdownTimeout, so an unreachable
// collector cannot hold the exit; the error then says what was lost. It is
// never nil, even when nothing was installed.
func Setup(getenv func(string) string) (shutdown func(context.Context) error, err error) {
	var exp sdktrace.SpanExporter
	switch v := getenv(EnvExporter); v {
	case "", "none":
		return func(context.Context) error { return nil }, nil
	case "stdout":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
	case "otlp":
		exp, err = otlpExporter(getenv)
	default:
		return nil, fmt.Errorf("telemetry: %s=%q: want stdout, otlp or none", EnvExporter, v)
	}
	if err != nil {
		return nil, err
	}
	name := getenv(EnvServiceName)
	if name == "" {
		name = "weft"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ShutdownTimeout)
			defer cancel()
		}
		ferr := tp.ForceFlush(ctx)
		return errors.Join(ferr, tp.Shutdown(ctx))
	}, nil
}

// otlpExporter builds the OTLP/HTTP exporter from the endpoint variables.
func otlpExporter(getenv func(string) string) (sdktrace.SpanExporter, error) {
	proto := getenv(EnvOTLPTracesProtocol)
	if proto == "" {
		proto = getenv(EnvOTLPProtocol)
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, fmt.Errorf("telemetry: OTLP protocol %q is not supported: use http/protobuf", proto)
	}
	endpoint, err := OTLPEndpoint(getenv)
	if err != nil {
		return nil, err
	}
	return otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
}

// OTLPEndpoint returns the URL Setup posts OTLP traces to, from the
// standard variables read through getenv (see Setup), or an error when the
// chosen variable is not an http(s) URL with a host.
func OTLPEndpoint(getenv func(string) string) (string, error) {
	name, raw := EnvOTLPTracesEndpoint, getenv(EnvOTLPTracesEndpoint)
	signal := raw != ""
	if !signal {
		name, raw = EnvOTLPEndpoint, getenv(EnvOTLPEndpoint)
	}
	if raw == "" {
		return DefaultOTLPEndpoint, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("telemetry: %s=%q: want an http:// or https:// URL", name, raw)
	}
	if !signal {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}
