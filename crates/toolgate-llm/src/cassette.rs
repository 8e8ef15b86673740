//! Record and replay: a cassette is JSON lines — a header naming the provider and model, then one
//! line per model call with the request sent (credentials stripped) and the answer or error.
//! Replay rebuilds every request with the provider's own request builder, checks it against the
//! recorded one, and plays the recorded answer back, with no network.

use crate::provider::{Provider, Shape, WireRequest};
use async_trait::async_trait;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;
use toolgate_core::{Answer, Format, Model, ModelError, ModelErrorKind, ModelRequest};

/// The cassette format's version.
const VERSION: u64 = 1;

/// Header names whose values are credentials.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "proxy-authorization",
];

/// Writes one line per model call to a cassette file.
pub struct Recorder {
    file: Mutex<std::io::BufWriter<std::fs::File>>,
    path: PathBuf,
}

impl Recorder {
    /// Creates (or truncates) the cassette and writes its header.
    pub fn create(path: &Path, shape: &Shape) -> Result<Self, ModelError> {
        let fail = |e: std::io::Error| {
            ModelError::new(
                ModelErrorKind::Config,
                format!("cannot write the cassette {}: {e}", path.display()),
            )
        };
        let file = std::fs::File::create(path).map_err(fail)?;
        let mut w = std::io::BufWriter::new(file);
        let header = json!({
            "toolgate_cassette": VERSION,
            "provider": shape.provider.as_str(),
            "model": shape.model,
            "format": shape.format().as_str(),
            "native_tools": shape.native_tools,
            "stream": shape.stream,
            "max_tokens": shape.max_tokens,
            "dialect": shape.dialect.as_str(),
        });
        writeln!(w, "{header}").and_then(|()| w.flush()).map_err(fail)?;
        Ok(Self {
            file: Mutex::new(w),
            path: path.to_owned(),
        })
    }

    /// Appends one exchange; a write failure is logged, never fatal to the run.
    pub(crate) fn record(&self, wire: &WireRequest, result: &Result<Value, ModelError>) {
        let headers: Map<String, Value> = wire
            .headers
            .iter()
            .filter(|(k, _)| !SECRET_HEADERS.contains(&k.to_ascii_lowercase().as_str()))
            .map(|(k, v)| ((*k).to_owned(), Value::String(v.clone())))
            .collect();
        let response = match result {
            Ok(body) => json!({"status": 200, "body": body}),
            Err(e) => json!({"error": {"kind": e.kind.as_str(), "message": e.message}}),
        };
        let line = json!({
            "request": {"method": "POST", "url": strip_url(&wire.url), "headers": headers, "body": wire.body},
            "response": response,
        });
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = writeln!(file, "{line}").and_then(|()| file.flush()) {
            tracing::warn!(error = %e, path = %self.path.display(), "cannot write to the cassette");
        }
    }
}

/// A URL with credential query parameters (`key=`, `api_key=`, …) removed.
pub fn strip_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return url.split('?').next().unwrap_or_default().to_owned();
    };
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !(k == "key" || k.contains("api_key") || k.contains("apikey") || k.contains("token"))
        })
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(kept);
    }
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    parsed.to_string()
}

/// How strictly a replay checks requests.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayOptions {
    /// Tool results may differ from the recorded ones (timings, paths).
    pub ignore_tool_results: bool,
}

struct Exchange {
    line: usize,
    request: Value,
    response: Value,
}

/// A model that plays a cassette back.
pub struct Replay {
    shape: Shape,
    path: PathBuf,
    exchanges: Mutex<(usize, VecDeque<Exchange>)>,
    options: ReplayOptions,
}

