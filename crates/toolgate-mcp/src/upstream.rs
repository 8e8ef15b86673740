//! One upstream MCP server: its connection (a child process on stdio, or streamable HTTP), kept
//! alive by a supervisor that restarts it with backoff, re-lists its tools when it says they
//! changed, and carries calls, progress and cancellation.

use crate::config::{Endpoint, ServerConfig};
use crate::tool::{McpTool, StoredDef, ToolDef};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientNotification,
    ClientRequest, NumberOrString, ProgressNotificationParam, ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningServiceCancellationToken};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use toolgate_core::tool::{Progress, ProgressSink, ToolContext, ToolOutput};
use toolgate_core::{SessionId, ToolError};

/// An upstream tool that is not served: its name as it would be registered, and why.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Unserved {
    /// `SERVER__tool`.
    pub tool: String,
    /// Why, with the JSON pointer of the problem in its schema.
    pub problem: String,
}

/// Makes a tool's definition servable: a parameter schema that does not compile is normalised
/// where its intent is plain (each change logged), else the tool is refused with the compile
/// error; an output schema that does not compile either way is dropped (its results are then
/// not checked against it), with a warning.
fn servable(server: &str, def: &mut ToolDef) -> Result<(), String> {
    use toolgate_core::validate::{CompiledSchema, normalize_schema};
    if let Err(error) = CompiledSchema::compile(&def.input_schema) {
        let mut fixed = def.input_schema.clone();
        let changes = normalize_schema(&mut fixed);
        if changes.is_empty() {
            return Err(error);
        }
        CompiledSchema::compile(&fixed)?;
        tracing::warn!(server, tool = %def.name, ?changes, "the tool's parameter schema was normalised to compile");
        def.input_schema = fixed;
    }
    if let Some(output) = &def.output_schema
        && let Err(error) = CompiledSchema::compile(output)
    {
        let mut fixed = output.clone();
        let changes = normalize_schema(&mut fixed);
        if !changes.is_empty() && CompiledSchema::compile(&fixed).is_ok() {
            tracing::warn!(server, tool = %def.name, ?changes, "the tool's output schema was normalised to compile");
            def.output_schema = Some(fixed);
        } else {
            tracing::warn!(server, tool = %def.name, "the tool's output schema is ignored: {}", error.replace("parameter schema", "output schema"));
            def.output_schema = None;
        }
    }
    Ok(())
}

/// What a supervisor tells the hub.
#[derive(Debug)]
pub enum Report {
    /// The server's tools (after a start, a restart or a `list_changed`).
    Tools {
        /// The server.
        server: String,
        /// Its exposed tools.
        tools: Vec<Arc<McpTool>>,
        /// Its tools that cannot be served, and why.
        unserved: Vec<Unserved>,
    },
    /// The server could not be started or reached (it is retried in the background).
    Failed {
        /// The server.
        server: String,
        /// Why, in one line.
        reason: String,
    },
    /// A connected server went away (it exited or hung up); it is restarted.
    Down {
        /// The server.
        server: String,
        /// Why, in one line.
        reason: String,
    },
}

/// Where a call's progress goes, and the call's timer to restart.
struct ProgressRoute {
    sink: ProgressSink,
    reset: Option<Arc<Notify>>,
}

/// The state shared by a server's supervisor, its client handler and its tools.
pub struct Link {
    pub(crate) server: String,
    current: RwLock<Option<Arc<Conn>>>,
    /// Why there is no connection, when there is none.
    down: Mutex<String>,
    progress: Mutex<HashMap<String, ProgressRoute>>,
    list_changed: Notify,
    pub(crate) resets_on_progress: bool,
    /// The per-call timeout the entry sets (the engine's when absent).
    pub(crate) tool_timeout: Option<Duration>,
    /// With `resets_on_progress`: the resettable timer's length.
    pub(crate) timeout: Option<Duration>,
    pub(crate) max_total: Duration,
    /// Where the server's requests to its client go (the gateway's clients), once set.
    pub(crate) relay: OnceLock<Arc<dyn crate::relay::Relay>>,
    /// The session of each call in flight here, by a number of its own.
    callers: Mutex<HashMap<u64, SessionId>>,
    next_caller: AtomicU64,
}

