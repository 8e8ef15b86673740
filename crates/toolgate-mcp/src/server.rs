//! The gateway's MCP face: the governed registry served to MCP clients. Every `tools/call` goes
//! through the whole pipeline in the client's own session; refusals and failures are
//! `CallToolResult`s with `isError` and the error JSON, only protocol errors are JSON-RPC errors.

use crate::approve::{Queue, QueueApprover, Via};
use crate::elicit::{self, ElicitApprover};
use crate::hub::Hub;
use crate::tasks::{self, Tasks};
use async_trait::async_trait;
// Logging (`logging/setLevel`) is deprecated by the draft revision, not by 2025-11-25, which the
// gateway serves.
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    CompleteRequestParams, CompleteResult, ContentBlock, CreateTaskResult, GetPromptRequestMethod,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, GetTaskParams, GetTaskResult, Implementation,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestMethod, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, SetLevelRequestMethod, SetLevelRequestParams,
    SubscribeRequestMethod, SubscribeRequestParams, UnsubscribeRequestMethod, UnsubscribeRequestParams,
    UpdateTaskParams,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use tokio_util::sync::CancellationToken;
use toolgate_core::permit::DenyAll;
use toolgate_core::rules::Layer;
use toolgate_core::tool::{ProgressSink, TaskSupport};
use toolgate_core::{Answer, Engine, Format, Outcome, Session, SessionOptions, TurnOptions};

/// What a gateway serves besides its governed tools: prompts, resources, completion, log
/// levels. `toolgate serve` sets the upstream servers' ([`crate::proxy::Proxy`]); an embedder
/// can set its own, as the MCP conformance fixture does. Every method defaults to what a server
/// without the feature answers.
#[async_trait]
pub trait Extension: Send + Sync {
    /// Declares what it serves in the capabilities `initialize` answers with.
    fn capabilities(&self, capabilities: &mut ServerCapabilities);
    /// `prompts/list`.
    async fn list_prompts(&self, _context: RequestContext<RoleServer>) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::default())
    }
    /// `prompts/get`.
    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResult, McpError> {
        Err(McpError::method_not_found::<GetPromptRequestMethod>())
    }
    /// `resources/list`.
    async fn list_resources(&self, _context: RequestContext<RoleServer>) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::default())
    }
    /// `resources/templates/list`.
    async fn list_resource_templates(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::default())
    }
    /// `resources/read`.
    async fn read_resource(
        &self,
        _request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, McpError> {
        Err(McpError::method_not_found::<ReadResourceRequestMethod>())
    }
    /// `resources/subscribe`.
    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Err(McpError::method_not_found::<SubscribeRequestMethod>())
    }
    /// `resources/unsubscribe`.
    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Err(McpError::method_not_found::<UnsubscribeRequestMethod>())
    }
    /// A resource of the upstream `server` changed: tell whoever subscribed to it.
    async fn resource_updated(&self, _server: &str, _uri: &str) {}
    /// A log message the upstream `server` sent outside any one session's call.
    #[allow(deprecated)]
    async fn upstream_log(&self, _server: &str, _params: rmcp::model::LoggingMessageNotificationParam) {}
    /// `completion/complete`.
    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Ok(CompleteResult::default())
    }
    /// `logging/setLevel`.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Err(McpError::method_not_found::<SetLevelRequestMethod>())
    }
}

/// A gateway without an extension: tools only.
struct NoExtension;

impl Extension for NoExtension {
    fn capabilities(&self, _: &mut ServerCapabilities) {}
}

/// Builds a session's options for a new client (workspace, policy, store); the gateway sets
/// the approver.
pub type SessionFactory = Arc<dyn Fn() -> SessionOptions + Send + Sync>;

/// Everything the MCP face shares between client sessions.
pub struct Gateway {
    /// The engine every call goes through.
    pub engine: Arc<Engine>,
    /// The upstream servers, when any are configured.
    pub hub: Option<Arc<Hub>>,
    /// How a new client's session starts.
    pub sessions: SessionFactory,
    /// How asks are answered.
    pub via: Via,
    /// The HTTP approval queue (when asks go there).
    pub queue: Option<Arc<Queue>>,
    /// The connected clients by toolgate session id (told when the tools change; reachable by
    /// tools that talk back to their caller).
    peers: Mutex<HashMap<String, Peer<RoleServer>>>,
    /// What it serves besides tools.
    extension: OnceLock<Arc<dyn Extension>>,
    /// Every live session (a shutdown kills what still runs after the grace period).
    live: Mutex<Vec<std::sync::Weak<Session>>>,
    /// Rules of each principal, before every other layer.
    principal_rules: OnceLock<HashMap<String, Layer>>,
    /// MCP tasks, in the sessions' store (made on first use).
    tasks: OnceLock<Arc<Tasks>>,
}

