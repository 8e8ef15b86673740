//! The `<tool_call>` family, block by block:
//! - Hermes (Qwen 2.5 / Qwen 3, NousHermes): `<tool_call>{"name": …, "arguments": {…}}</tool_call>`;
//! - Qwen3-Coder: `<tool_call><function=NAME><parameter=KEY>value</parameter>…</function></tool_call>`
//!   (values are text, typed later by the tool's schema);
//! - GLM 4.5 / 4.6 / 4.7: `<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>`.
//!
//! JSON is read with strings respected, and a text value ends only at a closing tag that is
//! followed by the next tag of the call, so `</tool_call>` or `</parameter>` inside a value is text.

use super::scan::{broken, calls_in, json_end, json_sequence, json_value, value_end};
use super::{Call, Dialect, Found, find_structural};
use crate::formats::RawArguments;
use serde_json::{Map, Value};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const FUNCTION: &str = "<function=";

/// Where the first call block starts.
pub(super) fn marker(text: &str) -> Option<usize> {
    let tag = find_structural(text, OPEN);
    // Qwen3-Coder sometimes drops the wrapper: a `<function=` at the start of a line.
    let bare = find_structural(text, FUNCTION).filter(|&p| p == 0 || text[..p].ends_with('\n'));
    tag.into_iter().chain(bare).min()
}

pub(super) fn parse(text: &str) -> Option<Found> {
    let start = marker(text)?;
    let mut calls = Vec::new();
    let mut dialect = None;
    let mut at = start;
    let mut trailing = String::new();
    loop {
        let rest = &text[at..];
        let ws = rest.len() - rest.trim_start().len();
        at += ws;
        let rest = &text[at..];
        if rest.is_empty() {
            break;
        }
        let (found, kind, end) = if let Some(after) = rest.strip_prefix(OPEN) {
            block(text, at + OPEN.len(), after)
        } else if rest.starts_with(FUNCTION) {
            let (call, end) = function(text, at);
            (vec![call], Dialect::Qwen3Coder, end)
        } else {
            // Prose after the calls (or an end-of-turn token) stays content.
            trailing = rest.to_owned();
            break;
        };
        dialect.get_or_insert(kind);
        calls.extend(found);
        at = end;
    }
    let mut content = text[..start].to_owned();
    let trailing = strip_end_tokens(&trailing);
    if !trailing.is_empty() {
        content.push('\n');
        content.push_str(trailing);
    }
    Some(Found::new(dialect.unwrap_or(Dialect::Hermes), content, calls))
}

fn strip_end_tokens(text: &str) -> &str {
    let mut t = text.trim();
    for token in ["<|im_end|>", "<|endoftext|>", "<|user|>", "<|observation|>", "</s>"] {
        t = t.trim_end_matches(token).trim();
    }
    t
}

/// One `<tool_call>` block whose body starts at `body`: its calls, its family, and where the text
/// after the block starts.
fn block(text: &str, body: usize, after: &str) -> (Vec<Call>, Dialect, usize) {
    let lead = after.len() - after.trim_start().len();
    let inner = body + lead;
    let close = after.find(CLOSE).map(|p| body + p);
    let past = |end: usize| close_after(text, end);
    match after.trim_start().as_bytes().first() {
        Some(b'{' | b'[') => {
            let (calls, end) = json_block(text, inner, close);
            (calls, Dialect::Hermes, past(end))
        }
        _ if after.trim_start().starts_with(FUNCTION) => {
            let mut calls = Vec::new();
            let mut at = inner;
            while text[at..].trim_start().starts_with(FUNCTION) {
                at += text[at..].len() - text[at..].trim_start().len();
                let (call, end) = function(text, at);
                calls.push(call);
                at = end;
            }
            (calls, Dialect::Qwen3Coder, past(at))
        }
        None => (
            vec![broken(None, "the tool call was cut off before its end")],
            Dialect::Hermes,
            text.len(),
        ),
        _ => {
            let (call, end) = glm(text, inner, close);
            (vec![call], Dialect::Glm, past(end))
        }
    }
}

/// The position after the `</tool_call>` that follows `end` (white space between), or `end`.
fn close_after(text: &str, end: usize) -> usize {
    let rest = &text[end..];
    let trimmed = rest.trim_start();
    match trimmed.strip_prefix(CLOSE) {
        Some(after) => text.len() - after.len(),
        None => end,
    }
}

