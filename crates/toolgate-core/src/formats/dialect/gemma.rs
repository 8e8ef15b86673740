//! Gemma's function-call blocks:
//! - Gemma 2 / 3, as Google's function-calling guide prompts them: a ```` ```tool_code ```` block
//!   holding pythonic calls (`get_weather(city="Paris")`, one per line, or in `print(…)`);
//! - FunctionGemma: `<start_function_call>call:NAME{key:<escape>text<escape>,n:3}<end_function_call>`,
//!   where every string is wrapped in `<escape>` tokens and numbers, booleans, lists and nested
//!   objects are bare.

use super::scan::broken;
use super::{Call, Dialect, Found, find_structural, pythonic};
use crate::formats::RawArguments;
use serde_json::{Map, Number, Value};

const FENCE: &str = "```tool_code";
const CALL: &str = "<start_function_call>";
const CALL_END: &str = "<end_function_call>";
const ESCAPE: &str = "<escape>";
const MAX_DEPTH: usize = 64;

pub(super) fn marker(text: &str) -> Option<usize> {
    [find_structural(text, CALL), fence(text)].into_iter().flatten().min()
}

/// The first ```` ```tool_code ```` fence that opens a line and is not itself quoted.
fn fence(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = text.get(from..)?.find(FENCE) {
        let at = from + p;
        let opens_line = text[..at]
            .rfind('\n')
            .map_or(&text[..at], |n| &text[n + 1..at])
            .trim()
            .is_empty();
        if opens_line && !super::in_code(text, at) {
            return Some(at);
        }
        from = at + FENCE.len();
    }
    None
}

pub(super) fn parse(text: &str) -> Option<Found> {
    let start = marker(text)?;
    let (calls, end) = if text[start..].starts_with(CALL) {
        function_gemma(text, start)
    } else {
        tool_code(text, start)
    };
    let mut content = text[..start].to_owned();
    let trailing = text[end..].trim().trim_end_matches("<end_of_turn>").trim();
    if !trailing.is_empty() {
        content.push('\n');
        content.push_str(trailing);
    }
    Some(Found::new(Dialect::Gemma, content, calls))
}

/// ```` ```tool_code ```` blocks, one after another. A block ends at the first closing fence after
/// which its calls read whole, so a fence inside a string does not cut it short.
fn tool_code(text: &str, start: usize) -> (Vec<Call>, usize) {
    let mut calls = Vec::new();
    let mut at = start;
    while text[at..].trim_start().starts_with(FENCE) {
        let open = at + (text[at..].len() - text[at..].trim_start().len());
        let Some(nl) = text[open..].find('\n') else {
            calls.push(broken(None, "the tool_code block was cut off"));
            return (calls, text.len());
        };
        let body = open + nl + 1;
        let mut search = body;
        let mut error = None;
        let mut done = None;
        while let Some(p) = text[search..].find("```") {
            let close = search + p;
            match pythonic::calls(&text[body..close]) {
                Ok(Some(found)) => {
                    done = Some((found, close + 3));
                    break;
                }
                Ok(None) => error = Some("the tool_code block holds no call".to_owned()),
                Err(e) => error = Some(e),
            }
            search = close + 3;
        }
        match done {
            Some((found, end)) => {
                calls.extend(found);
                at = end;
            }
            None => {
                let message =
                    error.unwrap_or_else(|| "the tool_code block was cut off before its closing fence".into());
                calls.push(broken(None, message));
                return (calls, text.len());
            }
        }
    }
    (calls, at)
}

/// FunctionGemma's `<start_function_call>call:NAME{…}<end_function_call>` blocks.
fn function_gemma(text: &str, start: usize) -> (Vec<Call>, usize) {
    let mut calls = Vec::new();
    let mut at = start;
    while let Some(rest) = text[at..].trim_start().strip_prefix(CALL) {
        let body = text.len() - rest.len();
        let rest = rest.trim_start();
        let rest = rest.strip_prefix("call:").unwrap_or(rest);
        let name_at = text.len() - rest.len();
        let Some(brace) = rest.find('{') else {
            calls.push(broken(None, "the function call has no {arguments}"));
            return (calls, text.len());
        };
        let name = rest[..brace].trim().to_owned();
        let mut p = Reader {
            text,
            i: name_at + brace,
        };
        match p.object(0) {
            Ok(args) => calls.push(Call {
                id: None,
                name: Some(name),
                arguments: RawArguments::Json(Value::Object(args)),
                extra: Map::new(),
                repair: None,
            }),
            Err(e) => {
                calls.push(broken(Some(name), e));
                return (
                    calls,
                    text[body..]
                        .find(CALL_END)
                        .map_or(text.len(), |e| body + e + CALL_END.len()),
                );
            }
        }
        let after = text[p.i..].trim_start();
        at = match after.strip_prefix(CALL_END) {
            Some(rest) => text.len() - rest.len(),
            None => p.i,
        };
    }
    (calls, at)
}

struct Reader<'a> {
    text: &'a str,
    i: usize,
}

