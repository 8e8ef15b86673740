//! The web console at `/`: pending approvals pushed live (server-sent events) and answered with
//! the terminal approver's five answers, the journal live and searchable, the tools and upstream
//! servers. The page and its script and style are embedded (no build step, nothing fetched from
//! elsewhere: the page works offline).
//!
//! Security: the approver token is entered once and becomes an `HttpOnly`, `SameSite=Strict`
//! cookie (`Secure` behind a TLS-terminating proxy that says `X-Forwarded-Proto: https`), signed
//! with the token itself, so any replica sharing the token accepts it and a new token voids every
//! cookie. Every state-changing request needs `Content-Type: application/json` and the header
//! `X-Toolgate-Console: 1`, which a cross-site form cannot send; the gateway's Host and Origin
//! checks apply to every console route; the page forbids framing and scripts from anywhere else.

use crate::http::App;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolgate_core::SessionId;
use toolgate_core::store::JournalFilter;

const PAGE: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/console.js");
const STYLE: &str = include_str!("../console/console.css");

/// The cookie's name.
pub const COOKIE: &str = "toolgate_console";
/// How long a console login lasts.
const LOGIN_SECS: u64 = 12 * 3600;
/// How often the event stream looks at the queue and the journal (server side: the page itself
/// never polls).
const WATCH: Duration = Duration::from_millis(400);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the page.
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /console.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// HMAC-SHA-256 (RFC 2104) of `message` under `key`.
fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A cookie value valid until `expires` (Unix seconds).
fn sign(token: &str, expires: u64) -> String {
    format!(
        "v1.{expires}.{}",
        hex(&hmac(token.as_bytes(), format!("console|{expires}").as_bytes()))
    )
}

/// Whether the request carries a console cookie signed with `token` that has not expired.
pub fn logged_in(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = cookie(headers) else {
        return false;
    };
    let Some(expires) = value
        .strip_prefix("v1.")
        .and_then(|r| r.split('.').next())
        .and_then(|e| e.parse::<u64>().ok())
    else {
        return false;
    };
    expires > now_secs() && crate::http::same(sign(token, expires).as_bytes(), value.as_bytes())
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Whether a state-changing console request is same-site by construction: JSON, with the
/// console's own header (a cross-site form can send neither).
pub fn csrf_safe(headers: &HeaderMap) -> bool {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let marked = headers.get("x-toolgate-console").is_some_and(|v| v.as_bytes() == b"1");
    json && marked
}

fn secure(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        value.to_string(),
    )
        .into_response()
}

/// `POST /console/login {"token"}`: the approver token becomes the console cookie.
pub async fn login(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let token = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("token").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    if !crate::http::same(token.as_bytes(), app.options.approver_token.as_bytes()) {
        return json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"error": "that is not the approver token"}),
        );
    }
    let expires = now_secs() + LOGIN_SECS;
    let cookie = format!(
        "{COOKIE}={}; Path=/; Max-Age={LOGIN_SECS}; HttpOnly; SameSite=Strict{}",
        sign(&app.options.approver_token, expires),
        if secure(&headers) { "; Secure" } else { "" }
    );
    (
        StatusCode::OK,
        [(header::SET_COOKIE, cookie)],
        [(header::CONTENT_TYPE, "application/json")],
        "{\"ok\":true}",
    )
        .into_response()
}

/// `POST /console/logout`: the cookie is dropped (the browser's; a copied cookie stays valid
/// until it expires, or until the approver token changes).
pub async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
    (StatusCode::OK, [(header::SET_COOKIE, cookie)], "{}").into_response()
}

/// The queue as the page shows it: each ask with a diff for file writes.
async fn approvals(app: &App) -> Result<Vec<Value>, String> {
    let workspace = (app.gateway.sessions)().workspace;
    Ok(app
        .queue
        .pending()
        .await?
        .into_iter()
        .map(|p| {
            let tool = p.request.get("tool").and_then(Value::as_str).unwrap_or_default();
            let diff = p
                .request
                .get("arguments")
                .and_then(|args| file_diff(&workspace, tool, args, 400));
            json!({"id": p.id, "session_id": p.session_id, "request": p.request, "diff": diff})
        })
        .collect())
}

