//! The whole loop — `Agent::run` over the HTTP adapters — against a third-party mock LLM server
//! (`@copilotkit/aimock`'s `llmock`, started here on 127.0.0.1) in all four wire formats, with
//! streaming, a malformed tool-call argument, a stream dropped midway and a 429 with Retry-After.
//!
//! `scripts/peers.sh` installs it; the tests find it through `TOOLGATE_AIMOCK` (the `llmock`
//! binary). Without it they are skipped with a message, except under `CI=true`, where they fail.

mod common;

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use toolgate_core::events::{ChannelEvents, Event};
use toolgate_core::permit::ApproveAll;
use toolgate_core::{Agent, AgentConfig, AgentStatus, Engine, EngineConfig, Registry, Session, SessionOptions};
use toolgate_llm::{ModelOptions, RetryPolicy, connect};

fn llmock() -> Option<PathBuf> {
    let found = std::env::var_os("TOOLGATE_AIMOCK")
        .map(PathBuf::from)
        .filter(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "aimock is not installed: run scripts/peers.sh and set TOOLGATE_AIMOCK"
        );
        eprintln!("skipped: aimock is not installed (scripts/peers.sh, then TOOLGATE_AIMOCK=…/llmock)");
    }
    found
}

/// A running mock server; killed on drop.
struct Mock {
    child: tokio::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Mock {
    async fn start(bin: &PathBuf, fixtures: Value) -> Mock {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fixtures.json");
        std::fs::write(&file, fixtures.to_string()).unwrap();
        let mut child = tokio::process::Command::new(bin)
            .args(["-p", "0", "-h", "127.0.0.1", "--log-level", "info", "-f"])
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start llmock");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Wait for the line that names the port (bounded, for a broken install).
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(at) = line.find("http://127.0.0.1:") {
                    return line[at..].trim().to_owned();
                }
            }
            panic!("llmock exited before listening");
        })
        .await
        .expect("llmock listens");
        // Keep draining its log so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Mock { child, base, _dir: dir }
    }

    async fn journal(&self) -> Vec<Value> {
        let body = reqwest::get(format!("{}/__aimock/journal", self.base)).await.unwrap();
        body.json().await.unwrap()
    }
}

struct Run {
    status: AgentStatus,
    text: Option<String>,
    calls: Vec<Value>,
    events: Vec<Event>,
}

async fn run_agent(spec: &str, base: &str, prompt: &str) -> Run {
    let lookup = common::Lookup::new();
    let calls = lookup.calls.clone();
    let mut registry = Registry::new();
    registry.register(Arc::new(lookup));
    let (sink, mut rx) = ChannelEvents::new();
    let engine = Arc::new(Engine::new(registry, EngineConfig::default()).with_events(Arc::new(sink)));
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            approver: Arc::new(ApproveAll),
            workspace: std::env::temp_dir(),
            ..SessionOptions::default()
        },
    ));
    let options = ModelOptions {
        base_url: Some(base.to_owned()),
        api_key: Some("test-key".into()),
        retry: RetryPolicy {
            attempts: 3,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(5),
        },
        ..ModelOptions::default()
    };
    let model = connect(spec, &options).unwrap();
    let mut agent = Agent::new(engine, session, model, AgentConfig::default());
    let run = agent.run(prompt).await;
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let calls = calls.lock().unwrap().clone();
    Run {
        status: run.status,
        text: run.text,
        calls,
        events,
    }
}

fn two_turns(arguments: &str) -> Value {
    json!({"fixtures": [
        {"match": {"userMessage": "look up a", "turnIndex": 0},
         "response": {"toolCalls": [{"id": "call_1", "name": "lookup", "arguments": arguments}]}},
        {"match": {"userMessage": "look up a", "turnIndex": 1},
         "response": {"content": "a is 1"}}
    ]})
}

