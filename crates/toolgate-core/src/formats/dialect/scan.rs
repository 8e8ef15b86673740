//! Scanners the family parsers share: where a JSON value ends (strings respected, so a marker
//! inside a string is never structure), token lookup across the spellings servers render, and
//! call objects read from JSON.

use super::Call;
use crate::formats::RawArguments;
use crate::parse::repair_json;
use serde_json::{Map, Value};

/// The end (exclusive) of the JSON object or array starting at `start`, or `None` when the text
/// ends first. Brackets inside strings do not count; nesting is bounded by the text's length.
pub(crate) fn json_end(text: &str, start: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The first of `spellings` found in `text` from `from`: its position and length.
pub(crate) fn find_any(text: &str, from: usize, spellings: &[&str]) -> Option<(usize, usize)> {
    let rest = text.get(from..)?;
    spellings
        .iter()
        .filter_map(|s| rest.find(s).map(|p| (from + p, s.len())))
        .min_by_key(|&(p, _)| p)
}

/// `text` with one code fence around it removed (```` ```json ```` … ```` ``` ````).
pub(crate) fn unfence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let body = rest.find('\n').map_or("", |n| &rest[n + 1..]);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// Reads one JSON value from marker-delimited text, strictly first, then repaired. A value the
/// repair had to complete was cut off; that is an error, not a guess.
pub(crate) fn json_value(text: &str) -> Result<(Value, Option<crate::types::Repair>), String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the tool call is empty".into());
    }
    let (value, repair) = repair_json(text).map_err(|_| "the tool call is not valid JSON".to_owned())?;
    if repair.as_ref().is_some_and(|r| r.completed_cut_off) {
        return Err("the tool call was cut off before its end".into());
    }
    Ok((value, repair))
}

/// A call from a JSON call object: `{"name", "arguments" | "parameters"}` (with `"type":
/// "function"` or a nested `"function"` object), or toolgate's own `{"tool", "parameters"}`.
/// `None` when the object is not a call.
pub(crate) fn call_object(value: Value, loose: bool) -> Option<Call> {
    let Value::Object(mut obj) = value else {
        return None;
    };
    if let Some(Value::Object(inner)) = obj.get("function").filter(|_| !obj.contains_key("name")) {
        let mut inner = inner.clone();
        if let Some(id) = obj.remove("id") {
            inner.entry("id").or_insert(id);
        }
        obj = inner;
    }
    let own = obj.contains_key("tool") && !obj.contains_key("name");
    let name = match obj
        .remove("name")
        .or_else(|| obj.remove("tool"))
        .or_else(|| obj.remove("tool_name"))
    {
        Some(Value::String(s)) if !s.trim().is_empty() => s,
        _ => return None,
    };
    let args = obj
        .remove("arguments")
        .or_else(|| obj.remove("parameters"))
        .or_else(|| obj.remove("args"))
        .or_else(|| obj.remove("input"));
    // Without a marker, only a call-shaped object is a call: prose JSON such as
    // `{"name": "Bob", "arguments": [1]}` is data.
    if !loose && !own && !matches!(args, Some(Value::Object(_) | Value::String(_))) {
        return None;
    }
    let id = match obj.remove("id") {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    for key in ["type", "reasoning", "index"] {
        obj.remove(key);
    }
    let arguments = match args {
        None | Some(Value::Null) => RawArguments::Missing,
        Some(Value::String(s)) => RawArguments::Text(s),
        Some(v) => RawArguments::Json(v),
    };
    Some(Call {
        id,
        name: Some(name),
        arguments,
        extra: obj,
        repair: None,
    })
}

/// Every call in a JSON value: one call object, or an array of them. `None` when any element is
/// not a call (an array of ordinary data is not a list of calls).
pub(crate) fn calls_in(value: Value, loose: bool) -> Option<Vec<Call>> {
    match value {
        Value::Array(items) if !items.is_empty() => items.into_iter().map(|v| call_object(v, loose)).collect(),
        Value::Array(_) => None,
        other => call_object(other, loose).map(|c| vec![c]),
    }
}

/// A call that a clear marker announced but that could not be read.
pub(crate) fn broken(name: Option<String>, message: impl Into<String>) -> Call {
    Call {
        id: None,
        name,
        arguments: RawArguments::Broken(message.into()),
        extra: Map::new(),
        repair: None,
    }
}

/// Reads the JSON calls written one after another from `at` (separated by `;`, `,` or white
/// space, as Llama does), up to the end of the value list. Returns the calls and where reading
/// stopped.
pub(crate) fn json_sequence(text: &str, mut at: usize, loose: bool) -> Result<(Vec<Call>, usize), String> {
    let mut calls = Vec::new();
    loop {
        let rest = &text[at..];
        let skipped = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',')
                .len();
        if !matches!(rest.as_bytes().get(skipped), Some(b'{' | b'[')) {
            break;
        }
        let start = at + skipped;
        let end = json_end(text, start).ok_or("the tool call was cut off before its end")?;
        let (value, repair) = json_value(&text[start..end])?;
        let mut found = calls_in(value, loose)
            .ok_or("the JSON is not a tool call (expected an object with `name` and `arguments`)")?;
        if let Some(first) = found.first_mut() {
            first.repair = repair;
        }
        calls.extend(found);
        at = end;
    }
    Ok((calls, at))
}

/// Where a text value ends: at a `close` tag followed (after white space) by one of `next_tags`
/// or the end of the text; failing that, at the first `close`; failing that, just before the next
/// tag (a dropped closing tag). Returns the value's end and where reading goes on.
pub(crate) fn value_end(text: &str, from: usize, close: &str, next_tags: &[&str]) -> Option<(usize, usize)> {
    let mut search = from;
    let mut first = None;
    while let Some(p) = text[search..].find(close) {
        let end = search + p;
        first.get_or_insert(end);
        let after = text[end + close.len()..].trim_start();
        if after.is_empty() || next_tags.iter().any(|t| after.starts_with(t)) {
            return Some((end, end + close.len()));
        }
        search = end + close.len();
    }
    if let Some(end) = first {
        return Some((end, end + close.len()));
    }
    next_tags
        .iter()
        .filter_map(|t| text[from..].find(t))
        .min()
        .map(|p| (from + p, from + p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_end_skips_brackets_inside_strings() {
        let t = r#"{"a": "} ] </tool_call> ```", "b": [1, {"c": "\"}"}]} tail"#;
        let end = json_end(t, 0).unwrap();
        assert_eq!(&t[end..], " tail");
        assert_eq!(json_end(r#"{"a": [1, 2"#, 0), None);
        assert_eq!(json_end("]", 0), None);
    }

    #[test]
    fn call_objects_of_each_shape() {
        let c = call_object(serde_json::json!({"name": "f", "parameters": {"a": 1}}), false).unwrap();
        assert_eq!(c.name.as_deref(), Some("f"));
        let c = call_object(
            serde_json::json!({"type": "function", "function": {"name": "g", "arguments": "{}"}, "id": "x"}),
            false,
        )
        .unwrap();
        assert_eq!((c.name.as_deref(), c.id.as_deref()), (Some("g"), Some("x")));
        assert!(call_object(serde_json::json!({"name": "Bob", "age": 3}), false).is_none());
        assert!(call_object(serde_json::json!({"name": "f"}), true).is_some());
        assert!(calls_in(serde_json::json!([{"name": "f", "arguments": {}}, 3]), false).is_none());
    }
}
