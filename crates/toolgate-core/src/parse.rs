//! Stage 1: normalise a provider's call into a `ToolCall`, repairing what can be repaired.
//!
//! A strict parse is tried first. Every repair marks the call `repaired` with what was done and
//! whether a cut-off value was completed (such a repair may have invented arguments). What cannot
//! be repaired becomes `malformed_call` with the parser's message.

use crate::error::{CallError, ErrorKind};
use crate::formats::{RawArguments, RawCall};
use crate::registry::Registry;
use crate::types::{CallId, Repair, ToolCall, ToolName};
use serde_json::{Map, Value};

/// The deepest nesting stage 1 accepts in arguments (serde_json's own limit is 128).
pub const MAX_DEPTH: usize = 100;

/// Prefixes models put before a tool's name.
const NAME_PREFIXES: &[&str] = &[
    "functions.",
    "function.",
    "tools.",
    "tool.",
    "functions/",
    "default_api.",
];

/// The longest call id kept as given (providers issue ids of a few dozen bytes).
pub const MAX_ID_BYTES: usize = 256;
/// The longest tool name read (MCP's namespaced names stay far below it).
pub const MAX_NAME_BYTES: usize = 256;

/// The longest arguments text read (64 MiB, as `toolgate exec` reads at most: far above any real call).
pub const MAX_ARGUMENT_BYTES: usize = 64 << 20;

/// A call that stage 1 could not make usable.
#[derive(Clone, Debug, PartialEq)]
pub struct Malformed {
    /// The id (given or generated), so the result can still be linked.
    pub id: CallId,
    /// The name as written, if any.
    pub name: Option<String>,
    /// The `malformed_call` error.
    pub error: Box<CallError>,
}

/// Normalises one raw call. `cut_off` says the provider cut the answer at its token limit: then
/// incomplete arguments are never completed.
pub fn normalize(raw: &RawCall, registry: &Registry, cut_off: bool) -> Result<ToolCall, Malformed> {
    let given = raw.id.as_deref().map(str::trim).filter(|s| !s.is_empty());
    // A model chooses call ids: one longer than any provider issues is replaced, and said so.
    let overlong = given.is_some_and(|g| g.len() > MAX_ID_BYTES);
    let id = given.filter(|_| !overlong).map_or_else(CallId::generate, CallId::new);
    let malformed = |name: Option<String>, message: String| Malformed {
        id: id.clone(),
        name,
        error: Box::new(CallError::new(ErrorKind::MalformedCall, message)),
    };
    if let RawArguments::Broken(why) = &raw.arguments {
        return Err(malformed(
            raw.name.clone(),
            format!("The tool call could not be read: {why}. Call again with the whole call in the same format."),
        ));
    }
    let Some(written) = raw.name.as_deref().map(str::trim).filter(|n| !n.is_empty()) else {
        return Err(malformed(
            None,
            "The tool call has no tool name. Call again with the tool's name.".into(),
        ));
    };
    if written.len() > MAX_NAME_BYTES {
        return Err(malformed(
            None,
            format!(
                "The tool name is {} bytes long; tool names have at most {MAX_NAME_BYTES}. Call again with the tool's name.",
                written.len()
            ),
        ));
    }
    let mut repair = raw.repair.clone().unwrap_or_default();
    if overlong {
        repair.actions.push("replaced_overlong_call_id".into());
    }
    let name = resolve_name(written, registry, &mut repair.actions);

    let (mut arguments, arg_repair) = match &raw.arguments {
        RawArguments::Fields(fields) => {
            let schema = registry.registered(name.as_str()).map(|e| e.tool().parameter_schema());
            (typed_fields(fields, schema.as_deref()), None)
        }
        other => match parse_arguments(other, cut_off) {
            Ok(ok) => ok,
            Err(message) => return Err(malformed(Some(written.to_owned()), message)),
        },
    };
    if let Some(r) = arg_repair {
        repair.actions.extend(r.actions);
        repair.completed_cut_off |= r.completed_cut_off;
        repair.raw = r.raw;
    }
    let extra: Map<String, Value> = raw
        .extra
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "reasoning" | "thought_signature" | "thoughtSignature"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if arguments.is_empty() && !extra.is_empty() {
        arguments = extra;
        repair.actions.push("moved_top_level_parameters".into());
    }
    let repair = (!repair.actions.is_empty()).then(|| {
        if repair.raw.is_empty() {
            repair.raw = raw_text(&raw.arguments);
        }
        tracing::warn!(call_id = %id, tool = %name, actions = ?repair.actions, "repaired tool call");
        repair
    });
    Ok(ToolCall {
        id,
        name,
        arguments,
        repair,
    })
}

fn raw_text(raw: &RawArguments) -> String {
    match raw {
        RawArguments::Missing | RawArguments::Broken(_) => String::new(),
        RawArguments::Fields(m) => Value::Object(m.clone()).to_string(),
        RawArguments::Text(t) => t.clone(),
        RawArguments::Json(v) => v.to_string(),
    }
}

