//! Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}, "id": …}, …]` (tokenizer v3) and
//! `[TOOL_CALLS]name[ARGS]{…}` (v11+), optionally `[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`, one
//! `[TOOL_CALLS]` per call.

use super::scan::{broken, json_end, json_sequence, json_value};
use super::{Call, Dialect, Found, find_structural};
use crate::formats::RawArguments;
use serde_json::Map;

const TOKEN: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

pub(super) fn marker(text: &str) -> Option<usize> {
    find_structural(text, TOKEN)
}

pub(super) fn parse(text: &str) -> Option<Found> {
    let start = marker(text)?;
    let mut calls = Vec::new();
    let mut at = start;
    while let Some(rest) = text[at..].trim_start().strip_prefix(TOKEN) {
        let body = text.len() - rest.len();
        let lead = rest.len() - rest.trim_start().len();
        if rest.trim_start().starts_with(['[', '{']) {
            match json_sequence(text, body + lead, true) {
                Ok((found, end)) if !found.is_empty() => {
                    calls.extend(found);
                    at = end;
                }
                Ok(_) => {
                    calls.push(broken(None, "the JSON after [TOOL_CALLS] is not a list of calls"));
                    at = text.len();
                }
                Err(e) => {
                    calls.push(broken(None, e));
                    at = text.len();
                }
            }
        } else {
            let (call, end) = named(text, body);
            calls.push(call);
            at = end;
        }
    }
    if calls.is_empty() {
        calls.push(broken(None, "[TOOL_CALLS] is followed by no call"));
    }
    let trailing = text[at..].trim().trim_end_matches("</s>").trim();
    let mut content = text[..start].to_owned();
    if !trailing.is_empty() {
        content.push('\n');
        content.push_str(trailing);
    }
    Some(Found::new(Dialect::Mistral, content, calls))
}

/// `name[ARGS]{…}` or `name[CALL_ID]id[ARGS]{…}` at `at`.
fn named(text: &str, at: usize) -> (Call, usize) {
    let rest = &text[at..];
    let Some(args_at) = rest.find(ARGS) else {
        return (
            broken(None, "[TOOL_CALLS] has no [ARGS] after the tool name"),
            text.len(),
        );
    };
    let head = &rest[..args_at];
    let (name, id) = match head.split_once(CALL_ID) {
        Some((name, id)) => (name.trim(), Some(id.trim().to_owned())),
        None => (head.trim(), None),
    };
    let name = (!name.is_empty()).then(|| name.to_owned());
    let json_at = at + args_at + ARGS.len();
    let lead = text[json_at..].len() - text[json_at..].trim_start().len();
    let json_at = json_at + lead;
    let Some(end) = json_end(text, json_at) else {
        return (broken(name, "the arguments were cut off before their end"), text.len());
    };
    let call = match json_value(&text[json_at..end]) {
        Ok((value, repair)) => Call {
            id,
            name,
            arguments: RawArguments::Json(value),
            extra: Map::new(),
            repair,
        },
        Err(e) => broken(name, e),
    };
    (call, end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v3_json_list_with_ids() {
        let f = parse("[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1B2c3D4e\"}, {\"name\": \"get_time\", \"arguments\": {}, \"id\": \"f5G6h7I8j\"}]</s>").unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(f.calls[0].id.as_deref(), Some("a1B2c3D4e"));
        assert_eq!(f.calls[0].arguments, RawArguments::Json(json!({"city": "Paris"})));
    }

    #[test]
    fn v11_named_calls_with_and_without_ids() {
        let f = parse("Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"[ARGS] Paris\"}[TOOL_CALLS]get_time[CALL_ID]x9Y8z7W6v[ARGS]{}").unwrap();
        assert_eq!(f.content, "Sure.");
        assert_eq!(f.calls.len(), 2);
        assert_eq!(
            f.calls[0].arguments,
            RawArguments::Json(json!({"city": "[ARGS] Paris"}))
        );
        assert_eq!(f.calls[1].id.as_deref(), Some("x9Y8z7W6v"));
    }

    #[test]
    fn broken_calls_after_the_token() {
        for text in [
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa",
            "[TOOL_CALLS]get_weather",
            "[TOOL_CALLS]",
        ] {
            let f = parse(text).unwrap();
            assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)), "{text}");
        }
    }
}
