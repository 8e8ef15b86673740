//! The providers: where each one is reached, what its request body looks like, and how its
//! answer (whole or streamed) becomes one response body the core formats read.

use serde_json::{Map, Value, json};
use std::fmt;
use std::str::FromStr;
use toolgate_core::formats::Dialect;
use toolgate_core::{Answer, Format, ModelError, ModelErrorKind, ModelRequest};

/// A model provider's wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI Chat Completions.
    Openai,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini `generateContent`.
    Gemini,
    /// Ollama's OpenAI-compatible endpoint.
    Ollama,
    /// Any OpenAI-compatible server (vLLM, llama.cpp server, LM Studio) by base URL.
    OpenaiCompat,
}

impl Provider {
    /// The name used in `PROVIDER:MODEL`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Responses => "responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Ollama => "ollama",
            Self::OpenaiCompat => "openai-compat",
        }
    }

    /// The conversation format of this provider with native tools.
    pub fn native_format(self) -> Format {
        match self {
            Self::Openai | Self::Ollama | Self::OpenaiCompat => Format::Openai,
            Self::Responses => Format::Responses,
            Self::Anthropic => Format::Anthropic,
            Self::Gemini => Format::Gemini,
        }
    }

    /// Whether the text fallback (tools described in the prompt) can be used: Chat-style servers.
    pub fn chat_wire(self) -> bool {
        matches!(self, Self::Openai | Self::Ollama | Self::OpenaiCompat)
    }

    /// The base URL when none is given.
    pub fn default_base_url(self) -> Option<String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        match self {
            Self::Openai | Self::Responses => {
                Some(env("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into()))
            }
            Self::Anthropic => Some(env("ANTHROPIC_BASE_URL").unwrap_or_else(|| "https://api.anthropic.com".into())),
            Self::Gemini => Some(
                env("GOOGLE_GEMINI_BASE_URL")
                    .or_else(|| env("GEMINI_BASE_URL"))
                    .unwrap_or_else(|| "https://generativelanguage.googleapis.com".into()),
            ),
            Self::Ollama => Some(match env("OLLAMA_HOST") {
                Some(h) if h.starts_with("http://") || h.starts_with("https://") => {
                    format!("{}/v1", h.trim_end_matches('/'))
                }
                Some(h) => format!("http://{h}/v1"),
                None => "http://127.0.0.1:11434/v1".into(),
            }),
            Self::OpenaiCompat => None,
        }
    }

    /// The environment variables the API key is read from, in order.
    pub fn key_variables(self) -> &'static [&'static str] {
        match self {
            Self::Openai | Self::Responses => &["OPENAI_API_KEY"],
            Self::Anthropic => &["ANTHROPIC_API_KEY"],
            Self::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
            Self::Ollama => &[],
            Self::OpenaiCompat => &["TOOLGATE_LLM_API_KEY", "OPENAI_API_KEY"],
        }
    }

    /// Whether a request without a key is refused before it is sent.
    pub fn key_required(self) -> bool {
        matches!(self, Self::Openai | Self::Responses | Self::Anthropic | Self::Gemini)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "openai" | "chat" => Self::Openai,
            "responses" | "openai-responses" => Self::Responses,
            "anthropic" | "claude" => Self::Anthropic,
            "gemini" | "google" => Self::Gemini,
            "ollama" => Self::Ollama,
            "openai-compat" | "compat" | "vllm" | "llamacpp" | "lmstudio" => Self::OpenaiCompat,
            other => {
                return Err(format!(
                    "unknown model provider {other:?}; expected openai, responses, anthropic, gemini, ollama or openai-compat"
                ));
            }
        })
    }
}

/// What to send: the endpoint, its headers (without the credential) and the body.
#[derive(Clone, Debug, PartialEq)]
pub struct WireRequest {
    /// The full URL.
    pub url: String,
    /// Extra headers (the key header is added when sending).
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body.
    pub body: Value,
}