fn resolve_name(written: &str, registry: &Registry, actions: &mut Vec<String>) -> ToolName {
    if let Some(e) = registry.get(written) {
        return e.name().clone();
    }
    let mut name = written;
    for prefix in NAME_PREFIXES {
        if let Some(rest) = name.strip_prefix(prefix)
            && !rest.is_empty()
        {
            name = rest;
            actions.push("stripped_name_prefix".into());
            break;
        }
    }
    if let Some(e) = registry.get(name) {
        return e.name().clone();
    }
    if let Some(e) = registry.case_insensitive(name) {
        actions.push("fixed_name_case".into());
        return e.name().clone();
    }
    ToolName::new(name)
}

/// Reads arguments into an object. Empty or missing arguments are `{}` (not a repair).
pub fn parse_arguments(raw: &RawArguments, cut_off: bool) -> Result<(Map<String, Value>, Option<Repair>), String> {
    if let RawArguments::Json(Value::String(s)) | RawArguments::Text(s) = raw
        && s.len() > MAX_ARGUMENT_BYTES
    {
        return Err(format!(
            "The arguments are {} bytes; at most {MAX_ARGUMENT_BYTES} are read. Call again with smaller arguments.",
            s.len()
        ));
    }
    match raw {
        RawArguments::Missing | RawArguments::Json(Value::Null) => Ok((Map::new(), None)),
        RawArguments::Json(Value::Object(o)) => Ok((o.clone(), None)),
        RawArguments::Json(Value::String(s)) => parse_text(s, cut_off),
        RawArguments::Json(other) => Err(format!(
            "The arguments must be a JSON object, not {}. Call again with an object.",
            kind_name(other)
        )),
        RawArguments::Text(s) => parse_text(s, cut_off),
        RawArguments::Fields(m) => Ok((m.clone(), None)),
        RawArguments::Broken(why) => Err(format!("The tool call could not be read: {why}.")),
    }
}

/// Types the text values of a format that carries only text (Qwen3-Coder, GLM, DSML) by the
/// tool's schema: a property of type number, integer, boolean, null, object or array gets the
/// value its text spells; strings, untyped properties and text that spells no such value stay
/// text (stage 5 then says what is wrong). This is the format's encoding, not a repair.
pub fn typed_fields(fields: &Map<String, Value>, schema: Option<&Value>) -> Map<String, Value> {
    let properties = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
    fields
        .iter()
        .map(|(key, value)| {
            let typed = match (value, properties.and_then(|p| p.get(key))) {
                (Value::String(text), Some(property)) => type_text(text, property).unwrap_or_else(|| value.clone()),
                _ => value.clone(),
            };
            (key.clone(), typed)
        })
        .collect()
}

fn type_text(text: &str, property: &Value) -> Option<Value> {
    let types: Vec<&str> = match property.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        // No type but an enum or a const: the text is one of their strings.
        _ => return None,
    };
    let t = text.trim();
    // A nullable string written `null` means null (models write it for "no value").
    if types.contains(&"null") && matches!(t, "null" | "None") {
        return Some(Value::Null);
    }
    if types.contains(&"string") || types.is_empty() {
        return None;
    }
    let value = serde_json::from_str::<Value>(t)
        .ok()
        .or_else(|| match t {
            "True" => Some(Value::Bool(true)),
            "False" => Some(Value::Bool(false)),
            "None" => Some(Value::Null),
            _ => None,
        })
        .or_else(|| {
            (types.contains(&"object") || types.contains(&"array"))
                .then(|| repair_json(t).ok().map(|(v, _)| v))
                .flatten()
        })?;
    let fits = match &value {
        Value::Null => types.contains(&"null"),
        Value::Bool(_) => types.contains(&"boolean"),
        Value::Number(n) => {
            types.contains(&"number")
                || (types.contains(&"integer")
                    && (n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)))
        }
        Value::String(_) => false,
        Value::Array(_) => types.contains(&"array"),
        Value::Object(_) => types.contains(&"object"),
    };
    fits.then_some(value)
}

fn parse_text(text: &str, cut_off: bool) -> Result<(Map<String, Value>, Option<Repair>), String> {
    if text.trim().is_empty() {
        return Ok((Map::new(), None));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => return Ok((o, None)),
        Ok(Value::Null) => return Ok((Map::new(), None)),
        Ok(Value::String(inner)) => {
            return match serde_json::from_str::<Value>(&inner) {
                Ok(Value::Object(o)) => Ok((
                    o,
                    Some(Repair {
                        actions: vec!["unwrapped_double_encoded_json".into()],
                        completed_cut_off: false,
                        raw: text.to_owned(),
                    }),
                )),
                _ => Err("The arguments are a JSON string, not an object. Call again with an object.".into()),
            };
        }
        Ok(other) => {
            return Err(format!(
                "The arguments must be a JSON object, not {}. Call again with an object.",
                kind_name(&other)
            ));
        }
        Err(_) => {}
    }
    // The strict parse above failed: straight to repair.
    let (value, repair) = repair_broken(text)?;
    let repair = Some(repair);
    if cut_off && repair.as_ref().is_some_and(|r| r.completed_cut_off) {
        return Err("The arguments were cut off by the model's output token limit. Reissue the call with complete (or shorter) arguments.".into());
    }
    match value {
        Value::Object(o) => Ok((o, repair)),
        Value::Null => Ok((Map::new(), repair)),
        other => Err(format!(
            "The arguments must be a JSON object, not {}. Call again with an object.",
            kind_name(&other)
        )),
    }
}

