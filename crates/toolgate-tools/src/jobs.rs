//! The tools a model drives background jobs with: `job_status`, `job_output` (read-only, paged by
//! byte offset so a model can tail), `job_wait` (until the job ends or a time it chooses within a
//! bound), `job_kill` and `job_list`. They see only their own session's jobs. Polling them is not
//! a loop (the engine exempts them from the loop detector), but a poll that finds nothing new says
//! so, so the model waits instead of spinning.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::ToolError;
use toolgate_core::jobs::Job;
use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec, TypedTool};

/// Largest page of output, in bytes.
pub const MAX_PAGE: usize = 48 * 1024;
/// Longest `job_wait`, in milliseconds (and never past the call's own time limit).
pub const MAX_WAIT_MS: u64 = 120_000;

fn job(ctx: &ToolContext, id: &str) -> Result<Arc<Job>, ToolError> {
    ctx.jobs.get(id).ok_or_else(|| {
        let known: Vec<String> = ctx.jobs.list().iter().map(|j| j.id.clone()).collect();
        ToolError::failed(format!(
            "there is no job {id:?} in this session (its jobs: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ))
    })
}

/// Arguments naming one job.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobArgs {
    /// The job's handle, as the call that started it returned it (`j…`).
    pub job_id: String,
}

/// `job_status`: where a job is, and its result once it has ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobStatus;

#[async_trait]
impl TypedTool for JobStatus {
    type Args = JobArgs;
    fn name(&self) -> &str {
        "job_status"
    }
    fn description(&self) -> &str {
        "Show a background job's state (running, succeeded, failed, timed_out, killed), how long it has run, how much output it made, and its result once it has ended."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations::READ_ONLY)
    }
    async fn run(&self, ctx: &ToolContext, args: JobArgs) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(job(ctx, &args.job_id)?.status(true)))
    }
}

/// Arguments of `job_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobOutputArgs {
    /// The job's handle.
    pub job_id: String,
    /// Byte offset to read from (the `next_offset` of an earlier page). Default: where the last
    /// job_output without an offset ended, so repeated calls read on.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Bytes to return, at most 49152. Default 16384.
    #[serde(default)]
    #[schemars(range(min = 1, max = 49152))]
    pub max_bytes: Option<u64>,
}

/// `job_output`: a page of a job's output (stdout and stderr as they came).
#[derive(Clone, Copy, Debug, Default)]
pub struct JobOutput;

#[async_trait]
impl TypedTool for JobOutput {
    type Args = JobOutputArgs;
    fn name(&self) -> &str {
        "job_output"
    }
    fn description(&self) -> &str {
        "Read a background job's output from a byte offset (default: where the last read ended). Returns the text, the next offset and whether the job still runs."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations::READ_ONLY)
    }
    async fn run(&self, ctx: &ToolContext, args: JobOutputArgs) -> Result<ToolOutput, ToolError> {
        let job = job(ctx, &args.job_id)?;
        let max = args.max_bytes.map_or(16 * 1024, |m| m as usize).clamp(1, MAX_PAGE);
        let page = job.read(args.offset, max);
        let status = job.status(true);
        let mut v = serde_json::to_value(&page).unwrap_or(Value::Null);
        v["job_id"] = json!(job.id);
        v["state"] = status["state"].clone();
        v["new_output"] = status["new_output"].clone();
        if let Some(note) = status.get("note") {
            v["note"] = note.clone();
        }
        if page.dropped_bytes > 0 {
            v["dropped_note"] = json!(format!(
                "{} bytes before offset {} are no longer kept (a job keeps its last bytes only)",
                page.dropped_bytes, page.offset
            ));
        }
        Ok(ToolOutput::json(v))
    }
}

/// Arguments of `job_wait`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobWaitArgs {
    /// The job's handle.
    pub job_id: String,
    /// How long to wait, in milliseconds (at most 120000). Default 30000.
    #[serde(default)]
    #[schemars(range(min = 1, max = 120000))]
    pub timeout_ms: Option<u64>,
}

/// `job_wait`: waits until a job ends or the time passes.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobWait;

#[async_trait]
impl TypedTool for JobWait {
    type Args = JobWaitArgs;
    fn name(&self) -> &str {
        "job_wait"
    }
    fn description(&self) -> &str {
        "Wait until a background job ends, or until timeout_ms passes (at most 120000), then show its status: its result if it ended."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations::READ_ONLY)
    }
    async fn run(&self, ctx: &ToolContext, args: JobWaitArgs) -> Result<ToolOutput, ToolError> {
        let job = job(ctx, &args.job_id)?;
        // Within the bound, and ending before the call's own limit so the answer gets back.
        let limit = Duration::from_millis(args.timeout_ms.unwrap_or(30_000).clamp(1, MAX_WAIT_MS))
            .min(ctx.timeout.saturating_sub(Duration::from_millis(500)));
        let ended = tokio::select! {
            ended = job.wait(limit) => ended,
            () = ctx.cancel.cancelled() => return Err(ToolError::Canceled),
        };
        let mut v = job.status(false);
        v["waited_ms"] = json!(limit.as_millis() as u64);
        if !ended {
            v["note"] =
                json!("the job still runs; wait again, read its output with job_output, or stop it with job_kill");
        }
        Ok(ToolOutput::json(v))
    }
}

/// `job_kill`: stops a job and everything it started.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobKill;

#[async_trait]
impl TypedTool for JobKill {
    type Args = JobArgs;
    fn name(&self) -> &str {
        "job_kill"
    }
    fn description(&self) -> &str {
        "Stop a background job and every process it started; returns its final status."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: false,
        })
    }
    async fn run(&self, ctx: &ToolContext, args: JobArgs) -> Result<ToolOutput, ToolError> {
        let job = job(ctx, &args.job_id)?;
        let was_running = job.running();
        job.kill();
        // The tool ends what it started (TERM, then KILL after its grace) and then the job ends.
        let ended = job.wait(Duration::from_secs(15).min(ctx.timeout)).await;
        let mut v = job.status(false);
        v["killed"] = json!(was_running);
        if !ended {
            v["note"] = json!("asked to stop, but it has not ended yet; check again with job_status");
        }
        Ok(ToolOutput::json(v))
    }
}

/// Arguments of `job_list` (none).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobListArgs {}

/// `job_list`: the session's jobs, running and recently ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobList;

#[async_trait]
impl TypedTool for JobList {
    type Args = JobListArgs;
    fn name(&self) -> &str {
        "job_list"
    }
    fn description(&self) -> &str {
        "List this session's background jobs, running and recently ended, with their state and output size."
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec::with_annotations(Annotations::READ_ONLY)
    }
    async fn run(&self, ctx: &ToolContext, _: JobListArgs) -> Result<ToolOutput, ToolError> {
        let jobs: Vec<Value> = ctx
            .jobs
            .list()
            .iter()
            .map(|j| {
                let mut v = j.status(false);
                if let Some(o) = v.as_object_mut() {
                    o.remove("result"); // job_status shows it; a list stays short
                }
                v
            })
            .collect();
        Ok(ToolOutput::json(json!({ "jobs": jobs })))
    }
}

/// The five job tools.
pub fn job_tools() -> Vec<Arc<dyn toolgate_core::Tool>> {
    use toolgate_core::tool::Typed;
    vec![
        Arc::new(Typed::new(JobStatus)),
        Arc::new(Typed::new(JobOutput)),
        Arc::new(Typed::new(JobWait)),
        Arc::new(Typed::new(JobKill)),
        Arc::new(Typed::new(JobList)),
    ]
}
