//! Provider wire formats: reading tool calls out of a model answer, writing the assistant message
//! and the tool results back, and listing tool schemas — one file per provider.

mod anthropic;
pub mod dialect;
mod gemini;
mod mcp;
mod openai;
mod responses;
mod text;

pub use dialect::{Dialect, Parsed};
pub use gemini::to_gemini_schema;
pub use openai::strict_compatible;

use crate::error::ErrorKind;
use crate::tool::Annotations;
use crate::types::CallId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::str::FromStr;

/// A provider's conversation format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// OpenAI Chat Completions (and OpenAI-compatible servers).
    Openai,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini `generateContent`.
    Gemini,
    /// MCP (`tools/list`); tool listing only.
    Mcp,
    /// The text fallback for models without native tool calling.
    Text,
}

impl Format {
    /// The stable name (`openai`, `responses`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Responses => "responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Mcp => "mcp",
            Self::Text => "text",
        }
    }

    /// Guesses the format of a model answer from its shape.
    pub fn detect(body: &Value) -> Format {
        let Value::Object(o) = body else {
            return Self::Text;
        };
        if o.contains_key("candidates") || o.contains_key("parts") {
            return Self::Gemini;
        }
        if o.contains_key("choices") || o.contains_key("tool_calls") {
            return Self::Openai;
        }
        if o.contains_key("output") || o.get("type").and_then(Value::as_str) == Some("function_call") {
            return Self::Responses;
        }
        if o.contains_key("stop_reason") || o.get("content").is_some_and(Value::is_array) {
            return Self::Anthropic;
        }
        // A bare call object (`{"tool", …}`, or `{"name", "arguments" | "parameters"}` with no
        // message around it) is a text call, not an OpenAI message.
        let bare_call = o.contains_key("name")
            && (o.contains_key("arguments") || o.contains_key("parameters"))
            && !o.contains_key("role");
        if o.contains_key("tool") || bare_call {
            return Self::Text;
        }
        Self::Openai
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "openai" | "chat" => Self::Openai,
            "responses" => Self::Responses,
            "anthropic" => Self::Anthropic,
            "gemini" => Self::Gemini,
            "mcp" => Self::Mcp,
            "text" => Self::Text,
            other => {
                return Err(format!(
                    "unknown format {other:?}; expected openai, responses, anthropic, gemini, mcp or text"
                ));
            }
        })
    }
}

/// A model answer that cannot be read in the format asked for.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

impl FormatError {
    pub(crate) fn new(format: Format, what: impl fmt::Display) -> Self {
        Self(format!("not a {} model answer: {what}", format.as_str()))
    }
}

/// A call's arguments as the provider sent them.
#[derive(Clone, Debug, PartialEq)]
pub enum RawArguments {
    /// No arguments field.
    Missing,
    /// A JSON text (Chat Completions, Responses, a streamed Anthropic input).
    Text(String),
    /// Already a JSON value (Anthropic, Gemini, the text fallback).
    Json(Value),
    /// Named values written as text (Qwen3-Coder's `<parameter=…>`, GLM's `<arg_value>`, DSML):
    /// string values are typed by the tool's schema in stage 1.
    Fields(Map<String, Value>),
    /// A call a clear marker announced but that could not be read: why (it becomes
    /// `malformed_call`, so the model can retry, and is never taken for a final answer).
    Broken(String),
}

/// A tool call as read from the answer, before stage 1 normalises it.
#[derive(Clone, Debug, PartialEq)]
pub struct RawCall {
    /// The provider's id, if it gave one.
    pub id: Option<String>,
    /// The name as the model wrote it.
    pub name: Option<String>,
    /// The arguments as the model wrote them.
    pub arguments: RawArguments,
    /// Keys of the call object beside name and arguments (parameters given at the top level).
    pub extra: Map<String, Value>,
    /// A repair already made while reading the answer (the text fallback repairs the whole object).
    pub repair: Option<crate::types::Repair>,
}