/// Forgets a call in flight when it ends, however it ends.
struct CallerGuard<'a> {
    link: &'a Link,
    n: u64,
}

impl Drop for CallerGuard<'_> {
    fn drop(&mut self) {
        self.link
            .callers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.n);
    }
}

/// One live connection.
pub(crate) struct Conn {
    peer: Peer<RoleClient>,
    /// Fires when the connection ends (the server exited or hung up).
    closed: CancellationToken,
    generation: u64,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

fn token_key(token: &NumberOrString) -> String {
    match token {
        NumberOrString::Number(n) => format!("n{n}"),
        NumberOrString::String(s) => format!("s{s}"),
    }
}

impl Link {
    fn enter(&self, session: &SessionId) -> CallerGuard<'_> {
        let n = self.next_caller.fetch_add(1, Ordering::Relaxed);
        self.callers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(n, session.clone());
        CallerGuard { link: self, n }
    }

    /// The session every call in flight here belongs to; `None` when there is none, or when
    /// calls of several sessions are in flight (a server request could be any one's).
    fn caller(&self) -> Option<SessionId> {
        let callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        let mut sessions = callers.values();
        let first = sessions.next()?.clone();
        sessions.all(|s| *s == first).then_some(first)
    }

    fn conn(&self) -> Result<Arc<Conn>, ToolError> {
        if let Some(conn) = self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
            && !conn.closed.is_cancelled()
        {
            return Ok(conn);
        }
        let why = self.down.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Err(ToolError::failed(format!(
            "The MCP server `{}` is not connected ({why}); toolgate is restarting it. Try again later.",
            self.server
        )))
    }

    fn progress(&self, p: ProgressNotificationParam) {
        let routes = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(route) = routes.get(&token_key(&p.progress_token.0)) {
            route.sink.report(Progress {
                progress: p.progress,
                total: p.total,
                message: p.message,
            });
            if let Some(reset) = &route.reset {
                reset.notify_one();
            }
        }
    }

