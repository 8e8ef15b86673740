//! Stage 13: the only place a call's journal row is written, from what the stages returned, and
//! where its metrics and events end. Also the row committed before a tool that is not read-only
//! runs (the journal must hold it first, so a call id never runs twice).

use super::Engine;
use super::outcome::{AbortReason, Done, Outcome, Stop, error_entry};
use super::turn::TurnState;
use crate::error::{CallError, ErrorKind};
use crate::events::Event;
use crate::formats::ToolResult;
use crate::permit::Source;
use crate::redact::{redact_text, redact_value};
use crate::result::{json_size, truncate};
use crate::session::Session;
use crate::store::JournalRow;
use crate::types::{ToolCall, ToolName};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The most of a call's arguments (and raw text) one journal row keeps.
pub const AUDIT_BYTES: usize = 8 << 10;

/// Where the call's journal row stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Journal {
    /// Not in the store yet: stage 13 writes it, and never over a row the call id already has.
    Unwritten,
    /// Committed `started` before the tool ran: stage 13 closes it.
    Begun,
    /// The call id already ran in this session: that row is its record, left untouched.
    Foreign,
}

/// One call on its way through the stages: what the journal row, the metrics and the history
/// entry are made of.
pub(crate) struct Flight {
    pub(crate) call: ToolCall,
    /// The arguments as validated (and rewritten by a hook): what runs and what is hashed.
    pub(crate) args: Value,
    /// The registered tool name (the row's), and the name the provider knows (the entry's).
    pub(crate) tool: ToolName,
    pub(crate) name: String,
    started_at: SystemTime,
    pub(crate) queued: Instant,
    pub(crate) waiting: Duration,
    pub(crate) running: Duration,
    pub(crate) attempts: u32,
    pub(crate) truncated: bool,
    pub(crate) cache_hit: bool,
    /// The verdict as journalled (`allow`, `deny`, `canceled`) and its source.
    pub(crate) verdict: Option<(&'static str, Source)>,
    pub(crate) hooks: Option<Value>,
    pub(crate) journal: Journal,
    /// The per-turn cap slot this call holds (stage 6), given back if it never runs.
    pub(crate) slot: Option<ToolName>,
    /// Stage 10 started the tool.
    pub(crate) ran: bool,
    /// Hook context added to what the model sees.
    pub(crate) context: Vec<String>,
    /// `CallStarted` was emitted, so `CallFinished` is due.
    pub(crate) announced: bool,
    /// The background job the call started: the job, not this call, closes the journal row.
    pub(crate) job: Option<String>,
}

impl Flight {
    pub(crate) fn new(call: ToolCall, name: String, queued: Instant) -> Self {
        Self {
            args: call.arguments_value(),
            tool: call.name.clone(),
            name,
            call,
            started_at: SystemTime::now(),
            queued,
            waiting: Duration::ZERO,
            running: Duration::ZERO,
            attempts: 0,
            truncated: false,
            cache_hit: false,
            verdict: None,
            hooks: None,
            journal: Journal::Unwritten,
            slot: None,
            ran: false,
            context: Vec::new(),
            announced: false,
            job: None,
        }
    }

    /// Notes what a hook said in the row's `hooks` object, under `stage` (`pre` or `post`).
    pub(crate) fn note_hook(&mut self, stage: &str, value: Value) {
        match self.hooks.as_mut().and_then(Value::as_object_mut) {
            Some(hooks) => {
                hooks.insert(stage.into(), value);
            }
            None => self.hooks = Some(serde_json::json!({ stage: value })),
        }
    }
}

impl Engine {
    /// Stage 13: the outcome, the journal row, the metrics and events, from what the stages
    /// returned.
    pub(crate) async fn record(
        &self,
        session: &Session,
        turn: &TurnState,
        mut flight: Flight,
        result: Result<Done, Stop>,
    ) -> Outcome {
        if let Some(tool) = flight.slot.take().filter(|_| !flight.ran) {
            let mut executed = turn.executed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = executed.get_mut(&tool) {
                *n = n.saturating_sub(1);
            }
        }
        let outcome = self.outcome(session, turn, &flight, result);
        self.write_row(session, turn, &flight, &outcome).await;
        if flight.announced {
            self.finish(&flight, &outcome);
        }
        outcome
    }