impl RawCall {
    /// Reads a call object: its id under `id_key`, `name`, and its arguments under `args_key`;
    /// the `drop` keys are bookkeeping; every other key is kept as `extra`.
    pub(crate) fn from_object(
        mut obj: Map<String, Value>,
        id_key: Option<&str>,
        args_key: &str,
        drop: &[&str],
    ) -> Self {
        let text = |v: Value| v.as_str().map(str::to_owned);
        let id = id_key.and_then(|k| obj.remove(k)).and_then(text);
        let name = obj.remove("name").and_then(text);
        let arguments = match obj.remove(args_key) {
            None | Some(Value::Null) => RawArguments::Missing,
            Some(Value::String(s)) => RawArguments::Text(s),
            Some(v) => RawArguments::Json(v),
        };
        for key in drop {
            obj.remove(*key);
        }
        Self {
            id,
            name,
            arguments,
            extra: obj,
            repair: None,
        }
    }
}

/// A model answer: its text, its tool calls and whether it was cut off by the token limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The format it was read in.
    pub format: Format,
    /// The assistant message (or Responses output items) as given, to echo into the history.
    pub message: Value,
    /// The answer's text, if any.
    pub text: Option<String>,
    /// The tool calls, in the model's order.
    pub calls: Vec<RawCall>,
    /// The provider said the answer was cut off by its token limit.
    pub cut_off: bool,
    /// The reasoning separated from the text (`<think>…</think>`, harmony's analysis channel).
    pub reasoning: Option<String>,
    /// The text format the calls were read in, for calls read from text.
    pub dialect: Option<Dialect>,
}

impl Answer {
    /// Reads a model answer: a provider response body or just its assistant message.
    /// An answer with more than [`MAX_CALLS_PER_ANSWER`] calls is refused whole.
    pub fn parse(format: Format, body: &Value) -> Result<Answer, FormatError> {
        Self::parse_with(format, body, Dialect::Auto)
    }

    /// Reads a model answer whose text calls are written in `dialect` (`Auto`: found from the
    /// text). Text answers are read by the family parsers; an OpenAI-format answer with no
    /// `tool_calls` whose content holds a call is read as that call, marked repaired
    /// (`parsed_from_content`).
    pub fn parse_with(format: Format, body: &Value, dialect: Dialect) -> Result<Answer, FormatError> {
        let answer = match format {
            Format::Openai => openai::parse(body, dialect),
            Format::Responses => responses::parse(body),
            Format::Anthropic => anthropic::parse(body),
            Format::Gemini => gemini::parse(body),
            Format::Text => text::parse(body, dialect),
            Format::Mcp => mcp::parse(body),
        }?;
        if answer.calls.len() > MAX_CALLS_PER_ANSWER {
            return Err(FormatError(format!(
                "the answer holds {} tool calls; at most {MAX_CALLS_PER_ANSWER} are run from one answer",
                answer.calls.len()
            )));
        }
        Ok(answer)
    }
}

/// The most tool calls one answer may hold (models issue a handful; a few hundred at most).
pub const MAX_CALLS_PER_ANSWER: usize = 1024;

/// Refuses an answer with more calls than [`MAX_CALLS_PER_ANSWER`] before any is read, so a
/// hostile answer costs no more than its own parse.
pub(crate) fn check_call_count(n: usize) -> Result<(), FormatError> {
    if n > MAX_CALLS_PER_ANSWER {
        return Err(FormatError(format!(
            "the answer holds {n} tool calls; at most {MAX_CALLS_PER_ANSWER} are run from one answer"
        )));
    }
    Ok(())
}

/// How a call of the answer is written back into the assistant message.
#[derive(Clone, Debug, PartialEq)]
pub struct CallEcho {
    /// The id the result is linked by (generated when the provider gave none).
    pub id: CallId,
    /// The provider-safe name (or the name as written, for an unknown tool).
    pub name: String,
    /// The normalised arguments; `None` when they could not be read.
    pub arguments: Option<Map<String, Value>>,
}

/// The assistant message(s) to append, with ids filled in and repaired arguments normalised.
/// `echoes` are in the order of `answer.calls`.
pub fn assistant_messages(answer: &Answer, echoes: &[CallEcho]) -> Vec<Value> {
    match answer.format {
        Format::Openai => openai::assistant(answer, echoes),
        Format::Responses => responses::assistant(answer, echoes),
        Format::Anthropic => anthropic::assistant(answer, echoes),
        Format::Gemini => gemini::assistant(answer, echoes),
        Format::Text | Format::Mcp => text::assistant(answer),
    }
}

