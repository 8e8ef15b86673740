//! The gateway's one listener: MCP over streamable HTTP at `/mcp`, and the REST face —
//! `/v1/tools`, `/v1/execute`, `/v1/approvals`, `/v1/audit`, `/healthz`, `/metrics`.
//!
//! Every request passes the `Host` and `Origin` checks (DNS rebinding), then the token check:
//! the client token (when set; required off loopback) for everything, and the approver token —
//! always required, never the client's — for the approval endpoints, so a tool run by the
//! gateway cannot approve itself. A refused request gets its status and an empty body.

use crate::approve::{AnswerError, Queue};
use crate::hub::ServerState;
use crate::metrics::Metrics;
use crate::server::Gateway;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;
use toolgate_core::store::{JournalFilter, Store};
use toolgate_core::{Answer, Format, SessionId, TurnOptions};

/// How the listener is set up.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Where it listens.
    pub listen: SocketAddr,
    /// The client token (`Authorization: Bearer …`); required when not on loopback. Its
    /// principal is `client`.
    pub client_token: Option<String>,
    /// More client tokens, each naming its principal: `(principal, token)`. A principal's
    /// memory, sessions, grants and audit rows are its own.
    pub clients: Vec<(String, String)>,
    /// The approver token for `/v1/approvals`.
    pub approver_token: String,
    /// `Host` values accepted besides loopback names (with or without a port).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted (`http://localhost:3000`); requests without `Origin` pass.
    pub allowed_origins: Vec<String>,
    /// The largest request body, in bytes.
    pub max_body: usize,
}

impl HttpOptions {
    /// Checks the options before binding: a token off loopback, two different tokens.
    pub fn check(&self) -> Result<(), String> {
        if !self.listen.ip().is_loopback() && self.client_token.is_none() {
            return Err(format!(
                "listening on {} (not loopback) needs a client token: --token or TOOLGATE_SERVE_TOKEN",
                self.listen
            ));
        }
        if self.client_token.as_deref().is_some_and(str::is_empty) || self.approver_token.is_empty() {
            return Err("a token cannot be empty".into());
        }
        if self.client_token.as_deref() == Some(self.approver_token.as_str()) {
            return Err("the approver token must differ from the client token".into());
        }
        let mut seen: Vec<&str> = self.client_token.iter().map(String::as_str).collect();
        for (principal, token) in &self.clients {
            if !valid_principal(principal) {
                return Err(format!(
                    "the principal {principal:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
                ));
            }
            if token.is_empty() {
                return Err(format!("the token of the principal {principal:?} is empty"));
            }
            if token == &self.approver_token || seen.contains(&token.as_str()) {
                return Err(format!(
                    "the token of the principal {principal:?} is used twice (each client and the approver need their own)"
                ));
            }
            seen.push(token);
        }
        Ok(())
    }

    /// Whether any client token is configured (then every route but `/healthz` needs one).
    fn tokens_configured(&self) -> bool {
        self.client_token.is_some() || !self.clients.is_empty()
    }

    /// The principal a bearer token names, if any.
    fn principal_of(&self, token: &[u8]) -> Option<&str> {
        let legacy = self
            .client_token
            .as_deref()
            .filter(|t| same(token, t.as_bytes()))
            .map(|_| "client");
        legacy.or_else(|| {
            self.clients
                .iter()
                .find(|(_, t)| same(token, t.as_bytes()))
                .map(|(p, _)| p.as_str())
        })
    }

    /// The `Origin` values accepted: `allowed_origins`, and the gateway's own origin on the
    /// loopback names (a page it served itself is no rebinding; it serves none, but the MCP
    /// conformance suite checks that same-origin requests pass). Another port is another origin
    /// and stays refused.
    fn origins(&self) -> Vec<String> {
        let mut origins = self.allowed_origins.clone();
        let port = self.listen.port();
        if self.listen.ip().is_loopback() && port != 0 {
            for host in ["localhost", "127.0.0.1", "[::1]"] {
                origins.push(format!("http://{host}:{port}"));
            }
        }
        origins
    }

    fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"].map(str::to_owned).to_vec();
        hosts.extend(self.allowed_hosts.iter().cloned());
        hosts
    }
}

