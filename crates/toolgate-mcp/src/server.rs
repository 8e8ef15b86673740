//! The gateway's MCP face: the governed registry served to MCP clients. Every `tools/call` goes
//! through the whole pipeline in the client's own session; refusals and failures are
//! `CallToolResult`s with `isError` and the error JSON, only protocol errors are JSON-RPC errors.

use crate::approve::{Queue, QueueApprover, Via};
use crate::hub::Hub;
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction,
    Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, OnceLock};
use toolgate_core::permit::{Answer as Approval, ApprovalRequest, Approver, DenyAll};
use toolgate_core::tool::ProgressSink;
use toolgate_core::{Answer, Engine, Format, Outcome, Session, SessionOptions, TurnOptions};

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
    /// Clients to tell when the tools change.
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Every live session (a shutdown kills what still runs after the grace period).
    live: Mutex<Vec<std::sync::Weak<Session>>>,
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
            peers: Mutex::new(Vec::new()),
            live: Mutex::new(Vec::new()),
        });
        if let Some(hub) = hub {
            let weak = Arc::downgrade(&gateway);
            hub.on_change(move || {
                if let Some(g) = weak.upgrade() {
                    g.tools_changed();
                }
            });
        }
        gateway
    }

    /// Tells every connected client that the tool list changed.
    fn tools_changed(&self) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|p| !p.is_transport_closed());
        for peer in peers.iter() {
            let peer = peer.clone();
            tokio::spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
            });
        }
    }

    /// A new session: the factory's options, this gateway's approver (elicitation asks go to
    /// `elicit` when given), followed for grant revocation and shutdown.
    fn new_session(&self, id: Option<toolgate_core::SessionId>, elicit: Option<Arc<ElicitApprover>>) -> Arc<Session> {
        let mut options = (self.sessions)();
        let id = id
            .or(options.id.take())
            .unwrap_or_else(toolgate_core::SessionId::generate);
        options.id = Some(id.clone());
        options.approver = match (self.via, &self.queue, elicit) {
            (Via::Yes, _, _) => Arc::new(toolgate_core::permit::ApproveAll),
            (Via::Elicitation, _, Some(elicit)) => elicit,
            (Via::Queue, Some(queue), _) => Arc::new(QueueApprover {
                queue: queue.clone(),
                session: id.to_string(),
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

    /// The session of a REST request: the one named (its stored grants loaded), or a fresh one.
    pub async fn rest_session(&self, id: Option<toolgate_core::SessionId>) -> Arc<Session> {
        let named = id.is_some();
        let session = self.new_session(id, None);
        if named && let Err(e) = session.load_grants().await {
            tracing::warn!(error = %e, "could not load the session's grants");
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
    }

    /// A handler for one client session.
    pub fn handler(self: &Arc<Self>) -> GatewayHandler {
        GatewayHandler {
            gateway: self.clone(),
            session: Arc::new(OnceLock::new()),
            elicit: Arc::new(ElicitApprover::default()),
        }
    }

    /// The info `initialize` answers with.
    pub fn info(&self) -> InitializeResult {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        InitializeResult::new(capabilities).with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
    }

    /// The tools exposed, as `tools/list` answers.
    pub fn list(&self) -> Result<ListToolsResult, McpError> {
        let mut list = self.engine.tool_list(Format::Mcp, &TurnOptions::default());
        let tools: Vec<rmcp::model::Tool> = serde_json::from_value(list["tools"].take())
            .map_err(|e| McpError::internal_error(format!("tool list: {e}"), None))?;
        // The SDK's constructor fills what each protocol revision needs (`resultType`…).
        Ok(ListToolsResult::with_all_items(tools))
    }
}

/// One client session's handler (rmcp makes one per session).
#[derive(Clone)]
pub struct GatewayHandler {
    gateway: Arc<Gateway>,
    session: Arc<OnceLock<Arc<Session>>>,
    elicit: Arc<ElicitApprover>,
}

impl GatewayHandler {
    /// The client's toolgate session (made on first use).
    pub fn session(&self, peer: &Peer<RoleServer>) -> Arc<Session> {
        self.session
            .get_or_init(|| {
                let g = &self.gateway;
                let session = g.new_session(None, Some(self.elicit.clone()));
                let mut peers = g.peers.lock().unwrap_or_else(|p| p.into_inner());
                peers.retain(|p| !p.is_transport_closed());
                peers.push(peer.clone());
                session
            })
            .clone()
    }

    /// `tools/call` through the pipeline.
    pub async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let g = &self.gateway;
        // Only tools in the registry exist for a client: anything else is a protocol error.
        if g.engine.registry().get(&request.name).is_none() {
            return Err(McpError::invalid_params(
                format!("Unknown tool: {}", request.name),
                None,
            ));
        }
        let session = self.session(&context.peer);
        *self.elicit.peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(context.peer.clone());
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
        let progress = match context.meta.get_progress_token() {
            Some(token) => {
                let peer = context.peer.clone();
                ProgressSink::new(move |p| {
                    let params: Result<ProgressNotificationParam, _> = serde_json::from_value(json!({
                        "progressToken": token.0.clone(),
                        "progress": p.progress,
                        "total": p.total,
                        "message": p.message,
                    }));
                    if let Ok(params) = params {
                        let peer = peer.clone();
                        tokio::spawn(async move {
                            let _ = peer.notify_progress(params).await;
                        });
                    }
                })
            }
            None => ProgressSink::default(),
        };
        // A fresh call id per request: JSON-RPC ids repeat across clients and reconnects, and
        // the journal never runs one call id twice.
        let body = json!({
            "id": format!("mcp-{}", uuid::Uuid::now_v7()),
            "params": {"name": request.name, "arguments": request.arguments.map(Value::Object)},
        });
        let answer = Answer::parse(Format::Mcp, &body).map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let options = TurnOptions {
            format: Some(Format::Mcp),
            cancel: Some(context.ct.clone()),
            progress,
            ..TurnOptions::default()
        };
        let turn = tracing::Instrument::instrument(g.engine.run_turn(&session, &answer, options), span).await;
        Ok(match turn.outcomes.first() {
            Some(outcome) => result_of(outcome),
            None => {
                error_result(json!({"error": {"type": "execution_failed", "message": "The call produced no result."}}))
            }
        })
    }
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
            let mut result = CallToolResult::success(vec![ContentBlock::text(entry.content_text())]);
            if entry.structured {
                result.structured_content = Some(entry.content.clone());
            }
            result
        }
        None => error_result(json!({"error": {"type": "execution_failed",
            "message": "The tool asked for the turn to be re-run, which an MCP call cannot do."}})),
    }
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> InitializeResult {
        self.gateway.info()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.session(&context.peer);
        self.gateway.list()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context).await.map(CallToolResponse::Complete)
    }
}

