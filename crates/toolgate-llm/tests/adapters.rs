//! Each adapter against a local server answering with the provider's documented bodies and SSE
//! streams (written in 3- to 7-byte chunks), and the request each adapter sends, field by field.

mod common;

use common::{Reply, serve, sse};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolgate_core::formats::{Dialect, RawArguments};
use toolgate_core::tool::{ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{
    Answer, Engine, EngineConfig, Format, Model, ModelErrorKind, ModelRequest, Registry, Tool, ToolError, TurnOptions,
};
use toolgate_llm::{ModelOptions, Replay, ReplayOptions, RetryPolicy, connect};

struct ReadFile(Value, ToolSpec);

#[async_trait::async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Reads a file."
    }
    fn parameters(&self) -> &Value {
        &self.0
    }
    fn spec(&self) -> &ToolSpec {
        &self.1
    }
    async fn execute(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("x"))
    }
}

fn request(format: Format) -> ModelRequest {
    let mut registry = Registry::new();
    registry.register(Arc::new(ReadFile(
        json!({"type": "object", "properties": {"path": {"type": "string", "description": "the file"}}, "required": ["path"]}),
        ToolSpec::default(),
    )));
    let engine = Engine::new(registry, EngineConfig::default());
    let mut messages = Vec::new();
    toolgate_core::formats::push_user_text(format, &mut messages, "Read a.txt and b.txt");
    ModelRequest {
        format,
        system: Some("You are careful.".into()),
        messages,
        tools: engine.tool_list(format, &TurnOptions::default()),
        model: None,
        iteration: 1,
    }
}

fn options(base: &str) -> ModelOptions {
    ModelOptions {
        base_url: Some(base.to_owned()),
        api_key: Some("sk-test-SECRET".into()),
        retry: RetryPolicy {
            attempts: 3,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(5),
        },
        ..ModelOptions::default()
    }
}

async fn ask(model: &Arc<dyn Model>, format: Format) -> Result<Answer, toolgate_core::ModelError> {
    model.complete(&request(format), &CancellationToken::new()).await
}

fn call_args(answer: &Answer, i: usize) -> Value {
    match &answer.calls[i].arguments {
        RawArguments::Text(t) => serde_json::from_str(t).unwrap(),
        RawArguments::Json(v) => v.clone(),
        RawArguments::Fields(m) => Value::Object(m.clone()),
        RawArguments::Missing | RawArguments::Broken(_) => Value::Null,
    }
}

fn names(answer: &Answer) -> Vec<String> {
    answer
        .calls
        .iter()
        .map(|c| c.name.clone().unwrap_or_default())
        .collect()
}

// ---- OpenAI Chat Completions ----

fn chat_chunk(delta: Value, finish: Value) -> (&'static str, Value) {
    (
        "",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]}),
    )
}

fn chat_stream_two_calls() -> String {
    let mut events = vec![
        chat_chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
            Value::Null,
        ),
        chat_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"pa"}}]}),
            Value::Null,
        ),
        chat_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "th\": \"a.txt\"}"}}]}),
            Value::Null,
        ),
        chat_chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"café/b.txt\"}"}}]}),
            Value::Null,
        ),
        chat_chunk(json!({}), json!("tool_calls")),
    ];
    events.push((
        "",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}}),
    ));
    let mut text = sse(&events);
    text.push_str("data: [DONE]\n\n");
    text
}

#[tokio::test]
async fn chat_streams_parallel_calls_split_at_awkward_boundaries() {
    let server = serve(vec![Reply::sse(&chat_stream_two_calls(), 3)]).await;
    let model = connect("openai:gpt-4.1", &options(&format!("{}/v1", server.base))).unwrap();
    assert_eq!(model.format(), Format::Openai);
    let answer = ask(&model, Format::Openai).await.unwrap();
    assert_eq!(names(&answer), vec!["read_file", "read_file"]);
    assert_eq!(answer.calls[0].id.as_deref(), Some("call_a"));
    assert_eq!(call_args(&answer, 0), json!({"path": "a.txt"}));
    assert_eq!(call_args(&answer, 1), json!({"path": "café/b.txt"}));

    let req = &server.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.target, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer sk-test-SECRET"));
    let b = &req.body;
    assert_eq!(b["model"], "gpt-4.1");
    assert_eq!(
        b["messages"][0],
        json!({"role": "system", "content": "You are careful."})
    );
    assert_eq!(
        b["messages"][1],
        json!({"role": "user", "content": "Read a.txt and b.txt"})
    );
    assert_eq!(b["tools"][0]["type"], "function");
    assert_eq!(b["tools"][0]["function"]["name"], "read_file");
    assert_eq!(b["tools"][0]["function"]["description"], "Reads a file.");
    assert_eq!(b["tools"][0]["function"]["parameters"]["required"], json!(["path"]));
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b.as_object().unwrap().len(), 5, "no other fields: {b}");
}

