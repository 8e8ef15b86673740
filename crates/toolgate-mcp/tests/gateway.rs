//! The gateway over real HTTP on loopback: MCP clients (rmcp's) list and call tools through the
//! pipeline; refusals are `isError` results with the error JSON; the approval queue; the REST
//! face; and the attacks: no token, the client token on the approval endpoints, crafted calls
//! to tools not exposed, oversized bodies, foreign Host and Origin headers.

mod common;

use common::*;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::permit::Policy;
use toolgate_core::rules::{Layer, LayerSource, Rule};
use toolgate_core::store::{MemoryStore, Store};
use toolgate_core::{EngineConfig, SessionOptions};
use toolgate_mcp::http::HttpOptions;
use toolgate_mcp::metrics::Metrics;
use toolgate_mcp::{Gateway, Hub, Queue, Via};

const APPROVER: &str = "approver-secret";
const CLIENT: &str = "client-secret";

struct Running {
    addr: SocketAddr,
    hub: Arc<Hub>,
    shutdown: tokio_util::sync::CancellationToken,
    metrics: Arc<Metrics>,
}

/// A gateway over the fixture upstream: `fx__echo`, `fx__add` allowed, `fx__crash` denied,
/// `fx__slow` asked; bound to `listen` with an optional client token.
async fn start(listen: &str, client_token: Option<&str>, timeout_ms: u64) -> Running {
    start_via(listen, client_token, timeout_ms, Via::Queue).await
}

/// `start`, asks answered `via`.
async fn start_via(listen: &str, client_token: Option<&str>, timeout_ms: u64, via: Via) -> Running {
    let metrics = Arc::new(Metrics::default());
    let config = EngineConfig {
        timeout_ms,
        deadline_ms: timeout_ms,
        approval_timeout_ms: 10_000,
        ..EngineConfig::default()
    };
    let engine =
        Arc::new(toolgate_core::Engine::new(toolgate_core::Registry::new(), config).with_events(metrics.clone()));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut fx = stdio("normal");
    fx.disabled_tools = vec!["secret".into()];
    let hub = hub(&engine, vec![("fx", fx)], store.clone()).await;
    let rule = |t: &str| Rule::parse(t).unwrap();
    let layer = Layer {
        source: LayerSource::User,
        allow: vec![rule("fx__echo"), rule("fx__add"), rule("fx__hang"), rule("fx__noop")],
        ask: vec![rule("fx__slow")],
        deny: vec![rule("fx__crash")],
    };
    let policy = Policy {
        yolo: false,
        layers: Arc::new(vec![layer]),
    };
    let factory_store = store.clone();
    let factory: toolgate_mcp::SessionFactory = Arc::new(move || SessionOptions {
        policy: policy.clone(),
        store: Some(factory_store.clone()),
        workspace: std::env::temp_dir(),
        ..SessionOptions::default()
    });
    let queue = Queue::new(store.clone());
    let gateway = Gateway::new(engine, Some(hub.clone()), factory, via, Some(queue.clone()));
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = HttpOptions {
        listen: addr,
        client_token: client_token.map(str::to_owned),
        approver_token: APPROVER.into(),
        clients: vec![],
        allowed_hosts: vec![],
        allowed_origins: vec!["http://localhost:6274".into()],
        max_body: 64 * 1024,
    };
    options.check().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = toolgate_mcp::http::router(gateway, store, queue, metrics.clone(), options, shutdown.clone());
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    Running {
        addr,
        hub,
        shutdown,
        metrics,
    }
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.addr.port())
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.hub.shutdown(Duration::from_secs(5)).await;
    }
}

async fn client(url: String, token: Option<&str>) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(t) = token {
        config = config.auth_header(t.to_owned());
    }
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ().serve(transport).await.expect("MCP handshake")
}

