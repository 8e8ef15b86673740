//! Tool calls in the raw text of open-weight models. Each family writes its calls in the text
//! format its chat template defines; when an inference server's parser misses one (or there is no
//! parser: a completion endpoint, a local runtime, a replayed log), the call arrives as text. Each
//! family's parser is its own unit here; [`parse`] finds which one the text speaks (or uses the
//! one named), separates the reasoning, keeps the prose before the calls as content, and turns a
//! clear call marker it cannot read into a broken call (`malformed_call`), never a final answer.

mod bare;
mod deepseek;
mod gemma;
mod harmony;
mod kimi;
mod llama;
mod mistral;
mod pythonic;
mod scan;
mod tagged;

use super::RawCall;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A call read from text: the same shape every provider format reads into.
pub(crate) type Call = RawCall;

/// A family of tool-call text formats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dialect {
    /// Find the family from the text's markers.
    #[default]
    Auto,
    /// toolgate's own `{"tool", "parameters"}` object (the text fallback's prompt asks for it).
    Toolgate,
    /// `<tool_call>{json}</tool_call>`: Qwen 2.5 / Qwen 3, NousHermes and many fine-tunes.
    Hermes,
    /// `<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>`.
    Qwen3Coder,
    /// DeepSeek V3 / R1 / V3.1 (`<｜tool▁calls▁begin｜>…`) and V3.2's DSML.
    Deepseek,
    /// Llama 3.x (`<|python_tag|>`, bare JSON) and Llama 3.2 / 4 pythonic lists.
    Llama,
    /// Mistral `[TOOL_CALLS][…]` (v3) and `[TOOL_CALLS]name[ARGS]{…}` (v11+).
    Mistral,
    /// gpt-oss harmony channels (`<|channel|>commentary to=functions.NAME …<|call|>`).
    GptOss,
    /// Kimi K2 (`<|tool_calls_section_begin|>…`).
    Kimi,
    /// GLM 4.5 / 4.6 / 4.7 (`<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>…`).
    Glm,
    /// Gemma's ```` ```tool_code ```` blocks and FunctionGemma's `<start_function_call>`.
    Gemma,
}

impl Dialect {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Toolgate => "toolgate",
            Self::Hermes => "hermes",
            Self::Qwen3Coder => "qwen3-coder",
            Self::Deepseek => "deepseek",
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::GptOss => "gpt-oss",
            Self::Kimi => "kimi",
            Self::Glm => "glm",
            Self::Gemma => "gemma",
        }
    }

    /// Every dialect, for help texts.
    pub const ALL: [Dialect; 11] = [
        Self::Auto,
        Self::Toolgate,
        Self::Hermes,
        Self::Qwen3Coder,
        Self::Deepseek,
        Self::Llama,
        Self::Mistral,
        Self::GptOss,
        Self::Kimi,
        Self::Glm,
        Self::Gemma,
    ];

    /// The family's parser: `None` when the text holds none of its markers.
    fn parser(self) -> fn(&str) -> Option<Found> {
        match self {
            Self::Auto | Self::Toolgate => bare::parse,
            Self::Hermes | Self::Qwen3Coder | Self::Glm => tagged::parse,
            Self::Deepseek => deepseek::parse,
            Self::Llama => llama::parse,
            Self::Mistral => mistral::parse,
            Self::GptOss => harmony::parse,
            Self::Kimi => kimi::parse,
            Self::Gemma => gemma::parse,
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dialect {
    type Err = String;
    /// A dialect's name, or a model's (`qwen3`, `Qwen2.5-7B-Instruct`, `deepseek-v3.1`,
    /// `llama4`, `magistral`, `gpt-oss-20b`, `kimi-k2`, `glm-4.6`, `functiongemma`…).
    fn from_str(s: &str) -> Result<Self, String> {
        let name = s.trim().to_ascii_lowercase();
        let name = name.rsplit('/').next().unwrap_or(&name);
        let has = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
        Ok(if name == "auto" {
            Self::Auto
        } else if name == "toolgate" || name == "text" {
            Self::Toolgate
        } else if has(&["qwen3-coder", "qwen3_coder", "qwen3coder"]) {
            Self::Qwen3Coder
        } else if has(&["hermes", "qwen", "nous", "qwq"]) {
            Self::Hermes
        } else if has(&["deepseek"]) {
            Self::Deepseek
        } else if has(&["llama", "meta-llama"]) {
            Self::Llama
        } else if has(&["mistral", "magistral", "devstral", "ministral", "mixtral", "codestral"]) {
            Self::Mistral
        } else if has(&["gpt-oss", "gpt_oss", "harmony"]) {
            Self::GptOss
        } else if has(&["kimi", "moonshot"]) {
            Self::Kimi
        } else if has(&["glm", "chatglm"]) {
            Self::Glm
        } else if has(&["gemma", "functiongemma"]) {
            Self::Gemma
        } else {
            let names: Vec<&str> = Self::ALL.iter().map(|d| d.as_str()).collect();
            return Err(format!("unknown dialect {s:?}; expected one of {}", names.join(", ")));
        })
    }
}

/// What one family's parser found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// The calls, in order (broken ones included).
    pub calls: Vec<Call>,
    /// The text around the calls.
    pub content: String,
    /// Reasoning the format itself separates (harmony's analysis channel).
    pub reasoning: Option<String>,
    /// The family the calls were written in.
    pub dialect: Option<Dialect>,
}

impl Found {
    pub(crate) fn new(dialect: Dialect, content: impl Into<String>, calls: Vec<Call>) -> Self {
        Self {
            calls,
            content: content.into(),
            reasoning: None,
            dialect: Some(dialect),
        }
    }
}

/// What stage 1 made of a model's text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// The calls, in the model's order.
    pub calls: Vec<RawCall>,
    /// The text outside the calls and the reasoning (the answer, when there are no calls).
    pub content: String,
    /// The reasoning (`<think>…</think>`, `[THINK]…[/THINK]`, harmony's analysis channel).
    pub reasoning: Option<String>,
    /// The family the calls were written in, when there are calls.
    pub dialect: Option<Dialect>,
}

