//! Shared by the MCP tests: the fixture server's path, engines and sessions.
#![allow(dead_code)]

use async_trait::async_trait;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use toolgate_core::events::{Event, EventSink};
use toolgate_core::permit::{Answer, ApprovalRequest, Approver, Policy};
use toolgate_core::{CallId, Engine, EngineConfig, Outcome, Registry, Session, SessionOptions, ToolCall, TurnOptions};
use toolgate_mcp::{Hub, ServerConfig, Upstream};

/// `target/debug/examples/fixture_upstream`, built by `cargo test` with the crate's examples.
pub fn fixture() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join("fixture_upstream");
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo test` (it builds the examples)",
        path.display()
    );
    path
}

/// A stdio entry for the fixture in `mode`.
pub fn stdio(mode: &str) -> ServerConfig {
    ServerConfig {
        command: Some(fixture().display().to_string()),
        args: vec![mode.into()],
        enabled: true,
        ..ServerConfig::default()
    }
}

/// Every event, for assertions.
#[derive(Default)]
pub struct Events(pub Mutex<Vec<Event>>);

impl EventSink for Events {
    fn emit(&self, event: &Event) {
        self.0.lock().unwrap().push(event.clone());
    }
}

impl Events {
    pub fn all(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}

/// An engine with no tools of its own, its events collected.
pub fn engine(config: EngineConfig) -> (Arc<Engine>, Arc<Events>) {
    let events = Arc::new(Events::default());
    let engine = Arc::new(Engine::new(Registry::new(), config).with_events(events.clone()));
    (engine, events)
}

/// Starts a hub over these servers (no base tools, a memory store).
pub async fn hub(
    engine: &Arc<Engine>,
    servers: Vec<(&str, ServerConfig)>,
    store: Arc<dyn toolgate_core::store::Store>,
) -> Arc<Hub> {
    let workspace = std::env::temp_dir();
    let upstreams = servers
        .into_iter()
        .map(|(name, c)| Upstream::new(name, c, workspace.clone(), std::time::Duration::from_secs(30)).unwrap())
        .collect();
    Hub::start(engine.clone(), Vec::new(), store, upstreams).await
}

/// Approves every ask with `answer`, counting them.
pub struct Counting {
    pub asks: AtomicU32,
    pub answer: Answer,
}

#[async_trait]
impl Approver for Counting {
    async fn approve(&self, _: &ApprovalRequest) -> Answer {
        self.asks.fetch_add(1, Ordering::SeqCst);
        self.answer.clone()
    }
}

/// A session allowing everything (`--yolo`).
pub fn yolo(engine: &Engine) -> Arc<Session> {
    Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            policy: Policy {
                yolo: true,
                layers: Arc::new(Vec::new()),
            },
            ..SessionOptions::default()
        },
    ))
}

/// One call through the pipeline; `(success, content)`.
pub async fn call(engine: &Engine, session: &Arc<Session>, tool: &str, args: Value) -> (bool, Value) {
    let Value::Object(args) = args else { panic!("args") };
    let call = ToolCall::new(CallId::generate(), tool, args);
    match engine.run_call(session, call, TurnOptions::default()).await {
        Outcome::Recorded { entry, success, .. } => (success, entry.content),
        Outcome::Abort { entry, .. } => (false, entry.content),
        Outcome::Restart { context } => (false, json!({"restart": context})),
    }
}

/// The error `type` of a failed call's content.
pub fn error_type(content: &Value) -> &str {
    content["error"]["type"].as_str().unwrap_or("")
}