/// What the REST handlers share.
pub struct App {
    /// The MCP face (and its engine).
    pub gateway: Arc<Gateway>,
    /// Where the journal and pending approvals are.
    pub store: Arc<dyn Store>,
    /// The approval queue.
    pub queue: Arc<Queue>,
    /// The metrics fed by the engine's events.
    pub metrics: Arc<Metrics>,
    pub(crate) options: HttpOptions,
    /// The `Host` values accepted (loopback names and `allowed_hosts`), built once.
    hosts: Vec<String>,
    /// The `Origin` values accepted, built once.
    origins: Vec<String>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").finish_non_exhaustive()
    }
}

/// The router; `shutdown` ends the MCP sessions' streams.
pub fn router(
    gateway: Arc<Gateway>,
    store: Arc<dyn Store>,
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Router {
    let hosts = options.hosts();
    let origins = options.origins();
    let mcp_config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts.clone())
        .with_allowed_origins(origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(options.max_body)
        .with_cancellation_token(shutdown);
    // A session of the classic handshake made by another replica is taken over from the store.
    let mut mcp_config = mcp_config;
    mcp_config.session_store = Some(Arc::new(crate::sessions::McpSessions(store.clone())));
    let factory = gateway.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(factory.handler()),
        Arc::new(LocalSessionManager::default()),
        mcp_config,
    );
    let max_body = options.max_body;
    let app = Arc::new(App {
        gateway,
        store,
        queue,
        metrics,
        options,
        hosts,
        origins,
    });
    Router::new()
        .route("/v1/tools", get(tools))
        .route("/v1/execute", post(execute))
        .route("/v1/approvals", get(approvals))
        .route("/v1/approvals/{id}", post(answer))
        .route("/v1/audit", get(audit))
        .route("/v1/jobs", get(jobs))
        .route("/healthz", get(health))
        .route("/", get(crate::console::page))
        .route("/console.js", get(crate::console::script))
        .route("/console.css", get(crate::console::style))
        .route("/console/login", post(crate::console::login))
        .route("/console/logout", post(crate::console::logout))
        .route("/console/api/approvals", get(crate::console::list_approvals))
        .route("/console/api/approvals/{id}", post(crate::console::answer))
        .route("/console/api/calls", get(crate::console::list_calls))
        .route("/console/api/tools", get(crate::console::tools))
        .route("/console/api/events", get(crate::console::events))
        .route("/metrics", get(metrics_text))
        .route_service("/mcp", mcp)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Whether a principal name is usable (it prefixes session ids: `NAME/…`).
pub fn valid_principal(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Who a request acts for: the principal its client token names, `local` for a tokenless
/// request on loopback when no client token is configured, or the approver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A client, by principal.
    Client(String),
    /// The approver token (approvals, and the whole audit).
    Approver,
}

fn status(code: StatusCode) -> Response {
    (code, Body::empty()).into_response()
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    json_response(code, &json!({"error": message.into()}))
}

/// Compares in time independent of where the strings differ.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    value
        .strip_prefix(b"Bearer ")
        .or_else(|| value.strip_prefix(b"bearer "))
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let bare = match host.rsplit_once(':') {
        // `[::1]:8737`, `localhost:8737`; a bare IPv6 has more than one colon.
        Some((name, port))
            if port.chars().all(|c| c.is_ascii_digit()) && (!name.contains(':') || name.starts_with('[')) =>
        {
            name
        }
        _ => host,
    };
    allowed
        .iter()
        .any(|a| a.eq_ignore_ascii_case(host) || a.eq_ignore_ascii_case(bare))
}