/// A principal's session id: `NAME/ID`.
pub fn scoped(principal: &str, id: &str) -> toolgate_core::SessionId {
    toolgate_core::SessionId::new(format!("{principal}/{id}"))
}

/// A session id as its principal named it (`NAME/ID` → `ID`).
pub fn unscoped<'a>(principal: &str, id: &'a str) -> &'a str {
    id.strip_prefix(principal)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(id)
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("via", &self.via)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway over this engine.
    pub fn new(
        engine: Arc<Engine>,
        hub: Option<Arc<Hub>>,
        sessions: SessionFactory,
        via: Via,
        queue: Option<Arc<Queue>>,
    ) -> Arc<Self> {
        let gateway = Arc::new(Self {
            engine,
            hub: hub.clone(),
            sessions,
            via,
            queue,
            peers: Mutex::new(HashMap::new()),
            extension: OnceLock::new(),
            live: Mutex::new(Vec::new()),
            principal_rules: OnceLock::new(),
            tasks: OnceLock::new(),
        });
        if let Some(hub) = hub {
            for upstream in hub.upstreams() {
                upstream.set_relay(Arc::new(crate::relay::ToClients(Arc::downgrade(&gateway))));
            }
            let weak = Arc::downgrade(&gateway);
            hub.on_change(move || {
                if let Some(g) = weak.upgrade() {
                    g.tools_changed();
                }
            });
        }
        gateway
    }

    /// The MCP tasks, kept in the store the sessions use (so every replica sharing it answers
    /// for them), or in memory when the sessions have none.
    pub fn tasks(&self) -> &Arc<Tasks> {
        self.tasks.get_or_init(|| {
            let store = (self.sessions)()
                .store
                .unwrap_or_else(|| Arc::new(toolgate_core::store::MemoryStore::new()));
            Arc::new(Tasks::new(store))
        })
    }

    /// Whether calls of `tool` may run as tasks (`None`: no such tool).
    pub fn task_support(&self, tool: &str) -> Option<TaskSupport> {
        self.engine.registry().get(tool).map(|t| t.spec().task)
    }

    /// Starts a call as a task outside an rmcp request (a `tools/call` with the `task`
    /// parameter of the 2025-11-25 revision, see [`crate::legacy`]), in the principal's session
    /// named `session` (made or taken up from the store), for `ttl`. The call goes through the
    /// whole pipeline; its asks go to the approval queue (no client request is open to elicit
    /// from). The task is in the store when this returns.
    pub async fn start_task(
        self: &Arc<Self>,
        principal: &str,
        session: &str,
        tool: &str,
        arguments: Option<serde_json::Map<String, Value>>,
        ttl: std::time::Duration,
    ) -> Result<tasks::Record, McpError> {
        match self.task_support(tool) {
            None => return Err(McpError::invalid_params(format!("Unknown tool: {tool}"), None)),
            Some(TaskSupport::Forbidden) => {
                return Err(McpError::new(
                    rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                    format!("Tool {tool} does not run as a task"),
                    None,
                ));
            }
            Some(_) => {}
        }
        let session = self.named_session(principal, "tasks", Some(session), None).await;
        let call_id = format!("mcp-{}", uuid::Uuid::now_v7());
        let tasks = self.tasks().clone();
        let (record, stop) = tasks
            .create_for(principal, session.id().as_str(), tool, &call_id, ttl)
            .await?;
        let body = json!({"id": call_id, "params": {"name": tool, "arguments": arguments.map(Value::Object)}});
        let engine = self.engine.clone();
        let session_id = session.id().to_string();
        let cancel = stop.clone();
        let work = async move {
            let answer = match Answer::parse(Format::Mcp, &body) {
                Ok(answer) => answer,
                Err(e) => {
                    return error_result(json!({"error": {"type": "invalid_arguments", "message": e.to_string()}}));
                }
            };
            let options = TurnOptions {
                format: Some(Format::Mcp),
                cancel: Some(cancel),
                ..TurnOptions::default()
            };
            let before = session.guards_state();
            let turn = engine.run_turn(&session, &answer, options).await;
            if session.guards_state() != before
                && let Err(e) = session.save_guards().await
            {
                tracing::warn!(error = %e, "could not keep the session's loop detector and error count");
            }
            match turn.outcomes.first() {
                Some(outcome) => result_of(outcome),
                None => error_result(
                    json!({"error": {"type": "execution_failed", "message": "The call produced no result."}}),
                ),
            }
        };
        let running = tasks.run(principal.to_owned(), record.clone(), stop, work);
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            // The revision's status notification, to the client's stream when it is open here.
            if let Ok(ended) = running.await
                && let Some(peer) = gateway
                    .upgrade()
                    .and_then(|g| g.peer(&toolgate_core::SessionId::new(session_id)))
            {
                let _ = peer.send_notification(crate::legacy::status_notification(&ended)).await;
            }
        });
        Ok(record)
    }

    /// What it serves besides tools: the one set, else nothing (the trait's defaults).
    pub(crate) fn extension(&self) -> &dyn Extension {
        static NONE: NoExtension = NoExtension;
        match self.extension.get() {
            Some(e) => e.as_ref(),
            None => &NONE,
        }
    }

    /// Serves `extension` besides the tools (once; a second call is refused).
    pub fn set_extension(&self, extension: Arc<dyn Extension>) -> Result<(), String> {
        self.extension
            .set(extension)
            .map_err(|_| "the gateway already has an extension".to_owned())
    }

    /// The connected MCP client of a session, for a tool that talks back to its caller
    /// (logging, sampling, elicitation). `None` for REST calls and closed clients.
    pub fn peer(&self, session: &toolgate_core::SessionId) -> Option<Peer<RoleServer>> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers
            .get(session.as_str())
            .filter(|p| !p.is_transport_closed())
            .cloned()
    }

    /// A live session by its id.
    pub(crate) fn live_session(&self, id: &toolgate_core::SessionId) -> Option<Arc<Session>> {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .find(|s| s.id() == id)
    }

    /// Tells every connected client that the tool list changed.
    fn tools_changed(&self) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|_, p| !p.is_transport_closed());
        for peer in peers.values() {
            let peer = peer.clone();
            tokio::spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
            });
        }
    }

    /// Sets the rules that apply to one principal's calls before every other layer (its own
    /// allow, ask and deny rules), for each principal named; once.
    pub fn set_principal_rules(&self, rules: HashMap<String, Layer>) -> Result<(), String> {
        self.principal_rules
            .set(rules)
            .map_err(|_| "the gateway already has principal rules".to_owned())
    }

    /// A new session of `principal`: the factory's options, its id scoped to the principal
    /// (`NAME/ID`, so its grants, handles and audit rows are the principal's own), the
    /// principal's rules first, this gateway's approver (elicitation asks go to `elicit` when
    /// given), followed for grant revocation and shutdown.
    fn new_session(
        &self,
        principal: &str,
        client: &str,
        id: Option<&str>,
        elicit: Option<Arc<ElicitApprover>>,
    ) -> Arc<Session> {
        let mut options = (self.sessions)();
        let generated = toolgate_core::SessionId::generate();
        let id = scoped(principal, id.unwrap_or(generated.as_str()));
        options.id = Some(id.clone());
        options.principal = toolgate_core::types::Principal::new(principal);
        if let Some(layer) = self.principal_rules.get().and_then(|r| r.get(principal)) {
            let mut layers: Vec<Layer> = options.policy.layers.as_ref().clone();
            layers.insert(0, layer.clone());
            options.policy.layers = Arc::new(layers);
        }
        options.approver = match (self.via, &self.queue, elicit) {
            (Via::Yes, _, _) => Arc::new(toolgate_core::permit::ApproveAll),
            (Via::Elicitation, _, Some(elicit)) => elicit,
            (Via::Queue, Some(queue), _) => Arc::new(QueueApprover {
                queue: queue.clone(),
                session: id.to_string(),
                principal: principal.to_owned(),
                client: client.to_owned(),
                timeout: std::time::Duration::from_millis(self.engine.config().approval_timeout_ms),
            }),
            _ => Arc::new(DenyAll),
        };
        let session = Arc::new(Session::new(self.engine.config(), options));
        if let Some(hub) = &self.hub {
            hub.track(&session);
        }
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|s| s.strong_count() > 0);
        live.push(Arc::downgrade(&session));
        session
    }

    /// The session of a principal's REST request: the one named (its stored grants loaded), or
    /// a fresh one.
    pub async fn rest_session(&self, principal: &str, id: Option<&str>) -> Arc<Session> {
        self.named_session(principal, "rest", id, None).await
    }

    /// A session for one request that names it (`id`), its grants and guards loaded from the
    /// store, so consecutive requests (on any replica sharing the store) share them.
    async fn named_session(
        &self,
        principal: &str,
        client: &str,
        id: Option<&str>,
        elicit: Option<Arc<ElicitApprover>>,
    ) -> Arc<Session> {
        let named = id.is_some();
        let session = self.new_session(principal, client, id, elicit);
        if named && let Err(e) = session.load_grants().await {
            tracing::warn!(error = %e, "could not load the session's grants");
        }
        if named && let Err(e) = session.load_guards().await {
            tracing::warn!(error = %e, "could not load the session's loop detector and error count");
        }
        session
    }

    /// Kills the calls still running in every session (their journal rows are closed as
    /// canceled).
    pub fn kill_all(&self) {
        for session in self.live.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if let Some(s) = session.upgrade() {
                s.kill();
            }
        }
        // Background jobs and MCP tasks outlive the request that started them, not the gateway.
        self.engine.jobs().kill_all();
        if let Some(tasks) = self.tasks.get() {
            tasks.cancel_all();
        }
    }

    /// A handler for one client session.
    pub fn handler(self: &Arc<Self>) -> GatewayHandler {
        GatewayHandler {
            gateway: self.clone(),
            session: Arc::new(tokio::sync::OnceCell::new()),
            elicit: Arc::new(ElicitApprover::default()),
        }
    }

    /// The info `initialize` answers with.
    pub fn info(&self) -> InitializeResult {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        self.extension().capabilities(&mut capabilities);
        InitializeResult::new(capabilities).with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
    }

    /// One page of the tools exposed, as `tools/list` answers: sorted by name, at most
    /// [`PAGE_TOOLS`] tools or [`PAGE_BYTES`] of them (one tool at least), then a cursor that
    /// names the last tool sent, so a list that changes between pages neither repeats nor skips
    /// a tool that stayed.
    pub fn list(&self, cursor: Option<&str>) -> Result<ListToolsResult, McpError> {
        let after = match cursor {
            None => None,
            Some(c) => Some(cursor_name(c).ok_or_else(|| {
                McpError::invalid_params(
                    "the cursor is not one this server gave",
                    Some(json!({"reason": "invalid_cursor"})),
                )
            })?),
        };
        // Only the page's tools are built: the names are sorted, and the tools after the cursor
        // are built a page's worth at a time until the page is full (a tool hidden this turn
        // takes no room), so listing 10,000 tools page by page never builds the whole list.
        let registry = self.engine.registry();
        let mut names: Vec<&str> = registry.entries().map(|e| e.provider_name()).collect();
        names.sort_unstable();
        let mut next_name = match after {
            Some(after) => names.partition_point(|n| *n <= after),
            None => 0,
        };
        let mut page = Vec::new();
        let mut bytes = 0;
        let mut more = false;
        'fill: while next_name < names.len() {
            let chunk = &names[next_name..(next_name + PAGE_TOOLS).min(names.len())];
            next_name += chunk.len();
            let wanted: std::collections::HashSet<&str> = chunk.iter().copied().collect();
            let mut list = self
                .engine
                .tool_list_of(Format::Mcp, &TurnOptions::default(), &|n| wanted.contains(n));
            let mut tools = match list["tools"].take() {
                Value::Array(tools) => tools,
                _ => Vec::new(),
            };
            tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            for tool in tools {
                let size = tool.to_string().len();
                if !page.is_empty() && (page.len() >= PAGE_TOOLS || bytes + size > PAGE_BYTES) {
                    more = true;
                    break 'fill;
                }
                bytes += size;
                page.push(tool);
            }
        }
        let next = page
            .last()
            .and_then(|t| t["name"].as_str())
            .filter(|_| more)
            .map(|n| format!("{CURSOR_PREFIX}{n}"));
        let page: Vec<rmcp::model::Tool> = serde_json::from_value(Value::Array(page))
            .map_err(|e| McpError::internal_error(format!("tool list: {e}"), None))?;
        // The SDK's constructor fills what each protocol revision needs (`resultType`…).
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }
}

