//! The text fallback for models without native tool calling: the assistant content *is* the call —
//! a JSON object `{"tool", "parameters", "reasoning"}` alone, or in one fenced block after a short
//! preface. JSON quoted inside prose is not a call. Results go back as a user message starting
//! `[TOOL RESULT: name]`.

use super::{Answer, Format, FormatError, RawArguments, RawCall, ToolResult, ToolView};
use crate::parse::repair_json;
use serde_json::{Value, json};

/// The longest preface allowed before a fenced call.
const MAX_PREFACE: usize = 600;

pub(super) fn parse(body: &Value) -> Result<Answer, FormatError> {
    let content = match body {
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("tool") => body.to_string(),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => s.clone(),
            _ => {
                return Err(FormatError::new(
                    Format::Text,
                    "expected text or a message with string `content`",
                ));
            }
        },
        _ => {
            return Err(FormatError::new(
                Format::Text,
                "expected text or a message with string `content`",
            ));
        }
    };
    let calls = extract(&content).into_iter().collect();
    Ok(Answer {
        format: Format::Text,
        message: json!({"role": "assistant", "content": content}),
        text: Some(content),
        calls,
        cut_off: false,
    })
}

/// The call in `content`, if the content is one.
fn extract(content: &str) -> Option<RawCall> {
    let trimmed = content.trim();
    let candidate = if trimmed.starts_with('{') {
        trimmed
    } else {
        fenced_block(trimmed)?
    };
    let (value, repair) = repair_json(candidate).ok()?;
    // The object must stand alone: prose around it makes it a quotation, not a call.
    if repair.as_ref().is_some_and(|r| {
        r.actions
            .iter()
            .any(|a| a == "dropped_trailing_text" || a == "skipped_leading_text")
    }) {
        return None;
    }
    let Value::Object(mut obj) = value else {
        return None;
    };
    let name = match obj.remove("tool").or_else(|| obj.remove("tool_name")) {
        Some(Value::String(s)) => s,
        _ => return None,
    };
    obj.remove("reasoning");
    let arguments = match obj.remove("parameters").or_else(|| obj.remove("arguments")) {
        Some(Value::String(s)) => RawArguments::Text(s),
        Some(v) => RawArguments::Json(v),
        None => RawArguments::Missing,
    };
    Some(RawCall {
        id: None,
        name: Some(name),
        arguments,
        extra: obj,
        repair,
    })
}

/// The body of the single fenced block that ends the content after a short preface.
fn fenced_block(content: &str) -> Option<&str> {
    let start = content.find("```")?;
    if start > MAX_PREFACE {
        return None;
    }
    let after_open = &content[start + 3..];
    let body_start = after_open.find('\n')? + 1;
    let rest = &after_open[body_start..];
    let end = rest.find("```")?;
    let trailing = &rest[end + 3..];
    if !trailing.trim().is_empty() {
        return None;
    }
    Some(rest[..end].trim())
}

pub(super) fn assistant(answer: &Answer) -> Vec<Value> {
    if answer.message.is_null() {
        return Vec::new();
    }
    vec![answer.message.clone()]
}

pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| json!({"role": "user", "content": format!("[TOOL RESULT: {}]\n{}", r.name, r.content_text())}))
        .collect()
}

pub(super) fn tools(tools: &[ToolView<'_>]) -> String {
    let mut out = String::from(
        "## Tools\n\nTo call a tool, answer with only a JSON object, or with one short sentence followed by a single \
         ```json fenced block holding it:\n\n{\"tool\": \"<name>\", \"parameters\": {...}, \"reasoning\": \"<why>\"}\n\n\
         One call per answer. The result comes back in a user message starting with [TOOL RESULT: <name>]. \
         When you need no tool, answer in plain text.\n",
    );
    for t in tools {
        out.push_str(&format!(
            "\n### {}\n{}\nParameters (JSON Schema): {}\n",
            t.name, t.description, t.parameters
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_object_is_a_call() {
        let a = parse(&json!(
            r#"{"tool": "read_file", "parameters": {"path": "a"}, "reasoning": "look"}"#
        ))
        .unwrap();
        assert_eq!(a.calls.len(), 1);
        assert_eq!(a.calls[0].name.as_deref(), Some("read_file"));
        assert_eq!(a.calls[0].arguments, RawArguments::Json(json!({"path": "a"})));
    }

    #[test]
    fn a_fenced_block_after_a_short_preface_is_a_call() {
        let text = "I will read it.\n```json\n{\"tool\": \"read_file\", \"parameters\": {\"path\": \"a\"}}\n```\n";
        let a = parse(&json!(text)).unwrap();
        assert_eq!(a.calls.len(), 1);
    }

    #[test]
    fn json_quoted_inside_prose_is_not_a_call() {
        for text in [
            "You could answer {\"tool\": \"read_file\", \"parameters\": {}} but I will not.",
            "Example:\n```json\n{\"tool\": \"read_file\"}\n```\nand then more prose after it.",
            "```json\n{\"tool\": \"a\"}\n```\n```json\n{\"tool\": \"b\"}\n```",
            "{\"answer\": 42}",
            "{\"tool\": \"read_file\", \"parameters\": {}} is what you would send.",
        ] {
            assert!(parse(&json!(text)).unwrap().calls.is_empty(), "{text}");
        }
    }
}