/// The settings that shape a request.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The provider.
    pub provider: Provider,
    /// The model name.
    pub model: String,
    /// The base URL (no trailing slash).
    pub base_url: String,
    /// Stream the answer (SSE).
    pub stream: bool,
    /// Native tool calling (false: the text fallback on a Chat-style server).
    pub native_tools: bool,
    /// Anthropic's required `max_tokens`.
    pub max_tokens: u32,
    /// How calls written in the answer's text are read (the text fallback, and an OpenAI-style
    /// answer whose server left the call in `content`).
    pub dialect: Dialect,
}

impl Shape {
    /// The conversation format.
    pub fn format(&self) -> Format {
        if self.native_tools {
            self.provider.native_format()
        } else {
            Format::Text
        }
    }

    /// The request for one model call.
    pub fn request(&self, req: &ModelRequest) -> WireRequest {
        let model = req.model.as_deref().unwrap_or(&self.model);
        let base = self.base_url.trim_end_matches('/');
        let mut body = Map::new();
        let mut headers = Vec::new();
        let url = match self.provider {
            Provider::Openai | Provider::Ollama | Provider::OpenaiCompat => {
                body.insert("model".into(), json!(model));
                let mut messages = Vec::with_capacity(req.messages.len() + 1);
                let system = if self.native_tools {
                    req.system.clone()
                } else {
                    // The text fallback: the tools are described in the system prompt.
                    let tools = req.tools.as_str().unwrap_or_default();
                    match (&req.system, tools.is_empty()) {
                        (Some(s), false) => Some(format!("{s}\n\n{tools}")),
                        (Some(s), true) => Some(s.clone()),
                        (None, false) => Some(tools.to_owned()),
                        (None, true) => None,
                    }
                };
                if let Some(s) = system {
                    messages.push(json!({"role": "system", "content": s}));
                }
                messages.extend(req.messages.iter().cloned());
                body.insert("messages".into(), Value::Array(messages));
                if self.native_tools && req.has_tools() {
                    body.insert("tools".into(), req.tools.clone());
                }
                if self.stream {
                    body.insert("stream".into(), json!(true));
                    body.insert("stream_options".into(), json!({"include_usage": true}));
                }
                format!("{base}/chat/completions")
            }
            Provider::Responses => {
                body.insert("model".into(), json!(model));
                if let Some(s) = &req.system {
                    body.insert("instructions".into(), json!(s));
                }
                body.insert("input".into(), Value::Array(req.messages.clone()));
                if req.has_tools() {
                    body.insert("tools".into(), req.tools.clone());
                }
                body.insert("store".into(), json!(false));
                if self.stream {
                    body.insert("stream".into(), json!(true));
                }
                format!("{base}/responses")
            }
            Provider::Anthropic => {
                headers.push(("anthropic-version", "2023-06-01".to_owned()));
                body.insert("model".into(), json!(model));
                body.insert("max_tokens".into(), json!(self.max_tokens));
                if let Some(s) = &req.system {
                    body.insert("system".into(), json!(s));
                }
                body.insert("messages".into(), Value::Array(req.messages.clone()));
                if req.has_tools() {
                    body.insert("tools".into(), req.tools.clone());
                }
                if self.stream {
                    body.insert("stream".into(), json!(true));
                }
                format!("{base}/v1/messages")
            }
            Provider::Gemini => {
                body.insert("contents".into(), Value::Array(req.messages.clone()));
                if let Some(s) = &req.system {
                    body.insert("systemInstruction".into(), json!({"parts": [{"text": s}]}));
                }
                if req.has_tools() {
                    body.insert("tools".into(), req.tools.clone());
                }
                if self.stream {
                    format!("{base}/v1beta/models/{model}:streamGenerateContent?alt=sse")
                } else {
                    format!("{base}/v1beta/models/{model}:generateContent")
                }
            }
        };
        WireRequest {
            url,
            headers,
            body: Value::Object(body),
        }
    }

