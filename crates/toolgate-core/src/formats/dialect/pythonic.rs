//! Pythonic calls: Llama 3.2 / Llama 4 `[get_weather(city="Paris"), get_time()]` (optionally in
//! `<|python_start|>…<|python_end|>`), Llama 3.1's built-in `<|python_tag|>brave_search.call(…)`,
//! and Gemma's ```` ```tool_code ```` blocks. Only keyword arguments with literal values are read:
//! strings (single, double or triple quoted), numbers (exponents too), `True`/`False`/`None`,
//! lists, tuples and dicts. Nothing is evaluated.

use super::Call;
use crate::formats::RawArguments;
use serde_json::{Map, Number, Value};

/// The deepest literal nesting read.
const MAX_DEPTH: usize = 64;

/// Reads `[f(a=1), g()]`, `f(a=1)` or calls one per line, the whole text. `Err` names what is
/// wrong once the text has the shape of a call list; `Ok(None)` when it is not one at all.
pub(crate) fn calls(text: &str) -> Result<Option<Vec<Call>>, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    p.ws();
    let bracketed = p.eat(b'[');
    if !p.at_identifier() {
        return Ok(None);
    }
    let mut out = Vec::new();
    loop {
        p.ws();
        if bracketed && p.eat(b']') {
            break;
        }
        if p.i >= p.s.len() {
            if bracketed {
                return Err("the call list was cut off before its `]`".into());
            }
            break;
        }
        let Some(name) = p.dotted_name() else {
            return if out.is_empty() {
                Ok(None)
            } else {
                Err(p.error("a call"))
            };
        };
        // `print(f(x=1))`, as Gemma sometimes writes, is the inner call.
        if name == "print" && p.peek() == Some(b'(') {
            p.i += 1;
            p.ws();
            let Some(inner) = p.dotted_name() else {
                return Err(p.error("a call inside print()"));
            };
            let args = p.arguments(&inner)?;
            p.ws();
            if !p.eat(b')') {
                return Err(p.error("`)` closing print("));
            }
            out.push(make(inner, args));
        } else {
            if p.peek() != Some(b'(') {
                return if out.is_empty() {
                    Ok(None)
                } else {
                    Err(p.error("`(` after the tool name"))
                };
            }
            let args = p.arguments(&name)?;
            out.push(make(name, args));
        }
        p.ws();
        if !(p.eat(b',') || p.eat(b';')) && bracketed && p.peek() != Some(b']') && p.i < p.s.len() {
            // `[f(a=1) is how…`: prose that opens like a call list, not a list.
            if out.len() == 1 {
                return Ok(None);
            }
            return Err(p.error("`,` or `]` between calls"));
        }
    }
    p.ws();
    if p.i < p.s.len() {
        return if out.is_empty() {
            Ok(None)
        } else {
            Err(p.error("the end of the call list"))
        };
    }
    Ok(Some(out))
}

/// The text opens like a bracketed keyword call list (`[name(` then `)` or `key=`): a parse
/// error in such text is a broken call, not prose.
pub(crate) fn looks_like_calls(text: &str) -> bool {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    p.ws();
    if !p.eat(b'[') {
        return false;
    }
    p.ws();
    if p.dotted_name().is_none() || !p.eat(b'(') {
        return false;
    }
    p.ws();
    if p.eat(b')') {
        return true;
    }
    p.identifier().is_some() && {
        p.ws();
        p.eat(b'=')
    }
}