/// Reads the calls in `text`, in the family `dialect` names (or the one its markers show).
pub fn parse(text: &str, dialect: Dialect) -> Parsed {
    let (reasoning, rest) = split_reasoning(text);
    let family = match dialect {
        Dialect::Auto => detect(rest),
        named => Some(named),
    };
    let found = family
        .and_then(|f| f.parser()(rest))
        // A named family that finds nothing still reads toolgate's own object and bare JSON calls.
        .or_else(|| {
            (family != Some(Dialect::Auto) && family != Some(Dialect::Toolgate))
                .then(|| bare::parse(rest))
                .flatten()
        });
    match found {
        Some(mut found) => {
            // An empty name is no name (stage 1 says so); names are written without padding.
            for call in &mut found.calls {
                call.name = call.name.take().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
            }
            Parsed {
                calls: found.calls,
                content: found.content.trim().to_owned(),
                reasoning: join(reasoning, found.reasoning),
                dialect: found.dialect,
            }
        }
        None => Parsed {
            calls: Vec::new(),
            content: rest.trim().to_owned(),
            reasoning: reasoning.map(str::to_owned),
            dialect: None,
        },
    }
}

fn join(a: Option<&str>, b: Option<String>) -> Option<String> {
    match (a.map(str::trim).filter(|s| !s.is_empty()), b) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (Some(a), None) => Some(a.to_owned()),
        (None, b) => b,
    }
}

/// The family whose structural marker comes first in `text`; `Auto` (the bare JSON and
/// pythonic forms) when none does.
fn detect(text: &str) -> Option<Dialect> {
    Some(first_marker(text).map(|(d, _)| d).unwrap_or_else(|| {
        if bare::is_pythonic(text) || llama::prefaced_list(text).is_some() {
            Dialect::Llama
        } else {
            Dialect::Auto
        }
    }))
}