/// Tools per `tools/list` page at most.
pub const PAGE_TOOLS: usize = 256;
/// JSON bytes of tools per `tools/list` page at most (a single larger tool gets a page alone):
/// the Python SDK refuses a server-sent event over 1 MiB.
pub const PAGE_BYTES: usize = 512 * 1024;
const CURSOR_PREFIX: &str = "after:";

/// The tool name a cursor this server gave continues after; `None` for anything else.
fn cursor_name(cursor: &str) -> Option<&str> {
    let name = cursor.strip_prefix(CURSOR_PREFIX)?;
    let safe = !name.is_empty()
        && name.len() <= toolgate_core::registry::MAX_PROVIDER_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    safe.then_some(name)
}

/// One client session's handler (rmcp makes one per session).
#[derive(Clone)]
pub struct GatewayHandler {
    gateway: Arc<Gateway>,
    session: Arc<tokio::sync::OnceCell<Arc<Session>>>,
    elicit: Arc<ElicitApprover>,
}

/// The session name of a client's `Mcp-Session-Id` over HTTP: derived from it (a hash, so the
/// audit, which shows session names, never shows a session id a client could be impersonated
/// with), so every replica that takes the MCP session over from the store finds the same
/// grants, handles and guards.
fn mcp_session_name(extensions: &rmcp::model::Extensions) -> Option<String> {
    let id = extensions
        .get::<axum::http::request::Parts>()?
        .headers
        .get("mcp-session-id")?
        .as_bytes();
    Some(session_name_of(id))
}

