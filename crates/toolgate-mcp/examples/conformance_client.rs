//! The MCP conformance suite's client under test: toolgate's own MCP client path (an upstream
//! server over streamable HTTP, supervised by a `Hub`, its tools called through the engine's
//! pipeline). `conformance client --command "conformance_client" --scenario S` appends the
//! scenario server's URL and names the scenario in `MCP_CONFORMANCE_SCENARIO`.
//!
//! Exit 0 when the scenario's calls went through, 1 with a one-line reason otherwise.

use serde_json::{Value, json};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::permit::Policy;
use toolgate_core::store::{MemoryStore, Store};
use toolgate_core::{CallId, Engine, EngineConfig, Outcome, Registry, Session, SessionOptions, ToolCall, TurnOptions};
use toolgate_mcp::{Hub, ServerConfig, ServerState, Upstream};

const SERVER: &str = "conformance";

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conformance_client: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let url = std::env::args()
        .next_back()
        .filter(|a| a.starts_with("http"))
        .ok_or("usage: conformance_client URL")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let engine = Arc::new(Engine::new(Registry::new(), EngineConfig::default()));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let config = ServerConfig {
        url: Some(url),
        enabled: true,
        ..ServerConfig::default()
    };
    let upstream = Upstream::new(SERVER, config, std::env::temp_dir(), Duration::from_secs(30))?;
    let hub = Hub::start(engine.clone(), Vec::new(), store.clone(), vec![upstream]).await;
    let result = drive(&engine, &hub, store, &scenario).await;
    hub.shutdown(Duration::from_secs(5)).await;
    result
}

async fn drive(engine: &Arc<Engine>, hub: &Arc<Hub>, store: Arc<dyn Store>, scenario: &str) -> Result<(), String> {
    match hub.servers().get(SERVER) {
        Some(ServerState::Ready { tools, .. }) => eprintln!("connected: {tools} tool(s)"),
        other => return Err(format!("the server did not connect: {other:?}")),
    }
    // The suite drives this client, not a model: every call is allowed, and still validated,
    // timed and journaled by the pipeline.
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            policy: Policy {
                yolo: true,
                layers: Arc::new(Vec::new()),
            },
            store: Some(store),
            workspace: std::env::temp_dir(),
            ..SessionOptions::default()
        },
    ));
    let calls: Vec<(String, Value)> = match scenario {
        "tools_call" => vec![(format!("{SERVER}__add_numbers"), json!({"a": 5, "b": 3}))],
        "initialize" => Vec::new(),
        // Anything else (sse-retry): call every tool the server offers, without arguments.
        _ => engine
            .registry()
            .entries()
            .map(|e| (e.name().to_string(), json!({})))
            .collect(),
    };
    for (tool, args) in calls {
        let Value::Object(args) = args else {
            return Err("arguments must be an object".into());
        };
        let call = ToolCall::new(CallId::generate(), tool.as_str(), args);
        match engine.run_call(&session, call, TurnOptions::default()).await {
            Outcome::Recorded { entry, success, .. } if success => {
                println!("{tool}: {}", entry.content_text());
            }
            Outcome::Recorded { entry, .. } | Outcome::Abort { entry, .. } => {
                return Err(format!("{tool} failed: {}", entry.content_text()));
            }
            Outcome::Restart { .. } => return Err(format!("{tool} asked for a restart")),
        }
    }
    Ok(())
}
