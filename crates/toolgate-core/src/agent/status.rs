//! How a run ended, and what it produced.

use crate::ModelErrorKind;
use crate::dispatch::AbortReason;
use std::fmt;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentStatus {
    /// The model answered with text alone.
    FinalAnswer,
    /// A terminal tool ended the turn.
    EndTurn,
    /// `max_iterations` model calls were made.
    MaxIterations {
        /// The limit.
        limit: u32,
    },
    /// The same batch was repeated, or the same call kept returning the same output.
    LoopDetected,
    /// Too many calls failed in a row.
    ConsecutiveErrors,
    /// A post hook stopped the run.
    PostHookStop,
    /// A malformed call under `malformed = "abort"`.
    MalformedCall,
    /// A stop or kill.
    StoppedByUser,
    /// The model failed.
    ModelError(ModelErrorKind),
}

impl AgentStatus {
    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FinalAnswer => "final_answer",
            Self::EndTurn => "end_turn",
            Self::MaxIterations { .. } => "max_iterations",
            Self::LoopDetected => "loop_detected",
            Self::ConsecutiveErrors => "consecutive_errors",
            Self::PostHookStop => "post_hook_stop",
            Self::MalformedCall => "malformed_call",
            Self::StoppedByUser => "stopped_by_user",
            Self::ModelError(_) => "model_error",
        }
    }

    /// Whether the run ended the way a run should (an answer or a terminal tool).
    pub fn is_success(self) -> bool {
        matches!(self, Self::FinalAnswer | Self::EndTurn)
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxIterations { limit } => write!(f, "max_iterations ({limit})"),
            Self::ModelError(kind) => write!(f, "model_error ({})", kind.as_str()),
            other => f.write_str(other.as_str()),
        }
    }
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct AgentRun {
    /// How it ended.
    pub status: AgentStatus,
    /// The final answer's text (also the answer made at the limit, when asked for).
    pub text: Option<String>,
    /// Model calls made.
    pub iterations: u32,
    /// Why it ended, when not with an answer (the model error, the post hook's message, …).
    pub detail: Option<String>,
}

impl AgentRun {
    /// Whether the run gave the user an answer: a final answer, a terminal tool, or the answer
    /// made without tools at the iteration limit (`final_answer_on_limit`).
    pub fn answered(&self) -> bool {
        self.status.is_success() || (matches!(self.status, AgentStatus::MaxIterations { .. }) && self.text.is_some())
    }
}

/// The run's status for the abort that ended a turn.
pub(super) fn abort_status(reason: AbortReason) -> AgentStatus {
    match reason {
        AbortReason::StoppedByUser => AgentStatus::StoppedByUser,
        AbortReason::MalformedCall => AgentStatus::MalformedCall,
        AbortReason::ConsecutiveErrors => AgentStatus::ConsecutiveErrors,
        AbortReason::LoopDetected => AgentStatus::LoopDetected,
        AbortReason::PostHookStop => AgentStatus::PostHookStop,
    }
}