/// A unified diff of what `write_file` or `edit_file` would do with these arguments to a file of
/// the workspace (at most `max_lines` lines), when the file is inside it and readable — what an
/// approver is shown, in the terminal and in the console.
pub fn file_diff(workspace: &std::path::Path, tool: &str, args: &Value, max_lines: usize) -> Option<String> {
    if tool != "write_file" && tool != "edit_file" {
        return None;
    }
    let text = |k: &str| args.get(k).and_then(Value::as_str);
    let rel = text("path")?;
    let root = std::fs::canonicalize(workspace).ok()?;
    // Only files inside the workspace are read for display (the tool itself checks again).
    let old = match std::fs::canonicalize(root.join(rel)) {
        Ok(real) if real.starts_with(&root) && std::fs::metadata(&real).ok()?.len() <= 1 << 20 => {
            std::fs::read_to_string(&real).ok()?
        }
        Ok(_) => return None,
        Err(_) => String::new(),
    };
    let new = match tool {
        "write_file" => text("content")?.to_owned(),
        _ => {
            let (from, to) = (text("old_string")?, text("new_string")?);
            if from.is_empty() || !old.contains(from) {
                return None;
            }
            if args.get("replace_all").and_then(Value::as_bool) == Some(true) {
                old.replace(from, to)
            } else {
                old.replacen(from, to, 1)
            }
        }
    };
    let diff = similar::TextDiff::from_lines(&old, &new);
    let unified = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{rel}"), &format!("b/{rel}"))
        .to_string();
    let lines: Vec<&str> = unified.lines().collect();
    let mut out = lines.iter().take(max_lines).copied().collect::<Vec<_>>().join("\n");
    if lines.len() > max_lines {
        out.push_str(&format!("\n… {} more diff lines", lines.len() - max_lines));
    }
    Some(out)
}

/// `GET /console/api/approvals`.
pub async fn list_approvals(State(app): State<Arc<App>>) -> Response {
    match approvals(&app).await {
        Ok(list) => json_response(StatusCode::OK, &json!({"approvals": list})),
        Err(e) => json_response(StatusCode::INTERNAL_SERVER_ERROR, &json!({"error": e})),
    }
}

/// `POST /console/api/approvals/{id}`: one of the five answers.
pub async fn answer(State(app): State<Arc<App>>, Path(id): Path<String>, body: Bytes) -> Response {
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": format!("the body is not valid JSON: {e}")}),
            );
        }
    };
    match app.queue.answer(&id, &value).await {
        Ok(()) => json_response(StatusCode::OK, &json!({"id": id, "answered": true})),
        Err(crate::approve::AnswerError::NotFound) => json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": "already answered elsewhere, or withdrawn"}),
        ),
        Err(crate::approve::AnswerError::Invalid(m)) => json_response(StatusCode::BAD_REQUEST, &json!({"error": m})),
        Err(crate::approve::AnswerError::Store(m)) => {
            json_response(StatusCode::INTERNAL_SERVER_ERROR, &json!({"error": m}))
        }
    }
}

/// The journal search of the calls page.
#[derive(Debug, Default, Deserialize)]
pub struct CallsQuery {
    session: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    principal: Option<String>,
    since_ms: Option<u64>,
    until_ms: Option<u64>,
    call: Option<String>,
    limit: Option<usize>,
}

async fn calls(app: &App, q: &CallsQuery) -> Result<Vec<Value>, String> {
    let filter = JournalFilter {
        session: q.session.clone().filter(|s| !s.is_empty()).map(SessionId::new),
        session_prefix: q.principal.as_ref().filter(|p| !p.is_empty()).map(|p| format!("{p}/")),
        tool: q.tool.clone().filter(|t| !t.is_empty()),
        since: q.since_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        outcome: q.outcome.clone().filter(|o| !o.is_empty()),
        limit: if q.until_ms.is_some() || q.call.is_some() {
            0
        } else {
            q.limit.unwrap_or(100).min(1000)
        },
    };
    let until = q.until_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
    let rows = app.store.journal_list(&filter).await.map_err(|e| e.to_string())?;
    Ok(rows
        .iter()
        .filter(|r| until.is_none_or(|u| r.started_at.is_some_and(|s| s <= u)))
        .filter(|r| q.call.as_deref().is_none_or(|c| r.call_id.as_str() == c))
        .take(q.limit.unwrap_or(100).min(1000))
        .map(toolgate_core::audit::row_json)
        .collect())
}

/// `GET /console/api/calls?session&tool&outcome&principal&since_ms&until_ms&call&limit`: the
/// journal, newest first; with `session` and `call`, one call's whole record.
pub async fn list_calls(State(app): State<Arc<App>>, Query(q): Query<CallsQuery>) -> Response {
    match calls(&app, &q).await {
        Ok(rows) => json_response(StatusCode::OK, &json!({"rows": rows})),
        Err(e) => json_response(StatusCode::INTERNAL_SERVER_ERROR, &json!({"error": e})),
    }
}

