//! Keeping a history valid for its provider: exactly one result per call id. A history handed in
//! from elsewhere is sanitised — orphan and duplicate results dropped, missing ones filled with a
//! synthetic `canceled` result right after the call that lacks one.

use crate::error::{CallError, ErrorKind};
use crate::formats::{Format, ToolResult, result_messages};
use crate::types::CallId;
use serde_json::{Value, json};
use std::collections::HashSet;

/// The synthetic result of a call that was killed or never started.
pub fn canceled_result(id: &str, name: &str) -> ToolResult {
    let error = CallError::new(
        ErrorKind::Canceled,
        "The call was canceled before it produced a result. Call it again if it is still needed.",
    );
    ToolResult {
        call_id: CallId::new(id),
        name: name.to_owned(),
        content: error.to_json(),
        is_error: true,
        error_kind: Some(ErrorKind::Canceled),
        structured: false,
    }
}

/// Returns the history with orphan and duplicate tool results dropped and missing ones filled.
pub fn sanitize(format: Format, messages: Vec<Value>) -> Vec<Value> {
    match format {
        Format::Openai => sanitize_openai(messages),
        Format::Anthropic => sanitize_blocks(messages, Blocks::ANTHROPIC),
        Format::Gemini => sanitize_blocks(messages, Blocks::GEMINI),
        Format::Responses => sanitize_responses(messages),
        Format::Text | Format::Mcp => messages,
    }
}

/// Calls announced and not yet answered.
#[derive(Default)]
struct Pending {
    calls: Vec<(String, String)>,
    answered: HashSet<String>,
}

impl Pending {
    fn take_answer(&mut self, id: &str) -> bool {
        self.calls.iter().any(|(c, _)| c == id) && self.answered.insert(id.to_owned())
    }
    fn missing(&mut self) -> Vec<ToolResult> {
        let out = self
            .calls
            .iter()
            .filter(|(id, _)| !self.answered.contains(id))
            .map(|(id, name)| canceled_result(id, name))
            .collect();
        self.calls.clear();
        self.answered.clear();
        out
    }
}

fn sanitize_openai(messages: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    let mut pending = Pending::default();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "tool" {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            if pending.take_answer(id) {
                out.push(m);
            }
            continue;
        }
        out.extend(result_messages(Format::Openai, &pending.missing()));
        if role == "assistant"
            && let Some(Value::Array(calls)) = m.get("tool_calls")
        {
            pending.calls = calls
                .iter()
                .filter_map(|c| {
                    let id = c.get("id")?.as_str()?.to_owned();
                    let name = c.pointer("/function/name").and_then(Value::as_str).unwrap_or("unknown");
                    Some((id, name.to_owned()))
                })
                .collect();
        }
        out.push(m);
    }
    out.extend(result_messages(Format::Openai, &pending.missing()));
    out
}

fn sanitize_responses(items: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::with_capacity(items.len());
    let mut pending = Pending::default();
    for item in items {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                if let Some(id) = item.get("call_id").and_then(Value::as_str) {
                    let name = item.get("name").and_then(Value::as_str).unwrap_or("unknown");
                    pending.calls.push((id.to_owned(), name.to_owned()));
                }
                out.push(item);
            }
            Some("function_call_output") => {
                let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if pending.take_answer(id) {
                    out.push(item);
                }
            }
            Some("reasoning") => out.push(item),
            _ => {
                out.extend(result_messages(Format::Responses, &pending.missing()));
                out.push(item);
            }
        }
    }
    out.extend(result_messages(Format::Responses, &pending.missing()));
    out
}

/// Where a block-based format keeps calls and results.
struct Blocks {
    format: Format,
    list_key: &'static str,
    assistant_role: &'static str,
    call_id: fn(&Value) -> Option<(String, String)>,
    result_id: fn(&Value) -> Option<String>,
}

