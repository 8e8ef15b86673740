//! `fetch_url`: an HTTP(S) GET returning text — HTML as readable markdown, JSON pretty-printed,
//! other text as it is, anything else described rather than dumped — behind the SSRF guard of
//! [`crate::netguard`], with limits on size (cut while reading), time and redirects.
//!
//! A redirect to another host is not followed: the result names the target, and the model's
//! next call for it is decided by the permission rules like any other.

use crate::netguard::Guard;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::ToolError;
use toolgate_core::tool::{
    Annotations, CacheScope, CacheSpec, PermissionSubject, ToolContext, ToolOutput, ToolSpec, TypedTool, Vetted,
};

/// `fetch_url` settings (`[fetch]` in the configuration).
#[derive(Clone, Debug)]
pub struct FetchConfig {
    /// The guard: private networks, exceptions.
    pub guard: Guard,
    /// Bytes of body read at most; the rest is cut while reading.
    pub max_bytes: usize,
    /// The whole request, connection to last byte.
    pub timeout: Duration,
    /// Redirects followed at most (same host only).
    pub max_redirects: usize,
    /// How long an answer stays in the session's cache.
    pub cache_ttl: Duration,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            guard: Guard::default(),
            max_bytes: 2 << 20,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
            cache_ttl: Duration::from_secs(300),
        }
    }
}

/// Arguments of `fetch_url`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchUrlArgs {
    /// The http or https URL to GET.
    pub url: String,
}

/// The tool.
pub struct FetchUrl {
    config: FetchConfig,
    /// Built on first use (loading the system's certificates takes milliseconds).
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
    guard: Arc<Guard>,
}

impl std::fmt::Debug for FetchUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchUrl").field("config", &self.config).finish()
    }
}

/// Resolves names with the system resolver and lets through only addresses the guard allows:
/// the addresses checked are the ones connected to, so a name cannot rebind in between.
struct GuardedResolver(Arc<Guard>);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            guard.check_resolved(&host, &addrs)?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// Why a request failed, in one line, with the guard's refusal when it was the guard.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if s_text.starts_with("refused:") {
            return s_text;
        }
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

impl FetchUrl {
    /// A `fetch_url` with these settings.
    pub fn new(config: FetchConfig) -> Self {
        Self {
            guard: Arc::new(config.guard.clone()),
            config,
            client: std::sync::OnceLock::new(),
        }
    }

    fn client(&self) -> Result<&reqwest::Client, ToolError> {
        self.client
            .get_or_init(|| self.build_client())
            .as_ref()
            .map_err(|e| ToolError::failed(e.clone()))
    }

    fn build_client(&self) -> Result<reqwest::Client, String> {
        let hop_guard = self.guard.clone();
        let max_redirects = self.config.max_redirects;
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                return attempt.error(format!("stopped after {max_redirects} redirects"));
            }
            if let Err(refusal) = hop_guard.check_url(attempt.url()) {
                return attempt.error(refusal);
            }
            let first = attempt
                .previous()
                .first()
                .map(|u| (u.host_str().map(str::to_owned), u.port_or_known_default()));
            let here = (
                attempt.url().host_str().map(str::to_owned),
                attempt.url().port_or_known_default(),
            );
            if first.is_some_and(|f| f != here) {
                // Another host: the model gets the target and decides; the rules decide again.
                return attempt.stop();
            }
            attempt.follow()
        });
        reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver(self.guard.clone())))
            .redirect(redirects)
            .timeout(self.config.timeout)
            .connect_timeout(self.config.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION"), " (fetch_url)"))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }

    async fn fetch(&self, url: url::Url) -> Result<Value, ToolError> {
        self.guard.check_url(&url).map_err(ToolError::failed)?;
        let response = self.client()?.get(url.clone()).send().await.map_err(|e| classify(&e))?;
        let status = response.status();
        let final_url = response.url().clone();
        if status.is_redirection() {
            let target = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| final_url.join(l).ok());
            // A target the guard refuses is refused here too, not offered to the model.
            if let Some(Err(refusal)) = target.as_ref().map(|t| self.guard.check_url(t)) {
                return Err(ToolError::failed(refusal));
            }
            return Ok(json!({
                "url": final_url.as_str(),
                "status": status.as_u16(),
                "redirect_to": target.as_ref().map(url::Url::as_str),
                "content": format!(
                    "The server redirects to another host{}. It was not followed: call fetch_url with that URL if it is what you want (it is decided by the permission rules again).",
                    target.as_ref().map(|t| format!(" ({t})")).unwrap_or_default()
                ),
            }));
        }
        if status.as_u16() == 429 || status.is_server_error() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            return Err(ToolError::Retryable {
                message: format!("{final_url} answered {status}"),
                retry_after,
            });
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let length = response.content_length();
        let kind = Kind::of(&content_type);
        if kind == Kind::Binary {
            return Ok(json!({
                "url": final_url.as_str(),
                "status": status.as_u16(),
                "content_type": content_type,
                "content": format!(
                    "A {} response{} that is not text; its content is not shown.",
                    if content_type.is_empty() { "typeless" } else { content_type.as_str() },
                    length.map(|l| format!(" of {l} bytes")).unwrap_or_default()
                ),
            }));
        }
        let (body, truncated) = read_capped(response, self.config.max_bytes).await?;
        let text = decode(&body, &content_type);
        let content = match kind {
            Kind::Html => html_to_markdown(&text),
            Kind::Json => match serde_json::from_str::<Value>(&text) {
                Ok(v) if !truncated => serde_json::to_string_pretty(&v).unwrap_or(text),
                _ => text,
            },
            _ => text,
        };
        Ok(json!({
            "url": final_url.as_str(),
            "status": status.as_u16(),
            "content_type": content_type,
            "bytes": body.len(),
            "truncated": truncated,
            "content": content,
        }))
    }
}

