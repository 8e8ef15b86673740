//! Stages 9 and 10: answer from the cache, or run the tool within its time limit, raced with a
//! kill. The time limit is one rule: a tool's own setting never exceeds the engine's
//! `timeout_ms`, and neither exceeds the deadline; the tool is told the limit in
//! `ToolContext::timeout`, so a per-call argument (exec_shell's `timeout_ms`) is held under it.

use super::Engine;
use super::outcome::{AbortReason, Stop};
use super::record::Flight;
use super::turn::{TurnState, call_kill};
use crate::cache::{self, KeyParts};
use crate::error::{CallError, ErrorKind};
use crate::execute::{ExecFailure, ExecPolicy, ExecReport, execute};
use crate::jobs::Jobs;
use crate::registry::Entry;
use crate::session::Session;
use crate::tool::{CacheScope, CacheSpec, ToolContext, ToolOutput, ToolSpec};
use crate::validate::CompiledSchema;
use serde_json::Value;
use std::time::Duration;

/// How much longer than its limit the engine waits for a tool that stops itself (it kills its
/// process tree and reports what it has) before it drops the call.
pub(crate) const SELF_STOP_GRACE: Duration = Duration::from_secs(10);

impl Engine {
    /// The time limits of one call: `(attempt limit the tool is told, policy the engine enforces)`.
    pub(crate) fn limits(&self, spec: &ToolSpec) -> (Duration, ExecPolicy) {
        let deadline = Duration::from_millis(self.config.deadline_ms);
        let deadline = spec.deadline.map_or(deadline, |d| d.min(deadline));
        let engine = Duration::from_millis(self.config.timeout_ms);
        let limit = spec.timeout.map_or(engine, |t| t.min(engine)).min(deadline);
        let enforced = if spec.stops_itself {
            limit + SELF_STOP_GRACE
        } else {
            limit
        };
        let policy = ExecPolicy {
            timeout: enforced,
            deadline: if spec.stops_itself {
                deadline + SELF_STOP_GRACE
            } else {
                deadline
            },
            retry: spec.retry.unwrap_or_else(|| self.config.retry()),
            retry_allowed: spec.retry_allowed(),
        };
        (limit, policy)
    }

    /// Stages 9–10: commit the row of a tool that is not read-only, then run (or answer from the
    /// cache). A kill aborts the loop; a timeout or a failure is the call's error.
    pub(crate) async fn run(
        &self,
        session: &Session,
        turn: &TurnState,
        entry: &Entry,
        compiled: &CompiledSchema,
        f: &mut Flight,
    ) -> Result<ToolOutput, Stop> {
        let spec = entry.spec();
        if spec.runs_in_background(&f.args) {
            return self.start_job(session, turn, entry, f).await;
        }
        if !spec.annotations.read_only {
            self.begin_row(session, turn, f).await?;
        }
        let (kill, _linked) = call_kill(session, turn);
        let (limit, policy) = self.limits(spec);
        let ctx = ToolContext {
            jobs: Jobs::new(self.jobs.clone(), session.id.clone()),
            session_id: session.id.clone(),
            turn_id: turn.id.clone(),
            iteration: turn.iteration,
            long_loop: turn.long_loop,
            cancel: kill.child_token(),
            workspace: session.workspace.clone(),
            principal: session.principal.clone(),
            progress: self.progress_sink(&f.call, turn),
            store: session.store.clone(),
            timeout: limit,
        };
        f.waiting = f.queued.elapsed();
        f.ran = true;
        let (tool, args, id) = (entry.tool().as_ref(), &f.args, &f.call.id);
        let run = || execute(tool, &ctx, args, policy, &kill, self.events.as_ref(), id);
        let report = match spec.cache.filter(|_| spec.retry_allowed()) {
            None => run().await,
            Some(plan) => {
                let key = cache::key(&KeyParts {
                    tool: entry.name().as_str(),
                    schema_hash: compiled.hash(),
                    args,
                    workspace: &session.workspace_text,
                    principal: session.principal.as_str(),
                    scope: plan.scope,
                    session: session.id.as_str(),
                    turn: turn.id.as_str(),
                });
                let (report, hit) = self.cached(session, turn, plan, key, run).await;
                f.cache_hit = hit;
                report
            }
        };
        f.attempts = report.attempts;
        f.running = report.running;
        match report.result {
            Ok(output) => match output.restart {
                Some(context) => Err(Stop::Restart(context)),
                None => Ok(output),
            },
            Err(ExecFailure::Killed) => Err(Stop::Abort(
                AbortReason::StoppedByUser,
                CallError::new(
                    ErrorKind::Canceled,
                    "The call was canceled by the user while it ran; its partial result was discarded.",
                ),
            )),
            Err(ExecFailure::Timeout { limit }) => Err(Stop::Refused(
                CallError::new(
                    ErrorKind::Timeout,
                    format!(
                        "The tool did not finish within {} ms and was stopped.",
                        limit.as_millis()
                    ),
                )
                .with("attempts", report.attempts)
                .with("timeout_ms", limit.as_millis() as u64),
            )),
            Err(ExecFailure::Failed(e)) => Err(Stop::Refused(
                CallError::new(ErrorKind::ExecutionFailed, e.to_string())
                    .with("attempts", report.attempts)
                    .with("retryable", e.is_retryable()),
            )),
        }
    }

