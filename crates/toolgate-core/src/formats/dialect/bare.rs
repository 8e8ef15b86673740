//! Calls with no marker around them: toolgate's own `{"tool", "parameters"}` object, the
//! `{"name", "arguments" | "parameters"}` objects many models write (Llama 3.x's JSON tool
//! calling, Mistral and Hermes with their tokens stripped), a list of them, or several separated
//! by `;`. The text must be the calls alone, or one short preface and a single fenced block that
//! ends the answer: JSON quoted inside prose is an example, not a call.

use super::scan::{json_end, json_sequence};
use super::{Dialect, Found, pythonic};

/// The longest preface allowed before a fenced call.
const MAX_PREFACE: usize = 600;

pub(super) fn parse(text: &str) -> Option<Found> {
    let trimmed = text.trim();
    if let Some(found) = whole(trimmed, "") {
        return Some(found);
    }
    let (preface, body) = fenced(trimmed)?;
    whole(body, preface)
}

/// `text` is one or more JSON calls and nothing else.
fn whole(text: &str, preface: &str) -> Option<Found> {
    if !text.starts_with(['{', '[']) {
        return None;
    }
    let (calls, end) = json_sequence(text, 0, false).ok()?;
    if calls.is_empty() || !text[end..].trim().is_empty() {
        return None;
    }
    let dialect = if calls.iter().all(|c| c.extra.is_empty()) && text.contains("\"tool\"") {
        Dialect::Toolgate
    } else {
        Dialect::Llama
    };
    Some(Found::new(dialect, preface, calls))
}

/// The body of the single fenced block that ends the text after a short preface. The fence's
/// end is found after the JSON value, so a string holding ```` ``` ```` does not cut it short.
fn fenced(text: &str) -> Option<(&str, &str)> {
    let start = text.find("```")?;
    if start > MAX_PREFACE {
        return None;
    }
    let after_open = &text[start + 3..];
    let body_start = start + 3 + after_open.find('\n')? + 1;
    let json_start = body_start + (text[body_start..].len() - text[body_start..].trim_start().len());
    let end = json_end(text, json_start)?;
    let rest = text[end..].trim_start();
    let after_fence = rest.strip_prefix("```")?;
    if !after_fence.trim().is_empty() {
        return None;
    }
    Some((text[..start].trim(), &text[json_start..end]))
}

/// The whole text is a bracketed pythonic call list (`[get_weather(city="Paris")]`).
pub(super) fn is_pythonic(text: &str) -> bool {
    pythonic::looks_like_calls(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::RawArguments;
    use serde_json::json;

    #[test]
    fn toolgate_s_own_object_alone_or_fenced() {
        let f = parse(r#"{"tool": "read_file", "parameters": {"path": "a"}, "reasoning": "look"}"#).unwrap();
        assert_eq!(f.dialect, Some(Dialect::Toolgate));
        assert_eq!(f.calls[0].arguments, RawArguments::Json(json!({"path": "a"})));
        let f = parse("I will read it.\n```json\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"a\"}}\n```\n")
            .unwrap();
        assert_eq!(f.content, "I will read it.");
    }

    #[test]
    fn a_fenced_call_whose_string_holds_a_fence_is_whole() {
        let text = "Writing the README.\n```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"README.md\", \"content\": \"```sh\\ncargo test\\n```\\n\"}}\n```";
        let f = parse(text).unwrap();
        assert_eq!(
            f.calls[0].arguments,
            RawArguments::Json(json!({"path": "README.md", "content": "```sh\ncargo test\n```\n"}))
        );
    }

    #[test]
    fn llama_json_alone_in_a_list_or_separated_by_semicolons() {
        let f = parse(r#"{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}"#).unwrap();
        assert_eq!(f.dialect, Some(Dialect::Llama));
        let f = parse(r#"{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"n": -2.5E-3}}"#).unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(f.calls[1].arguments, RawArguments::Json(json!({"n": -0.0025})));
        let f = parse(r#"[{"name": "a", "arguments": {}}, {"name": "b", "arguments": "{\"x\": 1}"}]"#).unwrap();
        assert_eq!(f.calls.len(), 2);
    }

    #[test]
    fn json_that_is_not_a_call_is_not_one() {
        for text in [
            "You could answer {\"tool\": \"read_file\", \"parameters\": {}} but I will not.",
            "Example:\n```json\n{\"tool\": \"read_file\"}\n```\nand then more prose after it.",
            "```json\n{\"tool\": \"a\"}\n```\n```json\n{\"tool\": \"b\"}\n```",
            "{\"answer\": 42}",
            "{\"name\": \"Bob\", \"age\": 41}",
            "{\"name\": \"Bob\", \"arguments\": [1, 2]}",
            "[1, 2, 3]",
            "{\"tool\": \"read_file\", \"parameters\": {}} is what you would send.",
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
        ] {
            assert!(parse(text).is_none(), "{text}");
        }
    }
}