/// The session name of an `Mcp-Session-Id` (see `mcp_session_name`).
pub(crate) fn session_name_of(id: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id);
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("mcp-{hex}")
}

/// The principal an HTTP request's token names (`local` over stdio or without a token).
fn principal_of(extensions: &rmcp::model::Extensions) -> String {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::http::Caller>())
        .and_then(|c| match c {
            crate::http::Caller::Client(p) => Some(p.clone()),
            crate::http::Caller::Approver => None,
        })
        .unwrap_or_else(|| "local".to_owned())
}

/// A client's own name as the approver sees it: no control characters and no essay.
fn shown_name(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(100).collect()
}

/// The `_meta` key (and the HTTP header) by which a stateless client names its session.
pub const SESSION_META: &str = "dev.toolgate/session";
const SESSION_HEADER: &str = "x-toolgate-session";
/// The session of a stateless client that names none.
const STATELESS_DEFAULT: &str = "mcp";

/// For a stateless HTTP request (the 2026-07-28 revision: no handshake and no
/// `Mcp-Session-Id`, a fresh handler per request), the session it belongs to: the one it names
/// by header or `_meta`, else the principal's `mcp` session. `None` for a request of a
/// connection's session (a legacy client over HTTP, or stdio).
fn stateless_id(context: &RequestContext<RoleServer>) -> Option<Result<String, McpError>> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    if parts.headers.contains_key("mcp-session-id") {
        return None;
    }
    let named = parts
        .headers
        .get(SESSION_HEADER)
        .map(|v| v.to_str().map(str::to_owned).map_err(|_| ()))
        .or_else(|| {
            context
                .meta
                .0
                .get(SESSION_META)
                .map(|v| v.as_str().map(str::to_owned).ok_or(()))
        });
    Some(match named {
        None => Ok(STATELESS_DEFAULT.to_owned()),
        Some(Ok(id)) if !id.is_empty() && id.len() <= 200 && !id.chars().any(char::is_control) => Ok(id),
        Some(_) => Err(McpError::invalid_params(
            format!(
                "the session id ({SESSION_HEADER} or _meta \"{SESSION_META}\") must be 1 to 200 printable characters"
            ),
            None,
        )),
    })
}

