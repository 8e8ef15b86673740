//! DeepSeek, in its three layouts:
//! - V3 / R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`;
//! - V3.1 and later: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`;
//! - V3.2's DSML: `<｜DSML｜function_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter name="k"
//!   string="true|false">v</｜DSML｜parameter>…</｜DSML｜invoke></｜DSML｜function_calls>`.
//!
//! The bars are fullwidth (`｜`, U+FF5C) and the spaces `▁` (U+2581); renderings with an ASCII
//! `|` are read too.

use super::scan::{broken, find_any, json_end, json_value, unfence, value_end};
use super::{Call, Dialect, Found, find_structural};
use crate::formats::RawArguments;
use serde_json::{Map, Value};

const CALLS_BEGIN: [&str; 2] = ["<｜tool▁calls▁begin｜>", "<|tool▁calls▁begin|>"];
const CALLS_END: [&str; 2] = ["<｜tool▁calls▁end｜>", "<|tool▁calls▁end|>"];
const CALL_BEGIN: [&str; 2] = ["<｜tool▁call▁begin｜>", "<|tool▁call▁begin|>"];
const CALL_END: [&str; 2] = ["<｜tool▁call▁end｜>", "<|tool▁call▁end|>"];
const SEP: [&str; 2] = ["<｜tool▁sep｜>", "<|tool▁sep|>"];
const DSML: [&str; 2] = ["<｜DSML｜", "<|DSML|"];
const END_OF_SENTENCE: [&str; 2] = ["<｜end▁of▁sentence｜>", "<|end▁of▁sentence|>"];

pub(super) fn marker(text: &str) -> Option<usize> {
    CALLS_BEGIN
        .iter()
        .chain(&CALL_BEGIN)
        .chain(&DSML)
        .filter_map(|t| find_structural(text, t))
        .min()
}

pub(super) fn parse(text: &str) -> Option<Found> {
    let start = marker(text)?;
    let (calls, end) = match DSML.iter().find(|t| text[start..].starts_with(**t)) {
        Some(prefix) => dsml(text, start, prefix),
        None => tokens(text, start),
    };
    let mut content = text[..start].to_owned();
    let mut trailing = text[end.min(text.len())..].trim();
    for t in END_OF_SENTENCE {
        trailing = trailing.trim_end_matches(t).trim();
    }
    if !trailing.is_empty() {
        content.push('\n');
        content.push_str(trailing);
    }
    Some(Found::new(Dialect::Deepseek, content, calls))
}

/// The V3 / V3.1 token layout.
fn tokens(text: &str, start: usize) -> (Vec<Call>, usize) {
    let mut calls = Vec::new();
    let mut at = start;
    while let Some((p, len)) = find_any(text, at, &CALL_BEGIN) {
        let (call, end) = token_call(text, p + len);
        calls.push(call);
        at = end;
    }
    if calls.is_empty() {
        calls.push(broken(None, "the tool-call section holds no call"));
    }
    let end = find_any(text, at, &CALLS_END).map_or(at, |(p, len)| p + len);
    (calls, end)
}

fn token_call(text: &str, at: usize) -> (Call, usize) {
    let Some((sep, sep_len)) = find_any(text, at, &SEP) else {
        return (
            broken(None, "the tool call was cut off before <｜tool▁sep｜>"),
            text.len(),
        );
    };
    let pre = text[at..sep].trim();
    let body_at = sep + sep_len;
    let close = find_any(text, body_at, &CALL_END);
    let (name, args_at) = if pre == "function" || pre.is_empty() {
        // V3: the name is the first line after the separator, the arguments a fenced block.
        let line_end = text[body_at..].find('\n').map_or(text.len(), |n| body_at + n);
        (text[body_at..line_end].trim().to_owned(), line_end)
    } else {
        (pre.to_owned(), body_at)
    };
    let name = (!name.is_empty()).then_some(name);
    let rest = &text[args_at..];
    let json_at = rest.find(['{', '[']).map(|p| args_at + p);
    let bounded = close.map(|(p, _)| p);
    // The JSON's own end wins when the call's end token follows it (an end token inside a string
    // argument is not the end); otherwise the first end token bounds the arguments.
    let closes_at = |e: usize| {
        let after = text[e..].trim_start().trim_start_matches('`').trim_start();
        after.is_empty() || CALL_END.iter().chain(&CALLS_END).any(|t| after.starts_with(t))
    };
    let slice_end = match json_at.and_then(|j| json_end(text, j).map(|e| (j, e))) {
        Some((j, e)) if bounded.is_none_or(|c| e <= c) || closes_at(e) => Some((j, e)),
        _ => None,
    };
    let (args, end) = match (slice_end, bounded) {
        (Some((j, e)), _) => (json_value(&text[j..e]), e),
        (None, Some(c)) => (json_value(unfence(&text[args_at..c])), c),
        (None, None) => return (broken(name, "the arguments were cut off before their end"), text.len()),
    };
    let call = match args {
        Ok((value, repair)) => Call {
            id: None,
            name,
            arguments: RawArguments::Json(value),
            extra: Map::new(),
            repair,
        },
        Err(e) => broken(name, e),
    };
    let end = find_any(text, end, &CALL_END)
        .filter(|&(p, _)| text[end..p].trim().trim_matches('`').trim().is_empty())
        .map_or(end, |(p, len)| p + len);
    (call, end)
}