impl Blocks {
    const ANTHROPIC: Self = Self {
        format: Format::Anthropic,
        list_key: "content",
        assistant_role: "assistant",
        call_id: |b| {
            (b.get("type")?.as_str()? == "tool_use").then_some(())?;
            Some((b.get("id")?.as_str()?.to_owned(), b.get("name")?.as_str()?.to_owned()))
        },
        result_id: |b| {
            (b.get("type")?.as_str()? == "tool_result").then_some(())?;
            Some(b.get("tool_use_id")?.as_str()?.to_owned())
        },
    };
    const GEMINI: Self = Self {
        format: Format::Gemini,
        list_key: "parts",
        assistant_role: "model",
        call_id: |p| {
            let fc = p.get("functionCall")?;
            let name = fc.get("name")?.as_str()?.to_owned();
            let id = fc
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| name.clone(), str::to_owned);
            Some((id, name))
        },
        result_id: |p| {
            let fr = p.get("functionResponse")?;
            fr.get("id")
                .or_else(|| fr.get("name"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        },
    };
}

fn sanitize_blocks(messages: Vec<Value>, b: Blocks) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    let mut pending = Pending::default();
    for mut m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("").to_owned();
        let has_results = m
            .get(b.list_key)
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().any(|x| (b.result_id)(x).is_some()));
        if role == "user"
            && (has_results || !pending.calls.is_empty())
            && let Some(Value::Array(list)) = m.get_mut(b.list_key)
        {
            list.retain(|x| (b.result_id)(x).is_none_or(|id| pending.take_answer(&id)));
            let missing = pending.missing();
            if !missing.is_empty() {
                // Results come first in the message.
                let rest = std::mem::take(list);
                list.extend(result_blocks(&b, &missing));
                list.extend(rest);
            }
            if !list.is_empty() {
                out.push(m);
            }
            continue;
        }
        let missing = pending.missing();
        if !missing.is_empty() {
            out.extend(result_messages(b.format, &missing));
        }
        if role == b.assistant_role
            && let Some(Value::Array(list)) = m.get(b.list_key)
        {
            pending.calls = list.iter().filter_map(b.call_id).collect();
        }
        out.push(m);
    }
    let missing = pending.missing();
    if !missing.is_empty() {
        out.extend(result_messages(b.format, &missing));
    }
    out
}

fn result_blocks(b: &Blocks, results: &[ToolResult]) -> Vec<Value> {
    result_messages(b.format, results)
        .into_iter()
        .flat_map(|m| m.get(b.list_key).and_then(Value::as_array).cloned().unwrap_or_default())
        .collect()
}

/// A user message in the text fallback format (no ids to link).
pub fn text_user(content: &str) -> Value {
    json!({"role": "user", "content": content})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_orphans_and_duplicates_are_dropped_and_missing_filled() {
        let history = vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "tool", "tool_call_id": "ghost", "content": "orphan"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "u", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "1"}),
            json!({"role": "tool", "tool_call_id": "a", "content": "dup"}),
            json!({"role": "user", "content": "next"}),
        ];
        let out = sanitize(Format::Openai, history);
        let ids: Vec<&str> = out.iter().filter_map(|m| m.get("tool_call_id")?.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(out.len(), 5);
        assert_eq!(out[3]["tool_call_id"], "b");
        assert!(out[3]["content"].as_str().unwrap().contains("\"canceled\""));
        assert_eq!(out[4]["content"], "next");
    }

    #[test]
    fn anthropic_missing_results_go_first_in_the_next_user_message() {
        let history = vec![
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "x", "name": "t", "input": {}},
                {"type": "tool_use", "id": "y", "name": "t", "input": {}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "y", "content": "ok"},
                {"type": "tool_result", "tool_use_id": "zzz", "content": "orphan"},
                {"type": "text", "text": "and then"}]}),
        ];
        let out = sanitize(Format::Anthropic, history);
        let blocks = out[1]["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0]["tool_use_id"], "x");
        assert_eq!(blocks[0]["is_error"], true);
        assert_eq!(blocks[1]["tool_use_id"], "y");
        assert_eq!(blocks[2]["type"], "text");
    }

    #[test]
    fn gemini_and_responses_are_filled_at_the_end() {
        let g = sanitize(
            Format::Gemini,
            vec![json!({"role": "model", "parts": [{"functionCall": {"id": "1", "name": "t", "args": {}}}]})],
        );
        assert_eq!(g.len(), 2);
        assert_eq!(g[1]["parts"][0]["functionResponse"]["id"], "1");
        let r = sanitize(
            Format::Responses,
            vec![
                json!({"type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"}),
                json!({"type": "function_call_output", "call_id": "nope", "output": "x"}),
            ],
        );
        assert_eq!(r.len(), 2);
        assert_eq!(r[1]["call_id"], "c");
    }
}