/// The client's name a stateless request carries in `_meta`.
fn stateless_client(context: &RequestContext<RoleServer>) -> String {
    context
        .meta
        .0
        .get("io.modelcontextprotocol/clientInfo")
        .and_then(|info| info.get("name"))
        .and_then(Value::as_str)
        .map_or_else(|| "unknown".to_owned(), shown_name)
}

/// The token an MCP POST's connection cancels when the client goes away (HTTP only).
fn disconnect_of(extensions: &rmcp::model::Extensions) -> Option<CancellationToken> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::http::Disconnect>())
        .map(|d| d.0.clone())
}

impl GatewayHandler {
    /// The client's toolgate session (made on first use), for the principal its HTTP
    /// request's token named (`local` over stdio or without a token). Over HTTP it is named
    /// after the MCP session and takes up what the store holds of it (another replica may have
    /// served it before).
    pub async fn session(&self, peer: &Peer<RoleServer>, extensions: &rmcp::model::Extensions) -> Arc<Session> {
        self.session
            .get_or_init(|| async {
                let g = &self.gateway;
                let principal = principal_of(extensions);
                let client = peer
                    .peer_info()
                    .map_or_else(|| "unknown".to_owned(), |info| shown_name(&info.client_info.name));
                let name = mcp_session_name(extensions);
                let session = g.new_session(&principal, &client, name.as_deref(), Some(self.elicit.clone()));
                let mut peers = g.peers.lock().unwrap_or_else(|p| p.into_inner());
                peers.retain(|_, p| !p.is_transport_closed());
                peers.insert(session.id().to_string(), peer.clone());
                session
            })
            .await
            .clone()
    }

