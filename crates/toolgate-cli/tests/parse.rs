//! Model answers whose calls are written in text, through the real binary: `toolgate parse` shows
//! what stage 1 made of an answer without running anything; `toolgate exec` finds the calls
//! without a flag, runs them, and keeps prose (and JSON that is no call) a final answer;
//! `toolgate agent` on an OpenAI-compatible server whose tool parser missed the call runs it.

mod common;
#[path = "../../toolgate-llm/tests/common/mod.rs"]
mod llm_server;

use common::*;
use serde_json::{Value, json};

fn parse(ws: &std::path::Path, args: &[&str], stdin: &str) -> Value {
    let out = toolgate(ws)
        .arg("parse")
        .args(args)
        .write_stdin(stdin.to_owned())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    json_out(&out)
}

fn exec(ws: &std::path::Path, args: &[&str], stdin: &str) -> (Option<i32>, Value) {
    let out = toolgate(ws)
        .arg("exec")
        .args(args)
        .write_stdin(stdin.to_owned())
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), json_out(&out))
}

#[test]
fn parse_prints_calls_content_reasoning_and_the_dialect_found() {
    let ws = workspace();
    let text = "<think>The user wants the file.</think>\nReading it now.\n<tool_call>\n<function=read_file>\n<parameter=path>\nhello.txt\n</parameter>\n<parameter=offset>\n2\n</parameter>\n</function>\n</tool_call>";
    let v = parse(ws.path(), &[], text);
    let call = &v["calls"][0];
    assert!(!call["id"].as_str().unwrap().is_empty(), "{v}");
    assert_eq!(call["name"], "read_file");
    // The offset was text in the answer; read_file's schema makes it an integer.
    assert_eq!(call["arguments"], json!({"path": "hello.txt", "offset": 2}));
    assert_eq!(call["repairs"], json!([]));
    assert_eq!(v["content"], "Reading it now.");
    assert_eq!(v["reasoning"], "The user wants the file.");
    assert_eq!(v["format"], "text");
    assert_eq!(v["dialect"], "qwen3-coder");
    assert_eq!(v["calls"].as_array().unwrap().len(), 1);

    // Named, the same text reads the same.
    let named = parse(ws.path(), &["--dialect", "qwen3-coder"], text);
    assert_eq!(named["calls"][0]["arguments"], call["arguments"]);
}

#[test]
fn parse_runs_nothing() {
    let ws = workspace();
    let text = "[TOOL_CALLS]write_file[ARGS]{\"path\": \"made.txt\", \"content\": \"x\"}";
    let v = parse(ws.path(), &["--dialect", "mistral"], text);
    assert_eq!(v["calls"][0]["name"], "write_file");
    assert_eq!(v["calls"][0]["arguments"], json!({"path": "made.txt", "content": "x"}));
    assert!(!ws.path().join("made.txt").exists());
}

#[test]
fn parse_reports_a_broken_marker_as_malformed_and_an_unknown_dialect_as_a_usage_error() {
    let ws = workspace();
    let v = parse(
        ws.path(),
        &[],
        "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"hel",
    );
    assert_eq!(v["calls"][0]["error"]["type"], "malformed_call", "{v}");
    assert_eq!(v["dialect"], "llama");
    let out = toolgate(ws.path())
        .args(["parse", "--dialect", "gpt-5"])
        .write_stdin("hi")
        .output()
        .unwrap();
    // clap's own usage error: its first line names the problem and the dialects.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains("unknown dialect \"gpt-5\"") && first.contains("qwen3-coder"),
        "{stderr}"
    );
}

#[test]
fn an_openai_answer_whose_call_is_in_content_is_read_as_a_repaired_call() {
    let ws = workspace();
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
        "content": "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"hello.txt\"}}\n</tool_call>",
        "tool_calls": []}}]});
    let v = parse(ws.path(), &[], &body.to_string());
    assert_eq!(v["format"], "openai");
    assert_eq!(v["dialect"], "hermes");
    assert_eq!(v["calls"][0]["repairs"], json!(["parsed_from_content"]));
    assert_eq!(v["content"], Value::Null);

    // Run: the read-only call runs; a write read from prose is asked even under --yolo, and
    // nobody can approve it here, so nothing is written.
    let (code, v) = exec(ws.path(), &[], &body.to_string());
    assert_eq!(code, Some(0));
    assert!(
        v["messages"][1]["content"].as_str().unwrap().contains("hello\\nworld"),
        "{v}"
    );
    let write = json!({"role": "assistant", "content": "Saving.\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"out.txt\", \"content\": \"x\"}}\n</tool_call>"});
    let out = toolgate(ws.path())
        .args(["--yolo", "exec"])
        .write_stdin(write.to_string())
        .output()
        .unwrap();
    let v = json_out(&out);
    let result = v["messages"][1]["content"].as_str().unwrap();
    assert!(
        result.contains("permission_denied") && result.contains("read from the answer's text"),
        "{v}"
    );
    assert!(!ws.path().join("out.txt").exists());
    // The same call in tool_calls runs under --yolo.
    let direct = json!({"role": "assistant", "tool_calls": [{"id": "w", "type": "function",
        "function": {"name": "write_file", "arguments": "{\"path\": \"out.txt\", \"content\": \"x\"}"}}]});
    let out = toolgate(ws.path())
        .args(["--yolo", "exec"])
        .write_stdin(direct.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(ws.path().join("out.txt")).unwrap(), "x");
}

