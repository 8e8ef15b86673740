//! Text answers: models without native tool calling, completion endpoints, local runtimes without
//! a tool parser, replayed logs. The calls are read by the family parsers in [`super::dialect`]:
//! toolgate's own `{"tool", "parameters"}` object (what [`tools`] asks for), and each open-weight
//! family's format. Results go back as a user message starting `[TOOL RESULT: name]`.

use super::dialect::{self, Dialect};
use super::{Answer, Format, FormatError, ToolResult, ToolView};
use serde_json::{Value, json};

pub(super) fn parse(body: &Value, dialect: Dialect) -> Result<Answer, FormatError> {
    let content = match body {
        Value::String(s) => s.clone(),
        // An assistant message: its text.
        Value::Object(o) if o.get("content").is_some_and(Value::is_string) && !o.contains_key("tool") => {
            o.get("content").and_then(Value::as_str).unwrap_or_default().to_owned()
        }
        // Any other JSON is the text it spells (a call object, or JSON prose).
        Value::Null => {
            return Err(FormatError::new(
                Format::Text,
                "expected text or a message with string `content`",
            ));
        }
        other => other.to_string(),
    };
    let parsed = dialect::parse(&content, dialect);
    // The echo keeps the calls as the model wrote them (its template reads them back), without
    // the reasoning.
    let echo = match &parsed.reasoning {
        Some(_) if !parsed.calls.is_empty() || !parsed.content.is_empty() => without_reasoning(&content),
        _ => content.clone(),
    };
    Ok(Answer {
        format: Format::Text,
        message: json!({"role": "assistant", "content": echo}),
        text: Some(parsed.content),
        calls: parsed.calls,
        cut_off: false,
        reasoning: parsed.reasoning,
        dialect: parsed.dialect,
    })
}

/// The text after a leading reasoning block, as the family parsers split it.
fn without_reasoning(content: &str) -> String {
    dialect::after_reasoning(content).trim_start().to_owned()
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
    use crate::formats::RawArguments;

    #[test]
    fn toolgate_s_object_and_family_calls_read_in_text() {
        let a = parse(
            &json!(r#"{"tool": "read_file", "parameters": {"path": "a"}, "reasoning": "look"}"#),
            Dialect::Auto,
        )
        .unwrap();
        assert_eq!(a.calls[0].arguments, RawArguments::Json(json!({"path": "a"})));
        let a = parse(
            &json!({"tool": "read_file", "parameters": {"path": "a"}}),
            Dialect::Auto,
        )
        .unwrap();
        assert_eq!(a.calls.len(), 1);
        let a = parse(&json!("<think>the file</think>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>"), Dialect::Auto).unwrap();
        assert_eq!(a.calls.len(), 1);
        assert_eq!(a.reasoning.as_deref(), Some("the file"));
        assert_eq!(a.dialect, Some(Dialect::Hermes));
        assert!(!a.message["content"].as_str().unwrap().contains("the file"));
    }

    #[test]
    fn json_prose_is_a_final_answer() {
        for body in [json!({"answer": 42}), json!("{\"answer\": 42}"), json!([1, 2])] {
            let a = parse(&body, Dialect::Auto).unwrap();
            assert!(a.calls.is_empty(), "{body}");
            assert!(a.text.unwrap().contains(['4', '1']));
        }
    }
}