/// Asks the connected client through MCP elicitation (when it declared the capability).
#[derive(Default)]
pub struct ElicitApprover {
    peer: Mutex<Option<Peer<RoleServer>>>,
}

#[async_trait]
impl Approver for ElicitApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Approval {
        let Some(peer) = self.peer.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Approval::Unavailable;
        };
        let can = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some());
        if !can {
            return Approval::Unavailable;
        }
        let args = toolgate_core::redact::redact_value(&request.arguments());
        let message = format!(
            "Allow the tool `{}` to run with {}? ({})",
            request.call.name, args, request.reason
        );
        let params: ElicitRequestParams = match serde_json::from_value(json!({
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "title": "Decision",
                                 "enum": ["approve_once", "approve_session", "reject"]},
                    "reason": {"type": "string", "title": "Reason (when rejecting)"}
                },
                "required": ["decision"]
            }
        })) {
            Ok(p) => p,
            Err(_) => return Approval::Unavailable,
        };
        match peer.create_elicitation(params).await {
            Ok(result) if result.action == ElicitationAction::Accept => {
                let content = result.content.unwrap_or(Value::Null);
                crate::approve::parse_answer(&content).unwrap_or(Approval::Reject(Some("unreadable answer".into())))
            }
            Ok(_) => Approval::Reject(Some("the client declined".into())),
            Err(e) => {
                tracing::warn!(error = %e, "elicitation failed");
                Approval::Unavailable
            }
        }
    }
}
