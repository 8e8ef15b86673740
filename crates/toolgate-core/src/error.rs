//! The error contract: what the model sees when a call does not succeed.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// The stable error `type` strings of DESIGN.md; the set is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    MalformedCall,
    UnknownTool,
    NotAvailable,
    InvalidArguments,
    LoopDetected,
    RateLimited,
    PermissionDenied,
    RejectedByUser,
    HookDenied,
    Timeout,
    Canceled,
    ExecutionFailed,
    ResultInvalid,
}

impl ErrorKind {
    /// The stable string (`"invalid_arguments"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MalformedCall => "malformed_call",
            Self::UnknownTool => "unknown_tool",
            Self::NotAvailable => "not_available",
            Self::InvalidArguments => "invalid_arguments",
            Self::LoopDetected => "loop_detected",
            Self::RateLimited => "rate_limited",
            Self::PermissionDenied => "permission_denied",
            Self::RejectedByUser => "rejected_by_user",
            Self::HookDenied => "hook_denied",
            Self::Timeout => "timeout",
            Self::Canceled => "canceled",
            Self::ExecutionFailed => "execution_failed",
            Self::ResultInvalid => "result_invalid",
        }
    }
}

/// The message of the result a call gets when its tool panicked: the one failure that is the
/// engine's and not the tool's (an MCP task reports it as `failed`, not as a tool error).
pub const TOOL_CRASHED: &str = "The tool crashed while running this call.";

/// One refusal or failure, as the model sees it:
/// `{"error": {"type": kind, "message": …, …details}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct CallError {
    /// The stable kind.
    pub kind: ErrorKind,
    /// One sentence the model can act on.
    pub message: String,
    /// Extra keys beside `type` and `message` (`errors`, `suggestions`, `attempts`…).
    pub details: Map<String, Value>,
}

impl CallError {
    /// An error without details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// Adds a detail key.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// The JSON the model sees.
    pub fn to_json(&self) -> Value {
        let mut inner = Map::with_capacity(2 + self.details.len());
        inner.insert("type".into(), json!(self.kind.as_str()));
        inner.insert("message".into(), json!(self.message));
        for (k, v) in &self.details {
            if k != "type" && k != "message" {
                inner.insert(k.clone(), v.clone());
            }
        }
        json!({ "error": Value::Object(inner) })
    }
}

/// What a tool returns when it fails.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// A passing failure (a 503, a lock held): retried when the tool is read-only or idempotent.
    #[error("{message}")]
    Retryable {
        /// What went wrong.
        message: String,
        /// How long the other side asked us to wait, if it said.
        retry_after: Option<Duration>,
    },
    /// A failure that retrying will not fix.
    #[error("{0}")]
    Failed(String),
    /// The tool could not read its arguments (typed tools whose struct rejects them).
    #[error("{0}")]
    InvalidArguments(String),
    /// The tool stopped because its cancellation token fired.
    #[error("the call was canceled")]
    Canceled,
    /// The tool enforced a time limit of its own (one a remote end can extend, say) and it
    /// passed: reported as a `timeout`, like the engine's.
    #[error("timed out after {} ms", .0.as_millis())]
    TimedOut(Duration),
}

impl ToolError {
    /// A non-retryable failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// A retryable failure with no wait hint.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::Retryable {
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether a retry may help.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Retryable { .. })
    }
}
