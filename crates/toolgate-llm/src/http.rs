//! A model over HTTP: the request sent, the answer read (whole or streamed), 429 and 5xx retried
//! with backoff honouring `Retry-After`, and every exchange optionally recorded to a cassette.

use crate::cassette::Recorder;
use crate::provider::{Assembler, Provider, Shape, WireRequest, error_summary};
use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;
use toolgate_core::{Answer, Format, Model, ModelError, ModelErrorKind, ModelRequest};

/// The largest error body read, and the largest whole answer.
const MAX_ERROR_BODY: usize = 64 << 10;
const MAX_ANSWER: usize = 32 << 20;

/// How failed requests are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (at least 1).
    pub attempts: u32,
    /// The first backoff bound; it doubles per attempt.
    pub base: Duration,
    /// The largest backoff.
    pub cap: Duration,
    /// A `Retry-After` longer than this is not waited for: the call fails at once.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// One attempt's failure: retried (after the server's delay, when it gave one) or final.
enum Failure {
    Retry(ModelError, Option<Duration>),
    Final(ModelError),
}

/// A model reached over HTTP.
pub struct HttpModel {
    pub(crate) shape: Shape,
    key: Option<String>,
    client: reqwest::Client,
    retry: RetryPolicy,
    recorder: Option<Arc<Recorder>>,
}

impl HttpModel {
    /// A model with this request shape, key, client and retry policy.
    pub(crate) fn new(
        shape: Shape,
        key: Option<String>,
        client: reqwest::Client,
        retry: RetryPolicy,
        recorder: Option<Arc<Recorder>>,
    ) -> Self {
        Self {
            shape,
            key,
            client,
            retry,
            recorder,
        }
    }

    fn provider(&self) -> Provider {
        self.shape.provider
    }

    async fn attempt(&self, wire: &WireRequest) -> Result<Value, Failure> {
        let mut builder = self.client.post(&wire.url).json(&wire.body);
        for (k, v) in &wire.headers {
            builder = builder.header(*k, v);
        }
        if let Some(key) = &self.key {
            builder = match self.provider() {
                Provider::Anthropic => builder.header("x-api-key", key),
                Provider::Gemini => builder.header("x-goog-api-key", key),
                _ => builder.bearer_auth(key),
            };
        }
        let p = self.provider();
        let response = builder.send().await.map_err(|e| {
            Failure::Retry(
                ModelError::new(
                    ModelErrorKind::Network,
                    format!("{p}: cannot reach {}: {}", wire.url, describe(&e)),
                ),
                None,
            )
        })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let body = read_capped(response, MAX_ERROR_BODY).await.unwrap_or_default();
            let summary = error_summary(&String::from_utf8_lossy(&body));
            let code = status.as_u16();
            let message = format!("{p}: HTTP {code}: {summary}");
            return Err(match code {
                429 => Failure::Retry(ModelError::new(ModelErrorKind::RateLimited, message), retry_after),
                408 => Failure::Retry(ModelError::new(ModelErrorKind::Network, message), retry_after),
                500..=599 => Failure::Retry(ModelError::new(ModelErrorKind::Server, message), retry_after),
                401 | 403 => Failure::Final(ModelError::new(ModelErrorKind::Auth, message)),
                _ => Failure::Final(ModelError::new(ModelErrorKind::BadRequest, message)),
            });
        }
        let streamed = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if streamed {
            let mut assembler = Assembler::new(p);
            let mut events = response.bytes_stream().eventsource();
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| {
                    Failure::Retry(
                        ModelError::new(ModelErrorKind::Network, format!("{p}: the answer stream broke: {e}")),
                        None,
                    )
                })?;
                assembler.push(&event.event, &event.data).map_err(|e| match e.kind {
                    ModelErrorKind::Server => Failure::Retry(e, None),
                    _ => Failure::Final(e),
                })?;
            }
            return assembler.finish().map_err(|e| Failure::Retry(e, None));
        }
        let body = read_capped(response, MAX_ANSWER).await.map_err(|e| {
            Failure::Retry(
                ModelError::new(ModelErrorKind::Network, format!("{p}: the answer broke off: {e}")),
                None,
            )
        })?;
        serde_json::from_slice(&body).map_err(|e| {
            Failure::Final(ModelError::new(
                ModelErrorKind::InvalidResponse,
                format!("{p}: the answer is not JSON: {e}"),
            ))
        })
    }

    /// Sends the request, retrying what may be retried; the answer's body on success.
    async fn send(&self, wire: &WireRequest, cancel: &CancellationToken) -> Result<Value, ModelError> {
        let attempts = self.retry.attempts.max(1);
        let mut attempt = 1;
        loop {
            let failure = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ModelError::new(ModelErrorKind::Canceled, "canceled")),
                r = self.attempt(wire) => match r {
                    Ok(body) => return Ok(body),
                    Err(f) => f,
                },
            };
            let (error, after) = match failure {
                Failure::Final(e) => return Err(e),
                Failure::Retry(e, after) => (e, after),
            };
            if attempt >= attempts {
                return Err(ModelError::new(
                    error.kind,
                    format!("{} (after {attempt} attempts)", error.message),
                ));
            }
            let delay = match after {
                Some(d) if d > self.retry.max_retry_after => {
                    return Err(ModelError::new(
                        error.kind,
                        format!(
                            "{} (the server asked to retry after {} s, more than the {} s toolgate waits)",
                            error.message,
                            d.as_secs(),
                            self.retry.max_retry_after.as_secs()
                        ),
                    ));
                }
                Some(d) => d,
                None => backoff(&self.retry, attempt),
            };
            tracing::warn!(attempt, delay_ms = delay.as_millis() as u64, error = %error.message, "model call failed; retrying");
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ModelError::new(ModelErrorKind::Canceled, "canceled")),
                () = tokio::time::sleep(delay) => {}
            }
            attempt += 1;
        }
    }
}

