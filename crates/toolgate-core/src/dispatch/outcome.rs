//! What a call and a turn end with: the closed outcome enum DESIGN.md names, the turn's status,
//! and the values the stages hand each other (`Stop` when a stage ends the call, `Done` when the
//! call ran).

use crate::error::{CallError, ErrorKind};
use crate::formats::ToolResult;
use crate::types::CallId;
use serde::Serialize;
use serde_json::Value;

/// Why a call (and with it the loop) aborts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortReason {
    /// A stop or kill.
    StoppedByUser,
    /// A malformed call under `malformed = "abort"`.
    MalformedCall,
    /// The consecutive-error cap was reached.
    ConsecutiveErrors,
    /// The loop detector tripped.
    LoopDetected,
    /// A post hook stopped the run.
    PostHookStop,
}

impl AbortReason {
    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StoppedByUser => "stopped_by_user",
            Self::MalformedCall => "malformed_call",
            Self::ConsecutiveErrors => "consecutive_errors",
            Self::LoopDetected => "loop_detected",
            Self::PostHookStop => "post_hook_stop",
        }
    }
}

/// The outcome of one call.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The normal case: append `entry`.
    Recorded {
        /// The result the model sees.
        entry: ToolResult,
        /// Whether the call succeeded.
        success: bool,
        /// Whether the turn ends after this batch.
        end_turn: bool,
    },
    /// The tool asked for the turn to be re-run with this context; nothing is recorded.
    Restart {
        /// What to add to the model's context.
        context: Value,
    },
    /// The loop must stop. `entry` is the result the history gets if the conversation continues
    /// (a synthetic `canceled` for a killed or never-started call), so every call id keeps exactly
    /// one result.
    Abort {
        /// Why.
        reason: AbortReason,
        /// The call's result for the history.
        entry: ToolResult,
    },
}

impl Outcome {
    /// The history entry, if the outcome has one.
    pub fn entry(&self) -> Option<&ToolResult> {
        match self {
            Self::Recorded { entry, .. } | Self::Abort { entry, .. } => Some(entry),
            Self::Restart { .. } => None,
        }
    }

    /// Whether the call succeeded: recorded without an error (a restart is not a failure, an
    /// abort is).
    pub fn succeeded(&self) -> bool {
        match self {
            Self::Recorded { success, .. } => *success,
            Self::Restart { .. } => true,
            Self::Abort { .. } => false,
        }
    }
}

/// How a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The answer had no tool calls: it is the final answer.
    FinalAnswer,
    /// Results were recorded; call the model again.
    Continue,
    /// A terminal tool ran: the turn ends.
    EndTurn,
    /// A tool asked for the turn to be re-run with more context.
    Restart,
    /// The loop must stop.
    Aborted(AbortReason),
}

impl TurnStatus {
    /// The stable string (`continue`, `end_turn`, `stopped_by_user`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FinalAnswer => "final_answer",
            Self::Continue => "continue",
            Self::EndTurn => "end_turn",
            Self::Restart => "restart",
            Self::Aborted(r) => r.as_str(),
        }
    }
}

/// What a turn produced.
#[derive(Clone, Debug)]
pub struct TurnOutcome {
    /// The messages to append, in the answer's format: the assistant message, then the results.
    pub messages: Vec<Value>,
    /// Each call's outcome, in the model's order.
    pub outcomes: Vec<Outcome>,
    /// How the turn ended.
    pub status: TurnStatus,
    /// The context a `Restart` asked for.
    pub restart_context: Option<Value>,
    /// The message of a post hook that stopped the run.
    pub stop_message: Option<String>,
}

impl TurnOutcome {
    /// The results, in the model's order (one per call id, except after a restart).
    pub fn results(&self) -> impl Iterator<Item = &ToolResult> {
        self.outcomes.iter().filter_map(Outcome::entry)
    }
}

/// The turn's status from its calls' outcomes: the first abort in the model's order wins, then a
/// restart, then a terminal tool.
pub fn turn_status(outcomes: &[Outcome]) -> TurnStatus {
    if let Some(reason) = outcomes.iter().find_map(|o| match o {
        Outcome::Abort { reason, .. } => Some(*reason),
        _ => None,
    }) {
        return TurnStatus::Aborted(reason);
    }
    if outcomes.iter().any(|o| matches!(o, Outcome::Restart { .. })) {
        return TurnStatus::Restart;
    }
    if outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Recorded { end_turn: true, .. }))
    {
        return TurnStatus::EndTurn;
    }
    TurnStatus::Continue
}

/// A stage ending the call: the value every stage returns with `?`, turned into an [`Outcome`]
/// and a journal row by stage 13.
#[derive(Clone, Debug)]
pub(crate) enum Stop {
    /// The call is refused or failed: the model sees the error (it counts toward the
    /// consecutive-error cap).
    Refused(CallError),
    /// The loop must stop; the model's history gets the error.
    Abort(AbortReason, CallError),
    /// The tool asked for the turn to be re-run with this context.
    Restart(Value),
}

impl From<CallError> for Stop {
    fn from(error: CallError) -> Self {
        Self::Refused(error)
    }
}

/// A call that ran: what the model sees, and how the call ended.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) content: Value,
    /// The content matches the tool's output schema untouched (MCP `structuredContent`).
    pub(crate) structured: bool,
    /// The turn ends after this batch.
    pub(crate) end_turn: bool,
    /// The tool ran but did not succeed (a non-zero exit, its own timeout, a post hook's block):
    /// the model sees `content` with its provider's error flag.
    pub(crate) failed: Option<ErrorKind>,
    /// A post hook stopped the run after this call.
    pub(crate) stop: Option<String>,
}

/// The history entry of a call that ended in an error.
pub(crate) fn error_entry(id: &CallId, name: &str, error: &CallError) -> ToolResult {
    ToolResult {
        call_id: id.clone(),
        name: name.to_owned(),
        content: error.to_json(),
        is_error: true,
        error_kind: Some(error.kind),
        structured: false,
    }
}