    /// Reads a whole response body as a model answer.
    pub fn answer(&self, body: &Value) -> Result<Answer, ModelError> {
        let invalid = |e: toolgate_core::formats::FormatError| {
            ModelError::new(
                ModelErrorKind::InvalidResponse,
                format!("{}: unreadable answer: {e}", self.provider),
            )
        };
        if !self.native_tools {
            let message = body.pointer("/choices/0/message").ok_or_else(|| {
                ModelError::new(
                    ModelErrorKind::InvalidResponse,
                    format!("{}: the answer has no choices[0].message", self.provider),
                )
            })?;
            let text = message.get("content").and_then(Value::as_str).unwrap_or_default();
            return Answer::parse_with(Format::Text, &Value::String(text.to_owned()), self.dialect).map_err(invalid);
        }
        Answer::parse_with(self.provider.native_format(), body, self.dialect).map_err(invalid)
    }
}

/// Reads a provider's error body into one line: its type or code, and its message.
pub fn error_summary(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        let text: String = body.trim().chars().take(200).collect();
        return if text.is_empty() { "no details".into() } else { text };
    };
    // OpenAI: {"error": {"message", "type", "code"}}; Anthropic: {"type": "error", "error":
    // {"type", "message"}}; Gemini: {"error": {"code", "message", "status"}}; a list of those
    // (Gemini's streaming errors).
    let v = match v {
        Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
        other => other,
    };
    let err = v.get("error").unwrap_or(&v);
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| err.as_str())
        .unwrap_or("no message");
    let kind = ["status", "type", "code"].iter().find_map(|k| match err.get(*k) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    });
    match kind {
        Some(kind) => format!("{kind}: {message}"),
        None => message.to_owned(),
    }
}

/// Assembles a streamed answer, event by event, into the provider's whole response body.
#[derive(Debug)]
pub struct Assembler {
    provider: Provider,
    /// Whether the provider said the answer is complete.
    done: bool,
    text: String,
    /// Chat: tool calls by index (id, name, arguments text, extra keys).
    chat_calls: Vec<(Option<u64>, String, String, String)>,
    finish_reason: Option<Value>,
    /// Responses: the completed response, or the finished items by output index.
    completed: Option<Value>,
    items: Vec<(u64, Value)>,
    /// Anthropic: the message and its blocks (with the JSON text of tool inputs).
    message: Option<Value>,
    blocks: Vec<(u64, Value, String)>,
    stop: Map<String, Value>,
    /// Gemini: the parts so far and the last chunk's other fields.
    parts: Vec<Value>,
    last_chunk: Option<Value>,
}

impl Assembler {
    /// An assembler for `provider`'s stream.
    pub fn new(provider: Provider) -> Self {
        Self {
            provider,
            done: false,
            text: String::new(),
            chat_calls: Vec::new(),
            finish_reason: None,
            completed: None,
            items: Vec::new(),
            message: None,
            blocks: Vec::new(),
            stop: Map::new(),
            parts: Vec::new(),
            last_chunk: None,
        }
    }