impl Replay {
    /// Reads a cassette. The header may itself ask for `"ignore_tool_results": true`.
    pub fn open(path: &Path, options: ReplayOptions) -> Result<Self, ModelError> {
        let bad = |line: usize, what: String| {
            ModelError::new(
                ModelErrorKind::Config,
                format!("{}:{line}: not a toolgate cassette: {what}", path.display()),
            )
        };
        let file = std::fs::File::open(path).map_err(|e| {
            ModelError::new(
                ModelErrorKind::Config,
                format!("cannot read the cassette {}: {e}", path.display()),
            )
        })?;
        let mut lines = std::io::BufReader::new(file).lines().enumerate();
        let (_, first) = lines.next().ok_or_else(|| bad(1, "the file is empty".into()))?;
        let first = first.map_err(|e| bad(1, e.to_string()))?;
        let header: Value = serde_json::from_str(&first).map_err(|e| bad(1, e.to_string()))?;
        if header.get("toolgate_cassette").and_then(Value::as_u64) != Some(VERSION) {
            return Err(bad(1, format!("the header has no \"toolgate_cassette\": {VERSION}")));
        }
        let text = |k: &str| header.get(k).and_then(Value::as_str);
        let provider: Provider = text("provider")
            .ok_or_else(|| bad(1, "the header names no provider".into()))?
            .parse()
            .map_err(|e: String| bad(1, e))?;
        let shape = Shape {
            provider,
            model: text("model").unwrap_or_default().to_owned(),
            base_url: String::new(),
            stream: header.get("stream").and_then(Value::as_bool).unwrap_or(false),
            native_tools: header.get("native_tools").and_then(Value::as_bool).unwrap_or(true),
            max_tokens: header
                .get("max_tokens")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(4096),
            dialect: text("dialect").and_then(|d| d.parse().ok()).unwrap_or_default(),
        };
        let mut exchanges = VecDeque::new();
        for (i, line) in lines {
            let line = line.map_err(|e| bad(i + 1, e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let mut v: Value = serde_json::from_str(&line).map_err(|e| bad(i + 1, e.to_string()))?;
            let request = v.pointer_mut("/request/body").map(Value::take);
            let response = v.get_mut("response").map(Value::take);
            match (request, response) {
                (Some(request), Some(response)) => exchanges.push_back(Exchange {
                    line: i + 1,
                    request,
                    response,
                }),
                _ => return Err(bad(i + 1, "a line without request.body and response".into())),
            }
        }
        let options = ReplayOptions {
            ignore_tool_results: options.ignore_tool_results
                || header.get("ignore_tool_results").and_then(Value::as_bool) == Some(true),
        };
        Ok(Self {
            shape,
            path: path.to_owned(),
            exchanges: Mutex::new((0, exchanges)),
            options,
        })
    }

    /// The user's first prompt in the recording (to replay a run without typing it again).
    pub fn recorded_prompt(&self) -> Option<String> {
        let guard = self.exchanges.lock().unwrap_or_else(|p| p.into_inner());
        let body = &guard.1.front()?.request;
        let list = ["messages", "input", "contents"]
            .iter()
            .find_map(|k| body.get(*k).and_then(Value::as_array))?;
        let first = list
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
        match first.get("content").or_else(|| first.get("parts")) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .find_map(|b| b.get("text").and_then(Value::as_str).map(str::to_owned)),
            _ => None,
        }
    }
}

#[async_trait]
impl Model for Replay {
    fn format(&self) -> Format {
        self.shape.format()
    }

    fn describe(&self) -> String {
        format!("replay:{}:{}", self.shape.provider, self.shape.model)
    }

