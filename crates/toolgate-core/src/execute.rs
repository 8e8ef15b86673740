//! Stage 10: run a tool with a fresh timeout per attempt inside a whole-call deadline, raced with
//! the session's kill; retry retryable failures with exponential backoff and full jitter, only for
//! read-only or idempotent tools.

use crate::error::ToolError;
use crate::events::{Event, EventSink};
use crate::tool::{RetryPolicy, Tool, ToolContext, ToolOutput};
use crate::types::CallId;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How one call is run.
#[derive(Clone, Copy, Debug)]
pub struct ExecPolicy {
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Whole-call deadline.
    pub deadline: Duration,
    /// Retry policy (used only when `retry_allowed`).
    pub retry: RetryPolicy,
    /// Whether the tool is read-only or idempotent.
    pub retry_allowed: bool,
}

/// Why execution did not produce a result.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecFailure {
    /// An attempt ran out of time, or the deadline passed.
    Timeout {
        /// The limit that was hit.
        limit: Duration,
    },
    /// The tool failed.
    Failed(ToolError),
    /// The session was killed; the tool's work was cancelled.
    Killed,
}

/// What execution did.
#[derive(Clone, Debug)]
pub struct ExecReport {
    /// The output, or why there is none.
    pub result: Result<ToolOutput, ExecFailure>,
    /// Attempts started.
    pub attempts: u32,
    /// Time spent, from the first attempt to the end.
    pub running: Duration,
}

/// Runs the tool. `ctx.cancel` must be the call's token (a child of the session's kill token);
/// each attempt gets a child of it, cancelled when the attempt times out.
pub async fn execute(
    tool: &dyn Tool,
    ctx: &ToolContext,
    args: &Value,
    policy: ExecPolicy,
    kill: &CancellationToken,
    events: &dyn EventSink,
    call_id: &CallId,
) -> ExecReport {
    let start = Instant::now();
    let deadline = start + policy.deadline;
    let max_attempts = if policy.retry_allowed {
        policy.retry.max_attempts.max(1)
    } else {
        1
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let outcome = attempt(tool, ctx, args, policy, kill, deadline).await;
        // The attempt's future is dropped here; its token is cancelled on every failure path.
        let failure = match outcome {
            Ok(output) => {
                return ExecReport {
                    result: Ok(output),
                    attempts,
                    running: start.elapsed(),
                };
            }
            Err(ExecFailure::Failed(ToolError::Canceled)) if kill.is_cancelled() => ExecFailure::Killed,
            Err(ExecFailure::Failed(ToolError::TimedOut(limit))) => ExecFailure::Timeout { limit },
            Err(f) => f,
        };
        let retryable = match &failure {
            ExecFailure::Failed(e) => e.is_retryable(),
            ExecFailure::Timeout { .. } => Instant::now() < deadline,
            ExecFailure::Killed => false,
        };
        if !retryable || attempts >= max_attempts {
            return ExecReport {
                result: Err(failure),
                attempts,
                running: start.elapsed(),
            };
        }
        let (delay, bound) = retry_delay(&policy, attempts, &failure);
        if Instant::now() + delay >= deadline {
            return ExecReport {
                result: Err(failure),
                attempts,
                running: start.elapsed(),
            };
        }
        tracing::warn!(call_id = %call_id, attempt = attempts, delay_ms = delay.as_millis() as u64, error = ?failure, "retrying tool call");
        events.emit(&Event::Retry {
            call_id: call_id.clone(),
            attempt: attempts,
            delay_ms: delay.as_millis() as u64,
            bound_ms: bound.as_millis() as u64,
            error: match &failure {
                ExecFailure::Failed(e) => e.to_string(),
                ExecFailure::Timeout { limit } => format!("timed out after {} ms", limit.as_millis()),
                ExecFailure::Killed => "killed".into(),
            },
        });
        tokio::select! {
            biased;
            _ = kill.cancelled() => {
                return ExecReport { result: Err(ExecFailure::Killed), attempts, running: start.elapsed() };
            }
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One attempt within its limit (the attempt timeout, or what is left of the deadline), raced
/// with a kill; the attempt's token is cancelled on every failure path.
async fn attempt(
    tool: &dyn Tool,
    ctx: &ToolContext,
    args: &Value,
    policy: ExecPolicy,
    kill: &CancellationToken,
    deadline: Instant,
) -> Result<ToolOutput, ExecFailure> {
    let attempt_token = ctx.cancel.child_token();
    let mut attempt_ctx = ctx.clone();
    attempt_ctx.cancel = attempt_token.clone();
    let attempt_end = (Instant::now() + policy.timeout).min(deadline);
    let limit = if attempt_end == deadline {
        policy.deadline
    } else {
        policy.timeout
    };
    tokio::select! {
        biased;
        _ = kill.cancelled() => {
            attempt_token.cancel();
            Err(ExecFailure::Killed)
        }
        r = tool.execute(&attempt_ctx, args.clone()) => r.map_err(ExecFailure::Failed),
        _ = tokio::time::sleep_until(attempt_end) => {
            attempt_token.cancel();
            Err(ExecFailure::Timeout { limit })
        }
    }
}

/// The wait before the next attempt — the tool's `retry_after`, else full jitter under the
/// exponential bound — and that bound.
fn retry_delay(policy: &ExecPolicy, attempts: u32, failure: &ExecFailure) -> (Duration, Duration) {
    let bound = policy.retry.bound(attempts + 1);
    let jittered = Duration::from_millis(fastrand::u64(0..=bound.as_millis() as u64));
    let delay = match failure {
        ExecFailure::Failed(ToolError::Retryable {
            retry_after: Some(after),
            ..
        }) => *after,
        _ => jittered,
    };
    (delay, bound)
}