/// `GET /console/api/tools`: the tools exposed, and the upstream servers.
pub async fn tools(State(app): State<Arc<App>>) -> Response {
    let registry = app.gateway.engine.registry();
    let tools: Vec<Value> = registry
        .entries()
        .map(|e| {
            let spec = e.spec();
            json!({
                "name": e.provider_name(),
                "description": e.tool().description(),
                "annotations": spec.annotations,
                "category": spec.category,
            })
        })
        .collect();
    let servers = app.gateway.hub.as_ref().map(|h| h.servers()).unwrap_or_default();
    let health = app.gateway.hub.as_ref().map(|h| h.health()).unwrap_or_default();
    json_response(
        StatusCode::OK,
        &json!({"tools": tools, "servers": servers, "health": health}),
    )
}

/// `GET /console/api/events`: server-sent events — `approvals` with the whole queue whenever it
/// changes (an ask added, answered here, elsewhere or on another replica, or withdrawn), and
/// `calls` with journal rows written or changed since the last event.
pub async fn events(State(app): State<Arc<App>>) -> Sse<impl futures_core::Stream<Item = Result<Event, Infallible>>> {
    let stream = async_stream(app);
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn async_stream(app: Arc<App>) -> impl futures_core::Stream<Item = Result<Event, Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(16);
    tokio::spawn(async move {
        let mut last_queue: Option<String> = None;
        // Rows shown, as shown; a row is read again until it closes, then forgotten.
        let mut seen: std::collections::HashMap<(String, String), Value> = std::collections::HashMap::new();
        let mut open: std::collections::HashMap<(String, String), SystemTime> = std::collections::HashMap::new();
        let mut last_read = SystemTime::now();
        loop {
            if let Ok(list) = approvals(&app).await {
                let text = Value::Array(list).to_string();
                if last_queue.as_deref() != Some(text.as_str()) {
                    if tx
                        .send(Event::default().event("approvals").data(text.clone()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    last_queue = Some(text);
                }
            }
            let now = SystemTime::now();
            let floor = last_read.checked_sub(Duration::from_secs(5)).unwrap_or(last_read);
            let since = open.values().copied().chain([floor]).min().unwrap_or(floor);
            let filter = JournalFilter {
                since: Some(since),
                ..JournalFilter::default()
            };
            if let Ok(rows) = app.store.journal_list(&filter).await {
                last_read = now;
                let mut changed = Vec::new();
                for r in &rows {
                    let v = toolgate_core::audit::row_json(r);
                    let key = (r.session_id.to_string(), r.call_id.to_string());
                    match (r.finished_at, r.started_at) {
                        (None, Some(at)) => {
                            open.insert(key.clone(), at);
                        }
                        _ => {
                            open.remove(&key);
                        }
                    }
                    if seen.get(&key) != Some(&v) {
                        seen.insert(key, v.clone());
                        changed.push(v);
                    }
                }
                // What is neither open nor inside the window will not be read again.
                seen.retain(|k, _| {
                    rows.iter()
                        .any(|r| r.session_id.as_str() == k.0 && r.call_id.as_str() == k.1)
                });
                if !changed.is_empty() {
                    changed.reverse(); // oldest first
                    if tx
                        .send(Event::default().event("calls").data(Value::Array(changed).to_string()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(WATCH) => {}
                () = tx.closed() => return,
            }
        }
    });
    ReceiverStream(rx)
}

/// An `mpsc::Receiver` as a stream of `Ok` items.
struct ReceiverStream(tokio::sync::mpsc::Receiver<Event>);

impl futures_core::Stream for ReceiverStream {
    type Item = Result<Event, Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|e| e.map(Ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_cookie_holds_for_its_token_until_it_expires() {
        let mut headers = HeaderMap::new();
        let value = sign("tok", now_secs() + 60);
        headers.insert(header::COOKIE, format!("a=b; {COOKIE}={value}").parse().unwrap());
        assert!(logged_in(&headers, "tok"));
        assert!(!logged_in(&headers, "other token"), "a new token voids it");
        let mut forged = HeaderMap::new();
        forged.insert(header::COOKIE, format!("{COOKIE}=v1.99999999999.00").parse().unwrap());
        assert!(!logged_in(&forged, "tok"));
        let mut old = HeaderMap::new();
        old.insert(
            header::COOKIE,
            format!("{COOKIE}={}", sign("tok", now_secs() - 1)).parse().unwrap(),
        );
        assert!(!logged_in(&old, "tok"), "expired");
    }
}
