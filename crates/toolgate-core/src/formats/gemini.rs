//! Gemini `generateContent`: `functionCall` parts, `functionResponse` parts, and the schema subset
//! Gemini accepts.

use super::{Answer, CallEcho, Format, FormatError, RawCall, ToolResult, ToolView, echo_arguments_object};
use serde_json::{Map, Value, json};

pub(super) fn parse(body: &Value) -> Result<Answer, FormatError> {
    let (content, finish) = match body.get("candidates") {
        Some(Value::Array(c)) => {
            let cand = c
                .first()
                .ok_or_else(|| FormatError::new(Format::Gemini, "`candidates` is empty"))?;
            let content = cand
                .get("content")
                .ok_or_else(|| FormatError::new(Format::Gemini, "`candidates[0]` has no `content`"))?;
            (content, cand.get("finishReason").and_then(Value::as_str))
        }
        Some(_) => return Err(FormatError::new(Format::Gemini, "`candidates` is not an array")),
        None => (body, body.get("finishReason").and_then(Value::as_str)),
    };
    let parts = match content.get("parts") {
        Some(Value::Array(p)) => p,
        None if content.is_object() => &Vec::new(),
        _ => return Err(FormatError::new(Format::Gemini, "`content.parts` is not an array")),
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    super::check_call_count(parts.iter().filter(|p| p.get("functionCall").is_some()).count())?;
    for part in parts {
        if let Some(t) = part.get("text").and_then(Value::as_str)
            && part.get("thought") != Some(&Value::Bool(true))
        {
            text.push_str(t);
        }
        if let Some(fc) = part.get("functionCall") {
            calls.push(RawCall::from_object(
                fc.as_object().cloned().unwrap_or_default(),
                Some("id"),
                "args",
                &[],
            ));
        }
    }
    Ok(Answer {
        format: Format::Gemini,
        message: json!({"role": "model", "parts": parts}),
        text: (!text.is_empty()).then_some(text),
        calls,
        cut_off: finish == Some("MAX_TOKENS"),
        reasoning: None,
        dialect: None,
    })
}

pub(super) fn assistant(answer: &Answer, echoes: &[CallEcho]) -> Vec<Value> {
    let parts = answer
        .message
        .get("parts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut echoes = echoes.iter();
    let parts: Vec<Value> = parts
        .into_iter()
        .map(|mut p| {
            if p.get("functionCall").is_some()
                && let Some(e) = echoes.next()
            {
                p["functionCall"] = json!({"id": e.id.as_str(), "name": e.name, "args": echo_arguments_object(e)});
            }
            p
        })
        .collect();
    vec![json!({"role": "model", "parts": parts})]
}

pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    let parts: Vec<Value> = results
        .iter()
        .map(|r| {
            // `response` must be an object: errors already are; results go under `result`.
            let response = if r.is_error {
                r.content.clone()
            } else {
                json!({"result": r.content})
            };
            json!({"functionResponse": {"id": r.call_id.as_str(), "name": r.name, "response": response}})
        })
        .collect();
    vec![json!({"role": "user", "parts": parts})]
}

pub(super) fn tools(tools: &[ToolView<'_>]) -> Value {
    let decls: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut d = json!({"name": t.name, "description": t.description});
            let params = to_gemini_schema(t.parameters);
            let empty = params
                .get("properties")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty);
            if !empty {
                d["parameters"] = params;
            }
            d
        })
        .collect();
    json!([{"functionDeclarations": decls}])
}

const KEEP: &[&str] = &[
    "description",
    "title",
    "nullable",
    "maxItems",
    "minItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "default",
    "example",
    "propertyOrdering",
];

/// Down-converts a JSON Schema to the OpenAPI subset Gemini accepts: local `$ref`s inlined,
/// `const` and `oneOf` rewritten, `["T", "null"]` as `nullable`, unsupported keywords dropped.
/// Validation still uses the full schema.
pub fn to_gemini_schema(schema: &Value) -> Value {
    convert(schema, schema, 0)
}

