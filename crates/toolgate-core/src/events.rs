//! The event stream for UIs and tests: call started, repaired, verdict, retry, result, message added.

use crate::types::{CallId, Repair, SessionId, ToolName};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

/// Something that happened to a call or a conversation.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A call entered the pipeline (after stage 1).
    CallStarted {
        /// The session.
        session_id: SessionId,
        /// The call.
        call_id: CallId,
        /// The tool named.
        tool: ToolName,
        /// The arguments as normalised, redacted of secrets.
        arguments: Value,
        /// What stage 1 repaired, if anything.
        #[serde(skip_serializing_if = "Option::is_none")]
        repair: Option<Repair>,
    },
    /// Validation changed the arguments (coercions, dropped keys).
    ArgumentsAdjusted {
        /// The call.
        call_id: CallId,
        /// What was changed.
        warnings: Vec<String>,
    },
    /// The permission verdict, with DESIGN.md's decision and source strings.
    Verdict {
        /// The call.
        call_id: CallId,
        /// The tool.
        tool: ToolName,
        /// `allow`, `deny` or `canceled`.
        decision: &'static str,
        /// Where the verdict came from (`readonly_hint`, `user_approved`, …).
        source: &'static str,
        /// Why.
        reason: String,
    },
    /// A failed attempt is retried after a delay.
    Retry {
        /// The call.
        call_id: CallId,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// The delay before the next attempt.
        delay_ms: u64,
        /// The upper bound the delay was drawn under.
        bound_ms: u64,
        /// The failure.
        error: String,
    },
    /// A call finished, whatever its outcome.
    CallFinished {
        /// The call.
        call_id: CallId,
        /// The tool.
        tool: ToolName,
        /// Whether it succeeded.
        success: bool,
        /// The error type, for failures.
        #[serde(skip_serializing_if = "Option::is_none")]
        error_type: Option<&'static str>,
        /// Attempts made (0 when it never ran).
        attempts: u32,
        /// Whole duration.
        duration_ms: u64,
        /// Time in gates and approval.
        waiting_ms: u64,
        /// Time in the tool.
        running_ms: u64,
        /// Whether the result was truncated.
        truncated: bool,
        /// Whether the cache answered (execution was skipped).
        cache_hit: bool,
    },
    /// A message was added to the conversation.
    MessageAdded {
        /// The message, in the session's format.
        message: Value,
    },
    /// The agent loop asks the model (one iteration).
    ModelRequested {
        /// The loop's iteration (1-based).
        iteration: u32,
        /// The model asked (`provider:model`).
        model: String,
        /// Whether tools were offered (the final answer at the limit offers none).
        tools: bool,
    },
    /// The model answered.
    ModelAnswered {
        /// The loop's iteration.
        iteration: u32,
        /// The answer's text, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// How many tool calls it made.
        calls: usize,
        /// Time the model took.
        duration_ms: u64,
    },
    /// The model failed (after the adapter's retries).
    ModelFailed {
        /// The loop's iteration.
        iteration: u32,
        /// The error's kind (`rate_limited`, `auth`, …).
        kind: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A tool asked for the turn to be re-run with more context.
    TurnRestarted {
        /// The loop's iteration.
        iteration: u32,
    },
    /// A tool chose the model for the next turn.
    ModelOverride {
        /// The model for the next turn only.
        model: String,
    },
    /// A running tool reported progress.
    Progress {
        /// The call.
        call_id: CallId,
        /// What it reported.
        progress: crate::tool::Progress,
    },
    /// The tools changed while the engine runs (an upstream MCP server changed its list,
    /// restarted, or came up late).
    ToolsChanged {
        /// The server whose tools changed.
        server: String,
        /// Tools that appeared.
        added: Vec<String>,
        /// Tools that went away.
        removed: Vec<String>,
        /// Tools whose definition changed: their session grants were revoked.
        changed: Vec<String>,
    },
    /// The loop passed its soft warning threshold.
    LongLoop {
        /// The loop's iteration.
        iteration: u32,
        /// The hard limit.
        max_iterations: u32,
    },
    /// The agent loop ended.
    RunFinished {
        /// The end status (`final_answer`, `max_iterations`, …).
        status: &'static str,
        /// Iterations used.
        iterations: u32,
        /// The final answer, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Why it ended, for statuses other than an answer.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

/// Receives events. Must not block: it runs on the engine's path.
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn emit(&self, event: &Event);
}

/// Drops every event.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _: &Event) {}
}

/// Sends every event into an unbounded channel.
#[derive(Clone, Debug)]
pub struct ChannelEvents(mpsc::UnboundedSender<Event>);

impl ChannelEvents {
    /// A sink and the receiver its events arrive on.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self(tx), rx)
    }
}

impl EventSink for ChannelEvents {
    fn emit(&self, event: &Event) {
        let _ = self.0.send(event.clone());
    }
}
