//! The batch scheduler, and the stages that act on a whole batch before any call starts: the
//! malformed policy (stage 1), the stop check (stage 2) and the loop detector (stage 6).
//! Calls start in the model's order; read-only calls share a read lock (bounded), every other
//! call takes the write lock, so it waits for all earlier calls and blocks all later ones.

use super::Engine;
use super::outcome::{AbortReason, Outcome, Stop};
use super::record::Flight;
use super::turn::TurnState;
use crate::config::MalformedPolicy;
use crate::error::{CallError, ErrorKind};
use crate::parse::Malformed;
use crate::session::Session;
use crate::types::{ToolCall, ToolName};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::{RwLock, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

type Parsed = Result<ToolCall, Malformed>;

impl Engine {
    /// Stages 2–13 for a batch of normalised calls, in the model's order.
    pub(crate) async fn run_parsed(
        self: &Arc<Self>,
        session: &Arc<Session>,
        turn: &Arc<TurnState>,
        parsed: Vec<Parsed>,
    ) -> Vec<Outcome> {
        if let Some(stop) = self.batch_stop(session, &parsed) {
            let mut outcomes = Vec::with_capacity(parsed.len());
            for p in parsed {
                let (flight, own) = self.flight_of(p);
                let stop = match (&stop, own) {
                    // Under `malformed = "abort"` a malformed call keeps its own error.
                    (Stop::Abort(AbortReason::MalformedCall, _), Some(own)) => {
                        Stop::Abort(AbortReason::MalformedCall, own)
                    }
                    _ => stop.clone(),
                };
                outcomes.push(self.record(session, turn, flight, Err(stop)).await);
            }
            return outcomes;
        }
        if parsed.len() == 1 {
            let queued = Instant::now();
            let p = parsed.into_iter().next();
            return match p {
                Some(Ok(call)) => vec![self.run_call_at(session, turn, call, queued).await],
                Some(Err(m)) => vec![self.malformed(session, turn, m).await],
                None => Vec::new(),
            };
        }
        self.schedule(session, turn, parsed).await
    }

    /// What stops the whole batch before any call starts, if anything: a malformed call under
    /// `malformed = "abort"` (stage 1), a pending stop (stage 2), the Nth identical batch (stage 6).
    fn batch_stop(&self, session: &Session, parsed: &[Parsed]) -> Option<Stop> {
        if self.config.malformed == MalformedPolicy::Abort && parsed.iter().any(Result::is_err) {
            return Some(Stop::Abort(
                AbortReason::MalformedCall,
                CallError::new(
                    ErrorKind::Canceled,
                    "Not run: another call in this batch was malformed, so the batch was aborted. Reissue the calls.",
                ),
            ));
        }
        if session.stop_requested() {
            return Some(never_started());
        }
        let valid: Vec<&ToolCall> = parsed.iter().filter_map(|p| p.as_ref().ok()).collect();
        if valid.is_empty() || self.config.loop_threshold == 0 {
            return None;
        }
        let args: Vec<Value> = valid.iter().map(|c| c.arguments_value()).collect();
        let tripped = session
            .loop_detector
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(valid.iter().zip(&args).map(|(c, a)| (c.name.as_str(), a)));
        let n = self.config.loop_threshold;
        tripped.then(|| {
            Stop::Abort(
                AbortReason::LoopDetected,
                CallError::new(
                    ErrorKind::LoopDetected,
                    format!("The same tool calls were repeated {n} times in a row, so this batch was not run. Try a different approach."),
                )
                .with("repeats", n),
            )
        })
    }

    /// A call's flight before it reaches the pipeline, and a malformed call's own error.
    fn flight_of(&self, parsed: Parsed) -> (Flight, Option<CallError>) {
        match parsed {
            Ok(call) => {
                let name = self.provider_name(&call.name);
                (Flight::new(call, name, Instant::now()), None)
            }
            Err(m) => {
                let name = m
                    .name
                    .as_deref()
                    .map_or_else(|| "unknown".to_owned(), crate::registry::provider_safe);
                let call = ToolCall::new(
                    m.id,
                    ToolName::new(m.name.as_deref().unwrap_or("unknown")),
                    Default::default(),
                );
                (Flight::new(call, name, Instant::now()), Some(*m.error))
            }
        }
    }

    /// A malformed call, under `malformed = "continue"`: refused with its own error, recorded.
    async fn malformed(&self, session: &Session, turn: &TurnState, m: Malformed) -> Outcome {
        let (flight, error) = self.flight_of(Err(m));
        let error = error.unwrap_or_else(|| CallError::new(ErrorKind::MalformedCall, "The call is malformed."));
        self.record(session, turn, flight, Err(Stop::Refused(error))).await
    }

    /// Runs a batch: calls start in order; read-only calls share a read lock (bounded), every other
    /// call takes the write lock, so it waits for all earlier calls and blocks all later ones.
    async fn schedule(
        self: &Arc<Self>,
        session: &Arc<Session>,
        turn: &Arc<TurnState>,
        parsed: Vec<Parsed>,
    ) -> Vec<Outcome> {
        let lock = Arc::new(RwLock::new(()));
        let readers = Arc::new(Semaphore::new(self.config.max_parallel.max(1)));
        let mut set = JoinSet::new();
        let mut slots: Vec<Option<Outcome>> = vec![None; parsed.len()];
        let mut fallback: Vec<Option<ToolCall>> = Vec::with_capacity(parsed.len());
        for (index, p) in parsed.into_iter().enumerate() {
            let call = match p {
                Ok(call) => call,
                Err(m) => {
                    fallback.push(None);
                    slots[index] = Some(self.malformed(session, turn, m).await);
                    continue;
                }
            };
            fallback.push(Some(call.clone()));
            let queued = Instant::now();
            let read_only = turn
                .registry
                .get(call.name.as_str())
                .is_none_or(|e| e.spec().annotations.read_only);
            let (engine, session, turn) = (Arc::clone(self), Arc::clone(session), Arc::clone(turn));
            if read_only {
                let permit = readers.clone().acquire_owned().await;
                let guard = lock.clone().read_owned().await;
                set.spawn(async move {
                    let outcome = engine.run_call_at(&session, &turn, call, queued).await;
                    drop((guard, permit));
                    (index, outcome)
                });
            } else {
                let guard = lock.clone().write_owned().await;
                set.spawn(async move {
                    let outcome = engine.run_call_at(&session, &turn, call, queued).await;
                    drop(guard);
                    (index, outcome)
                });
            }
        }
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((index, outcome)) => slots[index] = Some(outcome),
                Err(e) => tracing::error!(error = %e, "a tool call task failed"),
            }
        }
        // A call whose task panicked still gets exactly one result.
        let mut outcomes = Vec::with_capacity(slots.len());
        for (slot, call) in slots.into_iter().zip(fallback) {
            match (slot, call) {
                (Some(outcome), _) => outcomes.push(outcome),
                (None, Some(call)) => {
                    let (flight, _) = self.flight_of(Ok(call));
                    let error = CallError::new(ErrorKind::ExecutionFailed, crate::error::TOOL_CRASHED);
                    outcomes.push(self.record(session, turn, flight, Err(Stop::Refused(error))).await);
                }
                (None, None) => {}
            }
        }
        outcomes
    }
}

/// Stage 2's refusal: a pending stop or kill.
pub(crate) fn never_started() -> Stop {
    Stop::Abort(
        AbortReason::StoppedByUser,
        CallError::new(
            ErrorKind::Canceled,
            "The call was not run because the user stopped the turn.",
        ),
    )
}
