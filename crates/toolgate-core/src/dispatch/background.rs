//! Stage 10 for a call that runs in the background (a tool of category `background`, or a call
//! that sets the tool's background argument): the job is registered under the caps and its row
//! committed naming it, the call answers at once with the job's handle, and the work goes on in
//! a task of its own under the session's job token. See `crate::jobs`.

use super::Engine;
use super::outcome::Stop;
use super::record::Flight;
use super::run::SELF_STOP_GRACE;
use super::turn::TurnState;
use crate::error::{CallError, ErrorKind};
use crate::execute::{ExecFailure, ExecPolicy, execute};
use crate::jobs::{JobEnd, JobState, Jobs};
use crate::redact::redact_result;
use crate::registry::Entry;
use crate::result::{json_size, normalize_empty, truncate};
use crate::session::Session;
use crate::store::Store;
use crate::tool::{Tool, ToolContext, ToolOutput};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

impl Engine {
    /// Stage 10 for a call that runs in the background: the job is registered (under the caps)
    /// and its row committed `started` with the job's id before the work starts; the call answers
    /// at once with the job's handle, and the work goes on in a task of its own under the
    /// session's job token, within `[engine] job_timeout_ms`. When it ends, the job keeps its
    /// shaped result and the task closes the row with the outcome, exit code and output size.
    pub(crate) async fn start_job(
        &self,
        session: &Session,
        turn: &TurnState,
        entry: &Entry,
        f: &mut Flight,
    ) -> Result<ToolOutput, Stop> {
        let spec = entry.spec();
        let job = self
            .jobs
            .start(&session.id, f.tool.clone(), f.call.id.clone(), &session.jobs_token())
            .map_err(|why| Stop::Refused(CallError::new(ErrorKind::RateLimited, why)))?;
        f.job = Some(job.id.clone());
        let opened = self.begin_row_with(session, turn, f, json!({"id": job.id})).await;
        if let Err(stop) = opened {
            job.finish(JobEnd {
                state: JobState::Failed,
                result: Value::Null,
                error_type: Some(ErrorKind::ExecutionFailed.as_str()),
            });
            return Err(stop);
        }
        let limit = Duration::from_millis(self.config.job_timeout_ms);
        let grace = if spec.stops_itself {
            SELF_STOP_GRACE
        } else {
            Duration::ZERO
        };
        let policy = ExecPolicy {
            timeout: limit + grace,
            deadline: limit + grace,
            retry: spec.retry.unwrap_or_else(|| self.config.retry()),
            retry_allowed: false,
        };
        let ctx = ToolContext {
            session_id: session.id.clone(),
            turn_id: turn.id.clone(),
            iteration: turn.iteration,
            long_loop: turn.long_loop,
            cancel: job.cancel_token(),
            workspace: session.workspace.clone(),
            principal: session.principal.clone(),
            progress: self.progress_sink(&f.call, turn),
            store: session.store.clone(),
            timeout: limit,
            jobs: Jobs::new(self.jobs.clone(), session.id.clone()).running_as(job.clone()),
        };
        f.waiting = f.queued.elapsed();
        f.ran = true;
        let mut row = self.row(session, turn, f, "started");
        let work = JobWork {
            tool: entry.tool().clone(),
            args: f.args.clone(),
            events: self.events.clone(),
            results: session.store.clone(),
            budget: self.budget(entry),
            redact: spec.secrets.results,
        };
        let task_job = job.clone();
        tokio::spawn(async move {
            // A kill of the job fires the tool's token, and the tool stops what it started (the
            // shell kills its process tree) before the job counts as ended; only a tool that has
            // not stopped a grace period later is dropped.
            let kill = CancellationToken::new();
            let soft = task_job.cancel_token();
            let hard = kill.clone();
            let watcher = tokio::spawn(async move {
                soft.cancelled().await;
                tokio::time::sleep(SELF_STOP_GRACE).await;
                hard.cancel();
            });
            let report = execute(
                work.tool.as_ref(),
                &ctx,
                &work.args,
                policy,
                &kill,
                work.events.as_ref(),
                &row.call_id,
            )
            .await;
            watcher.abort();
            let end = work.end(&ctx.session_id, report.result).await;
            let exit_code = end.result.get("exit_code").cloned().unwrap_or(Value::Null);
            row.state = match end.state {
                JobState::Succeeded => "success",
                JobState::Killed => "canceled",
                _ => "error",
            }
            .into();
            row.error_type = end.error_type.map(Into::into);
            row.may_have_run = end.state == JobState::Killed;
            row.attempts = report.attempts;
            row.running_ms = report.running.as_millis() as u64;
            row.finished_at = Some(std::time::SystemTime::now());
            row.job = Some(json!({
                "id": task_job.id,
                "state": end.state.as_str(),
                "exit_code": exit_code,
                "output_bytes": task_job.output_bytes(),
            }));
            task_job.finish(end);
            if let Err(e) = work.results.journal_finish(row).await {
                tracing::error!(error = %e, job = %task_job.id, "could not close the journal row of a job");
            }
        });
        Ok(ToolOutput::json(json!({
            "job_id": job.id,
            "state": "running",
            "tool": entry.provider_name(),
            "message": format!(
                "Started in the background as job {}. Read its output with job_output, wait for it with job_wait, stop it with job_kill.",
                job.id
            ),
        })))
    }
}

/// What a job's task needs once the call that started it has answered.
struct JobWork {
    tool: Arc<dyn Tool>,
    args: Value,
    events: Arc<dyn crate::events::EventSink>,
    results: Arc<dyn Store>,
    budget: usize,
    redact: bool,
}

impl JobWork {
    /// How the job ended, its result shaped as stage 11 shapes one: secrets redacted, cut to the
    /// budget with the full result behind a `read_result` handle of the session.
    async fn end(&self, session: &crate::types::SessionId, result: Result<ToolOutput, ExecFailure>) -> JobEnd {
        let (state, content, error_type) = match result {
            Ok(output) => {
                let state = match output.failure {
                    None => JobState::Succeeded,
                    Some(ErrorKind::Timeout) => JobState::TimedOut,
                    Some(ErrorKind::Canceled) => JobState::Killed,
                    Some(_) => JobState::Failed,
                };
                (state, output.content, output.failure.map(ErrorKind::as_str))
            }
            Err(ExecFailure::Killed) | Err(ExecFailure::Failed(crate::ToolError::Canceled)) => (
                JobState::Killed,
                CallError::new(ErrorKind::Canceled, "The job was stopped before it finished.").to_json(),
                Some(ErrorKind::Canceled.as_str()),
            ),
            Err(ExecFailure::Timeout { limit }) => (
                JobState::TimedOut,
                CallError::new(
                    ErrorKind::Timeout,
                    format!(
                        "The job did not finish within {} ms and was stopped.",
                        limit.as_millis()
                    ),
                )
                .to_json(),
                Some(ErrorKind::Timeout.as_str()),
            ),
            Err(ExecFailure::Failed(e)) => (
                JobState::Failed,
                CallError::new(ErrorKind::ExecutionFailed, e.to_string()).to_json(),
                Some(ErrorKind::ExecutionFailed.as_str()),
            ),
        };
        let mut content = normalize_empty(content);
        if self.redact {
            redact_result(&mut content);
        }
        let size = json_size(&content);
        if size > self.budget {
            let full = Arc::new(content);
            let handle = self.results.put(session, full.clone(), size).await;
            content = truncate(&full, self.budget, Some(&handle)).value;
        }
        JobEnd {
            state,
            result: content,
            error_type,
        }
    }
}