#[tokio::test]
async fn chat_reads_a_whole_text_answer() {
    let body = json!({"id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Both files are empty.", "refusal": null},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
    let server = serve(vec![Reply::json(200, &body)]).await;
    let model = connect(
        "openai:gpt-4.1",
        &ModelOptions {
            stream: false,
            ..options(&server.base)
        },
    )
    .unwrap();
    let answer = ask(&model, Format::Openai).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("Both files are empty."));
    assert!(answer.calls.is_empty());
    assert!(server.requests()[0].body.get("stream").is_none());
}

#[tokio::test]
async fn chat_error_bodies_become_clear_messages_and_auth_is_not_retried() {
    let body = json!({"error": {"message": "Incorrect API key provided: sk-test.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
    let server = serve(vec![Reply::json(401, &body)]).await;
    let model = connect("openai:gpt-4.1", &options(&server.base)).unwrap();
    let e = ask(&model, Format::Openai).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Auth);
    assert_eq!(
        e.message,
        "openai: HTTP 401: invalid_request_error: Incorrect API key provided: sk-test."
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_429_is_retried_after_the_retry_after_delay() {
    let limited =
        json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}});
    let ok =
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]});
    let server = serve(vec![
        Reply::json(429, &limited).header("retry-after", "1"),
        Reply::json(200, &ok),
    ])
    .await;
    let model = connect("openai:gpt-4.1", &options(&server.base)).unwrap();
    let answer = ask(&model, Format::Openai).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("ok"));
    let r = server.requests();
    assert_eq!(r.len(), 2);
    assert!(
        r[1].at.duration_since(r[0].at) >= Duration::from_millis(990),
        "Retry-After: 1 is honoured"
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_with_the_attempts() {
    let body = json!({"error": {"message": "The server had an error", "type": "server_error"}});
    let server = serve(vec![
        Reply::json(500, &body),
        Reply::json(502, &body),
        Reply::json(503, &body),
    ])
    .await;
    let model = connect("openai:gpt-4.1", &options(&server.base)).unwrap();
    let e = ask(&model, Format::Openai).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Server);
    assert!(
        e.message.contains("HTTP 503") && e.message.contains("after 3 attempts"),
        "{e}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_retry_after_longer_than_the_limit_fails_at_once() {
    let body = json!({"error": {"message": "Quota", "type": "insufficient_quota"}});
    let server = serve(vec![Reply::json(429, &body).header("retry-after", "3600")]).await;
    let model = connect("openai:gpt-4.1", &options(&server.base)).unwrap();
    let e = ask(&model, Format::Openai).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::RateLimited);
    assert!(e.message.contains("retry after 3600 s"), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_dropped_midway_is_retried() {
    let full = chat_stream_two_calls();
    let mut dropped = Reply::sse(&full, 5);
    dropped.drop_after = Some(full.len() / 2);
    let server = serve(vec![dropped, Reply::sse(&full, 7)]).await;
    let model = connect("openai:gpt-4.1", &options(&server.base)).unwrap();
    let answer = ask(&model, Format::Openai).await.unwrap();
    assert_eq!(answer.calls.len(), 2);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_missing_key_is_reported_before_any_request() {
    let server = serve(vec![]).await;
    let model = connect(
        "anthropic:claude-sonnet-4-5",
        &ModelOptions {
            api_key: None,
            ..options(&server.base)
        },
    )
    .unwrap();
    if std::env::var_os("ANTHROPIC_API_KEY").is_some() {
        return; // a key from the environment would be used
    }
    let e = ask(&model, Format::Anthropic).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Auth);
    assert!(e.message.contains("ANTHROPIC_API_KEY"), "{e}");
    assert!(server.requests().is_empty());
}

// ---- OpenAI Responses ----

#[tokio::test]
async fn responses_streams_text_and_a_function_call() {
    let item = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a.txt\"}", "status": "completed"});
    let message = json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "Reading.", "annotations": []}]});
    let events = vec![
        (
            "response.created",
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Reading."}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": message}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "", "status": "in_progress"}}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 5, "item_id": "fc_1", "output_index": 1, "delta": "{\"path\":\"a.txt\"}"}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 1, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "sequence_number": 7, "response": {"id": "resp_1", "object": "response", "status": "completed", "output": [message, item]}}),
        ),
    ];
    let server = serve(vec![Reply::sse(&sse(&events), 4)]).await;
    let model = connect("responses:gpt-4.1", &options(&format!("{}/v1", server.base))).unwrap();
    assert_eq!(model.format(), Format::Responses);
    let answer = ask(&model, Format::Responses).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("Reading."));
    assert_eq!(names(&answer), vec!["read_file"]);
    assert_eq!(answer.calls[0].id.as_deref(), Some("call_1"));
    assert_eq!(call_args(&answer, 0), json!({"path": "a.txt"}));

    let req = &server.requests()[0];
    assert_eq!(req.target, "/v1/responses");
    let b = &req.body;
    assert_eq!(b["model"], "gpt-4.1");
    assert_eq!(b["instructions"], "You are careful.");
    assert_eq!(b["input"][0]["role"], "user");
    assert_eq!(b["input"][0]["content"], "Read a.txt and b.txt");
    assert_eq!(b["tools"][0]["type"], "function");
    assert_eq!(b["tools"][0]["name"], "read_file", "Responses tools are flat");
    assert_eq!(b["tools"][0]["parameters"]["type"], "object");
    assert_eq!(b["store"], false);
    assert_eq!(b["stream"], true);
}

