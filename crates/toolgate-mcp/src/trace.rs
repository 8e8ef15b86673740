//! Trace context across MCP: W3C `traceparent` (and `tracestate`) travel in `params._meta`, as
//! the OpenTelemetry MCP conventions say. The telemetry pipeline lives in the binary; it plugs
//! its propagator in here so this crate does not depend on an exporter.

use rmcp::model::{MetaObject, RequestMetaObject};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Reads the current span's context as `traceparent`/`tracestate` pairs.
pub type Inject = fn() -> HashMap<String, String>;
/// Makes a span the child of the context carried by these pairs.
pub type Extract = fn(&HashMap<String, String>, &tracing::Span);

static INJECT: OnceLock<Inject> = OnceLock::new();
static EXTRACT: OnceLock<Extract> = OnceLock::new();

/// Installs the propagator (once, at start, when OTLP export is on).
pub fn install(inject: Inject, extract: Extract) {
    let _ = INJECT.set(inject);
    let _ = EXTRACT.set(extract);
}

/// `_meta` for an outgoing request, when there is a context to carry.
pub(crate) fn request_meta() -> Option<RequestMetaObject> {
    let inject = INJECT.get()?;
    let pairs = inject();
    if pairs.is_empty() {
        return None;
    }
    let mut meta = RequestMetaObject::new();
    for (k, v) in pairs {
        meta.0.0.insert(k, Value::String(v));
    }
    Some(meta)
}

/// Parents `span` on the context an incoming request's `_meta` carries, if any.
pub(crate) fn adopt(meta: &MetaObject, span: &tracing::Span) {
    let Some(extract) = EXTRACT.get() else {
        return;
    };
    let pairs: HashMap<String, String> = ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|k| {
            meta.0
                .get(k)
                .and_then(Value::as_str)
                .map(|v| (k.to_owned(), v.to_owned()))
        })
        .collect();
    if !pairs.is_empty() {
        extract(&pairs, span);
    }
}
