//! Upstream MCP servers as tools: registration, annotations, results, progress, cancellation,
//! timeouts, faults (crash, hang, garbage, no handshake), restarts, and `list_changed`
//! revoking the grants of a tool that changed.

mod common;

use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolgate_core::events::Event;
use toolgate_core::permit::{Answer, Policy};
use toolgate_core::store::{MemoryStore, Store};
use toolgate_core::tool::Annotations;
use toolgate_core::{EngineConfig, Session, SessionOptions};
use toolgate_mcp::ServerState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_registered_namespaced_filtered_and_untrusted_by_default() {
    let (engine, _) = engine(EngineConfig::default());
    let mut trusted = stdio("normal");
    trusted.trust_annotations = true;
    trusted.enabled_tools = Some(vec!["echo".into(), "add".into(), "secret".into()]);
    trusted.disabled_tools = vec!["secret".into()];
    let hub = hub(
        &engine,
        vec![("fx", stdio("normal")), ("tr", trusted)],
        Arc::new(MemoryStore::new()),
    )
    .await;
    assert!(matches!(hub.servers()["fx"], ServerState::Ready { .. }));
    let registry = engine.registry();
    let echo = registry.get("fx__echo").expect("fx__echo registered");
    assert_eq!(
        echo.tool().spec().annotations,
        Annotations::UNTRUSTED,
        "the server says read-only, but it is not trusted"
    );
    let trusted_echo = registry.get("tr__echo").expect("tr__echo");
    assert!(trusted_echo.tool().spec().annotations.read_only, "trusted hints count");
    assert!(registry.get("tr__secret").is_none(), "disabled_tools wins");
    assert!(registry.get("tr__noop").is_none(), "not in enabled_tools");
    assert!(registry.get("fx__secret").is_some());
    // The schemas travel: input, and output for `add`.
    let add = registry.get("fx__add").unwrap();
    assert_eq!(add.tool().parameters()["required"], json!(["a", "b"]));
    assert_eq!(add.tool().output_schema().unwrap()["required"], json!(["sum"]));
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_return_text_structured_results_and_errors() {
    let (engine, _) = engine(EngineConfig::default());
    let hub = hub(&engine, vec![("fx", stdio("normal"))], Arc::new(MemoryStore::new())).await;
    let session = yolo(&engine);
    let (ok, content) = call(&engine, &session, "fx__echo", json!({"text": "héllo"})).await;
    assert!(ok, "{content}");
    assert_eq!(content, json!("héllo"));
    let (ok, content) = call(&engine, &session, "fx__add", json!({"a": 2, "b": 40})).await;
    assert!(ok, "{content}");
    assert_eq!(
        content,
        json!({"sum": 42}),
        "structuredContent, validated against outputSchema"
    );
    // Arguments are validated against the server's schema before anything is sent.
    let (ok, content) = call(&engine, &session, "fx__add", json!({"a": "x"})).await;
    assert!(!ok);
    assert_eq!(error_type(&content), "invalid_arguments", "{content}");
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_event_stream_and_a_timeout_cancels_upstream() {
    let (engine, events) = engine(EngineConfig {
        timeout_ms: 400,
        deadline_ms: 400,
        ..EngineConfig::default()
    });
    let hub = hub(&engine, vec![("fx", stdio("normal"))], Arc::new(MemoryStore::new())).await;
    let session = yolo(&engine);
    let (ok, content) = call(&engine, &session, "fx__slow", json!({"ms": 200})).await;
    assert!(ok, "{content}");
    let progress = events
        .all()
        .into_iter()
        .filter(|e| matches!(e, Event::Progress { .. }))
        .count();
    assert!(progress >= 3, "progress events: {progress}");
    // `hang` never answers: the engine's timeout fires, toolgate sends notifications/cancelled,
    // and the server stays usable.
    let (ok, content) = call(&engine, &session, "fx__hang", json!({})).await;
    assert!(!ok);
    assert_eq!(error_type(&content), "timeout", "{content}");
    // The notification travels on its own; ask the server until it has heard it.
    let heard = async {
        loop {
            let (ok, content) = call(&engine, &session, "fx__cancellations", json!({})).await;
            assert!(ok, "{content}");
            if content != json!("0") {
                return content;
            }
            tokio::task::yield_now().await;
        }
    };
    let heard = tokio::time::timeout(Duration::from_secs(5), heard)
        .await
        .expect("the server heard it");
    assert_eq!(heard, json!("1"), "the server heard one notifications/cancelled");
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_extends_the_timeout_when_the_server_says_so() {
    let (engine, _) = engine(EngineConfig::default());
    let mut resets = stdio("normal");
    resets.tool_timeout_secs = Some(0.25);
    resets.timeout_resets_on_progress = true;
    resets.max_total_timeout_secs = Some(5.0);
    let mut fixed = stdio("normal");
    fixed.tool_timeout_secs = Some(0.25);
    let hub = hub(
        &engine,
        vec![("resets", resets), ("fixed", fixed)],
        Arc::new(MemoryStore::new()),
    )
    .await;
    let session = yolo(&engine);
    let (ok, content) = call(&engine, &session, "resets__slow", json!({"ms": 700})).await;
    assert!(ok, "progress every 50 ms keeps a 250 ms timeout alive: {content}");
    let (ok, content) = call(&engine, &session, "fixed__slow", json!({"ms": 700})).await;
    assert!(!ok);
    assert_eq!(error_type(&content), "timeout", "{content}");
    let (ok, content) = call(&engine, &session, "resets__hang", json!({})).await;
    assert!(!ok, "no progress, no extension");
    assert_eq!(error_type(&content), "timeout", "{content}");
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_servers_are_reported_and_the_others_keep_serving() {
    let (engine, _) = engine(EngineConfig::default());
    let mut garbage = stdio("garbage");
    garbage.startup_timeout_secs = Some(1.0);
    let mut silent = stdio("silent");
    silent.startup_timeout_secs = Some(1.0);
    let missing = toolgate_mcp::ServerConfig {
        command: Some("/nonexistent/mcp-server".into()),
        enabled: true,
        ..Default::default()
    };
    let hub = hub(
        &engine,
        vec![
            ("good", stdio("normal")),
            ("garbage", garbage),
            ("silent", silent),
            ("missing", missing),
        ],
        Arc::new(MemoryStore::new()),
    )
    .await;
    let servers = hub.servers();
    assert!(matches!(servers["good"], ServerState::Ready { .. }), "{servers:?}");
    let health = hub.health();
    for bad in ["garbage", "silent", "missing"] {
        assert!(
            health[bad].restarts >= 1 && health[bad].last_error.is_some(),
            "{bad}: {health:?}"
        );
        match &servers[bad] {
            ServerState::Failed { reason } => assert!(reason.contains(&format!("`{bad}`")), "{reason}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    match &servers["silent"] {
        ServerState::Failed { reason } => assert!(reason.contains("handshake within 1 s"), "{reason}"),
        _ => unreachable!(),
    }
    match &servers["missing"] {
        ServerState::Failed { reason } => assert!(reason.contains("cannot run"), "{reason}"),
        _ => unreachable!(),
    }
    let session = yolo(&engine);
    let (ok, content) = call(&engine, &session, "good__echo", json!({"text": "still here"})).await;
    assert!(ok, "{content}");
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_crashes_mid_call_fails_the_call_clearly_and_is_restarted() {
    let (engine, _) = engine(EngineConfig::default());
    let hub = hub(
        &engine,
        vec![("fx", stdio("normal")), ("other", stdio("normal"))],
        Arc::new(MemoryStore::new()),
    )
    .await;
    let session = yolo(&engine);
    let mut versions = hub.versions();
    let (ok, content) = call(&engine, &session, "fx__crash", json!({})).await;
    assert!(!ok);
    assert_eq!(error_type(&content), "execution_failed", "{content}");
    let message = content["error"]["message"].as_str().unwrap();
    assert!(message.contains("MCP server `fx`"), "{message}");
    // The other server never noticed.
    let (ok, _) = call(&engine, &session, "other__echo", json!({"text": "x"})).await;
    assert!(ok);
    // The restarted server lists its tools again (the registry version moves) and serves.
    let restarted = async {
        loop {
            let (ok, content) = call(&engine, &session, "fx__echo", json!({"text": "back"})).await;
            if ok {
                return content;
            }
            assert!(
                content["error"]["message"].as_str().unwrap().contains("fx"),
                "{content}"
            );
            versions.changed().await.unwrap();
        }
    };
    let content = tokio::time::timeout(Duration::from_secs(20), restarted)
        .await
        .expect("restarted within 20 s");
    assert_eq!(content, json!("back"));
    // The restart and why are on record (the console shows them); the other server has none.
    let health = hub.health();
    assert_eq!(health["fx"].restarts, 1, "{health:?}");
    assert!(
        health["fx"]
            .last_error
            .as_deref()
            .unwrap()
            .contains("exited or hung up"),
        "{health:?}"
    );
    assert!(!health.contains_key("other"), "{health:?}");
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_that_alters_an_approved_tool_drops_its_grant() {
    let (engine, events) = engine(EngineConfig::default());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hub = hub(&engine, vec![("fx", stdio("normal"))], store.clone()).await;
    let approver = Arc::new(Counting {
        asks: Default::default(),
        answer: Answer::ApproveTool,
    });
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            approver: approver.clone(),
            store: Some(store.clone()),
            policy: Policy::default(),
            ..SessionOptions::default()
        },
    ));
    hub.track(&session);
    let (ok, _) = call(&engine, &session, "fx__echo", json!({"text": "1"})).await;
    assert!(ok);
    let (ok, _) = call(&engine, &session, "fx__echo", json!({"text": "2"})).await;
    assert!(ok);
    assert_eq!(approver.asks.load(Ordering::SeqCst), 1, "approved for the session once");
    assert_eq!(store.grants(session.id()).await.unwrap(), ["fx__echo"]);
    // `change` alters echo's description and sends list_changed.
    let mut versions = hub.versions();
    versions.borrow_and_update();
    let (ok, _) = call(&engine, &session, "fx__change", json!({})).await;
    assert!(ok);
    tokio::time::timeout(Duration::from_secs(10), versions.changed())
        .await
        .expect("the registry was refreshed")
        .unwrap();
    assert!(
        engine
            .registry()
            .get("fx__echo")
            .unwrap()
            .tool()
            .description()
            .contains("elsewhere"),
        "the new definition is in force"
    );
    let changed = events.all().into_iter().find_map(|e| match e {
        Event::ToolsChanged { changed, .. } if !changed.is_empty() => Some(changed),
        _ => None,
    });
    assert_eq!(changed, Some(vec!["fx__echo".to_owned()]), "the change is reported");
    assert_eq!(
        store.grants(session.id()).await.unwrap(),
        ["fx__change"],
        "echo's stored grant is gone; the unchanged tool keeps its own"
    );
    let before = approver.asks.load(Ordering::SeqCst);
    let (ok, _) = call(&engine, &session, "fx__echo", json!({"text": "3"})).await;
    assert!(ok);
    assert_eq!(
        approver.asks.load(Ordering::SeqCst),
        before + 1,
        "the changed tool is asked about again: no silent swap after approval"
    );
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_upstreams_work_like_stdio_ones() {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(fixture())
        .args(["normal", "--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().expect("the fixture's address");
    let url = line.strip_prefix("listening ").unwrap().to_owned();
    let (engine, _) = engine(EngineConfig::default());
    let config = toolgate_mcp::ServerConfig {
        url: Some(url),
        headers: [("X-Test".to_owned(), "1".to_owned())].into(),
        enabled: true,
        ..Default::default()
    };
    let hub = hub(&engine, vec![("web", config)], Arc::new(MemoryStore::new())).await;
    let session = yolo(&engine);
    let (ok, content) = call(&engine, &session, "web__add", json!({"a": 1, "b": 2})).await;
    assert!(ok, "{content}");
    assert_eq!(content, json!({"sum": 3}));
    hub.shutdown(Duration::from_secs(5)).await;
}

/// Real servers send type names JSON Schema lacks. A tool whose schema means something plain
/// (`float`, `dict`) is served with the schema normalised, and its arguments are still checked;
/// one whose schema cannot be read (`banana`) is not served, and says so — in the server's state
/// (which `/healthz` shows) with where its schema is wrong. Never silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_with_schemas_that_do_not_compile_are_normalised_or_reported() {
    let (engine, _) = engine(EngineConfig::default());
    let hub = hub(&engine, vec![("fx", stdio("sloppy"))], Arc::new(MemoryStore::new())).await;
    let servers = hub.servers();
    let ServerState::Ready { tools, unserved } = &servers["fx"] else {
        panic!("{servers:?}");
    };
    assert_eq!(unserved.len(), 1, "{unserved:?}");
    assert_eq!(unserved[0].tool, "fx__broken");
    assert!(
        unserved[0].problem.contains("/properties/x/type"),
        "{}",
        unserved[0].problem
    );
    let health = serde_json::to_value(&servers).unwrap();
    assert_eq!(health["fx"]["unserved"][0]["tool"], "fx__broken", "{health}");
    let registry = engine.registry();
    assert!(registry.get("fx__broken").is_none());
    assert_eq!(*tools, registry.len());
    let ratio = registry.get("fx__ratio").expect("normalised and served");
    assert_eq!(ratio.tool().parameters()["properties"]["x"]["type"], "number");
    assert_eq!(ratio.tool().parameters()["properties"]["opts"]["type"], "object");
    // Served with its output schema dropped: its results are not checked against it.
    let loose = registry.get("fx__loose").expect("served");
    assert!(loose.tool().output_schema().is_none());
    let session = yolo(&engine);
    let (ok, content) = call(&engine, &session, "fx__ratio", json!({"x": 2.5})).await;
    assert!(ok, "{content}");
    assert_eq!(content, json!("x=2.5"));
    // The normalised schema still refuses what it should.
    let (ok, content) = call(&engine, &session, "fx__ratio", json!({"x": "fast"})).await;
    assert!(!ok, "{content}");
    assert_eq!(content["error"]["type"], "invalid_arguments", "{content}");
    let (ok, content) = call(&engine, &session, "fx__loose", json!({})).await;
    assert!(ok, "{content}");
    hub.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprefixed_server_s_tools_keep_their_own_names() {
    let (engine, _) = engine(EngineConfig::default());
    let mut config = stdio("normal");
    config.unprefixed = true;
    let hub = hub(&engine, vec![("fx", config)], Arc::new(MemoryStore::new())).await;
    let registry = engine.registry();
    assert!(registry.registered("echo").is_some(), "served as echo");
    assert!(registry.registered("fx__echo").is_none(), "not as fx__echo");
    let session = yolo(&engine);
    let (ok, content) = call(&engine, &session, "echo", json!({"text": "plain"})).await;
    assert!(ok, "{content}");
    assert_eq!(content, json!("plain"));
    hub.shutdown(Duration::from_secs(5)).await;
}