impl Reader<'_> {
    fn ws(&mut self) {
        let rest = &self.text[self.i..];
        self.i += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.text[self.i..].starts_with(s) {
            self.i += s.len();
            true
        } else {
            false
        }
    }

    fn object(&mut self, depth: usize) -> Result<Map<String, Value>, String> {
        if depth > MAX_DEPTH {
            return Err("the arguments nest too deeply".into());
        }
        if !self.eat("{") {
            return Err("expected `{`".into());
        }
        let mut map = Map::new();
        loop {
            self.ws();
            if self.eat("}") {
                return Ok(map);
            }
            let key = if self.eat(ESCAPE) {
                self.escaped()?
            } else {
                let rest = &self.text[self.i..];
                let len = rest.find(':').ok_or("the arguments were cut off after a key")?;
                self.i += len;
                rest[..len].trim().to_owned()
            };
            self.ws();
            if !self.eat(":") {
                return Err(format!("expected `:` after the key {key}"));
            }
            let value = self.value(depth + 1)?;
            map.insert(key, value);
            self.ws();
            if !self.eat(",") && !self.text[self.i..].starts_with('}') {
                return Err(if self.i >= self.text.len() {
                    "the arguments were cut off".into()
                } else {
                    "expected `,` or `}` between arguments".into()
                });
            }
        }
    }

    /// The text up to the closing `<escape>`.
    fn escaped(&mut self) -> Result<String, String> {
        let rest = &self.text[self.i..];
        let end = rest.find(ESCAPE).ok_or("a string in the arguments was cut off")?;
        self.i += end + ESCAPE.len();
        Ok(rest[..end].to_owned())
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        self.ws();
        if self.eat(ESCAPE) {
            return self.escaped().map(Value::String);
        }
        if self.text[self.i..].starts_with('{') {
            return self.object(depth).map(Value::Object);
        }
        if self.eat("[") {
            let mut items = Vec::new();
            loop {
                self.ws();
                if self.eat("]") {
                    return Ok(Value::Array(items));
                }
                if self.i >= self.text.len() {
                    return Err("the arguments were cut off".into());
                }
                items.push(self.value(depth + 1)?);
                self.ws();
                if !self.eat(",") && !self.text[self.i..].starts_with(']') {
                    return Err("expected `,` or `]` between list items".into());
                }
            }
        }
        let rest = &self.text[self.i..];
        let len = rest.find([',', '}', ']']).unwrap_or(rest.len());
        if len == rest.len() {
            return Err("the arguments were cut off".into());
        }
        let word = rest[..len].trim();
        if word.is_empty() {
            return Err("expected a value".into());
        }
        self.i += len;
        Ok(match word {
            "true" | "True" => Value::Bool(true),
            "false" | "False" => Value::Bool(false),
            "null" | "None" => Value::Null,
            _ => match word.parse::<i64>() {
                Ok(i) => Value::Number(i.into()),
                Err(_) => word
                    .parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .map_or_else(|| Value::String(word.to_owned()), Value::Number),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(c: &Call) -> Value {
        match &c.arguments {
            RawArguments::Json(v) => v.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stray_bracket_is_an_error_not_a_loop() {
        for text in [
            "<start_function_call>call:f{k:[m}x]}<end_function_call>",
            "<start_function_call>call:f{k:,}<end_function_call>",
            "<start_function_call>call:f{k:[1,,2]}<end_function_call>",
        ] {
            let f = parse(text).unwrap();
            assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)), "{text}");
        }
    }

    #[test]
    fn tool_code_blocks() {
        let f = parse("Let me look that up.\n```tool_code\nget_product_name_by_PID(PID=\"807ZPKBL9V\")\n```").unwrap();
        assert_eq!(f.content, "Let me look that up.\n");
        assert_eq!(f.calls[0].name.as_deref(), Some("get_product_name_by_PID"));
        assert_eq!(args(&f.calls[0]), json!({"PID": "807ZPKBL9V"}));
        let f = parse("```tool_code\nprint(write(text=\"```\\n\"))\nget_time()\n```").unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(args(&f.calls[0]), json!({"text": "```\n"}));
    }

    #[test]
    fn function_gemma_calls() {
        let f = parse("<start_function_call>call:get_current_temperature{location:<escape>London, {UK}<escape>,days:3,metric:true,tags:[<escape>a<escape>,<escape>b<escape>],opts:{deep:1.5e2}}<end_function_call><start_function_call>call:get_time{}<end_function_call>").unwrap();
        assert_eq!(f.calls.len(), 2);
        assert_eq!(f.calls[0].name.as_deref(), Some("get_current_temperature"));
        assert_eq!(
            args(&f.calls[0]),
            json!({"location": "London, {UK}", "days": 3, "metric": true, "tags": ["a", "b"], "opts": {"deep": 150.0}})
        );
        let f = parse("<start_function_call>call:get_weather{location:<escape>Lon").unwrap();
        assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)));
    }
}
