//! OpenAI Responses: `function_call` output items, `function_call_output` input items.

use super::{Answer, CallEcho, Format, FormatError, RawCall, ToolResult, ToolView, echo_arguments_text};
use serde_json::{Value, json};

pub(super) fn parse(body: &Value) -> Result<Answer, FormatError> {
    let items: Vec<Value> = match body {
        Value::Array(items) => items.clone(),
        Value::Object(o) => match o.get("output") {
            Some(Value::Array(items)) => items.clone(),
            Some(_) => return Err(FormatError::new(Format::Responses, "`output` is not an array")),
            None if o.contains_key("type") => vec![body.clone()],
            None => return Err(FormatError::new(Format::Responses, "no `output` array")),
        },
        _ => {
            return Err(FormatError::new(
                Format::Responses,
                "expected a response object or an array of items",
            ));
        }
    };
    let cut_off = body.get("status").and_then(Value::as_str) == Some("incomplete")
        && body
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .is_none_or(|r| r == "max_output_tokens");
    let mut text = String::new();
    let mut calls = Vec::new();
    super::check_call_count(
        items
            .iter()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
            .count(),
    )?;
    for item in &items {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => calls.push(RawCall::from_object(
                item.as_object().cloned().unwrap_or_default(),
                Some("call_id"),
                "arguments",
                &["type", "id", "status"],
            )),
            Some("message") => {
                if let Some(Value::Array(parts)) = item.get("content") {
                    for p in parts {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            text.push_str(t);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Answer {
        format: Format::Responses,
        message: Value::Array(items),
        text: (!text.is_empty()).then_some(text),
        calls,
        cut_off,
        reasoning: None,
        dialect: None,
    })
}

pub(super) fn assistant(answer: &Answer, echoes: &[CallEcho]) -> Vec<Value> {
    let Value::Array(items) = &answer.message else {
        return Vec::new();
    };
    let mut calls = echoes.iter().zip(&answer.calls);
    items
        .iter()
        .map(|item| {
            if item.get("type").and_then(Value::as_str) != Some("function_call") {
                return item.clone();
            }
            let Some((echo, raw)) = calls.next() else {
                return item.clone();
            };
            let mut out = item.clone();
            if let Value::Object(o) = &mut out {
                o.insert("call_id".into(), json!(echo.id.as_str()));
                o.insert("name".into(), json!(echo.name));
                o.insert("arguments".into(), json!(echo_arguments_text(echo, &raw.arguments)));
            }
            out
        })
        .collect()
}

pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| json!({"type": "function_call_output", "call_id": r.call_id.as_str(), "output": r.content_text()}))
        .collect()
}

pub(super) fn tools(tools: &[ToolView<'_>]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": super::strict_compatible(t.parameters)})
            })
            .collect(),
    )
}