async fn guard(State(app): State<Arc<App>>, request: Request<Body>, next: Next) -> Response {
    let headers = request.headers();
    // DNS rebinding: a page served from elsewhere reaches us under its own name.
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !host_allowed(host, &app.hosts) {
        return status(StatusCode::FORBIDDEN);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin
            .to_str()
            .is_ok_and(|o| app.origins.iter().any(|a| a.eq_ignore_ascii_case(o)));
        if !ok {
            return status(StatusCode::FORBIDDEN);
        }
    }
    let path = request.uri().path().to_owned();
    // The console: its page is public (it asks for the token); its API takes the cookie the
    // token became, and a state-changing request only as the page makes it (CSRF).
    if matches!(path.as_str(), "/" | "/console.js" | "/console.css") {
        return next.run(request).await;
    }
    if path.starts_with("/console/") {
        if request.method() == axum::http::Method::POST && !crate::console::csrf_safe(headers) {
            return status(StatusCode::FORBIDDEN);
        }
        let open = path == "/console/login" || path == "/console/logout";
        if !open && !crate::console::logged_in(headers, &app.options.approver_token) {
            return status(StatusCode::UNAUTHORIZED);
        }
        let mut request = request;
        request.extensions_mut().insert(Caller::Approver);
        return next.run(request).await;
    }
    let token = bearer(headers);
    let approver = token.is_some_and(|t| same(t, app.options.approver_token.as_bytes()));
    let approvals = path == "/v1/approvals" || path.starts_with("/v1/approvals/");
    let client = token.and_then(|t| app.options.principal_of(t)).map(str::to_owned);
    // The REST routes that run calls or read every session's arguments need a token even on
    // loopback: any local process (a tool the gateway runs included) could call them.
    let token_always = path == "/v1/execute" || path == "/v1/audit";
    let caller = if approvals {
        approver.then_some(Caller::Approver)
    } else if path == "/v1/audit" && approver {
        Some(Caller::Approver)
    } else {
        match client {
            Some(principal) => Some(Caller::Client(principal)),
            None if !app.options.tokens_configured() && !token_always && token.is_none() => {
                Some(Caller::Client("local".into()))
            }
            None => None,
        }
    };
    let Some(caller) = caller else {
        return status(StatusCode::UNAUTHORIZED);
    };
    let mut request = request;
    request.extensions_mut().insert(caller.clone());
    if path == "/mcp" && request.method() == axum::http::Method::POST {
        let principal = match caller {
            Caller::Client(p) => p,
            Caller::Approver => "local".to_owned(),
        };
        return legacy_tasks(&app, &principal, request, next).await;
    }
    next.run(request).await
}

/// The tasks of the 2025-11-25 revision ([`crate::legacy`]): a task request of a session that
/// negotiated that revision is answered here; the `initialize` result of a client asking for it,
/// and its sessions' `tools/list` results, get the revision's task surface added. Anything else
/// goes to rmcp untouched.
async fn legacy_tasks(app: &Arc<App>, principal: &str, request: Request<Body>, next: Next) -> Response {
    use crate::legacy;
    let versioned = request
        .headers()
        .get("mcp-protocol-version")
        .is_some_and(|v| v.as_bytes() == legacy::VERSION.as_bytes());
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, app.options.max_body).await {
        Ok(b) => b,
        Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large"),
    };
    // Parsed here only when it may be ours: a small message that may be an `initialize`, or
    // any message of a session that asked for 2025-11-25 (rmcp parses every message anyway;
    // other clients pay nothing more).
    const SMALL: usize = 64 << 10;
    let may_initialize = bytes.len() <= SMALL
        && !parts.headers.contains_key("mcp-session-id")
        && bytes.windows(12).any(|w| w == b"\"initialize\"");
    let message: Option<Value> = if versioned || may_initialize {
        serde_json::from_slice(&bytes).ok()
    } else {
        None
    };
    let method = message
        .as_ref()
        .and_then(|m| m.get("method"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let session_id = parts
        .headers
        .get("mcp-session-id")
        .map(|id| String::from_utf8_lossy(id.as_bytes()).into_owned());
    let claimed = message.as_ref().filter(|m| legacy::claims(m));
    // One store read, only for what this layer may answer or patch.
    let legacy_session = versioned
        && (claimed.is_some() || method == "tools/list")
        && match &session_id {
            Some(id) => matches!(
                app.store.cache_get(&legacy::mark(id)).await,
                Ok(Some(Value::Bool(true)))
            ),
            None => false,
        };
    if legacy_session && let (Some(m), Some(id)) = (claimed, &session_id) {
        let session = crate::server::session_name_of(id.as_bytes());
        return json_response(
            StatusCode::OK,
            &legacy::answer(&app.gateway, principal, &session, m).await,
        );
    }
    let patch = match method {
        "initialize" => message.as_ref().is_some_and(legacy::wants),
        "tools/list" => legacy_session,
        _ => false,
    };
    let response = with_disconnect(Request::from_parts(parts, Body::from(bytes)), next).await;
    if !patch || !response.status().is_success() {
        return response;
    }
    if method == "initialize"
        && let Some(id) = response.headers().get("mcp-session-id")
        && let Err(e) = app
            .store
            .cache_put(
                &legacy::mark(&String::from_utf8_lossy(id.as_bytes())),
                &Value::Bool(true),
                Duration::from_secs(24 * 3600),
            )
            .await
    {
        tracing::warn!(error = %e, "could not mark a 2025-11-25 session's tasks");
    }
    // These answers are short and end with their one response: buffered, patched, sent on.
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the response could not be read");
    };
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let text = String::from_utf8_lossy(&bytes);
    let patched = if json {
        match serde_json::from_str::<Value>(&text) {
            Ok(mut v) => {
                legacy::patch(&app.gateway, &mut v);
                v.to_string()
            }
            Err(_) => text.into_owned(),
        }
    } else {
        let mut out = String::with_capacity(text.len() + 128);
        for line in text.split_inclusive('\n') {
            match line
                .strip_prefix("data: ")
                .map(|d| serde_json::from_str::<Value>(d.trim_end()))
            {
                Some(Ok(mut v)) => {
                    legacy::patch(&app.gateway, &mut v);
                    out.push_str("data: ");
                    out.push_str(&v.to_string());
                    out.push_str(if line.ends_with("\r\n") {
                        "\r\n"
                    } else if line.ends_with('\n') {
                        "\n"
                    } else {
                        ""
                    });
                }
                _ => out.push_str(line),
            }
        }
        out
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(patched))
}