    /// Calls a tool at the server. Cancelling `ctx.cancel` sends `notifications/cancelled`.
    pub(crate) async fn call(&self, remote: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let conn = self.conn()?;
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "MCP tools take an object of arguments, not {other}"
                )));
            }
        };
        let mut params = CallToolRequestParams::new(remote.to_owned()).with_arguments(arguments);
        if let Some(meta) = crate::trace::request_meta() {
            params.meta = Some(meta);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let _caller = self.enter(&ctx.session_id);
        let handle = conn
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| self.lost(&e.to_string()))?;
        let id = handle.id.clone();
        let key = token_key(&handle.progress_token.0);
        let reset = self.resets_on_progress.then(|| Arc::new(Notify::new()));
        self.progress.lock().unwrap_or_else(|e| e.into_inner()).insert(
            key.clone(),
            ProgressRoute {
                sink: ctx.progress.clone(),
                reset: reset.clone(),
            },
        );
        let _route = RouteGuard { link: self, key };
        let rx = handle.rx;
        // Whatever ends the wait without an answer — our token, a timeout, the engine dropping
        // this future at its own timeout — the server is told the request is cancelled.
        let mut cancel = CancelOnDrop {
            peer: Some(conn.peer.clone()),
            id: Some(id),
            reason: "canceled by toolgate",
        };
        let timer = async {
            match (&reset, self.timeout) {
                (Some(reset), Some(limit)) => loop {
                    tokio::select! {
                        _ = reset.notified() => continue,
                        _ = tokio::time::sleep(limit) => return limit,
                    }
                },
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => Err(ToolError::Canceled),
            _ = conn.closed.cancelled() => {
                cancel.disarm();
                Err(self.lost("it exited during the call"))
            }
            limit = timer => {
                cancel.reason = "timed out";
                Err(ToolError::TimedOut(limit))
            }
            answer = rx => {
                cancel.disarm();
                match answer {
                    Ok(Ok(ServerResult::CallToolResult(result))) => crate::tool::output(&self.server, remote, result),
                    // The server made the call a task (the tasks extension): follow it to its end.
                    Ok(Ok(ServerResult::CreateTaskResult(created))) => self.follow(&conn, created.task, ctx, remote).await,
                    Ok(Ok(_)) => Err(ToolError::failed(format!(
                        "The MCP server `{}` answered tools/call with something that is not a tool result.",
                        self.server
                    ))),
                    Ok(Err(rmcp::ServiceError::McpError(e))) => Err(ToolError::failed(format!(
                        "The MCP server `{}` refused the call: {} (JSON-RPC error {}).",
                        self.server, e.message, e.code.0
                    ))),
                    Ok(Err(e)) => Err(self.lost(&e.to_string())),
                    Err(_) => Err(self.lost("it closed the connection during the call")),
                }
            }
        }
    }

    /// Polls an upstream task until it ends (at the interval the server suggests, within
    /// bounds) and turns its result into ours. Whatever stops the wait first — our cancel, the
    /// engine dropping this future at its timeout — cancels the task at the server.
    async fn follow(
        &self,
        conn: &Conn,
        task: rmcp::model::Task,
        ctx: &ToolContext,
        remote: &str,
    ) -> Result<ToolOutput, ToolError> {
        use rmcp::model::{GetTaskParams, TaskPayload};
        let every = Duration::from_millis(task.poll_interval_ms.unwrap_or(500).clamp(50, 5_000));
        let mut cancel = CancelTaskOnDrop {
            peer: Some(conn.peer.clone()),
            id: task.task_id.clone(),
        };
        loop {
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => return Err(ToolError::Canceled),
                _ = conn.closed.cancelled() => {
                    cancel.disarm();
                    return Err(self.lost("it exited while its task ran"));
                }
                _ = tokio::time::sleep(every) => {}
            }
            let got = tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => return Err(ToolError::Canceled),
                got = conn.peer.get_task(GetTaskParams::new(task.task_id.clone())) => got,
            };
            let detailed = match got {
                Ok(got) => got.task,
                Err(rmcp::ServiceError::McpError(e)) => {
                    cancel.disarm();
                    return Err(ToolError::failed(format!(
                        "The MCP server `{}` lost the call's task {}: {} (JSON-RPC error {}).",
                        self.server, task.task_id, e.message, e.code.0
                    )));
                }
                Err(e) => {
                    cancel.disarm();
                    return Err(self.lost(&e.to_string()));
                }
            };
            match detailed.payload {
                TaskPayload::Working => continue,
                TaskPayload::Completed { result } => {
                    cancel.disarm();
                    return match serde_json::from_value::<rmcp::model::CallToolResult>(Value::Object(result)) {
                        Ok(result) => crate::tool::output(&self.server, remote, result),
                        Err(e) => Err(ToolError::failed(format!(
                            "The MCP server `{}` ended the call's task with something that is not a tool result: {e}.",
                            self.server
                        ))),
                    };
                }
                TaskPayload::Failed { error } => {
                    cancel.disarm();
                    let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
                    return Err(ToolError::failed(format!(
                        "The MCP server `{}` failed the call's task: {message}.",
                        self.server
                    )));
                }
                TaskPayload::Cancelled => {
                    cancel.disarm();
                    return Err(ToolError::failed(format!(
                        "The MCP server `{}` cancelled the call's task.",
                        self.server
                    )));
                }
                // Input for an upstream task (its own elicitation) is not forwarded: the task is
                // cancelled rather than left waiting.
                _ => {
                    return Err(ToolError::failed(format!(
                        "The MCP server `{}` asked for input inside the call's task, which toolgate does not forward; the task was cancelled.",
                        self.server
                    )));
                }
            }
        }
    }

    fn lost(&self, why: &str) -> ToolError {
        ToolError::failed(format!(
            "The MCP server `{}` failed during the call: {why}. toolgate restarts it; the call did not complete.",
            self.server
        ))
    }
}