/// Every family's opening markers, for detection in one pass: the token, its family, and whether
/// it counts only where it opens a line. Each family's own `marker` finds the same tokens (a test
/// holds them together); harmony's `to=functions.` recipient is searched apart.
const MARKERS: [(&str, Dialect, bool); 19] = [
    ("<|start|>", Dialect::GptOss, false),
    ("<|channel|>", Dialect::GptOss, false),
    ("<|message|>", Dialect::GptOss, false),
    ("<｜tool▁calls▁begin｜>", Dialect::Deepseek, false),
    ("<|tool▁calls▁begin|>", Dialect::Deepseek, false),
    ("<｜tool▁call▁begin｜>", Dialect::Deepseek, false),
    ("<|tool▁call▁begin|>", Dialect::Deepseek, false),
    ("<｜DSML｜", Dialect::Deepseek, false),
    ("<|DSML|", Dialect::Deepseek, false),
    ("<|tool_calls_section_begin|>", Dialect::Kimi, false),
    ("<|tool_call_section_begin|>", Dialect::Kimi, false),
    ("<|tool_call_begin|>", Dialect::Kimi, false),
    ("[TOOL_CALLS]", Dialect::Mistral, false),
    ("<tool_call>", Dialect::Hermes, false),
    ("<function=", Dialect::Hermes, true),
    ("<|python_tag|>", Dialect::Llama, false),
    ("<|python_start|>", Dialect::Llama, false),
    ("<start_function_call>", Dialect::Gemma, false),
    ("```tool_code", Dialect::Gemma, true),
];

