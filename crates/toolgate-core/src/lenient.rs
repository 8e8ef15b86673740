//! A lenient JSON reader for the arguments models write: it accepts code fences, comments,
//! trailing and missing commas, single-quoted and backtick strings, unquoted keys and values,
//! Python and JavaScript literals (`True`, `None`, `undefined`, `NaN`), invalid escapes, and text
//! cut off at the end (closing what was left open). It names every repair it makes.
//!
//! Every loop consumes input or stops, and nesting is bounded, so no input can make it hang,
//! recurse without limit or panic. (It replaces `jsonrepair` 0.1.0, which loops forever with
//! unbounded memory on inputs such as `{"a": "x" /}` and panics on `"\é"`.)

use serde_json::{Map, Number, Value};

/// What the reader did to make the text JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Names of the repairs, each once, in the order first made.
    pub actions: Vec<&'static str>,
    /// A value was cut off at the end and completed.
    pub completed_cut_off: bool,
}

impl Repairs {
    fn note(&mut self, action: &'static str) {
        if !self.actions.contains(&action) {
            self.actions.push(action);
        }
    }
}

/// Reads `text` leniently. `max_depth` bounds nesting.
pub fn read(text: &str, max_depth: usize) -> Result<(Value, Repairs), String> {
    let mut r = Reader {
        s: text.as_bytes(),
        text,
        i: 0,
        repairs: Repairs::default(),
        max_depth,
    };
    r.strip_fence();
    r.skip_ws();
    if r.i >= r.s.len() {
        return Err("there is no JSON value in the text".into());
    }
    if !matches!(r.s[r.i], b'{' | b'[' | b'"' | b'\'' | b'`') {
        // Prose before the value: start at the first object or array.
        if let Some(off) = text[r.i..r.s.len()].find(['{', '[']) {
            r.i += off;
            r.repairs.note("skipped_leading_text");
        }
    }
    let value = r.value(0)?;
    r.skip_ws();
    if r.i < r.s.len() {
        r.repairs.note("dropped_trailing_text");
    }
    Ok((value, r.repairs))
}

/// What the head of a list loop found.
enum Step {
    /// The list ended.
    Done,
    /// A comma was consumed; look again.
    Again,
    /// An item (or key) starts here.
    Item,
}