    /// `tools/call` through the pipeline: its result, or (a 2026-07-28 client that is to be
    /// asked by elicitation) the form it must answer before the tool runs.
    pub async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let g = &self.gateway;
        // Only tools in the registry exist for a client: anything else is a protocol error.
        if g.engine.registry().get(&request.name).is_none() {
            return Err(McpError::invalid_params(
                format!("Unknown tool: {}", request.name),
                None,
            ));
        }
        // A task for a task-supporting tool when the client declared the tasks extension (for
        // its session or this request); a tool that runs only as a task refuses other clients.
        let support = g
            .engine
            .registry()
            .get(&request.name)
            .map_or(TaskSupport::Forbidden, |t| t.spec().task);
        let declared =
            support != TaskSupport::Forbidden && context.client_capabilities().is_some_and(|c| c.supports_tasks());
        if support == TaskSupport::Required && !declared {
            return Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let as_task = declared && support != TaskSupport::Forbidden;
        let stateless = match stateless_id(&context) {
            Some(id) => Some(id?),
            None => None,
        };
        let principal = principal_of(&context.extensions);
        let (session, elicit) = match &stateless {
            Some(id) => {
                let elicit = Arc::new(ElicitApprover::default());
                let client = stateless_client(&context);
                let session = g
                    .named_session(&principal, &client, Some(id), Some(elicit.clone()))
                    .await;
                (session, elicit)
            }
            None => {
                let session = self.session(&context.peer, &context.extensions).await;
                // Another replica may have served this MCP session since: take up its grants
                // and guards.
                if mcp_session_name(&context.extensions).is_some() {
                    if let Err(e) = session.load_grants().await {
                        tracing::warn!(error = %e, "could not load the session's grants");
                    }
                    if let Err(e) = session.load_guards().await {
                        tracing::warn!(error = %e, "could not load the session's loop detector and error count");
                    }
                }
                (session, self.elicit.clone())
            }
        };
        *elicit.peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(context.peer.clone());
        let arguments = request.arguments.clone().unwrap_or_default();
        let asked = elicit::Asked::new(&principal, session.id().as_str(), &request.name, &arguments);
        // A retry that answers an ask runs under the ask's own call id, with the answer given;
        // any other call gets a fresh id (JSON-RPC ids repeat across clients and reconnects, and
        // the journal never runs one call id twice).
        let call_id = match request.request_state {
            Some(_) => {
                let (id, answer) = elicit::resume(session.store().as_ref(), &request, &asked).await?;
                elicit.answer(&id, answer);
                id
            }
            None => format!("mcp-{}", uuid::Uuid::now_v7()),
        };
        if request.request_state.is_none()
            && g.via == Via::Elicitation
            && elicit::multi_round_trip(context.protocol_version())
            && context.client_capabilities().is_some_and(|c| c.elicitation.is_some())
        {
            let call = toolgate_core::types::ToolCall::new(call_id.as_str(), request.name.as_ref(), arguments.clone());
            let check = g.engine.check(&session, &call);
            if check.decision == "ask" {
                let ttl = std::time::Duration::from_millis(g.engine.config().approval_timeout_ms);
                let form = elicit::defer(
                    session.store().as_ref(),
                    &asked,
                    &Value::Object(arguments),
                    &check.reason,
                    ttl,
                )
                .await?;
                return Ok(CallToolResponse::InputRequired(form));
            }
        }
        if as_task {
            return self
                .start_task(
                    request,
                    context,
                    session,
                    stateless.is_some(),
                    call_id,
                    principal,
                    elicit,
                )
                .await;
        }
        let result = self
            .run(request, context, &session, stateless.is_some(), &call_id, None)
            .await;
        elicit.forget(&call_id);
        Ok(CallToolResponse::Complete(result))
    }