    fn outcome(&self, session: &Session, turn: &TurnState, f: &Flight, result: Result<Done, Stop>) -> Outcome {
        let done = match result {
            Err(Stop::Refused(error)) => return self.failure(session, error_entry(&f.call.id, &f.name, &error)),
            Err(Stop::Abort(reason, error)) => {
                return Outcome::Abort {
                    reason,
                    entry: error_entry(&f.call.id, &f.name, &error),
                };
            }
            Err(Stop::Restart(context)) => return Outcome::Restart { context },
            Ok(done) => done,
        };
        let entry = ToolResult {
            call_id: f.call.id.clone(),
            name: f.name.clone(),
            content: done.content,
            is_error: done.failed.is_some(),
            error_kind: done.failed,
            structured: done.structured && done.failed.is_none(),
        };
        if let Some(message) = done.stop {
            // The rest of the batch gets synthetic results; the loop ends with the hook's message.
            turn.stop(message);
            return Outcome::Abort {
                reason: AbortReason::PostHookStop,
                entry,
            };
        }
        if done.failed.is_some() {
            return self.failure(session, entry);
        }
        session.consecutive_errors.store(0, Ordering::SeqCst);
        if turn.allowlist.is_some() && self.config.deliberate_retain_turns > 0 {
            // "Do it again" works: the tool stays exposed for the next turns.
            session
                .retained
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(f.tool.clone(), self.config.deliberate_retain_turns);
        }
        Outcome::Recorded {
            entry,
            success: true,
            end_turn: done.end_turn,
        }
    }

    /// An unsuccessful call's outcome; the consecutive-error cap turns the Nth into an abort.
    fn failure(&self, session: &Session, entry: ToolResult) -> Outcome {
        let failures = session.consecutive_errors.fetch_add(1, Ordering::SeqCst) + 1;
        if self.config.max_consecutive_errors > 0 && failures >= self.config.max_consecutive_errors {
            session.consecutive_errors.store(0, Ordering::SeqCst);
            return Outcome::Abort {
                reason: AbortReason::ConsecutiveErrors,
                entry,
            };
        }
        Outcome::Recorded {
            entry,
            success: false,
            end_turn: false,
        }
    }

    /// The call's journal row as it stands, in `state`.
    pub(crate) fn row(&self, session: &Session, turn: &TurnState, f: &Flight, state: &'static str) -> JournalRow {
        JournalRow {
            session_id: session.id.clone(),
            call_id: f.call.id.clone(),
            turn_id: turn.id.clone(),
            tool: f.tool.clone(),
            arguments_hash: crate::guard::canonical_hash(&f.args),
            arguments: self.config.audit_arguments.then(|| audit_arguments(&f.args)),
            repaired: f.call.repair.is_some(),
            raw: f.call.repair.as_ref().map(|r| audit_text(&r.raw)),
            state: state.into(),
            decision: f.verdict.map(|(d, _)| d.into()),
            source: f.verdict.map(|(_, s)| s.as_str().into()),
            hooks: f.hooks.clone(),
            cache_hit: f.cache_hit,
            attempts: f.attempts,
            started_at: Some(f.started_at),
            waiting_ms: f.waiting.as_millis() as u64,
            running_ms: f.running.as_millis() as u64,
            ..JournalRow::default()
        }
    }

    /// Commits the row `started` before a tool that is not read-only runs; a call id the journal
    /// already holds is refused, so a call never runs twice.
    pub(crate) async fn begin_row(&self, session: &Session, turn: &TurnState, f: &mut Flight) -> Result<(), Stop> {
        let row = self.row(session, turn, f, "started");
        self.claim_row(session, f, row).await
    }

    /// [`Self::begin_row`] for a call that starts a background job: the row names the job.
    pub(crate) async fn begin_row_with(
        &self,
        session: &Session,
        turn: &TurnState,
        f: &mut Flight,
        job: Value,
    ) -> Result<(), Stop> {
        let mut row = self.row(session, turn, f, "started");
        row.job = Some(job);
        self.claim_row(session, f, row).await
    }

    async fn claim_row(&self, session: &Session, f: &mut Flight, row: JournalRow) -> Result<(), Stop> {
        match session.store.journal_begin(&row).await {
            Ok(true) => {
                f.journal = Journal::Begun;
                Ok(())
            }
            Ok(false) => {
                f.journal = Journal::Foreign;
                Err(Stop::Refused(CallError::new(
                    ErrorKind::ExecutionFailed,
                    format!(
                        "The call id {} already ran in this session; a call is never run twice. Issue a new call.",
                        f.call.id
                    ),
                )))
            }
            Err(e) => {
                // Nothing ran and the store cannot take a row: there is nothing to close.
                f.journal = Journal::Foreign;
                Err(Stop::Refused(CallError::new(
                    ErrorKind::ExecutionFailed,
                    format!("The call was not run: {e}."),
                )))
            }
        }
    }

