//! toolgate's model adapters: each speaks its provider's documented wire format over HTTP
//! (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini `generateContent`, and
//! any OpenAI-compatible server by base URL), streams answers and assembles them into whole
//! calls, retries 429 and 5xx honouring `Retry-After`, and records to or replays from cassettes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolgate_core::ModelError> {
//! let model = toolgate_llm::connect("anthropic:claude-sonnet-4-5", &toolgate_llm::ModelOptions::default())?;
//! # let _ = model; Ok(()) }
//! ```

pub mod cassette;
mod http;
pub mod provider;

pub use cassette::{Recorder, Replay, ReplayOptions};
pub use http::{HttpModel, RetryPolicy};
pub use provider::{Provider, Shape};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::{Model, ModelError, ModelErrorKind};

/// How to reach a model; every field has a default.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// The server's base URL (default: the provider's, or its environment variable).
    pub base_url: Option<String>,
    /// The API key (default: the provider's environment variable).
    pub api_key: Option<String>,
    /// Stream answers over SSE (default true).
    pub stream: bool,
    /// Native tool calling (default true); false uses the text fallback on Chat-style servers.
    pub native_tools: bool,
    /// Anthropic's `max_tokens` (default 4096).
    pub max_tokens: u32,
    /// Retries of 429, 5xx and broken connections.
    pub retry: RetryPolicy,
    /// The whole time one HTTP request may take (default 10 minutes).
    pub request_timeout: Duration,
    /// Time to connect (default 10 s).
    pub connect_timeout: Duration,
    /// Record every model call to this cassette.
    pub record: Option<PathBuf>,
    /// How calls written in text are read (default: found from the text).
    pub dialect: toolgate_core::formats::Dialect,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            stream: true,
            native_tools: true,
            max_tokens: 4096,
            retry: RetryPolicy::default(),
            request_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            record: None,
            dialect: toolgate_core::formats::Dialect::Auto,
        }
    }
}

/// Splits `PROVIDER:MODEL` (`openai:gpt-4.1`, `ollama:qwen2.5`, `openai-compat:NAME`).
pub fn parse_spec(spec: &str) -> Result<(Provider, String), ModelError> {
    let config = |m: String| ModelError::new(ModelErrorKind::Config, m);
    let (provider, model) = spec.split_once(':').ok_or_else(|| {
        config(format!(
            "the model {spec:?} must be PROVIDER:MODEL, such as openai:gpt-4.1, anthropic:claude-sonnet-4-5 or ollama:qwen2.5"
        ))
    })?;
    let provider: Provider = provider.trim().parse().map_err(config)?;
    let model = model.trim();
    if model.is_empty() {
        return Err(config(format!("the model {spec:?} names no model after the provider")));
    }
    Ok((provider, model.to_owned()))
}

/// A model for `PROVIDER:MODEL`.
pub fn connect(spec: &str, options: &ModelOptions) -> Result<Arc<dyn Model>, ModelError> {
    let (provider, model) = parse_spec(spec)?;
    let config = |m: String| ModelError::new(ModelErrorKind::Config, m);
    let base_url = match options.base_url.clone().or_else(|| provider.default_base_url()) {
        Some(b) => b,
        None => {
            return Err(config(format!(
                "{provider} needs --base-url (the server's OpenAI-compatible URL, such as http://127.0.0.1:8000/v1)"
            )));
        }
    };
    let parsed =
        url::Url::parse(&base_url).map_err(|e| config(format!("the base URL {base_url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(config(format!("the base URL {base_url:?} must be http or https")));
    }
    if !options.native_tools && !provider.chat_wire() {
        return Err(config(format!(
            "the text fallback (no native tools) is for Chat-style servers; {provider} has native tools"
        )));
    }
    let key = options.api_key.clone().or_else(|| {
        provider
            .key_variables()
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
    });
    let shape = Shape {
        provider,
        model,
        base_url: base_url.trim_end_matches('/').to_owned(),
        stream: options.stream,
        native_tools: options.native_tools,
        max_tokens: options.max_tokens,
        dialect: options.dialect,
    };
    // No system proxy: a proxy would see the conversation and the key.
    let client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(options.connect_timeout)
        .timeout(options.request_timeout)
        .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| config(format!("cannot build the HTTP client: {e}")))?;
    let recorder = match &options.record {
        Some(path) => Some(Arc::new(Recorder::create(path, &shape)?)),
        None => None,
    };
    Ok(Arc::new(HttpModel::new(shape, key, client, options.retry, recorder)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_a_provider_and_a_model() {
        assert_eq!(
            parse_spec("openai:gpt-4.1").unwrap(),
            (Provider::Openai, "gpt-4.1".into())
        );
        assert_eq!(
            parse_spec("ollama:qwen2.5:7b").unwrap(),
            (Provider::Ollama, "qwen2.5:7b".into())
        );
        assert!(parse_spec("gpt-4.1").unwrap_err().message.contains("PROVIDER:MODEL"));
        assert!(
            parse_spec("mistral:x")
                .unwrap_err()
                .message
                .contains("unknown model provider")
        );
        assert!(parse_spec("openai:").unwrap_err().message.contains("no model"));
    }

    #[test]
    fn a_compatible_server_needs_a_base_url() {
        let e = connect("openai-compat:local", &ModelOptions::default()).err().unwrap();
        assert!(e.message.contains("--base-url"), "{e}");
        let e = connect(
            "openai-compat:local",
            &ModelOptions {
                base_url: Some("ftp://x".into()),
                ..ModelOptions::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.message.contains("http or https"), "{e}");
    }
}