    /// Starts the call as an MCP task: the task is in the store before the client hears of it,
    /// the call runs on after this request is answered (stopped by `tasks/cancel`, not by the
    /// request's end), and its end is recorded on the task.
    #[allow(clippy::too_many_arguments)]
    async fn start_task(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        session: Arc<Session>,
        stateless: bool,
        call_id: String,
        principal: String,
        elicit: Arc<ElicitApprover>,
    ) -> Result<CallToolResponse, McpError> {
        let tasks = self.gateway.tasks().clone();
        let (record, stop) = tasks
            .create(&principal, session.id().as_str(), &request.name, &call_id)
            .await?;
        let task = record.task.clone();
        let handler = self.clone();
        let cancel = stop.clone();
        let id = call_id.clone();
        let work = async move {
            handler
                .run(request, context, &session, stateless, &id, Some(cancel))
                .await
        };
        let running = tasks.run(principal, record, stop, work);
        tokio::spawn(async move {
            let _ = running.await;
            elicit.forget(&call_id);
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    /// Runs one call in `session` under `call_id`: progress forwarded in order, canceled by the
    /// client's cancellation or disconnect, the session's guards kept when it is kept. A task's
    /// call (`detached`) is stopped by its own token only and sends no progress.
    async fn run(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        session: &Arc<Session>,
        stateless: bool,
        call_id: &str,
        detached: Option<CancellationToken>,
    ) -> CallToolResult {
        let g = &self.gateway;
        let span = tracing::info_span!(
            "mcp_server_call",
            otel.name = %format!("tools/call {}", request.name),
            otel.kind = "server",
            mcp.method.name = "tools/call",
            gen_ai.tool.name = %request.name,
            mcp.session.id = %session.id(),
            jsonrpc.request.id = %request_id(&context),
        );
        crate::trace::adopt(&context.meta.0, &span);
        // Progress goes out in order, and all of it before the result: a notification that
        // arrives after the response is dropped by clients.
        let token = match detached {
            Some(_) => None,
            None => context.meta.get_progress_token(),
        };
        let (progress, flush) = match token {
            Some(token) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Forward>();
                let peer = context.peer.clone();
                tokio::spawn(async move {
                    while let Some(message) = rx.recv().await {
                        match message {
                            Forward::Progress(p) => {
                                let params: Result<ProgressNotificationParam, _> = serde_json::from_value(json!({
                                    "progressToken": token.0.clone(),
                                    "progress": p.progress,
                                    "total": p.total,
                                    "message": p.message,
                                }));
                                if let Ok(params) = params {
                                    let _ = peer.notify_progress(params).await;
                                }
                            }
                            Forward::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                });
                let sink_tx = tx.clone();
                let sink = ProgressSink::new(move |p| {
                    let _ = sink_tx.send(Forward::Progress(p));
                });
                (sink, Some(tx))
            }
            None => (ProgressSink::default(), None),
        };
        let body = json!({
            "id": call_id,
            "params": {"name": request.name, "arguments": request.arguments.map(Value::Object)},
        });
        let answer = match Answer::parse(Format::Mcp, &body) {
            Ok(answer) => answer,
            Err(e) => return error_result(json!({"error": {"type": "invalid_arguments", "message": e.to_string()}})),
        };
        // Stopped by the client's `notifications/cancelled` or by its going away mid-call (a
        // task: by `tasks/cancel`).
        let watch_disconnect = detached.is_none();
        let cancel = detached.unwrap_or_else(|| context.ct.child_token());
        let _watch = disconnect_of(&context.extensions)
            .filter(|_| watch_disconnect)
            .map(|gone| {
                let cancel = cancel.clone();
                let watching = CancellationToken::new();
                let done = watching.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        () = gone.cancelled() => cancel.cancel(),
                        () = done.cancelled() => {}
                    }
                });
                watching.drop_guard()
            });
        let options = TurnOptions {
            format: Some(Format::Mcp),
            cancel: Some(cancel),
            progress,
            ..TurnOptions::default()
        };
        let guards_before = session.guards_state();
        let turn = tracing::Instrument::instrument(g.engine.run_turn(session, &answer, options), span).await;
        let kept = stateless || mcp_session_name(&context.extensions).is_some();
        if kept
            && session.guards_state() != guards_before
            && let Err(e) = session.save_guards().await
        {
            tracing::warn!(error = %e, "could not keep the session's loop detector and error count");
        }
        if let Some(flush) = flush {
            let (done, sent) = tokio::sync::oneshot::channel();
            if flush.send(Forward::Flush(done)).is_ok() {
                let _ = sent.await;
            }
        }
        match turn.outcomes.first() {
            Some(outcome) => result_of(outcome),
            None => {
                error_result(json!({"error": {"type": "execution_failed", "message": "The call produced no result."}}))
            }
        }
    }
}

/// What the progress forwarder of a call is given, in order.
enum Forward {
    Progress(toolgate_core::tool::Progress),
    /// Answered once everything before it went out.
    Flush(tokio::sync::oneshot::Sender<()>),
}

fn request_id(context: &RequestContext<RoleServer>) -> String {
    serde_json::to_value(&context.id)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

fn error_result(content: Value) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(content.to_string())])
}