    async fn write_row(&self, session: &Session, turn: &TurnState, f: &Flight, outcome: &Outcome) {
        // A call that started a job left its row `started`: the job closes it when it ends.
        if f.journal == Journal::Foreign || (f.job.is_some() && f.journal == Journal::Begun) {
            return;
        }
        let kind = match outcome {
            Outcome::Recorded { success: true, .. } | Outcome::Restart { .. } => None,
            other => other.entry().and_then(|e| e.error_kind),
        };
        let state = match kind {
            None => "success",
            Some(ErrorKind::Canceled) => "canceled",
            Some(_) => "error",
        };
        let mut row = self.row(session, turn, f, state);
        row.error_type = kind.map(|k| k.as_str().into());
        row.may_have_run = state == "canceled" && f.attempts > 0;
        row.finished_at = Some(SystemTime::now());
        let written = if f.journal == Journal::Unwritten && !f.ran {
            // A refusal never overwrites the row an earlier call with this id left.
            session.store.journal_begin(&row).await.map(drop)
        } else {
            session.store.journal_finish(row).await
        };
        if let Err(e) = written {
            tracing::error!(error = %e, call_id = %f.call.id, "could not write the journal row");
        }
    }

    /// Metrics, the log line and `CallFinished`.
    fn finish(&self, f: &Flight, outcome: &Outcome) {
        let success = outcome.succeeded();
        let error_type = outcome.entry().and_then(|e| e.error_kind).map(ErrorKind::as_str);
        let total = f.queued.elapsed();
        let waiting = if f.attempts > 0 { f.waiting } else { total };
        tracing::info!(
            tool = %f.call.name,
            call_id = %f.call.id,
            success,
            error_type,
            attempts = f.attempts,
            duration_ms = total.as_secs_f64() * 1e3,
            waiting_ms = waiting.as_secs_f64() * 1e3,
            running_ms = f.running.as_secs_f64() * 1e3,
            "tool call finished"
        );
        self.events.emit(&Event::CallFinished {
            call_id: f.call.id.clone(),
            tool: f.call.name.clone(),
            success,
            error_type,
            attempts: f.attempts,
            duration_ms: total.as_millis() as u64,
            waiting_ms: waiting.as_millis() as u64,
            running_ms: f.running.as_millis() as u64,
            truncated: f.truncated,
            cache_hit: f.cache_hit,
        });
    }
}

/// Arguments as the journal keeps them: secrets redacted, cut structurally to
/// [`AUDIT_BYTES`] (the row's hash covers them whole).
fn audit_arguments(args: &Value) -> Value {
    let redacted = redact_value(args);
    if json_size(&redacted) <= AUDIT_BYTES {
        return redacted;
    }
    truncate(&redacted, AUDIT_BYTES, None).value
}

/// Raw call text as the journal keeps it: redacted, at most [`AUDIT_BYTES`] on a char boundary.
fn audit_text(raw: &str) -> String {
    let redacted = redact_text(raw);
    if redacted.len() <= AUDIT_BYTES {
        return redacted.into_owned();
    }
    let mut end = AUDIT_BYTES;
    while !redacted.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} bytes cut]", &redacted[..end], redacted.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_text_is_cut_on_a_char_boundary_and_says_how_much() {
        let raw = "é".repeat(AUDIT_BYTES);
        let kept = audit_text(&raw);
        assert!(kept.len() < raw.len());
        assert!(
            kept.ends_with(&format!("[{} bytes cut]", raw.len() - AUDIT_BYTES)),
            "{}",
            &kept[kept.len() - 40..]
        );
    }

    #[test]
    fn a_hook_note_keeps_both_stages() {
        let mut f = Flight::new(
            ToolCall::new("c1", "t", serde_json::Map::new()),
            "t".into(),
            Instant::now(),
        );
        f.note_hook("pre", serde_json::json!({"decision": "allow"}));
        f.note_hook("post", serde_json::json!({"replaced": true}));
        let hooks = f.hooks.unwrap();
        assert_eq!(hooks["pre"]["decision"], "allow");
        assert_eq!(hooks["post"]["replaced"], true);
    }
}