/// Parses JSON text, strictly first, then through repair. A repaired value comes with what was
/// done; a JSON string that encodes an object is unwrapped.
pub fn repair_json(text: &str) -> Result<(Value, Option<Repair>), String> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok((v, None));
    }
    repair_broken(text).map(|(v, r)| (v, Some(r)))
}

/// Repairs text the strict parser refused, naming what was done.
fn repair_broken(text: &str) -> Result<(Value, Repair), String> {
    let (mut value, repairs) = crate::lenient::read(text, MAX_DEPTH).map_err(|e| {
        format!("The arguments are not valid JSON and could not be repaired ({e}). Call again with valid JSON.")
    })?;
    let mut actions: Vec<String> = repairs.actions.iter().map(|a| (*a).to_owned()).collect();
    if let Value::String(inner) = &value
        && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(inner)
    {
        value = v;
        actions.push("unwrapped_double_encoded_json".into());
    }
    if actions.is_empty() {
        actions.push("repaired_json".into());
    }
    Ok((
        value,
        Repair {
            actions,
            completed_cut_off: repairs.completed_cut_off,
            raw: text.to_owned(),
        },
    ))
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> (Value, Option<Repair>) {
        let (m, r) = parse_arguments(&RawArguments::Text(text.into()), false).unwrap();
        (Value::Object(m), r)
    }

    #[test]
    fn valid_json_is_not_repaired() {
        let (v, r) = parse(r#"{"path": "a.txt"}"#);
        assert_eq!(v, json!({"path": "a.txt"}));
        assert!(r.is_none());
        assert_eq!(parse("").0, json!({}));
    }

    #[test]
    fn each_repair_is_applied_and_named() {
        let cases: &[(&str, Value, &str)] = &[
            (
                "```json\n{\"path\": \"a\"}\n```",
                json!({"path": "a"}),
                "stripped_code_fence",
            ),
            (r#"{"path": "a",}"#, json!({"path": "a"}), "trailing_comma"),
            (r#"{'path': 'a'}"#, json!({"path": "a"}), "single_quotes"),
            (r#"{path: "a"}"#, json!({"path": "a"}), "unquoted_keys"),
            (
                r#"{"a": True, "b": False, "c": None}"#,
                json!({"a": true, "b": false, "c": null}),
                "python_literals",
            ),
            (
                r#""{\"path\": \"a\"}""#,
                json!({"path": "a"}),
                "unwrapped_double_encoded_json",
            ),
            (
                r#"{"path": "a", "content": "hel"#,
                json!({"path": "a", "content": "hel"}),
                "completed_cut_off_value",
            ),
        ];
        for (text, expected, action) in cases {
            let (v, r) = parse(text);
            assert_eq!(&v, expected, "{text}");
            let r = r.unwrap_or_else(|| panic!("{text} not marked repaired"));
            assert!(r.actions.iter().any(|a| a == action), "{text}: {:?}", r.actions);
            assert_eq!(r.raw, *text);
            assert_eq!(r.completed_cut_off, *action == "completed_cut_off_value", "{text}");
        }
    }

    #[test]
    fn cut_off_answers_are_never_completed() {
        let err = parse_arguments(&RawArguments::Text(r#"{"path": "a", "content": "hel"#.into()), true).unwrap_err();
        assert!(err.contains("cut off"), "{err}");
        let (m, r) = parse_arguments(&RawArguments::Text(r#"{"path": "a"}"#.into()), true).unwrap();
        assert_eq!(m["path"], "a");
        assert!(r.is_none());
    }

    #[test]
    fn non_objects_are_malformed() {
        for text in ["[1, 2]", "42", "\"just text\""] {
            assert!(
                parse_arguments(&RawArguments::Text(text.into()), false).is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn inputs_that_broke_jsonrepair_terminate() {
        // Each of these made jsonrepair 0.1.0 loop forever with unbounded memory, or panic.
        for text in [
            "{\"a\": 'x'/}",
            "\"a\" /x",
            "''!",
            "\"a\".",
            "\"a\"+<",
            "\" {\\''.",
            "{\"k\": \"x\\é\"",
            "'\\日'",
        ] {
            let _ = repair_json(text);
        }
    }

    #[test]
    fn deep_nesting_is_refused_without_recursion() {
        let deep = "[".repeat(100_000);
        let err = parse_arguments(&RawArguments::Text(deep), false).unwrap_err();
        assert!(err.contains("deeper"), "{err}");
        assert!(parse_arguments(&RawArguments::Text("{\"a\":".repeat(100_000)), false).is_err());
    }
}
