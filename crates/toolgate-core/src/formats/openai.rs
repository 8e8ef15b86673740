//! OpenAI Chat Completions: `tool_calls[].function.arguments` (a JSON string), `role: tool` results.

use super::dialect::{self, Dialect};
use super::{Answer, CallEcho, Format, FormatError, RawCall, ToolResult, ToolView, echo_arguments_text};
use serde_json::{Map, Value, json};

pub(super) fn parse(body: &Value, dialect: Dialect) -> Result<Answer, FormatError> {
    let (message, finish) = match body.get("choices") {
        Some(Value::Array(choices)) => {
            let choice = choices
                .first()
                .ok_or_else(|| FormatError::new(Format::Openai, "`choices` is empty"))?;
            let message = choice
                .get("message")
                .or_else(|| choice.get("delta"))
                .ok_or_else(|| FormatError::new(Format::Openai, "`choices[0]` has no `message`"))?;
            (message, choice.get("finish_reason").and_then(Value::as_str))
        }
        Some(_) => return Err(FormatError::new(Format::Openai, "`choices` is not an array")),
        None => (body, body.get("finish_reason").and_then(Value::as_str)),
    };
    if !message.is_object() {
        return Err(FormatError::new(Format::Openai, "the message is not a JSON object"));
    }
    let mut text = message.get("content").and_then(Value::as_str).map(str::to_owned);
    let mut calls = Vec::new();
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            super::check_call_count(items.len())?;
            for item in items {
                calls.push(read_call(item)?);
            }
        }
        Some(_) => return Err(FormatError::new(Format::Openai, "`tool_calls` is not an array")),
    }
    // The legacy single `function_call` field.
    if calls.is_empty()
        && let Some(fc) = message.get("function_call").filter(|v| v.is_object())
    {
        calls.push(read_function(None, fc.as_object().cloned().unwrap_or_default()));
    }
    // A server whose tool parser missed the model's call leaves it in the text.
    let mut reasoning = None;
    let mut found = None;
    if calls.is_empty()
        && let Some(content) = text.as_deref().filter(|t| !t.trim().is_empty())
    {
        let parsed = dialect::parse(content, dialect);
        if !parsed.calls.is_empty() {
            calls = parsed.calls.into_iter().map(from_content).collect();
            text = (!parsed.content.is_empty()).then_some(parsed.content);
            reasoning = parsed.reasoning;
            found = parsed.dialect;
        }
    }
    Ok(Answer {
        format: Format::Openai,
        message: message.clone(),
        text,
        calls,
        cut_off: finish == Some("length"),
        reasoning,
        dialect: found,
    })
}

/// A call read from the content: marked repaired, so the rules for repaired calls apply.
fn from_content(mut call: RawCall) -> RawCall {
    let mut repair = call.repair.take().unwrap_or_default();
    repair
        .actions
        .insert(0, crate::types::Repair::PARSED_FROM_CONTENT.into());
    call.repair = Some(repair);
    call
}

fn read_call(item: &Value) -> Result<RawCall, FormatError> {
    let Value::Object(obj) = item else {
        return Err(FormatError::new(Format::Openai, "a tool call is not a JSON object"));
    };
    match obj.get("function") {
        Some(Value::Object(f)) => {
            let mut call = read_function(None, f.clone());
            call.id = obj.get("id").and_then(Value::as_str).map(str::to_owned);
            Ok(call)
        }
        // Some servers put name and arguments at the call's top level.
        _ => Ok(RawCall::from_object(
            obj.clone(),
            Some("id"),
            "arguments",
            &["type", "index"],
        )),
    }
}

fn read_function(id: Option<String>, f: Map<String, Value>) -> RawCall {
    let mut call = RawCall::from_object(f, None, "arguments", &[]);
    call.id = id;
    call
}

