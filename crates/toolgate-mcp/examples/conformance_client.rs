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
use toolgate_core::SessionId;
use toolgate_core::permit::Policy;
use toolgate_core::store::{MemoryStore, Store};
use toolgate_core::{CallId, Engine, EngineConfig, Outcome, Registry, Session, SessionOptions, ToolCall, TurnOptions};
use toolgate_mcp::oauth::{Grant, OAuthConfig, Opener};
use toolgate_mcp::relay::Relay;
use toolgate_mcp::rmcp;
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
        oauth: Some(oauth_config(&scenario)?),
        ..ServerConfig::default()
    };
    let upstream = Upstream::new(SERVER, config, std::env::temp_dir(), Duration::from_secs(30))?;
    // A person is at hand: the authorization URL goes to `$BROWSER` (the conformance script
    // gives one that follows the authorization server's redirect to toolgate's loopback).
    if let Some(oauth) = upstream.oauth() {
        oauth.set_interactive(Opener::from_env());
    }
    // The server's elicitations go to a person who accepts each form as it is shown, prefilled
    // with its defaults; toolgate's client fills those into the answer (SEP-1034). In `serve`
    // they go to the calling client instead.
    upstream.set_relay(Arc::new(AcceptAsShown));
    let hub = Hub::start(engine.clone(), Vec::new(), store.clone(), vec![upstream]).await;
    let result = drive(&engine, &hub, store, &scenario).await;
    hub.shutdown(Duration::from_secs(5)).await;
    result
}

/// A person at the client who accepts every form unchanged and has no model to sample.
struct AcceptAsShown;

#[async_trait::async_trait]
#[allow(deprecated)] // sampling: deprecated by the 2026-07-28 draft, part of 2025-11-25
impl Relay for AcceptAsShown {
    async fn elicit(
        &self,
        _: &str,
        _: &SessionId,
        _: rmcp::model::ElicitRequestParams,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept))
    }

    async fn sample(
        &self,
        _: &str,
        _: &SessionId,
        _: rmcp::model::CreateMessageRequestParams,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        Err(rmcp::ErrorData::invalid_request("no model here", None))
    }
}

/// `[mcp_servers.conformance.oauth]` as a user would write it for the scenario: the client
/// the suite registered beforehand (`MCP_CONFORMANCE_CONTEXT`), the client credentials grant for
/// its `client-credentials` scenarios, and the URL of a client ID metadata document.
fn oauth_config(scenario: &str) -> Result<OAuthConfig, String> {
    let context: Value = match std::env::var("MCP_CONFORMANCE_CONTEXT") {
        Ok(raw) => serde_json::from_str(&raw).map_err(|e| format!("MCP_CONFORMANCE_CONTEXT is not JSON: {e}"))?,
        Err(_) => Value::Null,
    };
    let text = |k: &str| context.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(OAuthConfig {
        client_id: text("client_id"),
        client_secret: text("client_secret"),
        client_metadata_url: Some("https://conformance-test.local/client-metadata.json".into()),
        grant: if scenario.starts_with("auth/client-credentials") {
            Grant::ClientCredentials
        } else {
            Grant::AuthorizationCode
        },
        ..OAuthConfig::default()
    })
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