/// Sends `notifications/cancelled` for a request that did not get its answer.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: Option<rmcp::model::RequestId>,
    reason: &'static str,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let (Some(peer), Some(id)) = (self.peer.take(), self.id.take()) else {
            return;
        };
        let reason = self.reason.to_owned();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let notification = CancelledNotification::new(CancelledNotificationParam::new(Some(id), Some(reason)));
                if let Err(e) = peer
                    .send_notification(ClientNotification::CancelledNotification(notification))
                    .await
                {
                    tracing::debug!(error = %e, "could not send notifications/cancelled");
                }
            });
        }
    }
}

/// Sends `tasks/cancel` for an upstream task that was not followed to its end.
struct CancelTaskOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: String,
}

impl CancelTaskOnDrop {
    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for CancelTaskOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let id = std::mem::take(&mut self.id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = peer.cancel_task(rmcp::model::CancelTaskParams::new(id)).await {
                    tracing::debug!(error = %e, "could not send tasks/cancel");
                }
            });
        }
    }
}

struct RouteGuard<'a> {
    link: &'a Link,
    key: String,
}

impl Drop for RouteGuard<'_> {
    fn drop(&mut self) {
        self.link
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// Our side of the client session: hears `list_changed` and progress.
#[derive(Clone)]
struct Handler {
    link: Arc<Link>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.link.list_changed.notify_one();
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        self.link.progress(params);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        if let Some(relay) = self.link.relay.get() {
            relay.resource_updated(&self.link.server, &params.uri).await;
        }
    }

    #[allow(deprecated)] // logging: deprecated by the 2026-07-28 draft, part of 2025-11-25
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        if let Some(relay) = self.link.relay.get() {
            relay.log(&self.link.server, self.link.caller().as_ref(), params).await;
        }
    }

    #[allow(deprecated)] // sampling: deprecated by the 2026-07-28 draft, part of 2025-11-25
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut info = rmcp::model::ClientConfig::default();
        info.client_info = rmcp::model::Implementation::new("toolgate", env!("CARGO_PKG_VERSION"));
        // toolgate follows an upstream task to its end (`Link::follow`); it sends elicitation
        // and sampling on to the calling client (`relay`).
        info.capabilities = rmcp::model::ClientCapabilities::builder()
            .enable_tasks()
            .enable_elicitation()
            .enable_sampling()
            .build();
        info
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, McpError> {
        let server = &self.link.server;
        let decline = || rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline);
        let (Some(relay), Some(session)) = (self.link.relay.get(), self.link.caller()) else {
            tracing::info!(server = %server, "declined an elicitation: no single client's call is in flight there");
            return Ok(decline());
        };
        let mut result = relay.elicit(server, &session, request.clone()).await?;
        crate::relay::apply_defaults(&request, &mut result);
        Ok(result)
    }

    #[allow(deprecated)] // sampling: deprecated by the 2026-07-28 draft, part of 2025-11-25
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, McpError> {
        let server = &self.link.server;
        let (Some(relay), Some(session)) = (self.link.relay.get(), self.link.caller()) else {
            return Err(McpError::invalid_request(
                format!("toolgate has no client to sample for {server}: no single client's call is in flight"),
                None,
            ));
        };
        relay.sample(server, &session, request).await
    }
}