#[async_trait]
impl Model for HttpModel {
    fn format(&self) -> Format {
        self.shape.format()
    }

    fn describe(&self) -> String {
        format!("{}:{}", self.shape.provider, self.shape.model)
    }

    async fn complete(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<Answer, ModelError> {
        if self.key.is_none() && self.provider().key_required() {
            return Err(ModelError::new(
                ModelErrorKind::Auth,
                format!(
                    "{}: no API key: set {}",
                    self.provider(),
                    self.provider().key_variables().join(" or ")
                ),
            ));
        }
        let wire = self.shape.request(request);
        let result = self.send(&wire, cancel).await;
        if let Some(recorder) = &self.recorder
            && !matches!(&result, Err(e) if e.kind == ModelErrorKind::Canceled)
        {
            recorder.record(&wire, &result);
        }
        self.shape.answer(&result?)
    }
}

/// Exponential backoff with full jitter: a random delay under `base * 2^(attempt-1)`, capped.
fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let bound = policy
        .base
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(policy.cap);
    let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(ms / 2 + fastrand::u64(0..=ms / 2))
}

/// `Retry-After` (seconds or an HTTP date), or the OpenAI-style `retry-after-ms`.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_millis(ms as u64));
    }
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(when.duration_since(SystemTime::now()).unwrap_or_default())
}

async fn read_capped(response: reqwest::Response, cap: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| describe(&e))?;
        if out.len() + chunk.len() > cap {
            return Err(format!("the body is larger than {} KiB", cap >> 10));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A reqwest error with its causes, on one line.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        h.insert("retry-after", later.parse().unwrap());
        let d = retry_after(&h).unwrap();
        assert!(d > Duration::from_secs(27) && d <= Duration::from_secs(30), "{d:?}");
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        for attempt in 1..20 {
            let d = backoff(&p, attempt);
            assert!(d <= p.cap, "{d:?}");
        }
        assert!(backoff(&p, 1) <= p.base);
    }
}