/// An outcome as a `CallToolResult`: the content as text (the error JSON for refusals and
/// failures, with `isError`), and `structuredContent` only for a whole, schema-valid success.
pub fn result_of(outcome: &Outcome) -> CallToolResult {
    match outcome.entry() {
        Some(entry) if entry.is_error => error_result(entry.content.clone()),
        Some(entry) => {
            let content =
                content_blocks(&entry.content).unwrap_or_else(|| vec![ContentBlock::text(entry.content_text())]);
            let mut result = CallToolResult::success(content);
            if entry.structured {
                result.structured_content = Some(entry.content.clone());
            }
            result
        }
        None => error_result(json!({"error": {"type": "execution_failed",
            "message": "The tool asked for the turn to be re-run, which an MCP call cannot do."}})),
    }
}

/// A result that is a list of MCP content blocks (what an upstream tool's images, audio and
/// resources become, see `tool::output`) goes out as those blocks, so media pass through the
/// gateway as media. Anything else is not blocks: `None`.
fn content_blocks(content: &Value) -> Option<Vec<ContentBlock>> {
    let items = content.as_array()?;
    if items.is_empty() || !items.iter().all(|i| i.get("type").is_some_and(Value::is_string)) {
        return None;
    }
    serde_json::from_value(content.clone()).ok()
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> InitializeResult {
        self.gateway.info()
    }

    /// The session is made as the client's handshake ends, so the gateway can reach the client
    /// (tool-list changes, task status) before its first `tools/list` or `tools/call`.
    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.session(&context.peer, &context.extensions).await;
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.session(&context.peer, &context.extensions).await;
        self.gateway.list(request.as_ref().and_then(|r| r.cursor.as_deref()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let principal = principal_of(&context.extensions);
        self.gateway.tasks().get(&principal, &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let principal = principal_of(&context.extensions);
        self.gateway.tasks().cancel(&principal, &request.task_id).await
    }

    /// A governed call never waits inside its task for the client's input (approvals are asked
    /// before the task starts, or through the approval queue), so there is nothing to update.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let principal = principal_of(&context.extensions);
        self.gateway.tasks().get(&principal, &request.task_id).await?;
        Err(McpError::invalid_params(
            format!("Task {} is not waiting for input", request.task_id),
            None,
        ))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.gateway.extension().list_prompts(context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.gateway
            .extension()
            .get_prompt(request, context)
            .await
            .map(GetPromptResponse::Complete)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.gateway.extension().list_resources(context).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.gateway.extension().list_resource_templates(context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.gateway
            .extension()
            .read_resource(request, context)
            .await
            .map(ReadResourceResponse::Complete)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.gateway.extension().subscribe(request, context).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.gateway.extension().unsubscribe(request, context).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.gateway.extension().complete(request, context).await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.gateway.extension().set_level(request, context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_results_go_out_as_content_blocks_and_other_arrays_as_text() {
        let media = json!([
            {"type": "text", "text": "a picture:"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "r"}}
        ]);
        let blocks = content_blocks(&media).unwrap();
        assert_eq!(serde_json::to_value(&blocks).unwrap(), media);
        // Data that merely is an array, or names an unknown block type, or misses a field, stays data.
        for data in [
            json!([1, 2, 3]),
            json!([]),
            json!([{"type": "row", "id": 1}]),
            json!([{"type": "image", "mimeType": "image/png"}]),
            json!({"type": "text", "text": "an object, not a list"}),
        ] {
            assert!(content_blocks(&data).is_none(), "{data}");
        }
    }
}