fn classify(e: &reqwest::Error) -> ToolError {
    let text = describe(e);
    if text.starts_with("refused:") || e.is_redirect() || e.is_builder() {
        ToolError::failed(text)
    } else if e.is_timeout() || e.is_connect() {
        ToolError::retryable(text)
    } else {
        ToolError::failed(text)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Html,
    Json,
    Text,
    Binary,
}

impl Kind {
    fn of(content_type: &str) -> Self {
        let mime = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match mime.as_str() {
            "text/html" | "application/xhtml+xml" => Self::Html,
            "application/json" => Self::Json,
            m if m.ends_with("+json") => Self::Json,
            "" => Self::Text,
            m if m.starts_with("text/")
                || m.ends_with("+xml")
                || matches!(
                    m,
                    "application/xml"
                        | "application/javascript"
                        | "application/x-yaml"
                        | "application/yaml"
                        | "application/toml"
                ) =>
            {
                Self::Text
            }
            _ => Self::Binary,
        }
    }
}

/// Reads at most `cap` bytes of the body, stopping (and dropping the connection) beyond it.
async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<(Vec<u8>, bool), ToolError> {
    let mut body = Vec::with_capacity(cap.min(response.content_length().unwrap_or(16 << 10) as usize));
    while let Some(chunk) = response.chunk().await.map_err(|e| classify(&e))? {
        let room = cap - body.len();
        if chunk.len() >= room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// The body as text in its declared charset (UTF-8 otherwise); invalid bytes become U+FFFD.
fn decode(body: &[u8], content_type: &str) -> String {
    let label = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("charset="))
        .next()
        .map(|c| c.trim_matches('"'));
    let encoding = label
        .and_then(|l| encoding_rs::Encoding::for_label(l.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    encoding.decode(body).0.into_owned()
}

fn html_to_markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "iframe", "svg", "head", "nav", "footer",
        ])
        .build();
    match converter.convert(html) {
        Ok(md) => md.trim().to_owned(),
        Err(_) => html.to_owned(),
    }
}

#[async_trait]
impl TypedTool for FetchUrl {
    type Args = FetchUrlArgs;
    fn name(&self) -> &str {
        "fetch_url"
    }
    fn description(&self) -> &str {
        "GET an http(s) URL and return its content as text: HTML as markdown, JSON pretty-printed. Private and internal addresses are refused."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            subject: PermissionSubject::Url("url".into()),
            cache: Some(CacheSpec {
                scope: CacheScope::Session,
                ttl: self.config.cache_ttl,
            }),
            ..ToolSpec::with_annotations(Annotations {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: true,
            })
        }
    }
    /// The URL as the fetcher parses it is what the rules match (`http://[::1]:8\\@example.com/`
    /// is a request to `[::1]`, whatever a naive reading says), and the guard refuses an
    /// internal IP literal or name before anyone is asked, whatever a rule says.
    fn vet(&self, _workspace: &std::path::Path, args: &Value) -> Vetted {
        let text = args.get("url").and_then(Value::as_str).unwrap_or_default();
        let url = match url::Url::parse(text.trim()) {
            Ok(u) => u,
            Err(e) => return Vetted::refuse(format!("{text:?} is not a URL: {e}")),
        };
        match self.guard.check_url(&url) {
            Ok(()) => Vetted::resolved(url.as_str()),
            Err(why) => Vetted::refuse(why),
        }
    }
    async fn run(&self, ctx: &ToolContext, args: FetchUrlArgs) -> Result<ToolOutput, ToolError> {
        let url = url::Url::parse(args.url.trim())
            .map_err(|e| ToolError::InvalidArguments(format!("{:?} is not a URL: {e}", args.url)))?;
        tokio::select! {
            result = self.fetch(url) => result.map(ToolOutput::json),
            () = ctx.cancel.cancelled() => Err(ToolError::Canceled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve;
    use std::str::FromStr;

    /// A name (not on the refused-name list) is checked on what it resolves to.
    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_at_resolution() {
        let resolver = GuardedResolver(Arc::new(Guard::default()));
        let name = reqwest::dns::Name::from_str("localhost").unwrap();
        let e = match resolver.resolve(name).await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("localhost resolves to") && e.contains("allow_private_network"),
            "{e}"
        );
        let open = GuardedResolver(Arc::new(Guard {
            allow_private_network: true,
            ..Guard::default()
        }));
        let name = reqwest::dns::Name::from_str("localhost").unwrap();
        assert!(open.resolve(name).await.is_ok());
    }

    #[test]
    fn content_kinds() {
        assert_eq!(Kind::of("text/html; charset=utf-8"), Kind::Html);
        assert_eq!(Kind::of("application/problem+json"), Kind::Json);
        assert_eq!(Kind::of("text/plain"), Kind::Text);
        assert_eq!(Kind::of("image/png"), Kind::Binary);
        assert_eq!(Kind::of("application/octet-stream"), Kind::Binary);
        assert_eq!(decode(b"caf\xe9", "text/plain; charset=iso-8859-1"), "café");
    }
}