pub(super) fn assistant(answer: &Answer, echoes: &[CallEcho]) -> Vec<Value> {
    let mut msg = Map::new();
    msg.insert("role".into(), json!("assistant"));
    msg.insert("content".into(), answer.text.clone().map_or(Value::Null, Value::String));
    for key in ["refusal", "name"] {
        if let Some(v) = answer.message.get(key).filter(|v| !v.is_null()) {
            msg.insert(key.into(), v.clone());
        }
    }
    if !echoes.is_empty() {
        let calls: Vec<Value> = echoes
            .iter()
            .zip(&answer.calls)
            .map(|(e, raw)| {
                json!({
                    "id": e.id.as_str(),
                    "type": "function",
                    "function": {"name": e.name, "arguments": echo_arguments_text(e, &raw.arguments)}
                })
            })
            .collect();
        msg.insert("tool_calls".into(), Value::Array(calls));
    }
    vec![Value::Object(msg)]
}

pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| json!({"role": "tool", "tool_call_id": r.call_id.as_str(), "content": r.content_text()}))
        .collect()
}

pub(super) fn tools(tools: &[ToolView<'_>]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                let strict = strict_compatible(t.parameters);
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters, "strict": strict
                }})
            })
            .collect(),
    )
}

/// Keywords OpenAI strict mode accepts in a schema.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "description",
    "title",
    "$defs",
    "definitions",
    "$ref",
    "default",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// Whether a schema already satisfies OpenAI strict mode (every object closed with every property
/// required, only supported keywords), so `strict: true` changes nothing about what it accepts.
pub fn strict_compatible(schema: &Value) -> bool {
    fn check(s: &Value, depth: usize) -> bool {
        if depth > 32 {
            return false;
        }
        let Value::Object(o) = s else {
            return s.is_boolean();
        };
        if o.keys().any(|k| !STRICT_KEYWORDS.contains(&k.as_str())) {
            return false;
        }
        // Strict mode wants every schema typed (or a reference, an `anyOf`, a fixed value).
        if !["type", "anyOf", "$ref", "const", "enum"]
            .iter()
            .any(|k| o.contains_key(*k))
        {
            return false;
        }
        let is_object = match o.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
            _ => o.contains_key("properties"),
        };
        if is_object {
            if o.get("additionalProperties") != Some(&Value::Bool(false)) {
                return false;
            }
            let props = o.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = o
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = props {
                if props.keys().any(|k| !required.contains(&k.as_str())) {
                    return false;
                }
                if !props.values().all(|p| check(p, depth + 1)) {
                    return false;
                }
            }
        }
        for key in ["items"] {
            if let Some(sub) = o.get(key)
                && !check(sub, depth + 1)
            {
                return false;
            }
        }
        for key in ["anyOf"] {
            if let Some(Value::Array(subs)) = o.get(key)
                && !subs.iter().all(|s| check(s, depth + 1))
            {
                return false;
            }
        }
        for key in ["$defs", "definitions"] {
            if let Some(Value::Object(defs)) = o.get(key)
                && !defs.values().all(|s| check(s, depth + 1))
            {
                return false;
            }
        }
        true
    }
    schema.get("type").and_then(Value::as_str) == Some("object") && check(schema, 0)
}

#[cfg(test)]
mod strict_tests {
    use super::*;

    #[test]
    fn strict_is_claimed_only_for_schemas_strict_mode_accepts() {
        let closed = json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"type": "string"}, "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
            "required": ["a", "b"]});
        assert!(strict_compatible(&closed));
        for refused in [
            // An untyped property: strict mode refuses the schema.
            json!({"type": "object", "additionalProperties": false, "properties": {"a": {}}, "required": ["a"]}),
            json!({"type": "object", "additionalProperties": false, "properties": {"a": {"description": "x"}}, "required": ["a"]}),
            // Open objects and optional properties change what strict accepts.
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
            json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}}),
            json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "array", "items": {}}}, "required": ["a"]}),
        ] {
            assert!(!strict_compatible(&refused), "{refused}");
        }
    }
}