/// An upstream server and its supervisor.
pub struct Upstream {
    name: String,
    config: ServerConfig,
    endpoint: Endpoint,
    workspace: PathBuf,
    link: Arc<Link>,
    generation: AtomicU64,
    /// OAuth, for an HTTP server not given an `Authorization` header.
    oauth: Option<Arc<crate::oauth::OAuth>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Restart delays: 0.5 s doubling to 30 s, with jitter.
fn backoff(failures: u32) -> Duration {
    let base = 500u64.saturating_mul(1 << failures.min(6)).min(30_000);
    Duration::from_millis(base / 2 + fastrand::u64(0..=base / 2))
}

impl Upstream {
    /// A server from its configuration entry (checked here).
    pub fn new(name: &str, config: ServerConfig, workspace: PathBuf, engine_timeout: Duration) -> Result<Self, String> {
        let endpoint = config.validate(name)?;
        let timeout = config.tool_timeout();
        let per_call = timeout.unwrap_or(engine_timeout);
        let max_total = config
            .max_total_timeout_secs
            .map(Duration::from_secs_f64)
            .unwrap_or(per_call.saturating_mul(10));
        let link = Arc::new(Link {
            server: name.to_owned(),
            current: RwLock::new(None),
            down: Mutex::new("not started yet".into()),
            progress: Mutex::new(HashMap::new()),
            list_changed: Notify::new(),
            resets_on_progress: config.timeout_resets_on_progress,
            tool_timeout: timeout,
            timeout: config.timeout_resets_on_progress.then_some(per_call),
            max_total,
            relay: OnceLock::new(),
            callers: Mutex::new(HashMap::new()),
            next_caller: AtomicU64::new(0),
        });
        let oauth = match &endpoint {
            Endpoint::Http { url } if !config.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) => {
                Some(Arc::new(crate::oauth::OAuth::new(name, url, config.oauth.clone())?))
            }
            _ => None,
        };
        Ok(Self {
            name: name.to_owned(),
            config,
            endpoint,
            workspace,
            link,
            generation: AtomicU64::new(0),
            oauth,
        })
    }

    /// The name a tool of this server is registered under: `SERVER__tool`, or the tool's own
    /// name for a server configured `unprefixed`.
    pub fn registered_name(&self, tool: &str) -> String {
        if self.config.unprefixed {
            tool.to_owned()
        } else {
            format!("{}__{tool}", self.name)
        }
    }

    /// Sends the server's elicitation and sampling requests to `relay` (once).
    pub fn set_relay(&self, relay: Arc<dyn crate::relay::Relay>) {
        let _ = self.link.relay.set(relay);
    }