fn make(name: String, args: Map<String, Value>) -> Call {
    // Llama 3.1's built-in tools are written `brave_search.call(query=…)`.
    let name = name.strip_suffix(".call").map(str::to_owned).unwrap_or(name);
    Call {
        id: None,
        name: Some(name),
        arguments: RawArguments::Json(Value::Object(args)),
        extra: Map::new(),
        repair: None,
    }
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn error(&self, wanted: &str) -> String {
        let near: String = self.text[self.i.min(self.text.len())..].chars().take(20).collect();
        format!("expected {wanted} at byte {} (near {near:?})", self.i)
    }

    fn at_identifier(&self) -> bool {
        self.peek().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
    }

    fn identifier(&mut self) -> Option<String> {
        if !self.at_identifier() {
            return None;
        }
        let start = self.i;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            self.i += 1;
        }
        Some(self.text[start..self.i].to_owned())
    }

    fn dotted_name(&mut self) -> Option<String> {
        let mut name = self.identifier()?;
        while self.peek() == Some(b'.') {
            self.i += 1;
            name.push('.');
            name.push_str(&self.identifier()?);
        }
        Some(name)
    }

    /// `(k=v, …)` after a tool name.
    fn arguments(&mut self, name: &str) -> Result<Map<String, Value>, String> {
        if !self.eat(b'(') {
            return Err(self.error("`(`"));
        }
        let mut args = Map::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(args);
            }
            if self.i >= self.s.len() {
                return Err(format!("the call to {name} was cut off before its `)`"));
            }
            let start = self.i;
            let key = self.identifier();
            self.ws();
            let Some(key) = key.filter(|_| self.eat(b'=')) else {
                self.i = start;
                return Err(format!(
                    "the call to {name} passes an argument by position; pass every argument by name (key=value)"
                ));
            };
            self.ws();
            let value = self.value(0)?;
            args.insert(key, value);
            self.ws();
            if !self.eat(b',') && self.peek() != Some(b')') {
                return Err(self.error("`,` or `)` between arguments"));
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("the arguments nest too deeply".into());
        }
        match self.peek() {
            Some(b'"' | b'\'') => self.string().map(Value::String),
            Some(b'[') => self.sequence(b']', depth),
            Some(b'(') => self.sequence(b')', depth),
            Some(b'{') => self.dict(depth),
            Some(b) if b == b'-' || b == b'+' || b == b'.' || b.is_ascii_digit() => self.number(),
            Some(_) => {
                let word = self.identifier().ok_or_else(|| self.error("a value"))?;
                match word.as_str() {
                    "True" | "true" => Ok(Value::Bool(true)),
                    "False" | "false" => Ok(Value::Bool(false)),
                    "None" | "null" => Ok(Value::Null),
                    _ => Err(format!("{word} is not a literal value; pass strings in quotes")),
                }
            }
            None => Err("the arguments were cut off".into()),
        }
    }

    fn sequence(&mut self, close: u8, depth: usize) -> Result<Value, String> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.eat(close) {
                return Ok(Value::Array(items));
            }
            items.push(self.value(depth + 1)?);
            self.ws();
            if !self.eat(b',') && self.peek() != Some(close) {
                return Err(self.error("`,` between items"));
            }
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Value, String> {
        self.i += 1;
        let mut map = Map::new();
        loop {
            self.ws();
            if self.eat(b'}') {
                return Ok(Value::Object(map));
            }
            let key = match self.value(depth + 1)? {
                Value::String(s) => s,
                other => other.to_string(),
            };
            self.ws();
            if !self.eat(b':') {
                return Err(self.error("`:` after a dict key"));
            }
            self.ws();
            let value = self.value(depth + 1)?;
            map.insert(key, value);
            self.ws();
            if !self.eat(b',') && self.peek() != Some(b'}') {
                return Err(self.error("`,` between dict items"));
            }
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_'))
        {
            self.i += 1;
        }
        let word: String = self.text[start..self.i].chars().filter(|&c| c != '_').collect();
        if let Ok(i) = word.parse::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        word.parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{word} is not a number"))
    }

    /// A Python string: `'…'`, `"…"`, `'''…'''` or `"""…"""`, with backslash escapes.
    fn string(&mut self) -> Result<String, String> {
        let quote = self.s[self.i];
        let triple = self.s[self.i..].starts_with(&[quote; 3]);
        self.i += if triple { 3 } else { 1 };
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.i..].chars().next() else {
                return Err("a string in the arguments was cut off".into());
            };
            if c as u32 == u32::from(quote) && (!triple || self.s[self.i..].starts_with(&[quote; 3])) {
                self.i += if triple { 3 } else { 1 };
                return Ok(out);
            }
            self.i += c.len_utf8();
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = self.text[self.i..].chars().next() else {
                return Err("a string in the arguments was cut off".into());
            };
            self.i += e.len_utf8();
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'u' => {
                    let hex = self.text.get(self.i..self.i + 4).unwrap_or_default();
                    match u32::from_str_radix(hex, 16).ok().and_then(char::from_u32) {
                        Some(ch) if hex.len() == 4 => {
                            out.push(ch);
                            self.i += 4;
                        }
                        _ => out.push_str("\\u"),
                    }
                }
                '\n' => {}
                '\\' | '\'' | '"' => out.push(e),
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
        }
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
    fn a_list_of_calls_with_every_literal() {
        let text = r#"[get_weather(city="San Francisco, CA", days=3, metric=True), search(q='it\'s', n=-1.5e3, tags=["a", 'b'], opts={"x": None}, t=(1, 2)), now()]"#;
        let calls = calls(text).unwrap().unwrap();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].name.as_deref(), Some("get_weather"));
        assert_eq!(
            args(&calls[0]),
            json!({"city": "San Francisco, CA", "days": 3, "metric": true})
        );
        assert_eq!(
            args(&calls[1]),
            json!({"q": "it's", "n": -1500.0, "tags": ["a", "b"], "opts": {"x": null}, "t": [1, 2]})
        );
        assert_eq!(args(&calls[2]), json!({}));
    }

    #[test]
    fn markers_inside_strings_are_text() {
        let calls = calls(r#"[write(path="a.py", text="print(f(x=1)), ]) \"quoted\"\n")]"#)
            .unwrap()
            .unwrap();
        assert_eq!(args(&calls[0])["text"], json!("print(f(x=1)), ]) \"quoted\"\n"));
        let calls = super::calls("write(text='''line one\nit's ''')").unwrap().unwrap();
        assert_eq!(args(&calls[0])["text"], json!("line one\nit's "));
    }

    #[test]
    fn prose_is_not_a_call_and_broken_calls_say_why() {
        for text in [
            "The weather is fine.",
            "[1, 2, 3]",
            "[citation needed]",
            "Paris (France) is big",
            "[f(a=1) is a list in Python",
        ] {
            assert!(calls(text).unwrap().is_none(), "{text}");
        }
        assert!(calls("[get_weather(city=\"Par").unwrap_err().contains("cut off"));
        assert!(calls("[get_weather(\"Paris\")]").unwrap_err().contains("position"));
        assert!(calls("[get_weather(city=paris)]").unwrap_err().contains("literal"));
        assert!(calls("[f(a=1), g(b=2) h(c=3)]").unwrap_err().contains("between calls"));
    }

    #[test]
    fn builtin_and_print_forms() {
        let c = calls("brave_search.call(query=\"rust\")").unwrap().unwrap();
        assert_eq!(c[0].name.as_deref(), Some("brave_search"));
        let c = calls("print(get_time(tz=\"UTC\"))").unwrap().unwrap();
        assert_eq!(c[0].name.as_deref(), Some("get_time"));
    }
}
