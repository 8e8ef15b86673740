//! Anthropic Messages: `tool_use` blocks, `tool_result` blocks with `is_error`.

use super::{Answer, CallEcho, Format, FormatError, RawCall, ToolResult, ToolView, echo_arguments_object};
use serde_json::{Value, json};

pub(super) fn parse(body: &Value) -> Result<Answer, FormatError> {
    let content = match body.get("content") {
        Some(Value::Array(blocks)) => blocks,
        Some(Value::String(_)) => {
            return Ok(Answer {
                format: Format::Anthropic,
                message: json!({"role": "assistant", "content": body["content"].clone()}),
                text: body["content"].as_str().map(str::to_owned),
                calls: Vec::new(),
                cut_off: body.get("stop_reason").and_then(Value::as_str) == Some("max_tokens"),
                reasoning: None,
                dialect: None,
            });
        }
        _ => return Err(FormatError::new(Format::Anthropic, "no `content` array")),
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    super::check_call_count(
        content
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .count(),
    )?;
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => calls.push(RawCall::from_object(
                block.as_object().cloned().unwrap_or_default(),
                Some("id"),
                "input",
                &["type"],
            )),
            _ => {}
        }
    }
    Ok(Answer {
        format: Format::Anthropic,
        message: json!({"role": "assistant", "content": content}),
        text: (!text.is_empty()).then_some(text),
        calls,
        cut_off: body.get("stop_reason").and_then(Value::as_str) == Some("max_tokens"),
        reasoning: None,
        dialect: None,
    })
}

pub(super) fn assistant(answer: &Answer, echoes: &[CallEcho]) -> Vec<Value> {
    let blocks = answer.message.get("content").cloned().unwrap_or(Value::Null);
    let Value::Array(blocks) = blocks else {
        return vec![answer.message.clone()];
    };
    let mut echoes = echoes.iter();
    let blocks: Vec<Value> = blocks
        .into_iter()
        .map(|b| {
            if b.get("type").and_then(Value::as_str) != Some("tool_use") {
                return b;
            }
            match echoes.next() {
                Some(e) => {
                    json!({"type": "tool_use", "id": e.id.as_str(), "name": e.name, "input": echo_arguments_object(e)})
                }
                None => b,
            }
        })
        .collect();
    vec![json!({"role": "assistant", "content": blocks})]
}

pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    let blocks: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut b = json!({"type": "tool_result", "tool_use_id": r.call_id.as_str(), "content": r.content_text()});
            if r.is_error {
                b["is_error"] = Value::Bool(true);
            }
            b
        })
        .collect();
    vec![json!({"role": "user", "content": blocks})]
}

pub(super) fn tools(tools: &[ToolView<'_>]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect(),
    )
}