    async fn complete(&self, request: &ModelRequest, _: &CancellationToken) -> Result<Answer, ModelError> {
        let wire = self.shape.request(request);
        let (n, exchange) = {
            let mut guard = self.exchanges.lock().unwrap_or_else(|p| p.into_inner());
            guard.0 += 1;
            (guard.0, guard.1.pop_front())
        };
        let Some(exchange) = exchange else {
            return Err(ModelError::new(
                ModelErrorKind::Replay,
                format!(
                    "the cassette {} has no answer for model call {n}: the conversation went further than the recording",
                    self.path.display()
                ),
            ));
        };
        let recorded = normalize(&exchange.request, self.options);
        let now = normalize(&wire.body, self.options);
        let mut differences = Vec::new();
        diff("", &recorded, &now, &mut differences);
        if !differences.is_empty() {
            let shown = differences.len().min(5);
            return Err(ModelError::new(
                ModelErrorKind::Replay,
                format!(
                    "the conversation diverged from the cassette {} at model call {n} (line {}): {}{}",
                    self.path.display(),
                    exchange.line,
                    differences[..shown].join("; "),
                    if differences.len() > shown {
                        format!("; and {} more differences", differences.len() - shown)
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        if let Some(err) = exchange.response.get("error") {
            let kind = err.get("kind").and_then(Value::as_str).unwrap_or_default();
            let message = err.get("message").and_then(Value::as_str).unwrap_or("recorded error");
            return Err(ModelError::new(kind_from_str(kind), message));
        }
        let body = exchange.response.get("body").ok_or_else(|| {
            ModelError::new(
                ModelErrorKind::Replay,
                format!("{}:{}: the response has no body", self.path.display(), exchange.line),
            )
        })?;
        self.shape.answer(body)
    }
}

fn kind_from_str(s: &str) -> ModelErrorKind {
    match s {
        "auth" => ModelErrorKind::Auth,
        "rate_limited" => ModelErrorKind::RateLimited,
        "server_error" => ModelErrorKind::Server,
        "bad_request" => ModelErrorKind::BadRequest,
        "network" => ModelErrorKind::Network,
        "invalid_response" => ModelErrorKind::InvalidResponse,
        "config" => ModelErrorKind::Config,
        "canceled" => ModelErrorKind::Canceled,
        _ => ModelErrorKind::Replay,
    }
}

/// A request body as compared: streaming switches dropped, generated ids numbered by first
/// appearance, and tool results blanked when they may differ.
fn normalize(body: &Value, options: ReplayOptions) -> Value {
    let mut v = body.clone();
    if let Value::Object(o) = &mut v {
        o.remove("stream");
        o.remove("stream_options");
    }
    let mut ids = HashMap::new();
    walk(&mut v, &mut ids, options);
    v
}

fn walk(v: &mut Value, ids: &mut HashMap<String, usize>, options: ReplayOptions) {
    match v {
        Value::String(s) if is_uuid(s) => {
            let n = ids.len();
            let n = *ids.entry(s.clone()).or_insert(n);
            *s = format!("<generated id {n}>");
        }
        Value::Array(items) => items.iter_mut().for_each(|i| walk(i, ids, options)),
        Value::Object(o) => {
            if options.ignore_tool_results {
                blank_result(o);
            } else {
                steady_result(o);
            }
            o.values_mut().for_each(|i| walk(i, ids, options));
        }
        _ => {}
    }
}

/// Fields of a tool result that differ from run to run, whatever the tool did: timings, and
/// what the machine's sandbox could enforce.
const RUN_DEPENDENT: &[&str] = &["duration_ms", "waiting_ms", "running_ms", "elapsed_ms"];
const MACHINE_DEPENDENT: &[&str] = &["sandbox"];

/// A tool result's text with its run-dependent fields normalised, so a replay compares what
/// the tools did (a refused write, a failed command) and stops when it differs.
fn steady_result(o: &mut Map<String, Value>) {
    let role = o.get("role").and_then(Value::as_str).map(str::to_owned);
    let kind = o.get("type").and_then(Value::as_str).map(str::to_owned);
    let key = match (role.as_deref(), kind.as_deref()) {
        (Some("tool"), _) | (_, Some("tool_result")) => "content",
        (_, Some("function_call_output")) => "output",
        _ => {
            if let Some(Value::Object(fr)) = o.get_mut("functionResponse")
                && let Some(response) = fr.get_mut("response")
            {
                steady_value(response);
            }
            return;
        }
    };
    match o.get_mut(key) {
        Some(Value::String(text)) => {
            if let Ok(mut v) = serde_json::from_str::<Value>(text) {
                steady_value(&mut v);
                *text = v.to_string();
            }
        }
        Some(other) => steady_value(other),
        None => {}
    }
}

fn steady_value(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.retain(|k, _| !MACHINE_DEPENDENT.contains(&k.as_str()));
            for (k, x) in o.iter_mut() {
                if RUN_DEPENDENT.contains(&k.as_str()) {
                    *x = json!("<run-dependent>");
                } else {
                    steady_value(x);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(steady_value),
        Value::String(text) if text.starts_with('{') => {
            if let Ok(mut inner) = serde_json::from_str::<Value>(text) {
                steady_value(&mut inner);
                *text = inner.to_string();
            }
        }
        _ => {}
    }
}

/// Blanks the content of a tool result in any provider's shape.
fn blank_result(o: &mut Map<String, Value>) {
    const BLANK: &str = "<tool result>";
    let role = o.get("role").and_then(Value::as_str).map(str::to_owned);
    let kind = o.get("type").and_then(Value::as_str).map(str::to_owned);
    let (role, kind) = (role.as_deref(), kind.as_deref());
    if role == Some("tool") {
        o.insert("content".into(), json!(BLANK));
    } else if kind == Some("function_call_output") {
        o.insert("output".into(), json!(BLANK));
    } else if kind == Some("tool_result") {
        o.insert("content".into(), json!(BLANK));
    } else if let Some(Value::Object(fr)) = o.get_mut("functionResponse") {
        fr.insert("response".into(), json!(BLANK));
    } else if role == Some("user")
        && let Some(Value::String(c)) = o.get_mut("content")
        && c.starts_with("[TOOL RESULT:")
    {
        let head = c.lines().next().unwrap_or_default().to_owned();
        *c = format!("{head}\n{BLANK}");
    }
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Lists where two JSON values differ, by JSON pointer, with both values clipped.
fn diff(path: &str, recorded: &Value, now: &Value, out: &mut Vec<String>) {
    match (recorded, now) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let p = format!("{path}/{k}");
                match b.get(k) {
                    Some(vb) => diff(&p, va, vb, out),
                    None => out.push(format!("{p}: recorded {}, now missing", clip(va))),
                }
            }
            for (k, vb) in b {
                if !a.contains_key(k) {
                    out.push(format!("{path}/{k}: not recorded, now {}", clip(vb)));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}/{i}"), va, vb, out);
            }
            if a.len() != b.len() {
                out.push(format!("{path}: recorded {} items, now {}", a.len(), b.len()));
            }
        }
        (a, b) if a != b => out.push(format!(
            "{}: recorded {}, now {}",
            if path.is_empty() { "/" } else { path },
            clip(a),
            clip(b)
        )),
        _ => {}
    }
}

fn clip(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        let head: String = s.chars().take(80).collect();
        format!("{head}…")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_urls() {
        assert_eq!(
            strip_url("https://g.example/v1beta/models/m:generateContent?key=SECRET&alt=sse"),
            "https://g.example/v1beta/models/m:generateContent?alt=sse"
        );
        assert_eq!(strip_url("https://u:p@x.example/v1?api_key=1"), "https://x.example/v1");
    }

    #[test]
    fn generated_ids_compare_by_position_and_results_can_be_ignored() {
        let a = json!({"contents": [{"parts": [{"functionCall": {"id": "0190f3a2-0000-7000-8000-000000000001", "name": "f"}}]},
                                    {"parts": [{"functionResponse": {"id": "0190f3a2-0000-7000-8000-000000000001", "response": {"result": 1}}}]}]});
        let b = json!({"contents": [{"parts": [{"functionCall": {"id": "0190f3a2-0000-7000-8000-0000000000ff", "name": "f"}}]},
                                    {"parts": [{"functionResponse": {"id": "0190f3a2-0000-7000-8000-0000000000ff", "response": {"result": 2}}}]}]});
        let strict = ReplayOptions::default();
        let mut out = Vec::new();
        diff("", &normalize(&a, strict), &normalize(&b, strict), &mut out);
        assert_eq!(
            out,
            vec!["/contents/1/parts/0/functionResponse/response/result: recorded 1, now 2"]
        );
        let loose = ReplayOptions {
            ignore_tool_results: true,
        };
        out.clear();
        diff("", &normalize(&a, loose), &normalize(&b, loose), &mut out);
        assert!(out.is_empty(), "{out:?}");
    }
}