#[tokio::test]
async fn responses_without_a_completed_event_is_a_broken_stream() {
    let events = vec![(
        "response.created",
        json!({"type": "response.created", "response": {"id": "r", "status": "in_progress", "output": []}}),
    )];
    let body = sse(&events);
    let server = serve(vec![Reply::sse(&body, 6), Reply::sse(&body, 6), Reply::sse(&body, 6)]).await;
    let model = connect("responses:gpt-4.1", &options(&server.base)).unwrap();
    let e = ask(&model, Format::Responses).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Network);
    assert!(e.message.contains("ended before it was complete"), "{e}");
}

// ---- Anthropic Messages ----

fn anthropic_stream() -> String {
    sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "read them."}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "txt\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"b.txt\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 80}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

#[tokio::test]
async fn anthropic_streams_text_and_parallel_tool_uses() {
    let server = serve(vec![Reply::sse(&anthropic_stream(), 7)]).await;
    let model = connect("anthropic:claude-sonnet-4-5", &options(&server.base)).unwrap();
    let answer = ask(&model, Format::Anthropic).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("Let me read them."));
    assert_eq!(names(&answer), vec!["read_file", "read_file"]);
    assert_eq!(answer.calls[1].id.as_deref(), Some("toolu_2"));
    assert_eq!(call_args(&answer, 0), json!({"path": "a.txt"}));
    assert_eq!(call_args(&answer, 1), json!({"path": "b.txt"}));

    let req = &server.requests()[0];
    assert_eq!(req.target, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some("sk-test-SECRET"));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.header("authorization"), None);
    let b = &req.body;
    assert_eq!(b["model"], "claude-sonnet-4-5");
    assert_eq!(b["max_tokens"], 4096);
    assert_eq!(b["system"], "You are careful.");
    assert_eq!(
        b["messages"][0],
        json!({"role": "user", "content": "Read a.txt and b.txt"})
    );
    assert_eq!(b["tools"][0]["name"], "read_file");
    assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(b["stream"], true);
}

#[tokio::test]
async fn anthropic_overloaded_is_retried_and_a_bad_request_is_not() {
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let bad = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"}});
    let server = serve(vec![Reply::json(529, &overloaded), Reply::json(400, &bad)]).await;
    let model = connect("anthropic:claude-sonnet-4-5", &options(&server.base)).unwrap();
    let e = ask(&model, Format::Anthropic).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::BadRequest);
    assert_eq!(
        e.message,
        "anthropic: HTTP 400: invalid_request_error: messages: roles must alternate"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn anthropic_broken_tool_json_stays_text_for_the_engine_to_repair() {
    let stream = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "stop_reason": null}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\""}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    let server = serve(vec![Reply::sse(&stream, 3)]).await;
    let model = connect("anthropic:claude-sonnet-4-5", &options(&server.base)).unwrap();
    let answer = ask(&model, Format::Anthropic).await.unwrap();
    assert_eq!(
        answer.calls[0].arguments,
        RawArguments::Text("{\"path\": \"a.txt\"".into())
    );
    assert!(answer.cut_off, "max_tokens marks the answer as cut off");
}

