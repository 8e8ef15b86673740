//! Logs on stderr (`RUST_LOG`, default `warn`), and — when `OTEL_EXPORTER_OTLP_ENDPOINT` is set —
//! the spans exported over OTLP/HTTP (protobuf), with W3C trace context carried across MCP in
//! `params._meta`. The exporter's standard variables apply (`OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_SERVICE_NAME`…).

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::collections::HashMap;
use std::io::IsTerminal;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The exporter, flushed and stopped by `shutdown`.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered and stops the exporter (at exit).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            eprintln!("toolgate: the OTLP exporter did not flush: {e}");
        }
    }
}

/// Sets up logging, and OTLP export when the environment asks for it. An exporter that cannot
/// be built is reported on stderr; toolgate runs on without it.
pub fn init() -> Telemetry {
    // rmcp's transport worker logs a failed connection as an ERROR with its whole error chain;
    // toolgate reports the same failure itself, in a sentence (`cannot reach the MCP server …`),
    // so by default that line is left out (RUST_LOG brings it back).
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,rmcp::transport::worker=off"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok())
        .filter(|e| !e.trim().is_empty());
    let provider = endpoint.and_then(|endpoint| match provider() {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("toolgate: OTLP export to {endpoint} is off: {e}");
            None
        }
    });
    let Some(provider) = provider else {
        let _ = tracing_subscriber::registry().with(fmt).try_init();
        return Telemetry { provider: None };
    };
    // toolgate's own spans (calls, MCP requests), whatever the log level on stderr: a target
    // matches by prefix, so this takes every toolgate crate.
    let ours = Targets::new().with_target("toolgate", LevelFilter::INFO);
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("toolgate"))
        .with_filter(ours);
    let _ = tracing_subscriber::registry().with(fmt).with(otel).try_init();
    toolgate_mcp::trace::install(inject, extract);
    Telemetry {
        provider: Some(provider),
    }
}

fn provider() -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| e.to_string())?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "toolgate".into());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The current span's context as `traceparent`/`tracestate`.
fn inject() -> HashMap<String, String> {
    let mut pairs = HashMap::new();
    TraceContextPropagator::new().inject_context(&tracing::Span::current().context(), &mut pairs);
    pairs
}

/// Parents `span` on the context these pairs carry.
fn extract(pairs: &HashMap<String, String>, span: &tracing::Span) {
    let parent = TraceContextPropagator::new().extract(pairs);
    let _ = span.set_parent(parent);
}