    /// Stage 9 around stage 10: answers from the cache, or runs once and stores a success.
    async fn cached<F, Fut>(
        &self,
        session: &Session,
        turn: &TurnState,
        plan: CacheSpec,
        key: String,
        run: F,
    ) -> (ExecReport, bool)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = ExecReport>,
    {
        let hit = |content: Value| ExecReport {
            result: Ok(ToolOutput::json(content)),
            attempts: 0,
            running: Duration::ZERO,
        };
        if plan.scope == CacheScope::Persistent {
            if let Ok(Some(content)) = session.store.cache_get(&key).await {
                return (hit(content), true);
            }
            let report = run().await;
            if let Some(content) = cacheable(&report)
                && let Err(e) = session.store.cache_put(&key, &content, plan.ttl).await
            {
                tracing::warn!(error = %e, "could not store the cache entry");
            }
            return (report, false);
        }
        // The report of a run that happened here, so a miss is reported as what it was.
        let mut ran: Option<ExecReport> = None;
        // A session entry also goes to a durable store, so the session's other processes share it.
        let shared = (plan.scope == CacheScope::Session && session.store.durable()).then(|| key.clone());
        let run_once = async {
            if let Some(key) = &shared
                && let Ok(Some(content)) = session.store.cache_get(key).await
            {
                return Ok(content);
            }
            let report = run().await;
            let cacheable = cacheable(&report);
            if let (Some(key), Some(content)) = (&shared, &cacheable)
                && let Err(e) = session.store.cache_put(key, content, plan.ttl).await
            {
                tracing::warn!(error = %e, "could not store the cache entry");
            }
            ran = Some(report.clone());
            cacheable.ok_or(report)
        };
        let outcome = if plan.scope == CacheScope::Turn {
            // Turn entries live and die with the turn.
            let cell = turn
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key)
                .or_default()
                .clone();
            cell.get_or_try_init(|| run_once)
                .await
                .cloned()
                .map_err(std::sync::Arc::new)
        } else {
            self.cache
                .get_or_run(key, plan.ttl, run_once)
                .await
                .map(|cached| cached.content.clone())
        };
        match (outcome, ran) {
            (_, Some(report)) => (report, false),
            (Ok(content), None) => (hit(content), true),
            (Err(report), None) => ((*report).clone(), false),
        }
    }
}

/// What a run leaves in the cache: a success's untruncated content; failures (including a
/// tool's own unsuccessful result) and restarts never.
fn cacheable(report: &ExecReport) -> Option<Value> {
    match &report.result {
        Ok(output) if output.restart.is_none() && output.failure.is_none() => Some(output.content.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineConfig;
    use crate::registry::Registry;

    fn engine(timeout_ms: u64, deadline_ms: u64) -> Engine {
        Engine::new(
            Registry::new(),
            EngineConfig {
                timeout_ms,
                deadline_ms,
                ..EngineConfig::default()
            },
        )
    }

    #[test]
    fn a_tool_s_timeout_never_exceeds_the_engine_s_nor_the_deadline() {
        let ms = Duration::from_millis;
        let spec = |timeout: Option<u64>| ToolSpec {
            timeout: timeout.map(ms),
            ..ToolSpec::default()
        };
        let e = engine(1_000, 5_000);
        assert_eq!(e.limits(&spec(None)).0, ms(1_000), "the engine's by default");
        assert_eq!(e.limits(&spec(Some(300))).0, ms(300), "a lower tool setting wins");
        assert_eq!(
            e.limits(&spec(Some(60_000))).0,
            ms(1_000),
            "a higher one is held to the engine's"
        );
        assert_eq!(
            engine(9_000, 2_000).limits(&spec(None)).0,
            ms(2_000),
            "never past the deadline"
        );
        let stops_itself = ToolSpec {
            stops_itself: true,
            ..spec(None)
        };
        let (told, policy) = e.limits(&stops_itself);
        assert_eq!(told, ms(1_000), "the tool is told the limit");
        assert!(policy.timeout > told, "the engine's own timeout is a backstop after it");
    }
}