    /// Takes one SSE event. An error event or an unreadable one is an error.
    pub fn push(&mut self, event: &str, data: &str) -> Result<(), ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            ModelError::new(
                ModelErrorKind::InvalidResponse,
                format!("{}: a stream event is not JSON ({e}): {}", self.provider, clip(data)),
            )
        })?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event).to_owned();
        let kind = kind.as_str();
        let error_object = v.get("error").is_some_and(|e| !e.is_null()) && kind != "response.completed";
        if error_object || kind == "error" {
            let server = v.pointer("/error/type").and_then(Value::as_str) == Some("overloaded_error");
            return Err(ModelError::new(
                if server {
                    ModelErrorKind::Server
                } else {
                    ModelErrorKind::InvalidResponse
                },
                format!(
                    "{}: the stream reported an error: {}",
                    self.provider,
                    error_summary(data)
                ),
            ));
        }
        if kind == "response.failed" {
            let detail = v.pointer("/response/error").map_or_else(
                || "no details".into(),
                |e| error_summary(&json!({"error": e}).to_string()),
            );
            return Err(ModelError::new(
                ModelErrorKind::Server,
                format!("{}: the response failed: {detail}", self.provider),
            ));
        }
        match self.provider {
            Provider::Openai | Provider::Ollama | Provider::OpenaiCompat => self.push_chat(&v),
            Provider::Responses => self.push_responses(kind, v),
            Provider::Anthropic => self.push_anthropic(kind, v),
            Provider::Gemini => self.push_gemini(v),
        }
        Ok(())
    }

    fn push_chat(&mut self, v: &Value) {
        let Some(choice) = v.pointer("/choices/0") else {
            return; // a usage-only chunk
        };
        let delta = &choice["delta"];
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(t);
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let index = call.get("index").and_then(Value::as_u64);
            let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
            let slot = match index {
                Some(i) => self.chat_calls.iter().position(|c| c.0 == Some(i)),
                // Some servers omit the index and send each call whole.
                None if id.is_empty() => self.chat_calls.len().checked_sub(1),
                None => None,
            };
            let slot = match slot {
                Some(s) => s,
                None => {
                    self.chat_calls
                        .push((index, String::new(), String::new(), String::new()));
                    self.chat_calls.len() - 1
                }
            };
            let entry = &mut self.chat_calls[slot];
            if !id.is_empty() {
                entry.1 = id.to_owned();
            }
            if let Some(n) = call.pointer("/function/name").and_then(Value::as_str) {
                entry.2.push_str(n);
            }
            match call.pointer("/function/arguments") {
                Some(Value::String(a)) => entry.3.push_str(a),
                Some(other) if !other.is_null() => entry.3.push_str(&other.to_string()),
                _ => {}
            }
        }
        if let Some(f) = choice.get("finish_reason").filter(|f| !f.is_null()) {
            self.finish_reason = Some(f.clone());
            self.done = true;
        }
    }

    fn push_responses(&mut self, kind: &str, v: Value) {
        match kind {
            "response.output_text.delta" => {
                if let Some(d) = v.get("delta").and_then(Value::as_str) {
                    self.text.push_str(d);
                }
            }
            "response.output_item.done" => {
                let index = v
                    .get("output_index")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.items.len() as u64);
                if let Some(item) = v.get("item") {
                    self.items.push((index, item.clone()));
                }
            }
            "response.completed" | "response.incomplete" => {
                self.completed = v.get("response").cloned();
                self.done = true;
            }
            _ => {}
        }
    }

    fn push_anthropic(&mut self, kind: &str, mut v: Value) {
        match kind {
            "message_start" => self.message = v.get_mut("message").map(Value::take),
            "content_block_start" => {
                let index = v
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.blocks.len() as u64);
                let block = v.get_mut("content_block").map(Value::take).unwrap_or(Value::Null);
                self.blocks.push((index, block, String::new()));
            }
            "content_block_delta" => {
                let index = v.get("index").and_then(Value::as_u64);
                let Some(block) = self.blocks.iter_mut().find(|b| Some(b.0) == index) else {
                    return;
                };
                let delta = &v["delta"];
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let add = delta.get("text").and_then(Value::as_str).unwrap_or_default();
                        let text = block.1.get("text").and_then(Value::as_str).unwrap_or_default();
                        block.1["text"] = Value::String(format!("{text}{add}"));
                    }
                    Some("input_json_delta") => {
                        block
                            .2
                            .push_str(delta.get("partial_json").and_then(Value::as_str).unwrap_or_default());
                    }
                    Some("thinking_delta") => {
                        let add = delta.get("thinking").and_then(Value::as_str).unwrap_or_default();
                        let text = block.1.get("thinking").and_then(Value::as_str).unwrap_or_default();
                        block.1["thinking"] = Value::String(format!("{text}{add}"));
                    }
                    Some("signature_delta") => {
                        if let Some(s) = delta.get("signature") {
                            block.1["signature"] = s.clone();
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(Value::Object(d)) = v.get_mut("delta").map(Value::take) {
                    self.stop.extend(d);
                }
            }
            "message_stop" => self.done = true,
            _ => {}
        }
    }

    fn push_gemini(&mut self, mut v: Value) {
        if let Some(Value::Array(parts)) = v.pointer_mut("/candidates/0/content/parts").map(Value::take) {
            for part in parts {
                let joined = match (self.parts.last_mut(), part.get("text").and_then(Value::as_str)) {
                    (Some(last), Some(t)) if part.as_object().is_some_and(|o| o.len() == 1) => {
                        match last.get("text").and_then(Value::as_str) {
                            Some(prev) if last.as_object().is_some_and(|o| o.len() == 1) => {
                                *last = json!({"text": format!("{prev}{t}")});
                                true
                            }
                            _ => false,
                        }
                    }
                    _ => false,
                };
                if !joined {
                    self.parts.push(part);
                }
            }
        }
        if v.pointer("/candidates/0/finishReason").is_some_and(|f| !f.is_null()) {
            self.done = true;
        }
        self.last_chunk = Some(v);
    }

    /// The whole response body, once the stream ended. A stream that ended before the provider
    /// said it was complete is an error (the connection dropped).
    pub fn finish(self) -> Result<Value, ModelError> {
        if !self.done {
            return Err(ModelError::new(
                ModelErrorKind::Network,
                format!("{}: the answer stream ended before it was complete", self.provider),
            ));
        }
        Ok(match self.provider {
            Provider::Openai | Provider::Ollama | Provider::OpenaiCompat => {
                let mut message = json!({"role": "assistant", "content": if self.text.is_empty() { Value::Null } else { Value::String(self.text) }});
                if !self.chat_calls.is_empty() {
                    let calls: Vec<Value> = self
                        .chat_calls
                        .into_iter()
                        .map(|(_, id, name, args)| {
                            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
                        })
                        .collect();
                    message["tool_calls"] = Value::Array(calls);
                }
                json!({"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason.unwrap_or(Value::Null)}]})
            }
            Provider::Responses => match self.completed {
                Some(r)
                    if r.get("output")
                        .is_some_and(|o| o.as_array().is_some_and(|a| !a.is_empty())) =>
                {
                    r
                }
                other => {
                    let mut items = self.items;
                    items.sort_by_key(|(i, _)| *i);
                    let mut r = other.unwrap_or_else(|| json!({"object": "response"}));
                    r["output"] = Value::Array(items.into_iter().map(|(_, item)| item).collect());
                    r
                }
            },
            Provider::Anthropic => {
                let mut message = self
                    .message
                    .unwrap_or_else(|| json!({"type": "message", "role": "assistant"}));
                let mut blocks = self.blocks;
                blocks.sort_by_key(|(i, _, _)| *i);
                let content: Vec<Value> = blocks
                    .into_iter()
                    .map(|(_, mut block, json_text)| {
                        if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                            block["input"] = if json_text.trim().is_empty() {
                                block.get("input").cloned().unwrap_or_else(|| json!({}))
                            } else {
                                // Broken JSON stays text, so the engine's repair sees it.
                                serde_json::from_str(&json_text).unwrap_or(Value::String(json_text))
                            };
                        }
                        block
                    })
                    .collect();
                message["content"] = Value::Array(content);
                for (k, v) in self.stop {
                    message[k.as_str()] = v;
                }
                message
            }
            Provider::Gemini => {
                let mut chunk = self.last_chunk.unwrap_or_else(|| json!({"candidates": [{}]}));
                let role = chunk
                    .pointer("/candidates/0/content/role")
                    .cloned()
                    .unwrap_or_else(|| json!("model"));
                chunk["candidates"][0]["content"] = json!({"role": role, "parts": self.parts});
                chunk
            }
        })
    }
}

fn clip(s: &str) -> String {
    let cut: String = s.chars().take(120).collect();
    if cut.len() < s.len() { format!("{cut}…") } else { cut }
}
