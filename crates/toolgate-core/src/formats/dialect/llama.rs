//! Llama 3.x and 4: `<|python_tag|>` before JSON calls (several separated by `;`) or a built-in
//! tool's `name.call(…)`; bare `{"name": …, "parameters": …}` JSON; the pythonic list
//! `[func(a=1, b="x"), …]` of Llama 3.2 and 4, alone or in `<|python_start|>…<|python_end|>`.
//! End-of-message tokens (`<|eom_id|>`, `<|eot_id|>`, `<|eot|>`) are dropped.

use super::scan::{broken, json_sequence};
use super::{Dialect, Found, bare, find_structural, pythonic};

const TAGS: [&str; 2] = ["<|python_tag|>", "<|python_start|>"];
/// The longest preface allowed before a pythonic call list.
const MAX_PREFACE: usize = 600;
const ENDS: [&str; 4] = ["<|python_end|>", "<|eom_id|>", "<|eot_id|>", "<|eot|>"];

pub(super) fn marker(text: &str) -> Option<usize> {
    TAGS.iter().filter_map(|t| find_structural(text, t)).min()
}

pub(super) fn parse(text: &str) -> Option<Found> {
    let Some(at) = marker(text) else {
        return pythonic_list(text, "")
            .or_else(|| bare::parse(text))
            .or_else(|| prefaced_list(text));
    };
    let tag = TAGS.iter().find(|t| text[at..].starts_with(**t)).map_or(0, |t| t.len());
    let content = &text[..at];
    let body = strip_ends(&text[at + tag..]);
    if body.starts_with(['{', '[']) && !pythonic::looks_like_calls(body) {
        let calls = match json_sequence(body, 0, true) {
            Ok((calls, end)) if !calls.is_empty() && body[end..].trim().is_empty() => calls,
            Ok(_) => vec![broken(None, "the text after <|python_tag|> is not a JSON tool call")],
            Err(e) => vec![broken(None, e)],
        };
        return Some(Found::new(Dialect::Llama, content, calls));
    }
    let calls = match pythonic::calls(body) {
        Ok(Some(calls)) => calls,
        Ok(None) => vec![broken(
            None,
            "the text after <|python_tag|> is neither a JSON nor a pythonic tool call",
        )],
        Err(e) => vec![broken(None, e)],
    };
    Some(Found::new(Dialect::Llama, content, calls))
}

/// A bare pythonic list: the whole answer, or after a short preface on its own line.
fn pythonic_list(text: &str, content: &str) -> Option<Found> {
    let body = strip_ends(text);
    if !pythonic::looks_like_calls(body) {
        return None;
    }
    let calls = match pythonic::calls(body) {
        Ok(Some(calls)) => calls,
        Ok(None) => return None,
        Err(e) => vec![broken(None, e)],
    };
    Some(Found::new(Dialect::Llama, content, calls))
}

/// A short preface, then a whole pythonic call list on its own lines that ends the answer
/// (`Sure, reading it.\n\n[read_file(path="a.txt")]`). Only a list that reads whole counts:
/// prose that merely ends with brackets stays prose.
pub(super) fn prefaced_list(text: &str) -> Option<Found> {
    let body = strip_ends(text);
    let at = body.rfind("\n[")? + 1;
    let preface = &body[..at];
    if preface.len() > MAX_PREFACE || !pythonic::looks_like_calls(&body[at..]) {
        return None;
    }
    match pythonic::calls(&body[at..]) {
        Ok(Some(calls)) => Some(Found::new(Dialect::Llama, preface.trim(), calls)),
        _ => None,
    }
}

fn strip_ends(text: &str) -> &str {
    let mut t = text.trim();
    loop {
        let before = t.len();
        for end in ENDS {
            t = t.trim_end_matches(end).trim();
        }
        if t.len() == before {
            return t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::RawArguments;
    use serde_json::json;

    #[test]
    fn python_tag_json_and_semicolons() {
        let f = parse("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {}}<|eom_id|>").unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(f.calls[0].arguments, RawArguments::Json(json!({"city": "Paris"})));
        assert_eq!(f.calls[1].name.as_deref(), Some("get_time"));
    }

    #[test]
    fn builtin_tools_and_pythonic_lists() {
        let f = parse("<|python_tag|>brave_search.call(query=\"current weather in Menlo Park\")<|eom_id|>").unwrap();
        assert_eq!(f.calls[0].name.as_deref(), Some("brave_search"));
        let f = parse("[get_weather(city=\"Paris\", days=2), get_time(tz=\"Europe/Paris\")]<|eot|>").unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(
            f.calls[0].arguments,
            RawArguments::Json(json!({"city": "Paris", "days": 2}))
        );
        let f = parse("<|python_start|>[get_time()]<|python_end|>").unwrap();
        assert_eq!(f.calls[0].name.as_deref(), Some("get_time"));
    }

    #[test]
    fn a_pythonic_list_after_a_short_preface() {
        let f = parse("Sure! I will read both.\n\n[read_file(path=\"a.txt\"), read_file(path=\"b.txt\")]").unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(f.content, "Sure! I will read both.");
        for prose in [
            "The list is:\n[1, 2, 3]",
            "Call it like this:\n[f(a=1) is the form]",
            "It ends with\n[read_file(path=\"a.txt\")] and more text",
        ] {
            assert!(parse(prose).is_none_or(|f| f.calls.is_empty()), "{prose}");
        }
    }

    #[test]
    fn a_cut_off_call_after_the_tag_is_broken() {
        let f = parse("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa").unwrap();
        assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)));
        let f = parse("[get_weather(city=\"Pa").unwrap();
        assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)));
        assert!(parse("The answer is 42.").is_none());
    }
}