/// Cancelled when the client of an MCP POST goes away before its response has been sent: the
/// request is dropped before it is answered, or its response stream is dropped before its end.
/// The `tools/call` handler finds it in the request's parts and stops the call with it.
#[derive(Clone, Debug)]
pub struct Disconnect(pub CancellationToken);

async fn with_disconnect(mut request: Request<Body>, next: Next) -> Response {
    let token = CancellationToken::new();
    request.extensions_mut().insert(Disconnect(token.clone()));
    let guard = token.drop_guard();
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(UntilEnd {
            body,
            guard: Some(guard),
        }),
    )
}

/// A response body that fires its guard when dropped before its last frame.
struct UntilEnd {
    body: Body,
    guard: Option<tokio_util::sync::DropGuard>,
}

impl http_body::Body for UntilEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let std::task::Poll::Ready(None) = polled
            && let Some(guard) = self.guard.take()
        {
            guard.disarm();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[derive(Deserialize)]
struct ToolsQuery {
    format: Option<String>,
}

async fn tools(State(app): State<Arc<App>>, Query(q): Query<ToolsQuery>) -> Response {
    let format = match q.format.as_deref().unwrap_or("openai").parse::<Format>() {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    match app.gateway.engine.tool_list(format, &TurnOptions::default()) {
        Value::String(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text,
        )
            .into_response(),
        other => json_response(StatusCode::OK, &other),
    }
}

#[derive(Deserialize)]
struct ExecuteQuery {
    format: Option<String>,
    session: Option<String>,
}

/// A model answer in any provider format → `{"messages", "status"}`, as `toolgate exec`.
async fn execute(
    State(app): State<Arc<App>>,
    Query(q): Query<ExecuteQuery>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Caller::Client(principal) = caller else {
        return status(StatusCode::UNAUTHORIZED);
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body is not valid JSON: {e}")),
    };
    let format = match q.format.as_deref() {
        Some(f) => match f.parse::<Format>() {
            Ok(Format::Mcp) => return error(StatusCode::BAD_REQUEST, "execute reads model answers; use /mcp for MCP"),
            Ok(f) => f,
            Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        },
        None => Format::detect(&value),
    };
    let answer = match Answer::parse(format, &value) {
        Ok(a) => a,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let session_id = q.session.or_else(|| {
        headers
            .get("x-toolgate-session")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    if let Some(id) = &session_id
        && (id.is_empty() || id.len() > 200 || id.chars().any(char::is_control))
    {
        return error(
            StatusCode::BAD_REQUEST,
            "the session id must be 1 to 200 printable characters",
        );
    }
    let session = app.gateway.rest_session(&principal, session_id.as_deref()).await;
    // The turn runs in a task of its own and this request holds its stop: a client that goes
    // away drops this handler, which cancels the turn, and the task still records every call
    // (canceled) instead of leaving its row `started` and the call counted in flight.
    let cancel = tokio_util::sync::CancellationToken::new();
    let _stop_when_gone = cancel.clone().drop_guard();
    let engine = app.gateway.engine.clone();
    let named = session_id.is_some();
    let turn = tokio::spawn(async move {
        let options = TurnOptions {
            cancel: Some(cancel),
            ..TurnOptions::default()
        };
        let before = session.guards_state();
        let turn = engine.run_turn(&session, &answer, options).await;
        if named
            && session.guards_state() != before
            && let Err(e) = session.save_guards().await
        {
            tracing::warn!(error = %e, "could not keep the session's loop detector and error count");
        }
        (turn, session)
    });
    let (turn, session) = match turn.await {
        Ok(done) => done,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("the turn failed: {e}")),
    };
    let shown = crate::server::unscoped(&principal, session.id().as_str()).to_owned();
    json_response(
        StatusCode::OK,
        &json!({"messages": turn.messages, "status": turn.status.as_str(), "session_id": shown}),
    )
}

async fn approvals(State(app): State<Arc<App>>) -> Response {
    match app.queue.pending().await {
        Ok(list) => json_response(
            StatusCode::OK,
            &json!({"approvals": list.into_iter().map(|p| json!({"id": p.id, "session_id": p.session_id, "request": p.request})).collect::<Vec<_>>()}),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn answer(State(app): State<Arc<App>>, Path(id): Path<String>, body: Bytes) -> Response {
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body is not valid JSON: {e}")),
    };
    match app.queue.answer(&id, &value).await {
        Ok(()) => json_response(StatusCode::OK, &json!({"id": id, "answered": true})),
        Err(AnswerError::NotFound) => error(StatusCode::NOT_FOUND, format!("no approval {id:?} is waiting")),
        Err(AnswerError::Invalid(m)) => error(StatusCode::BAD_REQUEST, m),
        Err(AnswerError::Store(m)) => error(StatusCode::INTERNAL_SERVER_ERROR, m),
    }
}

#[derive(Deserialize)]
struct AuditQuery {
    session: Option<String>,
    tool: Option<String>,
    /// Unix time in milliseconds.
    since_ms: Option<u64>,
    outcome: Option<String>,
    limit: Option<usize>,
}

/// The journal: a client sees its own sessions' rows (session ids as it named them), the
/// approver token every row.
async fn audit(
    State(app): State<Arc<App>>,
    axum::Extension(caller): axum::Extension<Caller>,
    Query(q): Query<AuditQuery>,
) -> Response {
    let principal = match &caller {
        Caller::Client(p) => Some(p.clone()),
        Caller::Approver => None,
    };
    let filter = JournalFilter {
        session: q.session.map(|s| match &principal {
            Some(p) => crate::server::scoped(p, &s),
            None => SessionId::new(s),
        }),
        session_prefix: principal.as_ref().map(|p| format!("{p}/")),
        tool: q.tool,
        since: q.since_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        outcome: q.outcome,
        limit: q.limit.unwrap_or(100).min(10_000),
    };
    match app.store.journal_list(&filter).await {
        Ok(rows) => {
            let rows: Vec<Value> = rows.iter().map(toolgate_core::audit::row_json).collect();
            json_response(StatusCode::OK, &json!({"rows": rows}))
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[derive(Debug, Deserialize)]
struct JobsQuery {
    session: Option<String>,
}

/// A session's background jobs on this replica (`?session=ID`, or the `X-Toolgate-Session`
/// header): a client names its own sessions, the approver token any session by its full id.
async fn jobs(
    State(app): State<Arc<App>>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
    Query(q): Query<JobsQuery>,
) -> Response {
    let named = q.session.or_else(|| {
        headers
            .get("x-toolgate-session")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let Some(named) = named else {
        return error(StatusCode::BAD_REQUEST, "name the session: ?session=ID");
    };
    let session = match &caller {
        Caller::Client(p) => crate::server::scoped(p, &named),
        Caller::Approver => SessionId::new(named.clone()),
    };
    let jobs: Vec<Value> = app
        .gateway
        .engine
        .jobs()
        .list(&session)
        .iter()
        .map(|j| j.status(false))
        .collect();
    json_response(StatusCode::OK, &json!({"session": named, "jobs": jobs}))
}

/// Each part's state, and 503 when this replica cannot serve (its store does not answer, an
/// upstream server is still starting, or no tool is left because every upstream failed), so a
/// load balancer can act; 200 `degraded` while some upstream is down but tools remain.
async fn health(State(app): State<Arc<App>>) -> Response {
    let servers: BTreeMap<String, ServerState> = app.gateway.hub.as_ref().map(|h| h.servers()).unwrap_or_default();
    let probe = SessionId::new("toolgate/healthz");
    let call = toolgate_core::types::CallId::new("healthz");
    let store = match tokio::time::timeout(Duration::from_secs(2), app.store.journal_contains(&probe, &call)).await {
        Ok(Ok(_)) => match app.store.backlog() {
            // It answers reads but refuses writes (away, or its disk is full).
            b if b.held > 0 => json!({
                "state": "failed",
                "reason": format!("the store refuses writes: {} journal rows wait to be written", b.held),
            }),
            _ => json!({"state": "ok"}),
        },
        Ok(Err(e)) => json!({"state": "failed", "reason": e.to_string()}),
        Err(_) => json!({"state": "failed", "reason": "the store did not answer within 2 s"}),
    };
    let tools = app.gateway.engine.registry().len();
    let failed = servers
        .values()
        .filter(|s| matches!(s, ServerState::Failed { .. }))
        .count();
    let starting = servers.values().any(|s| matches!(s, ServerState::Starting));
    let status = if store["state"] != "ok" || tools == 0 && failed > 0 {
        "unavailable"
    } else if starting {
        "starting"
    } else if failed > 0 {
        "degraded"
    } else {
        "ok"
    };
    let code = match status {
        "ok" | "degraded" => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    json_response(
        code,
        &json!({"status": status, "store": store, "tools": tools, "servers": servers, "time_ms": now as u64}),
    )
}

async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    // This replica's own asks: replicas share the queue, and their sum must count each once.
    let pending = Some(app.queue.waiting_here());
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(
            pending,
            app.store.backlog(),
            app.store.replica(),
            app.gateway.engine.jobs().running(),
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_with_and_without_ports() {
        let allowed: Vec<String> = ["localhost", "127.0.0.1", "[::1]", "gw.example:8443"]
            .map(str::to_owned)
            .to_vec();
        for ok in [
            "localhost",
            "localhost:8737",
            "127.0.0.1:1",
            "[::1]:8737",
            "gw.example:8443",
            "LOCALHOST",
        ] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:8737",
            "127.0.0.1.evil:80",
            "localhost.evil",
            "gw.example:1",
        ] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn options_fail_closed() {
        let mut o = HttpOptions {
            listen: "0.0.0.0:0".parse().unwrap(),
            client_token: None,
            clients: vec![],
            approver_token: "a".into(),
            allowed_hosts: vec![],
            allowed_origins: vec![],
            max_body: 1,
        };
        assert!(o.check().unwrap_err().contains("needs a client token"));
        o.client_token = Some("a".into());
        assert!(o.check().unwrap_err().contains("must differ"));
        o.client_token = Some("c".into());
        assert!(o.check().is_ok());
        o.clients = vec![("bob".into(), "c".into())];
        assert!(o.check().unwrap_err().contains("used twice"));
        o.clients = vec![("bob/x".into(), "d".into())];
        assert!(o.check().unwrap_err().contains("must be 1 to 64"));
        o.clients = vec![("bob".into(), "d".into())];
        assert!(o.check().is_ok());
    }
}