/// A JSON call (or a list of them) at `start`.
fn json_block(text: &str, start: usize, close: Option<usize>) -> (Vec<Call>, usize) {
    let (slice, end) = match json_end(text, start) {
        Some(end) => (&text[start..end], end),
        // Unbalanced: the closing tag bounds it, if there is one.
        None => match close {
            Some(c) => (&text[start..c], c),
            None => {
                return (
                    vec![broken(None, "the tool call was cut off before its end")],
                    text.len(),
                );
            }
        },
    };
    let calls = match json_value(slice) {
        Ok((value, repair)) => match calls_in(value, true) {
            Some(mut calls) => {
                if let Some(first) = calls.first_mut() {
                    first.repair = repair;
                }
                calls
            }
            None => vec![broken(
                None,
                "the JSON in <tool_call> is not a call: expected {\"name\": …, \"arguments\": {…}}",
            )],
        },
        Err(e) => vec![broken(None, e)],
    };
    // Some fine-tunes put several call objects in one block, one per line.
    let mut calls = calls;
    let mut end = end;
    let more = text[end..].trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
    if more.starts_with('{') && close.is_none_or(|c| text.len() - more.len() < c) {
        match json_sequence(text, end, true) {
            Ok((found, stop)) => {
                calls.extend(found);
                end = stop;
            }
            Err(e) => {
                calls.push(broken(None, e));
                end = close.unwrap_or(text.len());
            }
        }
    }
    (calls, end)
}

/// A `<function=NAME>…</function>` at `at`.
fn function(text: &str, at: usize) -> (Call, usize) {
    let head = at + FUNCTION.len();
    let Some(gt) = text[head..].find('>') else {
        return (
            broken(None, "the tool call was cut off in its <function=…> tag"),
            text.len(),
        );
    };
    let name = text[head..head + gt].trim().to_owned();
    let mut i = head + gt + 1;
    let mut fields = Map::new();
    loop {
        let rest = &text[i..];
        let ws = rest.len() - rest.trim_start().len();
        let rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("</function>") {
            let end = text.len() - after.len();
            return (fields_call(name, fields), end);
        }
        let Some(after) = rest.strip_prefix("<parameter=") else {
            if rest.is_empty() || rest.starts_with(CLOSE) {
                // `</function>` missing: the call is whole when its block closed.
                return if rest.starts_with(CLOSE) {
                    (fields_call(name, fields), i + ws)
                } else {
                    (
                        broken(Some(name), "the tool call was cut off before </function>"),
                        text.len(),
                    )
                };
            }
            return (
                broken(Some(name), "expected <parameter=…> or </function> in the tool call"),
                skip_block(text, i),
            );
        };
        let key_start = text.len() - after.len();
        let Some(gt) = after.find('>') else {
            return (
                broken(Some(name), "the tool call was cut off in a <parameter=…> tag"),
                text.len(),
            );
        };
        let key = text[key_start..key_start + gt].trim().to_owned();
        let value_start = key_start + gt + 1;
        let Some((value_end, next)) = value_end(
            text,
            value_start,
            "</parameter>",
            &["<parameter=", "</function>", CLOSE],
        ) else {
            return (
                broken(Some(name), format!("the value of {key} was cut off")),
                text.len(),
            );
        };
        fields.insert(
            key,
            Value::String(trim_one_newline(&text[value_start..value_end]).to_owned()),
        );
        i = next;
    }
}

/// A GLM call: the name, then `<arg_key>`/`<arg_value>` pairs (or a JSON object), up to `</tool_call>`.
fn glm(text: &str, at: usize, close: Option<usize>) -> (Call, usize) {
    let stop = text[at..].find(['<', '{', '\n']).map_or(text.len(), |p| at + p);
    let name = text[at..stop].trim().to_owned();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return (
            broken(None, "the tool call has no tool name after <tool_call>"),
            close.map_or(text.len(), |c| c),
        );
    }
    let mut i = stop;
    let mut fields = Map::new();
    loop {
        let rest = text[i..].trim_start();
        let here = text.len() - rest.len();
        if rest.starts_with(CLOSE) {
            return (fields_call(name, fields), here);
        }
        if rest.is_empty() {
            // A call written whole and then the answer ended: complete unless a pair was open.
            return (fields_call(name, fields), here);
        }
        if rest.starts_with('{') && fields.is_empty() {
            let (mut calls, end) = json_args(text, here, close);
            let call = calls.pop().map_or_else(
                || broken(Some(name.clone()), "unreadable arguments"),
                |mut c| {
                    c.name = Some(name.clone());
                    c
                },
            );
            return (call, end);
        }
        let Some(after) = rest.strip_prefix("<arg_key>") else {
            return (
                broken(Some(name), "expected <arg_key> or </tool_call> in the tool call"),
                skip_block(text, here),
            );
        };
        let key_start = text.len() - after.len();
        let Some(key_len) = after.find("</arg_key>") else {
            return (
                broken(Some(name), "the tool call was cut off in an <arg_key>"),
                text.len(),
            );
        };
        let key = text[key_start..key_start + key_len].trim().to_owned();
        let rest = text[key_start + key_len + "</arg_key>".len()..].trim_start();
        let Some(after) = rest.strip_prefix("<arg_value>") else {
            return (
                broken(Some(name), format!("the argument {key} has no <arg_value>")),
                skip_block(text, here),
            );
        };
        let value_start = text.len() - after.len();
        let Some((value_end, next)) = value_end(text, value_start, "</arg_value>", &["<arg_key>", CLOSE]) else {
            return (
                broken(Some(name), format!("the value of {key} was cut off")),
                text.len(),
            );
        };
        fields.insert(key, Value::String(text[value_start..value_end].to_owned()));
        i = next;
    }
}

