//! Spans after the OpenTelemetry GenAI conventions, and result shape checks.

mod common;

use common::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use toolgate_core::tool::ToolOutput;
use toolgate_core::{EngineConfig, ToolError, TurnOptions};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

type Spans = Arc<Mutex<Vec<(Id, String, BTreeMap<String, String>)>>>;

/// Records every span's name and fields into the capture in progress.
struct Capture;

/// Where spans go while a test captures: one capture at a time.
static SINK: Mutex<Option<Spans>> = Mutex::new(None);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(spans) = SINK.lock().unwrap().as_ref() {
            spans
                .lock()
                .unwrap()
                .push((id.clone(), attrs.metadata().name().to_owned(), fields));
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(spans) = SINK.lock().unwrap().as_ref()
            && let Some((_, _, fields)) = spans.lock().unwrap().iter_mut().rev().find(|(i, _, _)| i == id)
        {
            values.record(&mut Fields(fields));
        }
    }
}

/// One capture at a time, through one global subscriber installed once: a scoped subscriber
/// (`set_default`) races tracing's global cache of each callsite's interest — a callsite first
/// hit while no scoped subscriber existed can stay "never" for the next one, and the span is
/// missed (1 run in 3 under CI load, even after rebuilding the cache).
static CAPTURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn spans_of(config: EngineConfig, tool: &str) -> Vec<(String, BTreeMap<String, String>)> {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Capture))
            .expect("the only global subscriber of this test binary");
    });
    let _one = CAPTURING.lock().await;
    let spans: Spans = Arc::default();
    *SINK.lock().unwrap() = Some(spans.clone());
    let failing = Arc::new(FnTool::new("fails", read_only(), |_, _| async {
        Err(ToolError::failed("no"))
    }));
    let h = harness(vec![echo("echo", read_only()), failing], config);
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[(
                "call_7",
                tool,
                "{\"note\": \"s3cr3t\", \"api_key\": \"sk-abcdefghijklmnopqrstuv\"}",
            )]),
            TurnOptions::default(),
        )
        .await;
    *SINK.lock().unwrap() = None;
    // The subscriber is global: spans of other tests running meanwhile (the output-schema test)
    // are captured too, and only this call's are kept.
    let spans = spans.lock().unwrap().clone();
    spans
        .into_iter()
        .filter(|(_, _, f)| f.get("gen_ai.tool.call.id").is_some_and(|id| id == "call_7"))
        .map(|(_, name, fields)| (name, fields))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn each_call_gets_an_execute_tool_span_with_genai_attributes() {
    let spans = spans_of(EngineConfig::default(), "echo").await;
    let (name, f) = spans
        .iter()
        .find(|(n, _)| n == "execute_tool")
        .expect("an execute_tool span");
    assert_eq!(name, "execute_tool");
    assert_eq!(f["otel.name"], "execute_tool echo");
    assert_eq!(f["otel.kind"], "internal");
    assert_eq!(f["gen_ai.operation.name"], "execute_tool");
    assert_eq!(f["gen_ai.tool.name"], "echo");
    assert_eq!(f["gen_ai.tool.call.id"], "call_7");
    assert_eq!(f["gen_ai.tool.type"], "function");
    assert_eq!(f["gen_ai.tool.description"], "a test tool");
    assert!(!f.contains_key("error.type"));
    // Arguments and results stay out of spans unless opted in.
    assert!(!f.values().any(|v| v.contains("s3cr3t")), "{f:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn failures_set_error_type_and_content_is_recorded_only_when_opted_in() {
    let spans = spans_of(EngineConfig::default(), "fails").await;
    let (_, f) = spans.iter().find(|(n, _)| n == "execute_tool").unwrap();
    assert_eq!(f["error.type"], "execution_failed");
    let config = EngineConfig {
        trace_content: true,
        ..EngineConfig::default()
    };
    let spans = spans_of(config, "echo").await;
    let (_, f) = spans.iter().find(|(n, _)| n == "execute_tool").unwrap();
    assert!(f["gen_ai.tool.call.arguments"].contains("s3cr3t"));
    assert!(f["gen_ai.tool.call.result"].contains("s3cr3t"));
    // Opted-in content is still redacted of secrets.
    for field in ["gen_ai.tool.call.arguments", "gen_ai.tool.call.result"] {
        assert!(
            !f[field].contains("sk-abcdef") && f[field].contains("[REDACTED]"),
            "{field}: {}",
            f[field]
        );
    }
}

#[tokio::test]
async fn a_result_that_breaks_its_output_schema_is_result_invalid() {
    let schema = json!({"type": "object", "properties": {"temp": {"type": "number"}}, "required": ["temp"]});
    let good = FnTool::new("good", read_only(), |_, _| async {
        Ok(ToolOutput::json(json!({"temp": 3.5})))
    })
    .output_schema(schema.clone());
    let bad = FnTool::new("bad", read_only(), |_, _| async {
        Ok(ToolOutput::json(json!({"temp": "hot"})))
    })
    .output_schema(schema);
    let h = harness(vec![Arc::new(good), Arc::new(bad)], EngineConfig::default());
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("g", "good", "{}"), ("b", "bad", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(turn.outcomes[0].entry().unwrap().content, json!({"temp": 3.5}));
    let e = &turn.outcomes[1].entry().unwrap().content["error"];
    assert_eq!(e["type"], "result_invalid");
    assert_eq!(e["errors"][0]["pointer"], "/temp");
}