// ---- Gemini ----

#[tokio::test]
async fn gemini_streams_text_and_function_calls() {
    let stream = sse(&[
        (
            "",
            json!({"candidates": [{"content": {"parts": [{"text": "Let me "}], "role": "model"}, "index": 0}], "modelVersion": "gemini-2.5-flash"}),
        ),
        (
            "",
            json!({"candidates": [{"content": {"parts": [{"text": "read them."}], "role": "model"}, "index": 0}]}),
        ),
        (
            "",
            json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "read_file", "args": {"path": "a.txt"}}}, {"functionCall": {"name": "read_file", "args": {"path": "b.txt"}}}], "role": "model"}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20}}),
        ),
    ]);
    let server = serve(vec![Reply::sse(&stream, 5)]).await;
    let model = connect("gemini:gemini-2.5-flash", &options(&server.base)).unwrap();
    let answer = ask(&model, Format::Gemini).await.unwrap();
    assert_eq!(answer.text.as_deref(), Some("Let me read them."));
    assert_eq!(names(&answer), vec!["read_file", "read_file"]);
    assert_eq!(call_args(&answer, 1), json!({"path": "b.txt"}));

    let req = &server.requests()[0];
    assert_eq!(
        req.target,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(req.header("x-goog-api-key"), Some("sk-test-SECRET"));
    let b = &req.body;
    assert_eq!(
        b["contents"][0],
        json!({"role": "user", "parts": [{"text": "Read a.txt and b.txt"}]})
    );
    assert_eq!(b["systemInstruction"], json!({"parts": [{"text": "You are careful."}]}));
    let decl = &b["tools"][0]["functionDeclarations"][0];
    assert_eq!(decl["name"], "read_file");
    assert_eq!(decl["parameters"]["properties"]["path"]["type"], "string");
    assert!(b.get("model").is_none(), "Gemini names the model in the path");
}

#[tokio::test]
async fn gemini_error_bodies_name_the_status() {
    let body = json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT"}});
    let server = serve(vec![Reply::json(400, &body)]).await;
    let model = connect("gemini:gemini-2.5-flash", &options(&server.base)).unwrap();
    let e = ask(&model, Format::Gemini).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::BadRequest);
    assert_eq!(
        e.message,
        "gemini: HTTP 400: INVALID_ARGUMENT: API key not valid. Please pass a valid API key."
    );
}

// ---- OpenAI-compatible servers and the text fallback ----

#[tokio::test]
async fn a_model_without_native_tools_uses_the_text_fallback() {
    let content = "I will read it.\n```json\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"a.txt\"}, \"reasoning\": \"need it\"}\n```";
    let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]});
    let server = serve(vec![Reply::json(200, &body)]).await;
    let model = connect(
        "ollama:qwen2.5",
        &ModelOptions {
            native_tools: false,
            api_key: None,
            ..options(&format!("{}/v1", server.base))
        },
    )
    .unwrap();
    assert_eq!(model.format(), Format::Text);
    let answer = ask(&model, Format::Text).await.unwrap();
    assert_eq!(names(&answer), vec!["read_file"]);
    assert_eq!(call_args(&answer, 0), json!({"path": "a.txt"}));
    let req = &server.requests()[0];
    assert_eq!(req.target, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), None, "Ollama needs no key");
    let b = &req.body;
    assert!(b.get("tools").is_none(), "no native tools are sent");
    let system = b["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("You are careful.") && system.contains("read_file"),
        "{system}"
    );
}

