//! Every message shape toolgate writes — assistant messages echoing parallel calls, text beside
//! calls, successful and failed results, a repaired call, the final answer — and every request
//! body its adapters send, validated with the providers' official Python SDK types
//! (`scripts/validate_wire.py`: openai, anthropic, google-genai).
//!
//! `scripts/peers.sh` installs the SDKs into a virtualenv; the test finds its interpreter through
//! `TOOLGATE_PYTHON`. Without it the test is skipped with a message, except under `CI=true`.

mod common;

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use toolgate_core::permit::ApproveAll;
use toolgate_core::{
    Agent, AgentConfig, AgentStatus, Answer, CancellationToken, Engine, EngineConfig, Format, Model, ModelError,
    ModelErrorKind, ModelRequest, Registry, Session, SessionOptions, TurnOptions,
};
use toolgate_llm::{Provider, Shape};

struct Scripted(Format, Mutex<VecDeque<Value>>);

#[async_trait]
impl Model for Scripted {
    fn format(&self) -> Format {
        self.0
    }
    fn describe(&self) -> String {
        "scripted:shapes".into()
    }
    async fn complete(&self, _: &ModelRequest, _: &CancellationToken) -> Result<Answer, ModelError> {
        let body = self.1.lock().unwrap().pop_front().unwrap_or(Value::Null);
        Answer::parse(self.0, &body).map_err(|e| ModelError::new(ModelErrorKind::InvalidResponse, e.0))
    }
}

/// The model's scripted answers in each format: a first answer with text and three calls (one
/// succeeds, one fails in the tool, one has cut-off arguments that are repaired), then a final text.
fn script(format: Format) -> Vec<Value> {
    let text_answer = |t: &str| match format {
        Format::Openai => json!({"role": "assistant", "content": t}),
        Format::Responses => {
            json!({"output": [{"type": "message", "id": "msg_2", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []}]}]})
        }
        Format::Anthropic => {
            json!({"role": "assistant", "content": [{"type": "text", "text": t}], "stop_reason": "end_turn"})
        }
        Format::Gemini => {
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "finishReason": "STOP"}]})
        }
        _ => Value::String(t.into()),
    };
    let first = match format {
        Format::Openai => json!({"role": "assistant", "content": "Checking three keys.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\": \"a\"}"}},
            {"id": "call_m", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\": \"missing\"}"}},
            {"id": "call_c", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\": \"c\""}}]}),
        Format::Responses => json!({"output": [
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "Checking three keys.", "annotations": []}]},
            {"type": "function_call", "id": "fc_a", "call_id": "call_a", "name": "lookup", "arguments": "{\"key\": \"a\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_m", "call_id": "call_m", "name": "lookup", "arguments": "{\"key\": \"missing\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_c", "call_id": "call_c", "name": "lookup", "arguments": "{\"key\": \"c\"", "status": "completed"}]}),
        Format::Anthropic => json!({"role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "text", "text": "Checking three keys."},
            {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"key": "a"}},
            {"type": "tool_use", "id": "toolu_m", "name": "lookup", "input": {"key": "missing"}},
            {"type": "tool_use", "id": "toolu_c", "name": "lookup", "input": "{\"key\": \"c\""}]}),
        Format::Gemini => json!({"candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [
            {"text": "Checking three keys."},
            {"functionCall": {"name": "lookup", "args": {"key": "a"}}},
            {"functionCall": {"name": "lookup", "args": {"key": "missing"}}},
            {"functionCall": {"name": "lookup", "args": {"key": "c"}}}]}}]}),
        _ => Value::String("I will look it up.\n```json\n{\"tool\": \"lookup\", \"parameters\": {\"key\": \"a\"}, \"reasoning\": \"need it\"}\n```".into()),
    };
    vec![first, text_answer("All keys checked.")]
}

async fn conversation(format: Format, provider: Provider, native_tools: bool) -> Value {
    let mut registry = Registry::new();
    registry.register(Arc::new(common::Lookup::new()));
    let engine = Arc::new(Engine::new(registry, EngineConfig::default()));
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            approver: Arc::new(ApproveAll),
            workspace: std::env::temp_dir(),
            ..SessionOptions::default()
        },
    ));
    let model = Arc::new(Scripted(format, Mutex::new(script(format).into())));
    let config = AgentConfig {
        system: Some("You are careful.".into()),
        ..AgentConfig::default()
    };
    let mut agent = Agent::new(engine.clone(), session, model, config);
    let run = agent.run("Look up a, missing and c.").await;
    assert_eq!(run.status, AgentStatus::FinalAnswer, "{format}: {:?}", run.detail);
    // A second prompt after the answer: Anthropic and Gemini join it to the last user message.
    let mut messages = agent.history().to_vec();
    toolgate_core::formats::push_user_text(format, &mut messages, "Thanks. And b?");
    let shape = Shape {
        provider,
        model: "model-x".into(),
        base_url: "http://127.0.0.1:9".into(),
        stream: true,
        native_tools,
        max_tokens: 1024,
        dialect: Default::default(),
    };
    let request = shape.request(&ModelRequest {
        format,
        system: Some("You are careful.".into()),
        messages: messages.clone(),
        tools: engine.tool_list(format, &TurnOptions::default()),
        model: None,
        iteration: 3,
    });
    json!({"messages": messages, "request": request.body})
}

fn python() -> Option<PathBuf> {
    let found = std::env::var_os("TOOLGATE_PYTHON")
        .map(PathBuf::from)
        .filter(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the provider SDKs are not installed: run scripts/peers.sh and set TOOLGATE_PYTHON"
        );
        eprintln!("skipped: the provider SDKs are not installed (scripts/peers.sh, then TOOLGATE_PYTHON=…/bin/python)");
    }
    found
}

#[tokio::test]
async fn every_shape_toolgate_writes_validates_with_the_provider_sdks() {
    let shapes = json!({
        "openai": conversation(Format::Openai, Provider::Openai, true).await,
        "responses": conversation(Format::Responses, Provider::Responses, true).await,
        "anthropic": conversation(Format::Anthropic, Provider::Anthropic, true).await,
        "gemini": conversation(Format::Gemini, Provider::Gemini, true).await,
        "text": conversation(Format::Text, Provider::Ollama, false).await,
    });
    // What the shapes must contain for the check to mean something.
    let openai = &shapes["openai"]["messages"];
    assert_eq!(openai[1]["tool_calls"].as_array().unwrap().len(), 3);
    let results: Vec<&Value> = openai
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results[1]["content"].as_str().unwrap().contains("execution_failed"));
    assert!(shapes["anthropic"]["messages"][2]["content"][1]["is_error"] == true);

    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shapes.json");
    std::fs::write(&file, serde_json::to_string_pretty(&shapes).unwrap()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/validate_wire.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the SDKs refuse toolgate's shapes:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