fn params(name: &str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else { panic!() };
    CallToolRequestParams::new(name.to_owned()).with_arguments(args)
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_clients_list_and_call_through_the_pipeline() {
    let gw = start("127.0.0.1:0", None, 500).await;
    let mcp = client(gw.url("/mcp"), None).await;
    let tools = mcp.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"fx__echo") && names.contains(&"fx__add"), "{names:?}");
    assert!(
        !names.contains(&"fx__secret"),
        "disabled upstream tools are not exposed"
    );
    let add = tools.iter().find(|t| t.name == "fx__add").unwrap();
    assert!(add.output_schema.is_some(), "outputSchema is passed on");

    // Allowed, with structured content (whole and valid).
    let r = mcp
        .peer()
        .call_tool(params("fx__add", json!({"a": 20, "b": 22})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true));
    assert_eq!(r.structured_content, Some(json!({"sum": 42})));
    let r = mcp
        .peer()
        .call_tool(params("fx__echo", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "hi");
    assert_eq!(r.structured_content, None, "no outputSchema, no structuredContent");

    // Denied by a rule: an isError result carrying the error contract, not a JSON-RPC error.
    let r = mcp.peer().call_tool(params("fx__crash", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    let error: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(error["error"]["type"], "permission_denied", "{error}");
    assert_eq!(r.structured_content, None);

    // Invalid arguments: isError with the validation errors.
    let r = mcp
        .peer()
        .call_tool(params("fx__add", json!({"a": "two"})))
        .await
        .unwrap();
    let error: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(error["error"]["type"], "invalid_arguments", "{error}");

    // Timed out upstream: isError `timeout`.
    let r = mcp.peer().call_tool(params("fx__hang", json!({}))).await.unwrap();
    let error: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(error["error"]["type"], "timeout", "{error}");

    // A tool that does not exist (or is not exposed) is a protocol error.
    for name in ["nope", "fx__secret"] {
        let e = mcp.peer().call_tool(params(name, json!({}))).await.unwrap_err();
        assert!(e.to_string().contains("Unknown tool"), "{name}: {e}");
    }
    let _ = mcp.cancel().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_wait_in_the_queue_for_the_approver() {
    let gw = start("127.0.0.1:0", None, 5_000).await;
    let mcp = client(gw.url("/mcp"), None).await;
    let peer = mcp.peer().clone();
    let call = tokio::spawn(async move { peer.call_tool(params("fx__slow", json!({"ms": 50}))).await });
    let http = reqwest::Client::new();
    // The ask appears in the queue (wait for it, bounded).
    let pending = async {
        loop {
            let r = http
                .get(gw.url("/v1/approvals"))
                .bearer_auth(APPROVER)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let body: Value = r.json().await.unwrap();
            if let Some(first) = body["approvals"].as_array().and_then(|a| a.first()) {
                return first.clone();
            }
            tokio::task::yield_now().await;
        }
    };
    let ask = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("the ask is queued");
    assert_eq!(ask["request"]["tool"], "fx__slow");
    // Who asks, from which client, since when and until when.
    assert_eq!(ask["request"]["principal"], "local", "{ask}");
    assert!(
        ask["request"]["client"].as_str().is_some_and(|c| !c.is_empty()),
        "{ask}"
    );
    let (created, expires) = (
        ask["request"]["created_at"].as_str().unwrap(),
        ask["request"]["expires_at"].as_str().unwrap(),
    );
    assert!(created.ends_with('Z') && expires > created, "{ask}");
    let id = ask["id"].as_str().unwrap();
    // The client token cannot answer (there is none here), a wrong decision is a 400, an
    // unknown id a 404, then the approver answers.
    let r = http
        .post(gw.url(&format!("/v1/approvals/{id}")))
        .json(&json!({"decision": "approve_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .post(gw.url(&format!("/v1/approvals/{id}")))
        .bearer_auth(APPROVER)
        .json(&json!({"decision": "maybe"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = http
        .post(gw.url("/v1/approvals/no-such-id"))
        .bearer_auth(APPROVER)
        .json(&json!({"decision": "approve_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .post(gw.url(&format!("/v1/approvals/{id}")))
        .bearer_auth(APPROVER)
        .json(&json!({"decision": "approve_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let result = call.await.unwrap().unwrap();
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert_eq!(text(&result), "slept 50 ms");
    // The answered ask left the queue.
    let body: Value = http
        .get(gw.url("/v1/approvals"))
        .bearer_auth(APPROVER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["approvals"], json!([]));
    let _ = mcp.cancel().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_face_executes_lists_audits_and_reports() {
    // /v1/execute and /v1/audit need a client token even on loopback.
    let gw = start("127.0.0.1:0", Some(CLIENT), 5_000).await;
    let anonymous = reqwest::Client::new();
    for path in ["/v1/execute", "/v1/audit"] {
        let r = anonymous.post(gw.url(path)).body("{}").send().await.unwrap();
        assert!(matches!(r.status().as_u16(), 401 | 405), "{path}: {}", r.status());
    }
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {CLIENT}").parse().unwrap(),
    );
    let http = reqwest::Client::builder().default_headers(auth).build().unwrap();
    let tools: Value = http
        .get(gw.url("/v1/tools?format=anthropic"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        tools.as_array().unwrap().iter().any(|t| t["name"] == "fx__echo"),
        "{tools}"
    );
    let r = http.get(gw.url("/v1/tools?format=klingon")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    // The gateway's own origin on loopback passes; a page on another local port does not.
    let port = gw.addr.port();
    for (origin, expected) in [
        (format!("http://127.0.0.1:{port}"), 200),
        (format!("http://localhost:{port}"), 200),
        (format!("http://localhost:{}", port.wrapping_add(1)), 403),
        ("null".to_owned(), 403),
    ] {
        let r = http
            .get(gw.url("/v1/tools"))
            .header("Origin", &origin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), expected, "Origin {origin}");
    }
    let answer = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "fx__echo", "arguments": "{\"text\": \"via rest\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "fx__crash", "arguments": "{}"}}
    ]});
    let r: Value = http
        .post(gw.url("/v1/execute?session=rest-1"))
        .json(&answer)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["status"], "continue");
    assert_eq!(
        r["messages"][1],
        json!({"role": "tool", "tool_call_id": "c1", "content": "via rest"})
    );
    assert!(
        r["messages"][2]["content"]
            .as_str()
            .unwrap()
            .contains("permission_denied")
    );
    // Malformed JSON: 400 with the parser's message.
    let r = http
        .post(gw.url("/v1/execute"))
        .body("{\"role\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("EOF while parsing"), "{body}");
    // The journal has both calls of the session.
    let audit: Value = http
        .get(gw.url("/v1/audit?session=rest-1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = audit["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{audit}");
    // One row schema for every audit face: the CLI's `audit --json` keys, the hash as a string.
    let schema = toolgate_core::audit::row_json(&toolgate_core::store::JournalRow::default());
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&rows[0]), keys(&schema));
    assert_eq!(rows[0]["arguments_hash"].as_str().map(str::len), Some(16), "{audit}");
    assert!(
        rows[0]["started_at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{audit}"
    );
    let health = http.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let health: Value = health.json().await.unwrap();
    assert_eq!(health["servers"]["fx"]["state"], "ready", "{health}");
    assert_eq!(
        (health["status"].as_str(), health["store"]["state"].as_str()),
        (Some("ok"), Some("ok")),
        "{health}"
    );
    let metrics = http.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("toolgate_calls_total{tool=\"fx__echo\",outcome=\"success\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("toolgate_calls_total{tool=\"fx__crash\",outcome=\"permission_denied\"} 1"));
    assert!(metrics.contains("toolgate_call_duration_seconds_count{tool=\"fx__echo\"} 1"));
    assert!(metrics.contains("toolgate_calls_in_flight 0"));
    assert!(metrics.contains("toolgate_approvals_pending 0"));
    assert_eq!(gw.metrics.in_flight(), 0);
    gw.stop().await;
}

/// Waits (bounded) until the gateway has `n` calls in flight.
async fn until_in_flight(gw: &Running, n: usize) {
    for _ in 0..1_000 {
        if gw.metrics.in_flight() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} calls in flight, waited for {n}", gw.metrics.in_flight());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_caller_that_goes_away_cancels_its_call_and_its_row_is_closed() {
    // A 60 s limit: the call can only end sooner by being canceled.
    let gw = start("127.0.0.1:0", Some(CLIENT), 60_000).await;
    let answer = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "h1", "type": "function", "function": {"name": "fx__hang", "arguments": "{}"}}
    ]});
    let url = gw.url("/v1/execute?session=gone");
    let caller = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .bearer_auth(CLIENT)
            .json(&answer)
            .send()
            .await
    });
    until_in_flight(&gw, 1).await;
    caller.abort(); // the connection closes with the request unanswered
    until_in_flight(&gw, 0).await;
    let audit: Value = reqwest::Client::new()
        .get(gw.url("/v1/audit?session=gone"))
        .bearer_auth(CLIENT)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = audit["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{audit}");
    assert_eq!(rows[0]["call_id"], "h1");
    assert_eq!(rows[0]["outcome"], "canceled", "{audit}");
    gw.stop().await;
}

/// An MCP client written by hand: initialized over plain HTTP, so a test can drop a request's
/// connection with no `notifications/cancelled` and no DELETE.
struct RawMcp {
    http: reqwest::Client,
    url: String,
    session: String,
}

impl RawMcp {
    async fn connect(gw: &Running) -> Self {
        let mut raw = Self {
            http: reqwest::Client::new(),
            url: gw.url("/mcp"),
            session: String::new(),
        };
        let init = raw
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw\u{1b}[31m", "version": "1"}}}))
            .await
            .unwrap();
        raw.session = init.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let r = raw
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        raw
    }

    fn post(&self, body: Value) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> + use<> {
        let mut r = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if !self.session.is_empty() {
            r = r.header("Mcp-Session-Id", &self.session);
        }
        r.send()
    }

    /// Calls a tool and holds the response stream open (headers received) until aborted.
    fn call_and_hold(&self, tool: &str, arguments: Value) -> tokio::task::JoinHandle<()> {
        let call = self.post(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}),
        );
        tokio::spawn(async move {
            let response = call.await;
            std::future::pending::<()>().await;
            drop(response);
        })
    }
}

async fn audit_of(gw: &Running, tool: &str) -> Vec<Value> {
    let audit: Value = reqwest::Client::new()
        .get(gw.url(&format!("/v1/audit?tool={tool}")))
        .bearer_auth(APPROVER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    audit["rows"].as_array().unwrap().clone()
}

async fn asks(gw: &Running) -> Vec<Value> {
    let body: Value = reqwest::Client::new()
        .get(gw.url("/v1/approvals"))
        .bearer_auth(APPROVER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["approvals"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_that_drops_its_connection_mid_call_cancels_the_call() {
    let gw = start("127.0.0.1:0", None, 60_000).await;
    let raw = RawMcp::connect(&gw).await;
    let caller = raw.call_and_hold("fx__hang", json!({}));
    until_in_flight(&gw, 1).await;
    caller.abort(); // the connection closes; nothing else is said
    until_in_flight(&gw, 0).await;
    let rows = audit_of(&gw, "fx__hang").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "canceled", "{rows:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_withdrawn_when_its_client_goes_away_and_the_tool_never_runs() {
    let gw = start("127.0.0.1:0", None, 60_000).await;
    let raw = RawMcp::connect(&gw).await;
    let caller = raw.call_and_hold("fx__slow", json!({"ms": 10}));
    let mut queued = Vec::new();
    for _ in 0..1_000 {
        queued = asks(&gw).await;
        if !queued.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(queued.len(), 1, "the ask is queued");
    // The client's own name, without its control characters.
    assert_eq!(queued[0]["request"]["client"], "raw[31m", "{queued:?}");
    caller.abort();
    until_in_flight(&gw, 0).await;
    // The ask is removed as its wait ends (a write of its own): wait for it, bounded.
    for _ in 0..1_000 {
        if asks(&gw).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(asks(&gw).await, Vec::<Value>::new(), "the ask left the queue");
    let rows = audit_of(&gw, "fx__slow").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0]["outcome"].as_str(), rows[0]["may_have_run"].as_bool()),
        (Some("canceled"), Some(false)),
        "{rows:?}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacks_are_refused() {
    // Bound to every interface, reached over loopback only.
    let gw = start("0.0.0.0:0", Some(CLIENT), 5_000).await;
    let http = reqwest::Client::new();
    for path in [
        "/mcp",
        "/v1/tools",
        "/v1/audit",
        "/healthz",
        "/metrics",
        "/v1/approvals",
    ] {
        let r = http.get(gw.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} without a token");
        assert_eq!(r.content_length(), Some(0), "{path}: nothing but the status");
    }
    let r = http.get(gw.url("/v1/tools")).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = http.get(gw.url("/v1/tools")).bearer_auth(CLIENT).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // The approval endpoints refuse the client token, and the approver token is not a client's.
    let r = http
        .get(gw.url("/v1/approvals"))
        .bearer_auth(CLIENT)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .post(gw.url("/v1/approvals/x"))
        .bearer_auth(CLIENT)
        .json(&json!({"decision": "approve_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(gw.url("/v1/tools"))
        .bearer_auth(APPROVER)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // DNS rebinding: a foreign Host or Origin is refused before anything else.
    let r = http
        .get(gw.url("/v1/tools"))
        .bearer_auth(CLIENT)
        .header("Host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .get(gw.url("/v1/tools"))
        .bearer_auth(CLIENT)
        .header("Origin", "http://attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .get(gw.url("/v1/tools"))
        .bearer_auth(CLIENT)
        .header("Origin", "http://localhost:6274")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "an allowed origin passes");
    // Oversized bodies.
    let big = format!(
        "{{\"role\": \"assistant\", \"content\": \"{}\"}}",
        "x".repeat(100 * 1024)
    );
    let r = http
        .post(gw.url("/v1/execute"))
        .bearer_auth(CLIENT)
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = http
        .post(gw.url("/mcp"))
        .bearer_auth(CLIENT)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // A crafted tools/call for a tool that is not exposed is refused at the protocol level.
    let mcp = client(gw.url("/mcp"), Some(CLIENT)).await;
    let e = mcp.peer().call_tool(params("fx__secret", json!({}))).await.unwrap_err();
    assert!(e.to_string().contains("Unknown tool"), "{e}");
    // A crafted REST batch naming it gets unknown_tool, and nothing ran.
    let r: Value = http
        .post(gw.url("/v1/execute"))
        .bearer_auth(CLIENT)
        .json(
            &json!({"role": "assistant", "tool_calls": [{"id": "x", "type": "function",
            "function": {"name": "fx__secret", "arguments": "{}"}}]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        r["messages"][1]["content"].as_str().unwrap().contains("unknown_tool"),
        "{r}"
    );
    let _ = mcp.cancel().await;
    gw.stop().await;
}

/// A client that answers elicitation asks from a script, and records what it was asked.
#[derive(Clone, Default)]
struct Eliciting {
    answers: Arc<std::sync::Mutex<Vec<Value>>>,
    asked: Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Eliciting {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "eliciting-test-client", "version": "1.0.0"}
        }))
        .unwrap()
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let request = serde_json::to_value(&request).unwrap();
        self.asked
            .lock()
            .unwrap()
            .push(request["message"].as_str().unwrap_or_default().to_owned());
        let answer = self.answers.lock().unwrap().remove(0);
        Ok(serde_json::from_value(answer).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_go_to_the_client_by_elicitation_when_configured() {
    let gw = start_via("127.0.0.1:0", None, 5_000, Via::Elicitation).await;
    let handler = Eliciting::default();
    *handler.answers.lock().unwrap() = vec![
        json!({"action": "accept", "content": {"decision": "approve_once"}}),
        json!({"action": "accept", "content": {"decision": "reject", "reason": "not now"}}),
        json!({"action": "decline"}),
    ];
    let transport = StreamableHttpClientTransport::from_uri(gw.url("/mcp"));
    let mcp = handler.clone().serve(transport).await.expect("MCP handshake");
    // Approved once: the asked tool runs.
    let result = mcp.call_tool(params("fx__slow", json!({"ms": 50}))).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert_eq!(text(&result), "slept 50 ms");
    let asked = handler.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].contains("fx__slow"), "the ask names the tool: {}", asked[0]);
    // Rejected with a reason, then declined: refusals with the error contract, the tool not run.
    for expected in ["not now", "declined"] {
        let result = mcp.call_tool(params("fx__slow", json!({"ms": 60}))).await.unwrap();
        assert_eq!(result.is_error, Some(true));
        let body: Value = serde_json::from_str(&text(&result)).unwrap();
        assert_eq!(body["error"]["type"], "rejected_by_user", "{body}");
        assert!(body.to_string().contains(expected), "{body}");
    }
    assert_eq!(
        handler.asked.lock().unwrap().len(),
        3,
        "one ask per call (approve_once)"
    );
    let _ = mcp.cancel().await;
    // A client without the elicitation capability cannot be asked: the ask is denied.
    let plain = client(gw.url("/mcp"), None).await;
    let result = plain.call_tool(params("fx__slow", json!({"ms": 70}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    let body: Value = serde_json::from_str(&text(&result)).unwrap();
    assert_eq!(body["error"]["type"], "permission_denied", "{body}");
    assert_eq!(body["error"]["source"], "non_interactive_deny", "{body}");
    let _ = plain.cancel().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_503_when_the_gateway_cannot_serve() {
    let engine = Arc::new(toolgate_core::Engine::new(
        toolgate_core::Registry::new(),
        EngineConfig::default(),
    ));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut down = stdio("normal");
    down.command = Some("/nonexistent/toolgate-upstream".into());
    let hub = hub(&engine, vec![("down", down)], store.clone()).await;
    let factory: toolgate_mcp::SessionFactory = Arc::new(SessionOptions::default);
    let queue = Queue::new(store.clone());
    let gateway = Gateway::new(engine, Some(hub.clone()), factory, Via::Queue, Some(queue.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = HttpOptions {
        listen: addr,
        client_token: None,
        approver_token: APPROVER.into(),
        clients: vec![],
        allowed_hosts: vec![],
        allowed_origins: vec![],
        max_body: 64 * 1024,
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = toolgate_mcp::http::router(
        gateway,
        store,
        queue,
        Arc::new(Metrics::default()),
        options,
        shutdown.clone(),
    );
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    let r = reqwest::get(format!("http://127.0.0.1:{}/healthz", addr.port()))
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        503,
        "no tool can be served: a load balancer must take this replica out"
    );
    let health: Value = r.json().await.unwrap();
    assert_eq!(health["status"], "unavailable", "{health}");
    assert_eq!(health["servers"]["down"]["state"], "failed", "{health}");
    assert!(
        health["servers"]["down"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{health}"
    );
    shutdown.cancel();
    hub.shutdown(Duration::from_secs(5)).await;
}

/// One `tools/call` as a 2026-07-28 client sends it: no handshake, the revision's headers and
/// `_meta`, in session `session`; `extra` is merged into the params (`requestState`,
/// `inputResponses`). The JSON-RPC response, read from JSON or from the event stream.
async fn stateless_call(
    gw: &Running,
    session: &str,
    elicits: bool,
    tool: &str,
    arguments: Value,
    extra: Value,
) -> Value {
    let capabilities = if elicits { json!({"elicitation": {}}) } else { json!({}) };
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "stateless-test", "version": "1"},
    }});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    let response = reqwest::Client::new()
        .post(gw.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .header("X-Toolgate-Session", session)
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}))
        .send()
        .await
        .unwrap();
    let body = response.text().await.unwrap();
    let json = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| d.contains("\"id\""))
        .unwrap_or(&body);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A 2026-07-28 client cannot be sent `elicitation/create`, so an ask is its call's answer: an
/// `InputRequiredResult` with the form and a `requestState`. The retry with the answer runs the
/// tool once. The state is honoured only for the call it was made for: not forged, not for other
/// arguments or another session, not twice. Nothing runs and nothing is journalled until then.
#[tokio::test]
async fn a_stateless_client_is_asked_by_input_required_and_its_answer_holds_once() {
    let gw = start_via("127.0.0.1:0", None, 10_000, Via::Elicitation).await;
    let args = json!({"ms": 10});
    let first = stateless_call(&gw, "s1", true, "fx__slow", args.clone(), json!({})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let form = &result["inputRequests"]["approval"];
    assert_eq!(form["method"], "elicitation/create", "{first}");
    assert!(
        form["params"]["message"].as_str().unwrap().contains("fx__slow"),
        "{form}"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert!(
        audit_of(&gw, "fx__slow").await.is_empty(),
        "asking ran or journalled the call"
    );

    let approve = json!({"approval": {"action": "accept", "content": {"decision": "approve_once"}}});
    let with = |state: &str| json!({"requestState": state, "inputResponses": approve.clone()});
    let refused = |r: &Value| r["error"]["code"] == -32602 && r["error"]["data"]["reason"] == "invalid_request_state";
    // Forged, for other arguments, from another session: refused alike, and nothing runs.
    for (session, arguments, state) in [
        ("s1", args.clone(), "0123456789abcdef0123456789abcdef".to_owned()),
        ("s1", args.clone(), "../../etc".to_owned()),
        ("s1", json!({"ms": 11}), state.clone()),
        ("s2", args.clone(), state.clone()),
    ] {
        let r = stateless_call(&gw, session, true, "fx__slow", arguments.clone(), with(&state)).await;
        assert!(refused(&r), "{session} {arguments} {state}: {r}");
    }
    assert!(audit_of(&gw, "fx__slow").await.is_empty());

    // The call it was made for, answered: it runs once.
    let done = stateless_call(&gw, "s1", true, "fx__slow", args.clone(), with(&state)).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    let rows = audit_of(&gw, "fx__slow").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "success");
    assert_eq!(rows[0]["source"], "user_approved", "{rows:?}");
    // A spent state does not run it again.
    let again = stateless_call(&gw, "s1", true, "fx__slow", args.clone(), with(&state)).await;
    assert!(refused(&again), "{again}");
    assert_eq!(audit_of(&gw, "fx__slow").await.len(), 1);

    // A declined form is a rejection; a client that cannot elicit is refused, not sent a form.
    let first = stateless_call(&gw, "s1", true, "fx__slow", args.clone(), json!({})).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let declined = json!({"requestState": state, "inputResponses": {"approval": {"action": "decline"}}});
    let r = stateless_call(&gw, "s1", true, "fx__slow", args.clone(), declined).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r).contains("rejected_by_user"), "{r}");
    let r = stateless_call(&gw, "s3", false, "fx__slow", args.clone(), json!({})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r).contains("non_interactive_deny"), "{r}");
    gw.stop().await;
}

fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