/// vLLM / SGLang whose tool parser missed the call: the stream carries it as `content` text.
fn chat_stream_call_in_content(text: &str) -> String {
    let mut chunks = vec![chat_chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    // Awkward boundaries: the text in 5-character pieces, splitting the tags.
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(5) {
        chunks.push(chat_chunk(
            json!({"content": piece.iter().collect::<String>()}),
            Value::Null,
        ));
    }
    chunks.push(chat_chunk(json!({}), json!("stop")));
    let mut stream = sse(&chunks);
    stream.push_str("data: [DONE]\n\n");
    stream
}

#[tokio::test]
async fn an_openai_compatible_answer_with_its_call_left_in_content_is_read_as_a_repaired_call() {
    let text = "<think>Two files.</think>\n\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b.txt\"}}\n</tool_call>";
    let server = serve(vec![Reply::sse(&chat_stream_call_in_content(text), 7)]).await;
    let model = connect("openai-compat:Qwen/Qwen3-8B", &options(&format!("{}/v1", server.base))).unwrap();
    let answer = ask(&model, Format::Openai).await.unwrap();
    assert_eq!(names(&answer), ["read_file", "read_file"]);
    assert_eq!(call_args(&answer, 1), json!({"path": "b.txt"}));
    assert!(
        answer
            .calls
            .iter()
            .all(|c| c.repair.as_ref().is_some_and(|r| r.actions == ["parsed_from_content"]))
    );
    assert_eq!(answer.reasoning.as_deref(), Some("Two files."));
    assert_eq!(answer.text, None);

    // Ollama, not streamed, a Llama 3.1 answer; and a named dialect that does not match the text
    // leaves it text.
    let llama = "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"a.txt\"}}";
    let body =
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": llama}, "finish_reason": "stop"}]});
    for (dialect, calls) in [(Dialect::Auto, 1), (Dialect::Llama, 1), (Dialect::Hermes, 0)] {
        let server = serve(vec![Reply::json(200, &body)]).await;
        let model = connect(
            "ollama:llama3.1",
            &ModelOptions {
                stream: false,
                api_key: None,
                dialect,
                ..options(&format!("{}/v1", server.base))
            },
        )
        .unwrap();
        let answer = ask(&model, Format::Openai).await.unwrap();
        assert_eq!(answer.calls.len(), calls, "{dialect:?}");
    }
}

#[tokio::test]
async fn an_openai_compatible_server_is_reached_by_its_base_url() {
    let server = serve(vec![Reply::sse(&chat_stream_two_calls(), 64)]).await;
    let model = connect("openai-compat:local-model", &options(&format!("{}/v1/", server.base))).unwrap();
    assert_eq!(model.describe(), "openai-compat:local-model");
    let answer = ask(&model, Format::Openai).await.unwrap();
    assert_eq!(answer.calls.len(), 2);
    assert_eq!(server.requests()[0].target, "/v1/chat/completions");
    assert_eq!(server.requests()[0].body["model"], "local-model");
}

// ---- record and replay ----

#[tokio::test]
async fn a_recorded_run_replays_offline_and_a_diverging_request_gets_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("run.cassette.jsonl");
    let server = serve(vec![Reply::sse(&anthropic_stream(), 9)]).await;
    let model = connect(
        "anthropic:claude-sonnet-4-5",
        &ModelOptions {
            record: Some(cassette.clone()),
            ..options(&server.base)
        },
    )
    .unwrap();
    let live = ask(&model, Format::Anthropic).await.unwrap();
    let text = std::fs::read_to_string(&cassette).unwrap();
    assert!(!text.contains("SECRET"), "credentials are stripped: {text}");
    assert_eq!(text.lines().count(), 2);
    let line: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert_eq!(line["request"]["headers"], json!({"anthropic-version": "2023-06-01"}));

    let replay = Replay::open(&cassette, ReplayOptions::default()).unwrap();
    assert_eq!(replay.format(), Format::Anthropic);
    let replayed = replay
        .complete(&request(Format::Anthropic), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(replayed, live);
    assert_eq!(server.requests().len(), 1, "replay makes no request");

    let replay = Replay::open(&cassette, ReplayOptions::default()).unwrap();
    let mut changed = request(Format::Anthropic);
    changed.messages[0]["content"] = json!("Read c.txt");
    let e = replay.complete(&changed, &CancellationToken::new()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Replay);
    assert!(
        e.message.contains("diverged")
            && e.message
                .contains("/messages/0/content: recorded \"Read a.txt and b.txt\", now \"Read c.txt\""),
        "{e}"
    );
    let e = replay
        .complete(&request(Format::Anthropic), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(e.message.contains("no answer for model call 2"), "{e}");
}

#[test]
fn a_file_that_is_not_a_cassette_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.jsonl");
    std::fs::write(&path, "{\"hello\": 1}\n").unwrap();
    let e = Replay::open(&path, ReplayOptions::default()).err().unwrap();
    assert!(e.message.contains(":1: not a toolgate cassette"), "{e}");
    std::fs::write(
        &path,
        "{\"toolgate_cassette\": 1, \"provider\": \"openai\", \"model\": \"m\"}\nnot json\n",
    )
    .unwrap();
    let e = Replay::open(&path, ReplayOptions::default()).err().unwrap();
    assert!(e.message.contains(":2: not a toolgate cassette"), "{e}");
}