/// V3.2's DSML markup, `prefix` being `<｜DSML｜` as this text spells it.
fn dsml(text: &str, start: usize, prefix: &str) -> (Vec<Call>, usize) {
    let invoke = format!("{prefix}invoke name=\"");
    let invoke_end = format!("</{}invoke>", &prefix[1..]);
    let param = format!("{prefix}parameter name=\"");
    let param_end = format!("</{}parameter>", &prefix[1..]);
    let calls_end = format!("</{}function_calls>", &prefix[1..]);
    let mut calls = Vec::new();
    let mut at = start;
    while let Some(p) = text[at..].find(&invoke) {
        let name_at = at + p + invoke.len();
        let Some(q) = text[name_at..].find('"') else {
            calls.push(broken(None, "the tool call was cut off in its invoke tag"));
            at = text.len();
            break;
        };
        let name = text[name_at..name_at + q].to_owned();
        let Some(gt) = text[name_at + q..].find('>') else {
            calls.push(broken(Some(name), "the tool call was cut off in its invoke tag"));
            at = text.len();
            break;
        };
        let (call, end) = invoke_body(text, name_at + q + gt + 1, name, &param, &param_end, &invoke_end);
        calls.push(call);
        at = end;
    }
    if calls.is_empty() {
        calls.push(broken(None, "the DSML block holds no invoke"));
    }
    let end = text[at..].find(&calls_end).map_or(at, |p| at + p + calls_end.len());
    (calls, end)
}

fn invoke_body(text: &str, at: usize, name: String, param: &str, param_end: &str, invoke_end: &str) -> (Call, usize) {
    let mut fields = Map::new();
    let mut i = at;
    loop {
        let rest = text[i..].trim_start();
        let here = text.len() - rest.len();
        if let Some(after) = rest.strip_prefix(invoke_end) {
            return (fields_call(name, fields), text.len() - after.len());
        }
        if rest.is_empty() {
            return (
                broken(Some(name), "the tool call was cut off before its invoke closed"),
                text.len(),
            );
        }
        if rest.starts_with('{') && fields.is_empty() {
            // The JSON form: the arguments as one object inside the invoke.
            let Some(end) = json_end(text, here) else {
                return (
                    broken(Some(name), "the arguments were cut off before their end"),
                    text.len(),
                );
            };
            match json_value(&text[here..end]) {
                Ok((Value::Object(o), _)) => fields = o,
                _ => return (broken(Some(name), "the invoke's JSON arguments are not an object"), end),
            }
            i = end;
            continue;
        }
        let Some(after) = rest.strip_prefix(param) else {
            return (
                broken(Some(name), "expected a parameter or the end of the invoke"),
                skip(text, here, invoke_end),
            );
        };
        let key_at = text.len() - after.len();
        let Some(q) = after.find('"') else {
            return (
                broken(Some(name), "the tool call was cut off in a parameter tag"),
                text.len(),
            );
        };
        let key = after[..q].to_owned();
        let Some(gt) = after[q..].find('>') else {
            return (
                broken(Some(name), "the tool call was cut off in a parameter tag"),
                text.len(),
            );
        };
        let attrs = &after[q..q + gt];
        let value_at = key_at + q + gt + 1;
        let Some((value_stop, next)) = value_end(text, value_at, param_end, &[param, invoke_end]) else {
            return (
                broken(Some(name), format!("the value of {key} was cut off")),
                text.len(),
            );
        };
        let raw = &text[value_at..value_stop];
        let value = if attrs.contains("string=\"false\"") {
            json_value(raw).map_or_else(|_| Value::String(raw.trim().to_owned()), |(v, _)| v)
        } else {
            Value::String(raw.to_owned())
        };
        fields.insert(key, value);
        i = next;
    }
}

fn skip(text: &str, at: usize, invoke_end: &str) -> usize {
    text[at..]
        .find(invoke_end)
        .map_or(text.len(), |p| at + p + invoke_end.len())
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

    fn args(c: &Call) -> Value {
        match &c.arguments {
            RawArguments::Json(v) => v.clone(),
            RawArguments::Fields(m) => Value::Object(m.clone()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v3_fenced_arguments() {
        let f = parse("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Tokyo\", \"note\": \"```\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>").unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(f.calls[0].name.as_deref(), Some("get_weather"));
        assert_eq!(args(&f.calls[0]), json!({"location": "Tokyo", "note": "```"}));
        assert_eq!(f.calls[1].name.as_deref(), Some("get_time"));
        assert_eq!(f.content, "");
    }

    #[test]
    fn v31_inline_arguments() {
        let f = parse("I'll check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>").unwrap();
        assert_eq!(f.content, "I'll check.");
        assert_eq!(f.calls[0].name.as_deref(), Some("get_weather"));
        assert_eq!(args(&f.calls[0]), json!({"location": "Paris"}));
        let f =
            parse("<|tool▁calls▁begin|><|tool▁call▁begin|>get_time<|tool▁sep|>{}<|tool▁call▁end|><|tool▁calls▁end|>")
                .unwrap();
        assert_eq!(f.calls[0].name.as_deref(), Some("get_time"));
    }

    #[test]
    fn v32_dsml_parameters_typed_by_the_string_attribute() {
        let text = "Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">杭州</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n<｜DSML｜parameter name=\"units\" string=\"false\">[\"c\", \"f\"]</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
        let f = parse(text).unwrap();
        assert_eq!(f.content.trim(), "Checking.");
        assert_eq!(f.calls.len(), 2);
        assert_eq!(
            args(&f.calls[0]),
            json!({"location": "杭州", "days": 3, "units": ["c", "f"]})
        );
        assert_eq!(f.calls[1].name.as_deref(), Some("get_time"));
    }

    #[test]
    fn cut_off_calls_are_broken() {
        for text in [
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Pa",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weath",
            "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">Pa",
        ] {
            let f = parse(text).unwrap();
            assert!(
                matches!(f.calls[0].arguments, RawArguments::Broken(_)),
                "{text}: {:?}",
                f.calls
            );
        }
    }
}