/// GLM arguments written as one JSON object after the name.
fn json_args(text: &str, at: usize, close: Option<usize>) -> (Vec<Call>, usize) {
    let (slice, end) = match json_end(text, at) {
        Some(end) => (&text[at..end], end),
        None => match close {
            Some(c) => (&text[at..c], c),
            None => return (vec![broken(None, "the arguments were cut off")], text.len()),
        },
    };
    let call = match json_value(slice) {
        Ok((value, repair)) => Call {
            id: None,
            name: None,
            arguments: RawArguments::Json(value),
            extra: Map::new(),
            repair,
        },
        Err(e) => broken(None, e),
    };
    (vec![call], end)
}

/// The text after the block holding `at`, for recovery after a broken call.
fn skip_block(text: &str, at: usize) -> usize {
    text[at..].find(CLOSE).map_or(text.len(), |p| at + p)
}

fn trim_one_newline(s: &str) -> &str {
    let s = s.strip_prefix("\r\n").or_else(|| s.strip_prefix('\n')).unwrap_or(s);
    s.strip_suffix("\r\n").or_else(|| s.strip_suffix('\n')).unwrap_or(s)
}

fn fields_call(name: String, fields: Map<String, Value>) -> Call {
    Call {
        id: None,
        name: Some(name),
        arguments: RawArguments::Fields(fields),
        extra: Map::new(),
        repair: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> Found {
        parse(text).expect("a call block")
    }

    fn args(c: &Call) -> Value {
        match &c.arguments {
            RawArguments::Json(v) => v.clone(),
            RawArguments::Fields(m) => Value::Object(m.clone()),
            RawArguments::Text(t) => serde_json::from_str(t).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hermes_with_and_without_newlines_and_several_calls() {
        for text in [
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
            "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
        ] {
            let f = one(text);
            assert_eq!(f.calls.len(), 1, "{text}");
            assert_eq!(f.calls[0].name.as_deref(), Some("get_weather"));
            assert_eq!(args(&f.calls[0]), json!({"city": "Paris"}));
            assert_eq!(f.dialect, Some(Dialect::Hermes));
        }
        let f = one(
            "Checking both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1e3, \"y\": null, \"z\": \"日本\"}}\n</tool_call>",
        );
        assert_eq!(f.content.trim(), "Checking both.");
        let names: Vec<_> = f.calls.iter().map(|c| c.name.clone().unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(args(&f.calls[1]), json!({"x": 1000.0, "y": null, "z": "日本"}));
        // Several objects in one block, one per line: every one is a call, none is content.
        let f = one(
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>",
        );
        let names: Vec<_> = f.calls.iter().map(|c| c.name.clone().unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(f.content, "");
        let f = one("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n{\"name\": \"b\", \"argu");
        assert!(matches!(f.calls[1].arguments, RawArguments::Broken(_)));
    }

    #[test]
    fn a_closing_tag_inside_a_string_is_text() {
        let f = one(
            "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"</tool_call> and ``` and {\"}}\n</tool_call>",
        );
        assert_eq!(f.calls.len(), 1);
        assert_eq!(args(&f.calls[0]), json!({"text": "</tool_call> and ``` and {"}));
    }

    #[test]
    fn cut_off_and_empty_blocks_are_broken_calls() {
        for text in [
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
            "<tool_call>\n</tool_call>",
            "<tool_call>",
            "<tool_call>{\"city\": \"Paris\"}</tool_call>",
        ] {
            let f = one(text);
            assert_eq!(f.calls.len(), 1, "{text}");
            assert!(
                matches!(f.calls[0].arguments, RawArguments::Broken(_)),
                "{text}: {:?}",
                f.calls[0]
            );
        }
    }

    #[test]
    fn qwen3_coder_xml_values_are_text_and_may_hold_tags() {
        let text = "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.xml\n</parameter>\n<parameter=content>\n<a></parameter></a>\nline 2\n</parameter>\n<parameter=count>\n3\n</parameter>\n</function>\n</tool_call>";
        let f = one(text);
        assert_eq!(f.dialect, Some(Dialect::Qwen3Coder));
        assert_eq!(f.content.trim(), "I'll write it.");
        assert_eq!(f.calls[0].name.as_deref(), Some("write_file"));
        assert_eq!(
            args(&f.calls[0]),
            json!({"path": "src/a.xml", "content": "<a></parameter></a>\nline 2", "count": "3"})
        );
        let f = one(
            "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call>",
        );
        assert_eq!(f.calls.len(), 2);
        let f = one("<tool_call>\n<function=f>\n<parameter=a>\nunfinis");
        assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)));
    }

    #[test]
    fn glm_pairs_with_and_without_newlines() {
        for text in [
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>北京</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>北京</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
        ] {
            let f = one(text);
            assert_eq!(f.dialect, Some(Dialect::Glm));
            assert_eq!(f.calls[0].name.as_deref(), Some("get_weather"));
            assert_eq!(args(&f.calls[0]), json!({"city": "北京", "days": "2"}));
        }
        let f = one("<tool_call>list_files</tool_call>");
        assert_eq!(args(&f.calls[0]), json!({}));
    }
}
