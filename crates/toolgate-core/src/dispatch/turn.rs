//! The turn: its options, the state its calls share, and `run_turn`, which takes a model answer
//! through stage 1 and hands the batch to the scheduler.

use super::Engine;
use super::outcome::{Outcome, TurnOutcome, TurnStatus, turn_status};
use crate::events::Event;
use crate::formats::{self, Answer, CallEcho, Format, ToolResult};
use crate::parse::{self, Malformed};
use crate::registry::{Registry, provider_safe};
use crate::session::Session;
use crate::tool::ProgressSink;
use crate::types::{ToolCall, ToolName, TurnId};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Per-turn settings.
#[derive(Clone, Debug, Default)]
pub struct TurnOptions {
    /// The agent loop's iteration.
    pub iteration: u32,
    /// The loop has passed its soft warning threshold (tools may wrap up).
    pub long_loop: bool,
    /// Deliberate mode: only these tools are exposed this turn.
    pub allowlist: Option<Vec<ToolName>>,
    /// The provider format of the turn (tools may depend on its capabilities).
    pub format: Option<Format>,
    /// The caller's own stop for this turn's calls (an MCP client cancelling its request, or
    /// disconnecting): like a session kill, for these calls only.
    pub cancel: Option<CancellationToken>,
    /// Where the tools' progress reports go besides the event stream (an MCP client's progress
    /// token, say).
    pub progress: ProgressSink,
}

/// State shared by the calls of one turn.
pub struct TurnState {
    pub(crate) id: TurnId,
    pub(crate) iteration: u32,
    pub(crate) long_loop: bool,
    pub(crate) format: Option<Format>,
    pub(crate) allowlist: Option<HashSet<ToolName>>,
    /// Calls per tool that passed the per-turn cap (stage 6), released when a later stage
    /// refuses the call before it runs.
    pub(crate) executed: Mutex<HashMap<ToolName, u32>>,
    /// Set when a post hook stopped the run: calls not yet started are not run.
    stopped: Mutex<Option<String>>,
    /// Turn-scoped cache entries; each runs its call once for concurrent identical calls.
    pub(crate) cache: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Value>>>>,
    /// The tools as they were when the turn started (an upstream refresh swaps the engine's).
    pub(crate) registry: Arc<Registry>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) progress: ProgressSink,
}

impl TurnState {
    /// A new turn over these tools.
    pub fn new(options: TurnOptions, registry: Arc<Registry>) -> Self {
        Self {
            registry,
            cancel: options.cancel,
            progress: options.progress,
            id: TurnId::generate(),
            iteration: options.iteration,
            long_loop: options.long_loop,
            format: options.format,
            allowlist: options.allowlist.map(|a| a.into_iter().collect()),
            executed: Mutex::new(HashMap::new()),
            stopped: Mutex::new(None),
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn stop(&self, message: String) {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(message);
    }

    pub(crate) fn stop_message(&self) -> Option<String> {
        self.stopped.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn exposes(&self, name: &ToolName) -> bool {
        self.allowlist.as_ref().is_none_or(|a| a.contains(name))
    }
}

impl Engine {
    /// A turn's state: deliberate mode keeps tools that succeeded under it for a few more turns.
    pub(crate) fn start_turn(&self, session: &Session, mut options: TurnOptions) -> TurnState {
        let mut retained = session.retained.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(allow) = options.allowlist.as_mut() {
            allow.extend(retained.keys().cloned());
        }
        retained.retain(|_, turns| {
            *turns -= 1;
            *turns > 0
        });
        TurnState::new(options, self.registry())
    }

    /// Runs every call of a model answer and returns the messages to append.
    pub async fn run_turn(
        self: &Arc<Self>,
        session: &Arc<Session>,
        answer: &Answer,
        options: TurnOptions,
    ) -> TurnOutcome {
        let turn = Arc::new(self.start_turn(session, options));
        // Stage 1, for the whole batch.
        let parsed: Vec<Result<ToolCall, Malformed>> = answer
            .calls
            .iter()
            .map(|raw| parse::normalize(raw, &turn.registry, answer.cut_off))
            .collect();
        let echoes: Vec<CallEcho> = parsed.iter().map(|p| self.echo(p)).collect();
        let mut messages = formats::assistant_messages(answer, &echoes);
        if parsed.is_empty() {
            self.emit_messages(&messages);
            return TurnOutcome {
                messages,
                outcomes: Vec::new(),
                status: TurnStatus::FinalAnswer,
                restart_context: None,
                stop_message: None,
            };
        }
        let outcomes = self.run_parsed(session, &turn, parsed).await;
        let status = turn_status(&outcomes);
        let restart_context = outcomes.iter().find_map(|o| match o {
            Outcome::Restart { context } => Some(context.clone()),
            _ => None,
        });
        if status == TurnStatus::Restart {
            messages.clear();
        } else {
            let results: Vec<ToolResult> = outcomes.iter().filter_map(Outcome::entry).cloned().collect();
            messages.extend(formats::result_messages(answer.format, &results));
        }
        self.emit_messages(&messages);
        TurnOutcome {
            messages,
            outcomes,
            status,
            restart_context,
            stop_message: turn.stop_message(),
        }
    }

    fn emit_messages(&self, messages: &[Value]) {
        for m in messages {
            self.events.emit(&Event::MessageAdded { message: m.clone() });
        }
    }

    fn echo(&self, parsed: &Result<ToolCall, Malformed>) -> CallEcho {
        match parsed {
            Ok(call) => CallEcho {
                id: call.id.clone(),
                name: self.provider_name(&call.name),
                arguments: Some(call.arguments.clone()),
            },
            Err(m) => CallEcho {
                id: m.id.clone(),
                name: m.name.as_deref().map_or_else(|| "unknown".to_owned(), provider_safe),
                arguments: None,
            },
        }
    }

    /// The name the provider knows the tool by.
    pub(crate) fn provider_name(&self, name: &ToolName) -> String {
        self.registry()
            .get(name.as_str())
            .map_or_else(|| provider_safe(name.as_str()), |e| e.provider_name().to_owned())
    }
}

/// The token that stops a call: the session's kill, joined by the caller's own stop when the
/// turn has one. The guard ends the link when the call is done.
pub(crate) fn call_kill(
    session: &Session,
    turn: &TurnState,
) -> (CancellationToken, Option<tokio_util::sync::DropGuard>) {
    let kill = session.kill_token();
    let Some(own) = turn.cancel.clone() else {
        return (kill, None);
    };
    let both = kill.child_token();
    if own.is_cancelled() {
        both.cancel();
        return (both, None);
    }
    let link = both.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = own.cancelled() => link.cancel(),
            _ = link.cancelled() => {}
        }
    });
    (both.clone(), Some(both.drop_guard()))
}
