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
    let mut out = convert(schema, schema, 0);
    fit(&mut out, true);
    out
}

/// What Gemini refuses that `convert` can leave: a schema with neither `type` nor `anyOf` (an
/// untyped property), an `object` with no `properties` (a free-form map), and `required` naming
/// a property that is not defined. The first two become a string holding JSON text (validation
/// turns JSON text back into the object the full schema asks for), the third is dropped.
fn fit(schema: &mut Value, top: bool) {
    let Value::Object(out) = schema else {
        return;
    };
    if let Some(Value::Object(props)) = out.get_mut("properties") {
        for p in props.values_mut() {
            fit(p, false);
        }
    }
    for key in ["items"] {
        if let Some(sub) = out.get_mut(key) {
            fit(sub, false);
        }
    }
    if let Some(Value::Array(any)) = out.get_mut("anyOf") {
        for sub in any.iter_mut() {
            fit(sub, false);
        }
    }
    let defined: Vec<String> = out
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(Value::Array(required)) = out.get_mut("required") {
        required.retain(|r| r.as_str().is_some_and(|r| defined.iter().any(|d| d == r)));
        if required.is_empty() {
            out.remove("required");
        }
    }
    if top {
        return;
    }
    let untyped = !out.contains_key("type") && !out.contains_key("anyOf");
    let free_object = out.get("type").and_then(Value::as_str) == Some("object") && defined.is_empty();
    if untyped || free_object {
        let what = if free_object { "a JSON object" } else { "any JSON value" };
        let description = match out.get("description").and_then(Value::as_str) {
            Some(d) => format!("{d} ({what}, written as JSON text)"),
            None => format!("{what}, written as JSON text"),
        };
        let nullable = out.get("nullable").cloned();
        out.clear();
        out.insert("type".into(), json!("string"));
        out.insert("description".into(), json!(description));
        if let Some(n) = nullable {
            out.insert("nullable".into(), n);
        }
    }
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

    /// The rules Gemini's function-declaration documentation states for `parameters` (an
    /// OpenAPI subset), as a checker: every schema typed (or an `anyOf`), an `object` below the
    /// top with properties, `required` naming defined properties, only the documented keywords.
    fn gemini_refusal(schema: &Value, top: bool, at: &str) -> Option<String> {
        const KEYS: &[&str] = &[
            "type",
            "format",
            "title",
            "description",
            "nullable",
            "enum",
            "maxItems",
            "minItems",
            "properties",
            "required",
            "minProperties",
            "maxProperties",
            "minLength",
            "maxLength",
            "pattern",
            "example",
            "anyOf",
            "propertyOrdering",
            "default",
            "items",
            "minimum",
            "maximum",
        ];
        let o = schema.as_object()?;
        if let Some(k) = o.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Some(format!("{at}: keyword {k}"));
        }
        if !o.contains_key("type") && !o.contains_key("anyOf") {
            return Some(format!("{at}: no type"));
        }
        if o.get("type").is_some_and(|t| !t.is_string()) {
            return Some(format!("{at}: a type that is not one name"));
        }
        let props = o.get("properties").and_then(Value::as_object);
        if !top && o.get("type") == Some(&json!("object")) && props.is_none_or(Map::is_empty) {
            return Some(format!("{at}: an object without properties"));
        }
        for r in o.get("required").and_then(Value::as_array).into_iter().flatten() {
            if !props.is_some_and(|p| r.as_str().is_some_and(|r| p.contains_key(r))) {
                return Some(format!("{at}: required {r} is not defined"));
            }
        }
        let subs = props
            .into_iter()
            .flat_map(|p| p.iter().map(|(k, v)| (format!("{at}/properties/{k}"), v)))
            .chain(o.get("items").map(|i| (format!("{at}/items"), i)))
            .chain(
                o.get("anyOf")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, v)| (format!("{at}/anyOf/{i}"), v)),
            );
        for (path, sub) in subs {
            if let Some(why) = gemini_refusal(sub, false, &path) {
                return Some(why);
            }
        }
        None
    }

    #[test]
    fn what_gemini_refuses_is_down_converted_and_the_full_schema_still_validates() {
        let schemas = [
            json!({"type": "object", "properties": {"anything": {"description": "any value"}}}),
            json!({"type": "object", "properties": {"opts": {"type": "object", "description": "options"}}, "required": ["opts"]}),
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "ghost"]}),
            json!({"type": "object", "properties": {"list": {"type": "array", "items": {}}}}),
            json!({"type": "object", "properties": {"either": {"anyOf": [{"type": "object"}, {"type": "string"}]}}}),
            json!({"type": "object", "properties": {"maybe": {"type": ["object", "null"]}}}),
        ];
        for schema in &schemas {
            // The lower bound: each one, as it was, is refused by the rules...
            assert!(
                gemini_refusal(schema, true, "").is_some(),
                "{schema} should need converting"
            );
            // ...and converted, accepted.
            let converted = to_gemini_schema(schema);
            assert_eq!(gemini_refusal(&converted, true, ""), None, "{schema} -> {converted}");
        }
        let opts = to_gemini_schema(&schemas[1]);
        assert_eq!(opts["properties"]["opts"]["type"], "string");
        assert!(
            opts["properties"]["opts"]["description"]
                .as_str()
                .unwrap()
                .contains("JSON object")
        );
        assert_eq!(opts["required"], json!(["opts"]));
        assert_eq!(to_gemini_schema(&schemas[2])["required"], json!(["a"]));
        // What a Gemini model then sends (JSON text) passes the full schema as the object it means.
        let compiled = crate::validate::CompiledSchema::compile(&schemas[1]).unwrap();
        let mut args = json!({"opts": "{\"depth\": 2}"});
        let warnings = compiled.check(&mut args, Default::default()).expect("coerced");
        assert_eq!(args, json!({"opts": {"depth": 2}}));
        assert_eq!(warnings.len(), 1);
        let mut broken = json!({"opts": "{depth: 2"});
        assert!(compiled.check(&mut broken, Default::default()).is_err());
        let mut array_for_object = json!({"opts": "[1]"});
        assert!(compiled.check(&mut array_for_object, Default::default()).is_err());
    }

    #[test]
    fn a_schema_gemini_accepts_keeps_its_shape() {
        // Typed properties, enums, nested objects with properties: nothing to change.
        let schema = json!({"type": "object", "additionalProperties": false,
            "properties": {"path": {"type": "string"}, "mode": {"type": "string", "enum": ["a", "b"]},
                "limits": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
                "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["path"]});
        let converted = to_gemini_schema(&schema);
        assert_eq!(gemini_refusal(&converted, true, ""), None, "{converted}");
        assert_eq!(
            converted["properties"]["limits"]["type"], "object",
            "a typed object stays one"
        );
    }

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