#[test]
fn exec_finds_calls_in_text_without_a_flag() {
    let ws = workspace();
    // A bare {"name", "arguments"} object was once taken for an OpenAI message with no calls.
    for answer in [
        "{\"name\": \"read_file\", \"arguments\": {\"path\": \"hello.txt\"}}",
        "{\"name\": \"read_file\", \"parameters\": {\"path\": \"hello.txt\"}}",
        "[read_file(path=\"hello.txt\")]",
        "<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{\"path\": \"hello.txt\"}<|call|>",
        "\"<tool_call>{\\\"name\\\": \\\"read_file\\\", \\\"arguments\\\": {\\\"path\\\": \\\"hello.txt\\\"}}</tool_call>\"",
    ] {
        let (code, v) = exec(ws.path(), &[], answer);
        assert_eq!(code, Some(0), "{answer}");
        assert_eq!(v["status"], "continue", "{answer}: {v}");
        let result = v["messages"][1]["content"].to_string();
        assert!(result.contains("hello\\\\nworld"), "{answer}: {v}");
    }
}

#[test]
fn exec_keeps_prose_and_plain_json_a_final_answer() {
    let ws = workspace();
    for (args, answer) in [
        (&["--format", "text"][..], "{\"answer\": 42}"),
        (&[][..], "{\"answer\": 42}"),
        (&[][..], "[1, 2, 3]"),
        (&[][..], "{not json, just braces"),
        (&[][..], "[f(a=1) is how Python calls f"),
        (&[][..], "The file says hello."),
        (&["--format", "text"][..], "Qwen writes `<tool_call>` tags."),
    ] {
        let (code, v) = exec(ws.path(), args, answer);
        assert_eq!(code, Some(0), "{answer}");
        assert_eq!(v["status"], "final_answer", "{answer}: {v}");
        assert_eq!(v["messages"].as_array().map(Vec::len), Some(1), "{answer}: {v}");
    }
}

/// A vLLM-style answer: the server's parser missed the call, so it is text in `content`.
fn chat(content: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "Qwen/Qwen3-8B",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
            "message": {"role": "assistant", "content": content, "tool_calls": []}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

#[tokio::test]
async fn the_agent_runs_a_call_an_openai_compatible_server_left_in_content() {
    let first = chat(
        "<think>Read it first.</think>\n\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"hello.txt\"}}\n</tool_call>",
    );
    let last = chat("The file says hello, then world.");
    let server = llm_server::serve(vec![
        llm_server::Reply::json(200, &first),
        llm_server::Reply::json(200, &last),
    ])
    .await;
    let ws = workspace();
    let mut cmd = toolgate(ws.path());
    cmd.args([
        "--store",
        "memory",
        "agent",
        "--model",
        "openai-compat:Qwen/Qwen3-8B",
        "--base-url",
    ])
    .arg(format!("{}/v1", server.base))
    .arg("What does hello.txt say?")
    .env("TOOLGATE_AGENT_STREAM", "false");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello, then world"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // The second request carries the call as tool_calls and the file as its result.
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read_file");
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["tool_call_id"], assistant["tool_calls"][0]["id"]);
    assert!(tool["content"].as_str().unwrap().contains("hello\\nworld"), "{tool}");
}

#[test]
fn a_bad_agent_dialect_is_a_configuration_error() {
    let ws = workspace();
    let config = ws.path().join("agent.toml");
    std::fs::write(&config, "[agent]\nmodel = \"ollama:qwen3\"\ndialect = \"nope\"\n").unwrap();
    let out = toolgate(ws.path())
        .args(["--store", "memory", "--config"])
        .arg(&config)
        .args(["agent", "hi"])
        .output()
        .unwrap();
    assert_usage_error(&out, "[agent] dialect: unknown dialect \"nope\"");
}
