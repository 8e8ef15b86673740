//! Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
//! <|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>`. The call id is
//! `functions.NAME:IDX`, as Kimi's template writes it back.

use super::scan::{broken, find_any, json_end, json_value};
use super::{Call, Dialect, Found, find_structural};
use crate::formats::RawArguments;
use serde_json::Map;

const SECTION: [&str; 2] = ["<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"];
const SECTION_END: [&str; 2] = ["<|tool_calls_section_end|>", "<|tool_call_section_end|>"];
const CALL: &str = "<|tool_call_begin|>";
const ARGS: &str = "<|tool_call_argument_begin|>";
const CALL_END: &str = "<|tool_call_end|>";

pub(super) fn marker(text: &str) -> Option<usize> {
    SECTION
        .iter()
        .chain([&CALL])
        .filter_map(|t| find_structural(text, t))
        .min()
}

pub(super) fn parse(text: &str) -> Option<Found> {
    let start = marker(text)?;
    let mut calls = Vec::new();
    let mut at = start;
    while let Some((p, len)) = find_any(text, at, &[CALL]) {
        let (call, end) = one(text, p + len);
        calls.push(call);
        at = end;
    }
    if calls.is_empty() {
        calls.push(broken(None, "the tool-call section holds no <|tool_call_begin|>"));
    }
    let after = find_any(text, at, &SECTION_END).map_or(at, |(p, len)| p + len);
    let mut content = text[..start].to_owned();
    let trailing = text[after.min(text.len())..]
        .trim()
        .trim_end_matches("<|im_end|>")
        .trim();
    if !trailing.is_empty() {
        content.push('\n');
        content.push_str(trailing);
    }
    Some(Found::new(Dialect::Kimi, content, calls))
}

/// One call whose id starts at `at`.
fn one(text: &str, at: usize) -> (Call, usize) {
    let Some((args_at, len)) = find_any(text, at, &[ARGS]) else {
        return (
            broken(None, "the tool call was cut off before its arguments"),
            text.len(),
        );
    };
    let id = text[at..args_at].trim().to_owned();
    // `functions.get_weather:0` → `get_weather`.
    let bare = id.strip_prefix("functions.").unwrap_or(&id);
    let name = bare.rsplit_once(':').map_or(bare, |(n, idx)| {
        if idx.chars().all(|c| c.is_ascii_digit()) {
            n
        } else {
            bare
        }
    });
    let name = (!name.is_empty()).then(|| name.to_owned());
    let json_at = args_at + len;
    let json_at = json_at + (text[json_at..].len() - text[json_at..].trim_start().len());
    let end = match json_end(text, json_at) {
        Some(end) => end,
        None => match find_any(text, json_at, &[CALL_END]) {
            Some((p, _)) => p,
            None => return (broken(name, "the arguments were cut off before their end"), text.len()),
        },
    };
    let call = match json_value(&text[json_at..end]) {
        Ok((value, repair)) => Call {
            id: (!id.is_empty()).then_some(id),
            name,
            arguments: RawArguments::Json(value),
            extra: Map::new(),
            repair,
        },
        Err(e) => broken(name, e),
    };
    let next = text[end..].trim_start();
    let end = next
        .strip_prefix(CALL_END)
        .map_or(end, |after| text.len() - after.len());
    (call, end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_section_with_two_calls() {
        let f = parse("Let me look.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"<|tool_call_end|>\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>").unwrap();
        assert_eq!(f.content, "Let me look.");
        assert_eq!(f.calls.len(), 2);
        assert_eq!(f.calls[0].id.as_deref(), Some("functions.get_weather:0"));
        assert_eq!(f.calls[0].name.as_deref(), Some("get_weather"));
        assert_eq!(
            f.calls[0].arguments,
            RawArguments::Json(json!({"city": "<|tool_call_end|>"}))
        );
        assert_eq!(f.calls[1].name.as_deref(), Some("get_time"));
    }

    #[test]
    fn cut_off_calls_are_broken() {
        let f = parse("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Pa").unwrap();
        assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)));
        let f = parse("<|tool_calls_section_begin|>").unwrap();
        assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)));
    }
}