/// The family whose structural marker comes first in `text`, and where: one scan of the bytes
/// that can open a marker (`<`, `[`, `` ` ``), a token compared only there.
fn first_marker(text: &str) -> Option<(Dialect, usize)> {
    let recipient = find_structural(text, "to=functions.");
    let limit = recipient.unwrap_or(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < limit {
        // Only a marker's first two bytes are checked at every position; the tokens where they match.
        let pair = (bytes[i], bytes.get(i + 1).copied().unwrap_or(0));
        if matches!(
            pair,
            (b'<', b'|' | 0xEF | b't' | b'f' | b's') | (b'[', b'T') | (b'`', b'`')
        ) {
            let rest = &bytes[i..];
            for (token, dialect, line) in MARKERS {
                if rest.starts_with(token.as_bytes())
                    && (!line
                        || text[..i]
                            .rfind('\n')
                            .map_or(&text[..i], |n| &text[n + 1..i])
                            .trim()
                            .is_empty())
                    && !in_code(text, i)
                {
                    return Some((dialect, i));
                }
            }
        }
        i += 1;
    }
    recipient.map(|at| (Dialect::GptOss, at))
}

/// `text` without its leading reasoning block (`<think>…</think>` and its spellings), split as
/// [`parse`] splits it.
pub(crate) fn after_reasoning(text: &str) -> &str {
    split_reasoning(text).1
}

/// Reasoning pairs, as families write them.
const THINK: [(&str, &str); 2] = [("<think>", "</think>"), ("[THINK]", "[/THINK]")];

/// Splits off the reasoning: `<think>…</think>` (or Magistral's `[THINK]…[/THINK]`) at the start;
/// a closing tag with no opening one (the template opened it in the prompt) ends the reasoning; an
/// opening tag never closed (the answer was cut off while thinking) makes the rest reasoning.
fn split_reasoning(text: &str) -> (Option<&str>, &str) {
    let trimmed = text.trim_start();
    for (open, close) in THINK {
        if let Some(after) = trimmed.strip_prefix(open) {
            return match after.find(close) {
                Some(end) => (Some(&after[..end]), &after[end + close.len()..]),
                None => (Some(after), ""),
            };
        }
        if let Some(end) = text.find(close) {
            let before = &text[..end];
            if !before.contains(open) && ends_reasoning(text, end) {
                return (Some(before), &text[end + close.len()..]);
            }
        }
    }
    (None, text)
}

/// Whether a closing reasoning tag at `end` with no opening tag ends the reasoning: not when a
/// call marker comes before it, nor when it sits inside a JSON value (a call's string argument).
fn ends_reasoning(text: &str, end: usize) -> bool {
    let before = &text[..end];
    if first_marker(before).is_some() {
        return false;
    }
    let mut i = 0;
    while let Some(p) = before[i..].find(['{', '[']) {
        let at = i + p;
        let next = before[at + 1..].trim_start();
        let json = next.starts_with('"') || (before.as_bytes()[at] == b'[' && next.starts_with('{'));
        if !json {
            i = at + 1;
            continue;
        }
        match scan::json_end(text, at) {
            Some(e) if e <= end => i = e,
            _ => return false,
        }
    }
    true
}

/// Whether byte `at` of `text` sits inside Markdown code (a fence or an inline span): a marker
/// there is quoted, not written as structure.
pub(crate) fn in_code(text: &str, at: usize) -> bool {
    let before = &text[..at];
    if before.matches("```").count() % 2 == 1 {
        return true;
    }
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    before[line_start..].matches('`').count() % 2 == 1
}

/// The first occurrence of `marker` outside Markdown code.
pub(crate) fn find_structural(text: &str, marker: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = text.get(from..)?.find(marker) {
        let at = from + p;
        if !in_code(text, at) {
            return Some(at);
        }
        from = at + marker.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_finds_what_each_family_finds() {
        let family_marker = |d: Dialect| -> fn(&str) -> Option<usize> {
            match d {
                Dialect::GptOss => harmony::marker,
                Dialect::Deepseek => deepseek::marker,
                Dialect::Kimi => kimi::marker,
                Dialect::Mistral => mistral::marker,
                Dialect::Hermes => tagged::marker,
                Dialect::Llama => llama::marker,
                _ => gemma::marker,
            }
        };
        for (token, dialect, _) in MARKERS {
            for text in [format!("{token}x"), format!("Some prose.\n{token}x")] {
                let at = text.find(token).unwrap();
                assert_eq!(first_marker(&text), Some((dialect, at)), "{text}");
                assert_eq!(family_marker(dialect)(&text), Some(at), "{text}");
            }
            let quoted = format!("Write `{token}` first.");
            assert_eq!(first_marker(&quoted), None, "{quoted}");
        }
        let text = "analysis then commentary to=functions.get_time json{}";
        assert_eq!(first_marker(text), Some((Dialect::GptOss, text.find("to=").unwrap())));
        assert_eq!(first_marker("say <function=x> inline"), None);
    }

    #[test]
    fn reasoning_is_split_off_in_each_spelling() {
        assert_eq!(split_reasoning("<think>plan</think>answer"), (Some("plan"), "answer"));
        assert_eq!(split_reasoning("plan</think>\nanswer"), (Some("plan"), "\nanswer"));
        assert_eq!(split_reasoning("[THINK]x[/THINK]y"), (Some("x"), "y"));
        assert_eq!(
            split_reasoning("<think>cut off while thin"),
            (Some("cut off while thin"), "")
        );
        assert_eq!(split_reasoning("no reasoning"), (None, "no reasoning"));
        // A lone closing tag after a call marker or inside a JSON string is an argument.
        for text in [
            "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": \"</think>\"}}</tool_call>",
            "{\"name\": \"a\", \"arguments\": {\"x\": [\"</think>\"]}}",
            "[{\"name\": \"a\", \"arguments\": {\"x\": \"</think>\"}}]",
        ] {
            assert_eq!(split_reasoning(text), (None, text), "{text}");
        }
        assert_eq!(
            split_reasoning("call it with {\"x\": 1} and f(x) { y }</think>done"),
            (Some("call it with {\"x\": 1} and f(x) { y }"), "done")
        );
    }

    #[test]
    fn dialect_names_and_model_names() {
        for (name, d) in [
            ("qwen3", Dialect::Hermes),
            ("Qwen/Qwen2.5-7B-Instruct", Dialect::Hermes),
            ("qwen3-coder-30b", Dialect::Qwen3Coder),
            ("deepseek-v3.1", Dialect::Deepseek),
            ("llama4", Dialect::Llama),
            ("magistral-small", Dialect::Mistral),
            ("gpt-oss-20b", Dialect::GptOss),
            ("kimi-k2", Dialect::Kimi),
            ("GLM-4.6", Dialect::Glm),
            ("functiongemma", Dialect::Gemma),
            ("auto", Dialect::Auto),
        ] {
            assert_eq!(name.parse::<Dialect>(), Ok(d), "{name}");
        }
        for d in Dialect::ALL {
            assert_eq!(d.as_str().parse::<Dialect>(), Ok(d));
        }
        assert!("gpt-4.1".parse::<Dialect>().unwrap_err().contains("unknown dialect"));
    }

    #[test]
    fn quoted_markers_are_not_structure() {
        assert!(in_code("Use `<tool_call>` tags", 5));
        assert!(in_code("```\n<tool_call>\n```", 4));
        assert!(!in_code("text\n<tool_call>", 5));
    }
}