    /// Its OAuth client (an HTTP server without a configured `Authorization` header).
    pub fn oauth(&self) -> Option<&Arc<crate::oauth::OAuth>> {
        self.oauth.as_ref()
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether its names are served as they are (`unprefixed = true`).
    pub fn unprefixed(&self) -> bool {
        self.config.unprefixed
    }

    /// The client of its current connection, when connected.
    pub(crate) fn peer(&self) -> Option<Peer<RoleClient>> {
        self.link.conn().ok().map(|c| c.peer.clone())
    }

    /// Runs the server until `shutdown`: connects, reports its tools, re-lists them on
    /// `list_changed`, restarts it with backoff when it exits. The first report (tools or
    /// failure) comes after the first attempt.
    pub async fn supervise(self: Arc<Self>, reports: mpsc::UnboundedSender<Report>, shutdown: CancellationToken) {
        let mut failures = 0u32;
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = tokio::time::timeout(self.config.startup_timeout(), self.connect()) => match r {
                    Ok(r) => r,
                    Err(_) => Err(format!(
                        "it did not finish the MCP handshake within {} s",
                        self.config.startup_timeout().as_secs_f64()
                    )),
                },
            };
            let (stop, conn) = match attempt {
                Ok(pair) => pair,
                Err(reason) => {
                    let reason = format!("the MCP server `{}` could not be started: {reason}", self.name);
                    tracing::warn!(server = %self.name, "{reason}");
                    *self.link.down.lock().unwrap_or_else(|p| p.into_inner()) = reason.clone();
                    let _ = reports.send(Report::Failed {
                        server: self.name.clone(),
                        reason,
                    });
                    failures += 1;
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(backoff(failures)) => continue,
                    }
                }
            };
            *self.link.current.write().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
            tracing::info!(server = %self.name, generation = conn.generation, "MCP server connected");
            // Listing is part of being up: a server that cannot list its tools is restarted.
            let mut listed = self.list(&conn).await;
            loop {
                match listed {
                    Ok((tools, unserved)) => {
                        failures = 0;
                        let _ = reports.send(Report::Tools {
                            server: self.name.clone(),
                            tools,
                            unserved,
                        });
                    }
                    Err(reason) => {
                        tracing::warn!(server = %self.name, "{reason}");
                        conn.closed.cancel();
                        break;
                    }
                }
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        // Close the transport and wait for the service to end (a child gets
                        // EOF, then SIGTERM, then SIGKILL to its process group).
                        let ended = conn.closed.clone();
                        stop.cancel();
                        let _ = tokio::time::timeout(Duration::from_secs(8), ended.cancelled()).await;
                        self.take_down("toolgate is shutting down");
                        return;
                    }
                    _ = conn.closed.cancelled() => break,
                    _ = self.link.list_changed.notified() => {
                        tracing::info!(server = %self.name, "tools/list_changed: listing the tools again");
                        listed = self.list(&conn).await;
                    }
                }
            }
            let why = format!("it exited or hung up (connection {})", conn.generation);
            self.take_down(&why);
            let _ = reports.send(Report::Down {
                server: self.name.clone(),
                reason: format!("the MCP server `{}` {why}", self.name),
            });
            tracing::warn!(server = %self.name, "the MCP server {why}; restarting it");
            stop.cancel();
            failures += 1;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff(failures)) => {}
            }
        }
    }

    /// Connects once, lists the server's tools and hangs up: the number of tools. With an
    /// interactive OAuth client, this is a sign-in wherever the server asks for one.
    pub async fn check(&self, within: Duration) -> Result<usize, String> {
        let attempt = async {
            let (stop, conn) = self.connect().await?;
            let listed = conn.peer.list_all_tools().await.map_err(|e| e.to_string());
            stop.cancel();
            listed.map(|tools| tools.len())
        };
        tokio::time::timeout(within, attempt)
            .await
            .map_err(|_| format!("{} did not answer within {} s", self.name, within.as_secs()))?
    }

    /// Why an HTTP server's handshake failed, in one sentence. The transport's error hides the
    /// cause behind its wrappers (`Send message error Transport [...] error: Client error: error
    /// sending request`), so, on this failure path only, a connection to the host and port tells
    /// whether the server is there at all (`connection refused`, a name that does not resolve).
    async fn unreachable(&self, handshake: &str) -> String {
        let url = self.config.url.as_deref().unwrap_or_default();
        let target = url::Url::parse(url).ok().and_then(|u| {
            Some((
                u.host_str()?.trim_matches(['[', ']']).to_owned(),
                u.port_or_known_default()?,
            ))
        });
        if let Some((host, port)) = target {
            let probe = tokio::time::timeout(
                Duration::from_secs(5),
                tokio::net::TcpStream::connect((host.as_str(), port)),
            );
            match probe.await {
                Ok(Err(e)) => return format!("cannot reach the MCP server `{}` at {url}: {e}", self.name),
                Err(_) => {
                    return format!(
                        "cannot reach the MCP server `{}` at {url}: no connection within 5 s",
                        self.name
                    );
                }
                Ok(Ok(_)) => {}
            }
        }
        format!(
            "the MCP server `{}` at {url} did not complete the MCP handshake: {handshake}",
            self.name
        )
    }

    fn take_down(&self, why: &str) {
        *self.link.down.lock().unwrap_or_else(|p| p.into_inner()) = why.to_owned();
        if let Some(conn) = self.link.current.write().unwrap_or_else(|p| p.into_inner()).take() {
            conn.closed.cancel();
        }
    }

    /// The server's tools that can be served (schemas normalised where their intent is plain),
    /// and those that cannot, each with the reason and where in its schema.
    async fn list(&self, conn: &Conn) -> Result<(Vec<Arc<McpTool>>, Vec<Unserved>), String> {
        let tools = conn
            .peer
            .list_all_tools()
            .await
            .map_err(|e| format!("the MCP server `{}` could not list its tools: {e}", self.name))?;
        // A server with the tasks extension may answer any call with a task; a client of the
        // gateway that declared the extension then gets one too, for the same call.
        let tasks = conn.peer.peer_info().is_some_and(|i| i.capabilities.supports_tasks());
        // Two passes, for the memory a long list leaves behind: what each tool keeps is first
        // written into one buffer (a single large allocation), the server's parsed list is
        // dropped and its heap given back, and only then are the tools made from the buffer, so
        // that what they keep sits together rather than in the pages the list was parsed into
        // (which a few live bytes per page would otherwise keep resident).
        let mut packed = String::new();
        let mut unserved = Vec::new();
        for tool in tools {
            if !self.config.exposes(&tool.name) {
                continue;
            }
            let mut def = ToolDef::from_mcp(&tool);
            if let Err(problem) = servable(&self.name, &mut def) {
                tracing::warn!(server = %self.name, tool = %def.name, "the tool is not served: {problem}");
                unserved.push(Unserved {
                    tool: self.registered_name(&def.name),
                    problem,
                });
                continue;
            }
            let annotations = def.annotations(self.config.trust_annotations);
            match serde_json::to_string(&(StoredDef::new(def), annotations)) {
                Ok(line) => {
                    packed.push_str(&line);
                    packed.push('\n');
                }
                Err(e) => tracing::warn!(server = %self.name, error = %e, "a tool could not be kept"),
            }
        }
        crate::hub::release_freed_memory();
        let mut out = Vec::with_capacity(packed.lines().count());
        for line in packed.lines() {
            match serde_json::from_str::<(StoredDef, toolgate_core::tool::Annotations)>(line) {
                Ok((def, annotations)) => out.push(Arc::new(McpTool::stored(
                    &self.registered_name(&def.name),
                    def,
                    annotations,
                    tasks,
                    self.link.clone(),
                ))),
                Err(e) => tracing::warn!(server = %self.name, error = %e, "a tool could not be kept"),
            }
        }
        Ok((out, unserved))
    }

    async fn connect(&self) -> Result<(RunningServiceCancellationToken, Arc<Conn>), String> {
        let handler = Handler {
            link: self.link.clone(),
        };
        let running = match &self.endpoint {
            Endpoint::Stdio { command, args } => {
                let mut cmd = tokio::process::Command::new(command);
                // The server gets PATH, HOME, LANG and what its configuration names — never
                // toolgate's environment (tokens, provider keys) — and cannot outlive toolgate.
                cmd.args(args)
                    .env_clear()
                    .envs(toolgate_tools::contain::minimal_env(&[]))
                    .envs(&self.config.env)
                    .current_dir(self.config.cwd.as_ref().unwrap_or(&self.workspace));
                let containment = toolgate_tools::contain::Containment::default();
                // SAFETY: the containment makes only async-signal-safe system calls (prctl,
                // unshare, fork, waitpid) between fork and exec.
                unsafe {
                    cmd.pre_exec(move || containment.apply_in_own_group());
                }
                let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
                wrap.wrap(process_wrap::tokio::ProcessGroup::leader())
                    .wrap(process_wrap::tokio::KillOnDrop);
                let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(wrap)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot run {command:?}: {e}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(drain_stderr(self.name.clone(), stderr));
                }
                handler.serve(transport).await.map_err(|e| e.to_string())?
            }
            Endpoint::Http { url } => {
                let mut headers = HashMap::new();
                for (k, v) in &self.config.headers {
                    // Checked by `validate`.
                    if let (Ok(k), Ok(v)) = (
                        http::HeaderName::from_bytes(k.as_bytes()),
                        http::HeaderValue::from_str(v),
                    ) {
                        headers.insert(k, v);
                    }
                }
                let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                )
                .custom_headers(headers);
                let client = reqwest::Client::builder()
                    .no_proxy()
                    .pool_idle_timeout(Duration::from_secs(90))
                    .build()
                    .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
                match &self.oauth {
                    Some(oauth) => {
                        let client = crate::oauth::AuthedHttp {
                            inner: client,
                            oauth: oauth.clone(),
                        };
                        let transport = rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                        match handler.serve(transport).await {
                            Ok(running) => running,
                            Err(e) => return Err(self.unreachable(&e.to_string()).await),
                        }
                    }
                    None => {
                        let transport = rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                        match handler.serve(transport).await {
                            Ok(running) => running,
                            Err(e) => return Err(self.unreachable(&e.to_string()).await),
                        }
                    }
                }
            }
        };
        let closed = CancellationToken::new();
        let peer = running.peer().clone();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let stop = running.cancellation_token();
        // The service ends when the transport closes (the server exited or hung up) or when
        // `stop` fires; either way the connection is over.
        let ended = closed.clone();
        tokio::spawn(async move {
            let _ = running.waiting().await;
            ended.cancel();
        });
        Ok((
            stop,
            Arc::new(Conn {
                peer,
                closed,
                generation,
            }),
        ))
    }
}

