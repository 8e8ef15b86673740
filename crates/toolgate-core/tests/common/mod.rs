//! Test tools and helpers shared by the integration tests.
#![allow(dead_code)]

use async_trait::async_trait;
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;
use toolgate_core::events::{ChannelEvents, Event};
use toolgate_core::permit::{ApproveAll, Approver, Policy};
use toolgate_core::tool::{Annotations, Category, ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{Engine, EngineConfig, Registry, Session, SessionOptions, Tool, ToolError};

type Body =
    dyn Fn(ToolContext, Value) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>> + Send + Sync;

/// A tool whose body is a closure.
pub struct FnTool {
    pub name: String,
    pub schema: Value,
    pub spec: ToolSpec,
    pub output: Option<Value>,
    pub body: Arc<Body>,
}

impl FnTool {
    pub fn new<F, Fut>(name: &str, spec: ToolSpec, body: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Self {
            name: name.into(),
            schema: json!({"type": "object"}),
            spec,
            output: None,
            body: Arc::new(move |ctx, args| Box::pin(body(ctx, args))),
        }
    }

    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output = Some(schema);
        self
    }

    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = schema;
        self
    }
}

#[async_trait]
impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "a test tool"
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn output_schema(&self) -> Option<&Value> {
        self.output.as_ref()
    }
    async fn execute(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        (self.body)(ctx.clone(), args).await
    }
}

pub fn read_only() -> ToolSpec {
    ToolSpec::with_annotations(Annotations::READ_ONLY)
}

pub fn writer() -> ToolSpec {
    ToolSpec::default()
}

pub fn idempotent_writer() -> ToolSpec {
    ToolSpec::with_annotations(Annotations {
        idempotent: true,
        ..Annotations::default()
    })
}

pub fn terminal() -> ToolSpec {
    ToolSpec {
        category: Category::Terminal,
        ..read_only()
    }
}

/// An echo tool: returns its arguments.
pub fn echo(name: &str, spec: ToolSpec) -> Arc<dyn Tool> {
    Arc::new(FnTool::new(
        name,
        spec,
        |_, args| async move { Ok(ToolOutput::json(args)) },
    ))
}

pub struct Harness {
    pub engine: Arc<Engine>,
    pub session: Arc<Session>,
    pub events: UnboundedReceiver<Event>,
}

pub fn harness(tools: Vec<Arc<dyn Tool>>, config: EngineConfig) -> Harness {
    harness_with(tools, config, Arc::new(ApproveAll), Policy::default())
}

pub fn harness_with(
    tools: Vec<Arc<dyn Tool>>,
    config: EngineConfig,
    approver: Arc<dyn Approver>,
    policy: Policy,
) -> Harness {
    let mut registry = Registry::new();
    for t in tools {
        registry.register(t);
    }
    let (sink, events) = ChannelEvents::new();
    let engine = Arc::new(Engine::new(registry, config).with_events(Arc::new(sink)));
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            approver,
            policy,
            workspace: std::env::temp_dir(),
            ..SessionOptions::default()
        },
    ));
    Harness {
        engine,
        session,
        events,
    }
}

/// An OpenAI Chat Completions answer with these (id, name, arguments-text) calls.
pub fn openai_answer(calls: &[(&str, &str, &str)]) -> toolgate_core::Answer {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    toolgate_core::Answer::parse(
        toolgate_core::Format::Openai,
        &json!({"role": "assistant", "content": null, "tool_calls": calls}),
    )
    .unwrap()
}

/// Drains the events received so far.
pub fn drain(rx: &mut UnboundedReceiver<Event>) -> Vec<Event> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

/// The error type of a recorded entry, if it is an error.
pub fn error_type(o: &toolgate_core::Outcome) -> Option<String> {
    o.entry()
        .and_then(|e| e.content.pointer("/error/type"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}