/// The result of one call, ready to be written in any format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call it answers.
    pub call_id: CallId,
    /// The provider-safe tool name the model used.
    pub name: String,
    /// The (truncated) result, or the error JSON.
    pub content: Value,
    /// Whether `content` is an error.
    pub is_error: bool,
    /// The error kind, for errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// `content` is the tool's whole result, validated against its output schema: not
    /// truncated, not replaced by a hook, no context added (MCP sends it as `structuredContent`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub structured: bool,
}

impl ToolResult {
    /// The content as text: strings as they are, anything else as compact JSON.
    pub fn content_text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// The messages carrying the results, in the order given.
pub fn result_messages(format: Format, results: &[ToolResult]) -> Vec<Value> {
    if results.is_empty() {
        return Vec::new();
    }
    match format {
        Format::Openai => openai::results(results),
        Format::Responses => responses::results(results),
        Format::Anthropic => anthropic::results(results),
        Format::Gemini => gemini::results(results),
        Format::Text => text::results(results),
        Format::Mcp => mcp::results(results),
    }
}

/// What a tool listing needs to know of one tool.
#[derive(Clone, Debug)]
pub struct ToolView<'a> {
    /// The provider-safe name.
    pub name: &'a str,
    /// The description shown this turn.
    pub description: &'a str,
    /// The parameter schema shown (and validated) this turn.
    pub parameters: &'a Value,
    /// The result schema, if any.
    pub output_schema: Option<&'a Value>,
    /// Behaviour hints.
    pub annotations: Annotations,
}

/// The tool schemas in a provider's format, in the order given (the registry's is sorted by name).
pub fn tool_list(format: Format, tools: &[ToolView<'_>]) -> Value {
    match format {
        Format::Openai => openai::tools(tools),
        Format::Responses => responses::tools(tools),
        Format::Anthropic => anthropic::tools(tools),
        Format::Gemini => gemini::tools(tools),
        Format::Mcp => mcp::tools(tools),
        Format::Text => Value::String(text::tools(tools)),
    }
}

/// Reads `arguments` text for echoing: the normalised arguments when known, else the raw text.
pub(crate) fn echo_arguments_text(echo: &CallEcho, raw: &RawArguments) -> String {
    match (&echo.arguments, raw) {
        (Some(args), _) => Value::Object(args.clone()).to_string(),
        (None, RawArguments::Text(t)) => t.clone(),
        (None, RawArguments::Json(v)) => v.to_string(),
        (None, RawArguments::Fields(m)) => Value::Object(m.clone()).to_string(),
        (None, RawArguments::Missing | RawArguments::Broken(_)) => "{}".to_owned(),
    }
}

/// The arguments as an object for formats that require one.
pub(crate) fn echo_arguments_object(echo: &CallEcho) -> Value {
    Value::Object(echo.arguments.clone().unwrap_or_default())
}

/// Appends a user's text to a conversation in `format`. Where the provider wants the roles to
/// alternate (Anthropic, Gemini) and the conversation already ends with a user message (tool
/// results), the text joins that message.
pub fn push_user_text(format: Format, history: &mut Vec<Value>, text: &str) {
    let last_user = history
        .last_mut()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    match (format, last_user) {
        (Format::Anthropic, Some(last)) => {
            let block = serde_json::json!({"type": "text", "text": text});
            match last.get_mut("content") {
                Some(Value::Array(blocks)) => blocks.push(block),
                Some(Value::String(s)) => {
                    let earlier = serde_json::json!({"type": "text", "text": std::mem::take(s)});
                    last["content"] = Value::Array(vec![earlier, block]);
                }
                _ => last["content"] = Value::Array(vec![block]),
            }
        }
        (Format::Gemini, Some(last)) => match last.get_mut("parts") {
            Some(Value::Array(parts)) => parts.push(serde_json::json!({"text": text})),
            _ => last["parts"] = serde_json::json!([{"text": text}]),
        },
        (Format::Gemini, None) => history.push(serde_json::json!({"role": "user", "parts": [{"text": text}]})),
        (Format::Responses, _) => {
            history.push(serde_json::json!({"type": "message", "role": "user", "content": text}));
        }
        _ => history.push(serde_json::json!({"role": "user", "content": text})),
    }
}
