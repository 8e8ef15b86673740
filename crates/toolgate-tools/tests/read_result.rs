//! A truncated result is paged through `read_result`, within its session only.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;
use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{
    Answer, Engine, EngineConfig, Format, Registry, Session, SessionOptions, Tool, ToolError, TurnOptions,
};

struct Big;

#[async_trait]
impl Tool for Big {
    fn name(&self) -> &str {
        "big"
    }
    fn description(&self) -> &str {
        "returns a large result"
    }
    fn parameters(&self) -> &Value {
        static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| json!({"type": "object"}))
    }
    fn spec(&self) -> &ToolSpec {
        static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
        SPEC.get_or_init(|| ToolSpec::with_annotations(Annotations::READ_ONLY))
    }
    async fn execute(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        let log: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        Ok(ToolOutput::json(json!({"exit_code": 0, "stdout": log})))
    }
}

fn call(name: &str, args: Value) -> Answer {
    Answer::parse(
        Format::Openai,
        &json!({"role": "assistant", "tool_calls": [{"id": format!("c_{name}"), "type": "function",
            "function": {"name": name, "arguments": args.to_string()}}]}),
    )
    .unwrap()
}

#[tokio::test]
async fn read_result_pages_the_full_result_of_this_session_only() {
    let mut registry = Registry::new();
    registry.register(Arc::new(Big));
    for t in toolgate_tools::builtin_tools() {
        registry.register(t);
    }
    let config = EngineConfig {
        budget_bytes: 8192,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(registry, config));
    let session = Arc::new(Session::new(engine.config(), SessionOptions::default()));
    let turn = engine
        .run_turn(&session, &call("big", json!({})), TurnOptions::default())
        .await;
    let stdout = turn.outcomes[0].entry().unwrap().content["stdout"]
        .as_str()
        .unwrap()
        .to_owned();
    let handle = stdout
        .split("read_result handle=")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap()
        .to_owned();

    // Page through /stdout until the end; the pages put together are the full text.
    let mut offset = 0u64;
    let mut text = String::new();
    loop {
        let args = json!({"handle": handle, "pointer": "/stdout", "offset": offset, "length": 6000});
        let turn = engine
            .run_turn(&session, &call("read_result", args), TurnOptions::default())
            .await;
        let page = turn.outcomes[0].entry().unwrap().content.clone();
        assert!(page.get("error").is_none(), "{page}");
        text.push_str(page["content"].as_str().unwrap());
        match page["next_offset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
    }
    let expected: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(text, expected);

    // Another session cannot read this session's handle.
    let other = Arc::new(Session::new(engine.config(), SessionOptions::default()));
    let turn = engine
        .run_turn(
            &other,
            &call("read_result", json!({"handle": handle})),
            TurnOptions::default(),
        )
        .await;
    let e = &turn.outcomes[0].entry().unwrap().content["error"];
    assert!(e["message"].as_str().unwrap().contains("no result under handle"), "{e}");
}

#[tokio::test]
async fn pages_are_measured_as_sent_so_escapes_never_overflow_the_budget() {
    use toolgate_core::tool::{Typed, TypedTool};
    let ctx = ToolContext::standalone(&std::env::temp_dir());
    let handle = ctx
        .store
        .put(&ctx.session_id, Arc::new(Value::String("\n".repeat(100_000))), 200_002)
        .await;
    let tool = Typed::new(toolgate_tools::read_result::ReadResult);
    assert_eq!(tool.inner().name(), "read_result");
    let page = tool
        .execute(&ctx, json!({"handle": handle, "length": 49152}))
        .await
        .unwrap()
        .content;
    // Each newline is sent as two bytes: half as many characters fit the page.
    assert_eq!(page["length"], 24576);
    assert_eq!(page["next_offset"], 24576);
    assert!(page.to_string().len() <= EngineConfig::default().budget_bytes);
}