fn convert(root: &Value, schema: &Value, depth: usize) -> Value {
    let Value::Object(src) = schema else {
        return json!({});
    };
    if depth > 16 {
        return json!({"type": "object"});
    }
    if let Some(target) = src
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|p| root.pointer(p))
    {
        let mut merged = convert(root, target, depth + 1);
        if let (Some(d), Value::Object(m)) = (src.get("description"), &mut merged) {
            m.insert("description".into(), d.clone());
        }
        return merged;
    }
    let mut out = Map::new();
    for key in KEEP {
        if let Some(v) = src.get(*key) {
            out.insert((*key).into(), v.clone());
        }
    }
    if out.get("example").is_none()
        && let Some(first) = src.get("examples").and_then(Value::as_array).and_then(|e| e.first())
    {
        out.insert("example".into(), first.clone());
    }
    types(root, src, depth, &mut out);
    if let Some(c) = src.get("const") {
        if let Value::String(_) = c {
            out.insert("type".into(), json!("string"));
            out.insert("enum".into(), json!([c]));
        }
    } else if let Some(Value::Array(e)) = src.get("enum")
        && e.iter().all(Value::is_string)
    {
        out.insert("enum".into(), Value::Array(e.clone()));
        out.insert("type".into(), json!("string"));
    }
    if let Some(f) = src.get("format").and_then(Value::as_str) {
        let ok = matches!(
            (out.get("type").and_then(Value::as_str), f),
            (Some("string"), "enum" | "date-time")
                | (Some("integer"), "int32" | "int64")
                | (Some("number"), "float" | "double")
        );
        if ok {
            out.insert("format".into(), json!(f));
        }
    }
    if let Some(Value::Object(props)) = src.get("properties") {
        let converted: Map<String, Value> = props
            .iter()
            .map(|(k, v)| (k.clone(), convert(root, v, depth + 1)))
            .collect();
        out.insert("properties".into(), Value::Object(converted));
        if !out.contains_key("type") {
            out.insert("type".into(), json!("object"));
        }
    }
    if let Some(Value::Array(req)) = src.get("required") {
        out.insert("required".into(), Value::Array(req.clone()));
    }
    if let Some(items) = src.get("items").filter(|i| i.is_object()) {
        out.insert("items".into(), convert(root, items, depth + 1));
    }
    combinators(root, src, depth, &mut out);
    Value::Object(out)
}

/// `type`: a single type, or a list — `null` in it becomes `nullable`, several real types `anyOf`.
fn types(root: &Value, src: &Map<String, Value>, depth: usize, out: &mut Map<String, Value>) {
    match src.get("type") {
        Some(Value::String(t)) => {
            out.insert("type".into(), json!(t));
        }
        Some(Value::Array(ts)) => {
            let real: Vec<&Value> = ts.iter().filter(|t| t.as_str() != Some("null")).collect();
            if real.len() < ts.len() {
                out.insert("nullable".into(), Value::Bool(true));
            }
            match real.as_slice() {
                [one] => {
                    out.insert("type".into(), (*one).clone());
                }
                [] => {}
                many => {
                    let mut rest = src.clone();
                    rest.remove("type");
                    let any: Vec<Value> = many
                        .iter()
                        .map(|t| {
                            let mut s = rest.clone();
                            s.insert("type".into(), (*t).clone());
                            convert(root, &Value::Object(s), depth + 1)
                        })
                        .collect();
                    out.insert("anyOf".into(), Value::Array(any));
                }
            }
        }
        _ => {}
    }
}

/// `anyOf`/`oneOf` (a null alternative becomes `nullable`, a single real one is inlined) and
/// `allOf` (merged).
fn combinators(root: &Value, src: &Map<String, Value>, depth: usize, out: &mut Map<String, Value>) {
    let any = src.get("anyOf").or_else(|| src.get("oneOf"));
    if let Some(Value::Array(subs)) = any {
        let (nulls, real): (Vec<&Value>, Vec<&Value>) = subs
            .iter()
            .partition(|s| s.get("type").and_then(Value::as_str) == Some("null"));
        if !nulls.is_empty() {
            out.insert("nullable".into(), Value::Bool(true));
        }
        if let [only] = real.as_slice() {
            if let Value::Object(m) = convert(root, only, depth + 1) {
                for (k, v) in m {
                    out.entry(k).or_insert(v);
                }
            }
        } else if !real.is_empty() {
            let any: Vec<Value> = real.iter().map(|s| convert(root, s, depth + 1)).collect();
            out.insert("anyOf".into(), Value::Array(any));
        }
    }
    if let Some(Value::Array(all)) = src.get("allOf") {
        for sub in all {
            if let Value::Object(m) = convert(root, sub, depth + 1) {
                for (k, v) in m {
                    match (out.get_mut(&k), v) {
                        (Some(Value::Object(a)), Value::Object(b)) if k == "properties" => a.extend(b),
                        (Some(Value::Array(a)), Value::Array(b)) if k == "required" => a.extend(b),
                        (None, v) => {
                            out.insert(k, v);
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_keywords_are_converted_or_dropped() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "mode": {"const": "fast"},
                "maybe": {"type": ["integer", "null"], "exclusiveMinimum": 0},
                "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "item": {"$ref": "#/$defs/item"},
                "when": {"type": "string", "format": "uri"}
            },
            "required": ["mode"],
            "$defs": {"item": {"type": "object", "properties": {"n": {"type": "integer"}}}}
        });
        let g = to_gemini_schema(&schema);
        assert_eq!(
            g,
            json!({
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["fast"]},
                    "maybe": {"nullable": true, "type": "integer"},
                    "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    "item": {"type": "object", "properties": {"n": {"type": "integer"}}},
                    "when": {"type": "string"}
                },
                "required": ["mode"]
            })
        );
    }

    #[test]
    fn recursive_refs_terminate() {
        let schema = json!({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"});
        let g = to_gemini_schema(&schema);
        assert_eq!(g["type"], "object");
    }
}