#[tokio::test(flavor = "multi_thread")]
async fn every_wire_format_runs_the_loop_with_streaming() {
    let Some(bin) = llmock() else { return };
    let mock = Mock::start(&bin, two_turns("{\"key\": \"a\"}")).await;
    for (spec, base) in [
        ("openai:gpt-4.1", format!("{}/v1", mock.base)),
        ("responses:gpt-4.1", format!("{}/v1", mock.base)),
        ("anthropic:claude-sonnet-4-5", mock.base.clone()),
        ("gemini:gemini-2.5-flash", mock.base.clone()),
    ] {
        let run = run_agent(spec, &base, "look up a").await;
        assert_eq!(run.status, AgentStatus::FinalAnswer, "{spec}");
        assert_eq!(run.text.as_deref(), Some("a is 1"), "{spec}");
        assert_eq!(
            run.calls,
            vec![json!({"key": "a"})],
            "{spec}: the tool ran once with the model's arguments"
        );
    }
    let journal = mock.journal().await;
    let paths: Vec<&str> = journal.iter().filter_map(|e| e["path"].as_str()).collect();
    assert!(paths.contains(&"/v1/chat/completions"), "{paths:?}");
    assert!(paths.contains(&"/v1/responses"), "{paths:?}");
    assert!(paths.contains(&"/v1/messages"), "{paths:?}");
    assert!(
        paths.iter().any(|p| p.contains(":streamGenerateContent")),
        "Gemini was asked to stream: {paths:?}"
    );
    assert_eq!(journal.len(), 8, "two model calls per format");
    assert!(journal.iter().all(|e| e["response"]["status"] == 200));
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_tool_call_json_is_repaired_and_run() {
    let Some(bin) = llmock() else { return };
    let mock = Mock::start(&bin, two_turns("{\"key\": \"a\"")).await;
    let run = run_agent("openai:gpt-4.1", &format!("{}/v1", mock.base), "look up a").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    assert_eq!(run.calls, vec![json!({"key": "a"})]);
    let repaired = run
        .events
        .iter()
        .any(|e| matches!(e, Event::CallStarted { repair: Some(_), .. }));
    assert!(repaired, "the call is marked repaired");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_dropped_midway_is_retried_and_the_loop_goes_on() {
    let Some(bin) = llmock() else { return };
    let fixtures = json!({"fixtures": [
        {"match": {"userMessage": "look up a", "turnIndex": 0, "sequenceIndex": 0},
         "response": {"toolCalls": [{"id": "call_1", "name": "lookup", "arguments": "{\"key\": \"a\"}"}]},
         "truncateAfterChunks": 1},
        {"match": {"userMessage": "look up a", "turnIndex": 0},
         "response": {"toolCalls": [{"id": "call_1", "name": "lookup", "arguments": "{\"key\": \"a\"}"}]}},
        {"match": {"userMessage": "look up a", "turnIndex": 1}, "response": {"content": "a is 1"}}
    ]});
    let mock = Mock::start(&bin, fixtures).await;
    let run = run_agent("openai:gpt-4.1", &format!("{}/v1", mock.base), "look up a").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer);
    assert_eq!(run.calls.len(), 1, "the call ran once, from the whole answer");
    assert_eq!(mock.journal().await.len(), 3, "the dropped answer was asked again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_with_retry_after_is_waited_out() {
    let Some(bin) = llmock() else { return };
    let fixtures = json!({"fixtures": [
        {"match": {"userMessage": "hello", "sequenceIndex": 0},
         "response": {"error": {"message": "Rate limited", "type": "rate_limit_error"}, "status": 429}},
        {"match": {"userMessage": "hello"}, "response": {"content": "hi after the limit"}}
    ]});
    let mock = Mock::start(&bin, fixtures).await;
    for (spec, base) in [
        ("openai:gpt-4.1", format!("{}/v1", mock.base)),
        ("anthropic:claude-sonnet-4-5", mock.base.clone()),
    ] {
        let run = run_agent(spec, &base, "hello").await;
        assert_eq!(run.status, AgentStatus::FinalAnswer, "{spec}");
        assert_eq!(run.text.as_deref(), Some("hi after the limit"), "{spec}");
    }
    let journal = mock.journal().await;
    let statuses: Vec<i64> = journal
        .iter()
        .filter_map(|e| e["response"]["status"].as_i64())
        .collect();
    assert_eq!(statuses, vec![429, 200, 200], "one 429, honoured, then answers");
    let waited = journal[1]["timestamp"].as_i64().unwrap() - journal[0]["timestamp"].as_i64().unwrap();
    assert!(waited >= 990, "Retry-After: 1 was honoured ({waited} ms)");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_keeps_failing_ends_the_run_with_a_clear_model_error() {
    let Some(bin) = llmock() else { return };
    let fixtures = json!({"fixtures": [
        {"match": {"userMessage": "hello"}, "response": {"error": {"message": "The server is on fire", "type": "server_error"}, "status": 500}}
    ]});
    let mock = Mock::start(&bin, fixtures).await;
    let run = run_agent("openai:gpt-4.1", &format!("{}/v1", mock.base), "hello").await;
    assert_eq!(
        run.status,
        AgentStatus::ModelError(toolgate_core::ModelErrorKind::Server)
    );
    let failed = run.events.iter().find_map(|e| match e {
        Event::ModelFailed { message, .. } => Some(message.clone()),
        _ => None,
    });
    let message = failed.expect("a model_failed event");
    assert!(
        message.contains("HTTP 500")
            && message.contains("The server is on fire")
            && message.contains("after 3 attempts"),
        "{message}"
    );
}