struct Reader<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    repairs: Repairs,
    max_depth: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn strip_fence(&mut self) {
        let t = self.text.trim_start();
        if !t.starts_with("```") {
            return;
        }
        let start = self.text.len() - t.len() + 3;
        // Skip the language tag line.
        let body = match self.text[start..].find('\n') {
            Some(nl) => start + nl + 1,
            None => start,
        };
        let end = self.text[body..].find("```").map_or(self.text.len(), |e| body + e);
        self.s = &self.text.as_bytes()[..end];
        self.i = body;
        self.repairs.note("stripped_code_fence");
    }

    fn skip_ws(&mut self) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => self.i += 1,
                b'/' if self.s.get(self.i + 1) == Some(&b'/') => {
                    self.repairs.note("removed_comment");
                    while self.peek().is_some_and(|b| b != b'\n') {
                        self.i += 1;
                    }
                }
                b'/' if self.s.get(self.i + 1) == Some(&b'*') => {
                    self.repairs.note("removed_comment");
                    self.i += 2;
                    while self.i < self.s.len() && !(self.s[self.i] == b'*' && self.s.get(self.i + 1) == Some(&b'/')) {
                        self.i += 1;
                    }
                    self.i = (self.i + 2).min(self.s.len());
                }
                b'#' => {
                    self.repairs.note("removed_comment");
                    while self.peek().is_some_and(|b| b != b'\n') {
                        self.i += 1;
                    }
                }
                _ => return,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > self.max_depth {
            return Err(format!("the JSON nests deeper than {} levels", self.max_depth));
        }
        self.skip_ws();
        match self.peek() {
            None => {
                self.repairs.completed_cut_off = true;
                self.repairs.note("completed_cut_off_value");
                Ok(Value::Null)
            }
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(q @ (b'"' | b'\'' | b'`')) => {
                if q != b'"' {
                    self.repairs.note("single_quotes");
                }
                self.string(q).map(Value::String)
            }
            Some(_) => Ok(self.bare_value()),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, String> {
        self.i += 1;
        let mut map = Map::new();
        loop {
            match self.list_step(b'}', map.is_empty()) {
                Step::Done => return Ok(Value::Object(map)),
                Step::Again => continue,
                Step::Item => {}
            }
            let start = self.i;
            let key = match self.peek() {
                Some(q @ (b'"' | b'\'' | b'`')) => {
                    if q != b'"' {
                        self.repairs.note("single_quotes");
                    }
                    self.string(q)?
                }
                _ => {
                    let k = self.bare_word(b":,}]");
                    if !k.is_empty() {
                        self.repairs.note("unquoted_keys");
                    }
                    k
                }
            };
            self.skip_ws();
            match self.peek() {
                Some(b':') | Some(b'=') => {
                    self.i += 1;
                    let value = self.value(depth + 1)?;
                    map.insert(key, value);
                }
                None => {
                    // Cut off after a key: the key had no value yet.
                    self.repairs.completed_cut_off = true;
                    self.repairs.note("completed_cut_off_value");
                    return Ok(Value::Object(map));
                }
                Some(b',' | b'}' | b']') => {
                    // A key with no value: dropped.
                    self.repairs.note("dropped_junk");
                    if self.i == start {
                        self.drop_junk();
                    }
                }
                Some(_) => {
                    self.repairs.note("missing_colon");
                    if self.i == start {
                        // Nothing was consumed: drop one junk character to make progress.
                        self.drop_junk();
                        continue;
                    }
                    let before = self.i;
                    let value = self.value(depth + 1)?;
                    if self.i == before {
                        self.drop_junk();
                    } else {
                        map.insert(key, value);
                    }
                }
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, String> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            match self.list_step(b']', items.is_empty()) {
                Step::Done => return Ok(Value::Array(items)),
                Step::Again => continue,
                Step::Item => {}
            }
            let start = self.i;
            let v = self.value(depth + 1)?;
            if self.i == start {
                self.drop_junk();
            } else {
                items.push(v);
            }
        }
    }

    /// The head of an object's or array's loop: ends the list at its closer (or a mismatched
    /// one, or the end of the text), steps over commas, and notes a missing one before an item.
    fn list_step(&mut self, close: u8, empty: bool) -> Step {
        self.skip_ws();
        match self.peek() {
            None => {
                self.repairs.completed_cut_off = true;
                self.repairs.note("completed_cut_off_value");
                Step::Done
            }
            Some(b) if b == close => {
                self.i += 1;
                Step::Done
            }
            Some(b'}' | b']') => {
                self.repairs.note("fixed_brackets");
                self.i += 1;
                Step::Done
            }
            Some(b',') => {
                self.i += 1;
                self.skip_ws();
                if matches!(self.peek(), Some(b'}' | b']') | None) || empty {
                    self.repairs.note("trailing_comma");
                }
                Step::Again
            }
            Some(_) => {
                if !empty && !self.after_separator() {
                    self.repairs.note("missing_comma");
                }
                Step::Item
            }
        }
    }

    /// Whether the last significant character before the cursor was a separator or an opener.
    fn after_separator(&self) -> bool {
        let mut j = self.i;
        while j > 0 {
            j -= 1;
            match self.s[j] {
                b' ' | b'\t' | b'\n' | b'\r' => continue,
                b',' | b'{' | b'[' => return true,
                _ => return false,
            }
        }
        true
    }

    fn drop_junk(&mut self) {
        self.repairs.note("dropped_junk");
        self.i += utf8_len(self.s[self.i]);
        self.i = self.i.min(self.s.len());
    }

    /// A quoted string; the cursor is on the opening quote.
    fn string(&mut self, quote: u8) -> Result<String, String> {
        self.i += 1;
        let mut out = String::new();
        let mut run = self.i;
        loop {
            let Some(b) = self.peek() else {
                out.push_str(&self.text[run..self.i]);
                self.repairs.completed_cut_off = true;
                self.repairs.note("completed_cut_off_value");
                return Ok(out);
            };
            if b == quote {
                out.push_str(&self.text[run..self.i]);
                self.i += 1;
                return Ok(out);
            }
            if b == b'\\' {
                out.push_str(&self.text[run..self.i]);
                self.escape(&mut out, quote);
                run = self.i;
                continue;
            }
            if b < 0x20 {
                // A raw control character inside a string: kept as that character.
                self.repairs.note("escaped_control_characters");
            }
            self.i += utf8_len(b);
            self.i = self.i.min(self.s.len());
        }
    }

    fn escape(&mut self, out: &mut String, quote: u8) {
        self.i += 1;
        let Some(b) = self.peek() else {
            self.repairs.completed_cut_off = true;
            self.repairs.note("completed_cut_off_value");
            return;
        };
        let simple = match b {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            b'/' => Some('/'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'n' => Some('\n'),
            b'r' => Some('\r'),
            b't' => Some('\t'),
            _ if b == quote => Some(b as char),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            self.i += 1;
            return;
        }
        if b == b'u'
            && let Some(hex) = self.text.get(self.i + 1..self.i + 5)
            && let Ok(code) = u32::from_str_radix(hex, 16)
        {
            self.i += 5;
            // A surrogate pair is two escapes.
            if (0xD800..0xDC00).contains(&code)
                && self.text.get(self.i..self.i + 2) == Some("\\u")
                && let Some(low) = self
                    .text
                    .get(self.i + 2..self.i + 6)
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                && (0xDC00..0xE000).contains(&low)
            {
                self.i += 6;
                let c = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                out.push(char::from_u32(c).unwrap_or('\u{FFFD}'));
                return;
            }
            out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            return;
        }
        // An invalid escape: the backslash is literal.
        self.repairs.note("fixed_invalid_escape");
        out.push('\\');
    }

    /// Characters up to a delimiter, trimmed; the cursor ends on the delimiter.
    fn bare_word(&mut self, delimiters: &[u8]) -> String {
        let start = self.i;
        while let Some(b) = self.peek() {
            if delimiters.contains(&b) || b == b'\n' || b == b'"' || b == b'\'' || b == b'{' || b == b'[' {
                break;
            }
            // A comment ends the word: `/*` anywhere, `//` and `#` after white space.
            let next = self.s.get(self.i + 1).copied();
            let after_space = self.i > start && self.s[self.i - 1].is_ascii_whitespace();
            if (b == b'/' && next == Some(b'*')) || (after_space && (b == b'#' || (b == b'/' && next == Some(b'/')))) {
                break;
            }
            self.i += utf8_len(b);
        }
        self.i = self.i.min(self.s.len());
        self.text[start..self.i].trim().to_owned()
    }

    /// A number, a literal, or an unquoted string value.
    fn bare_value(&mut self) -> Value {
        let word = self.bare_word(b",}]");
        match word.as_str() {
            "true" => return Value::Bool(true),
            "false" => return Value::Bool(false),
            "null" => return Value::Null,
            "True" | "False" | "None" => {
                self.repairs.note("python_literals");
                return match word.as_str() {
                    "True" => Value::Bool(true),
                    "False" => Value::Bool(false),
                    _ => Value::Null,
                };
            }
            "undefined" | "NaN" | "Infinity" | "-Infinity" | "+Infinity" => {
                self.repairs.note("normalized_literals");
                return Value::Null;
            }
            _ => {}
        }
        if let Some(n) = number(&word) {
            if serde_json::from_str::<Number>(&word).is_err() {
                self.repairs.note("fixed_number");
            }
            return Value::Number(n);
        }
        if word.is_empty() {
            return Value::Null;
        }
        // Cut off inside a literal (`tr`, `fals`, `nul`).
        if self.i >= self.s.len() {
            for full in ["true", "false", "null"] {
                if full.starts_with(word.as_str()) {
                    self.repairs.completed_cut_off = true;
                    self.repairs.note("completed_cut_off_value");
                    return match full {
                        "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        _ => Value::Null,
                    };
                }
            }
        }
        self.repairs.note("quoted_bare_value");
        Value::String(word)
    }
}

fn number(word: &str) -> Option<Number> {
    if let Ok(n) = serde_json::from_str::<Number>(word) {
        return Some(n);
    }
    let w = word.strip_prefix('+').unwrap_or(word);
    if !w
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'e' | b'E' | b'+'))
    {
        return None;
    }
    if !w.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let f: f64 = w.trim_end_matches(['e', 'E', '+', '-']).parse().ok()?;
    if !f.is_finite() {
        return None;
    }
    if f.fract() == 0.0 && f.abs() < 9.0e15 && !w.contains(['.', 'e', 'E']) {
        return Some(Number::from(f as i64));
    }
    Number::from_f64(f)
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(text: &str) -> (Value, Vec<&'static str>) {
        let (v, r) = read(text, 100).unwrap();
        (v, r.actions)
    }

    #[test]
    fn repairs_what_models_write() {
        let cases: &[(&str, Value)] = &[
            ("{\"a\": 1,}", json!({"a": 1})),
            ("{'a': 'b'}", json!({"a": "b"})),
            ("{a: 1, b_c: \"x\"}", json!({"a": 1, "b_c": "x"})),
            (
                "{\"a\": True, \"b\": None, \"c\": False}",
                json!({"a": true, "b": null, "c": false}),
            ),
            ("```json\n{\"a\": 1}\n```", json!({"a": 1})),
            ("{\"a\": 1 // one\n, \"b\": 2 /* two */}", json!({"a": 1, "b": 2})),
            ("{\"a\": 1 \"b\": 2}", json!({"a": 1, "b": 2})),
            ("{\"a\": [1, 2", json!({"a": [1, 2]})),
            ("{\"a\": \"hel", json!({"a": "hel"})),
            ("{\"a\": tr", json!({"a": true})),
            ("{\"path\": src/main.rs}", json!({"path": "src/main.rs"})),
            ("{\"a\": \"x\" /}", json!({"a": "x"})),
            ("''!", json!("")),
            ("{\"k\": \"x\\é\"}", json!({"k": "x\\é"})),
            ("{\"e\": \"\\u00e9\\ud83d\\ude00\"}", json!({"e": "é😀"})),
            (
                "{\"n\": .5, \"m\": 1., \"big\": 1e400}",
                json!({"n": 0.5, "m": 1.0, "big": "1e400"}),
            ),
            ("Sure: {\"a\": 1} hope it helps", json!({"a": 1})),
            ("{\"a\": undefined, \"b\": NaN}", json!({"a": null, "b": null})),
        ];
        for (text, expected) in cases {
            let (v, _) = ok(text);
            assert_eq!(&v, expected, "{text}");
        }
    }

    #[test]
    fn cut_off_text_is_marked() {
        let (_, r) = read("{\"a\": \"hel", 100).unwrap();
        assert!(r.completed_cut_off);
        let (_, r) = read("{'a': 1,}", 100).unwrap();
        assert!(!r.completed_cut_off);
    }

    #[test]
    fn nesting_is_bounded() {
        assert!(read(&"[".repeat(10_000), 100).is_err());
        assert!(read(&"{\"a\":".repeat(10_000), 100).is_err());
    }
}