async fn drain_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                let line: String = line.chars().take(2000).collect();
                tracing::info!(target: "toolgate::mcp::stderr", server = %server, "{line}");
            }
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(server = %server, error = %e, "stopped reading the server's stderr");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_request_belongs_to_a_session_only_while_that_sessions_calls_alone_are_in_flight() {
        let config = ServerConfig {
            command: Some("true".into()),
            enabled: true,
            ..ServerConfig::default()
        };
        let up = Upstream::new("s", config, std::env::temp_dir(), Duration::from_secs(5)).unwrap();
        let (a, b) = (SessionId::new("alice/1"), SessionId::new("bob/1"));
        assert_eq!(up.link.caller(), None, "no call in flight: nobody to ask");
        let first = up.link.enter(&a);
        let second = up.link.enter(&a);
        assert_eq!(up.link.caller(), Some(a.clone()));
        // Bob's call in flight beside Alice's: a request could be either's, so it is no one's.
        let bobs = up.link.enter(&b);
        assert_eq!(up.link.caller(), None);
        drop(first);
        assert_eq!(up.link.caller(), None);
        drop(second);
        assert_eq!(up.link.caller(), Some(b.clone()));
        drop(bobs);
        assert_eq!(up.link.caller(), None);
    }

    #[test]
    fn a_registered_tool_keeps_its_schemas_as_text_and_reading_them_keeps_no_tree() {
        use toolgate_core::tool::Tool;
        let config = ServerConfig {
            command: Some("true".into()),
            enabled: true,
            ..ServerConfig::default()
        };
        let up = Upstream::new("s", config, std::env::temp_dir(), Duration::from_secs(5)).unwrap();
        let def = |schema: Value| ToolDef {
            name: "t".into(),
            description: "d".into(),
            input_schema: schema,
            output_schema: Some(serde_json::json!({"type": "object", "properties": {"r": {"type": "string"}}})),
            annotations: None,
        };
        let schema = serde_json::json!({"type": "object", "properties": {"q": {"type": "string", "maxLength": 5}}, "required": ["q"]});
        let tool = McpTool::new("s__t", def(schema.clone()), false, false, up.link.clone());
        // What the engine reads is the schema the server gave, parsed for the reading only.
        let read = tool.parameter_schema();
        assert!(matches!(read, std::borrow::Cow::Owned(_)));
        assert_eq!(*read, schema);
        assert_eq!(
            tool.result_schema().as_deref(),
            Some(&serde_json::json!({"type": "object", "properties": {"r": {"type": "string"}}}))
        );
        // A caller that wants a reference gets one, kept from then on.
        assert_eq!(tool.parameters(), &schema);
        assert!(matches!(tool.parameter_schema(), std::borrow::Cow::Borrowed(_)));
        // A change of schema is still a change of definition (grants are revoked on it).
        let other = McpTool::new(
            "s__t",
            def(
                serde_json::json!({"type": "object", "properties": {"q": {"type": "string", "maxLength": 6}}, "required": ["q"]}),
            ),
            false,
            false,
            up.link.clone(),
        );
        assert_ne!(tool.def(), other.def());
        let same = McpTool::new("s__t", def(schema), false, false, up.link.clone());
        assert_eq!(tool.def(), same.def());
    }
}
