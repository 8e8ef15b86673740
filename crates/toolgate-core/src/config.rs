//! The engine's configuration (`[engine]` in `toolgate.toml`).

use crate::tool::RetryPolicy;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What to do with a call stage 1 cannot make usable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MalformedPolicy {
    /// The call gets a `malformed_call` result; the rest of the batch runs.
    #[default]
    Report,
    /// The whole batch aborts with nothing run.
    Abort,
}

/// Engine settings; every field has a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Per-attempt timeout, in milliseconds.
    pub timeout_ms: u64,
    /// Whole-call deadline (all attempts and backoff), in milliseconds.
    pub deadline_ms: u64,
    /// Attempts in all for retryable failures of read-only or idempotent tools.
    pub retry_attempts: u32,
    /// Upper bound of the first retry delay, in milliseconds.
    pub retry_base_ms: u64,
    /// Growth of the bound per attempt.
    pub retry_factor: u32,
    /// Largest retry delay bound, in milliseconds.
    pub retry_cap_ms: u64,
    /// Truncation budget in bytes of compact JSON, per result.
    pub budget_bytes: usize,
    /// `report` or `abort`.
    pub malformed: MalformedPolicy,
    /// The Nth consecutive identical batch is not run (0: the detector is off).
    pub loop_threshold: u32,
    /// Tools whose batches neither count for nor reset the loop detector.
    pub loop_exempt: Vec<String>,
    /// Read-only calls running at once in a batch.
    pub max_parallel: usize,
    /// Consecutive failed calls that abort the loop.
    pub max_consecutive_errors: u32,
    /// `max_per_turn` for dangerous tools that set none.
    pub dangerous_max_per_turn: u32,
    /// Full results kept per session for `read_result`.
    pub results_per_session: usize,
    /// Bytes of full results kept per session.
    pub results_bytes_per_session: usize,
    /// How long an ask waits for an answer, in milliseconds.
    pub approval_timeout_ms: u64,
    /// Record arguments and results on spans (off: they may hold secrets).
    pub trace_content: bool,
    /// Feature flags that are on (tools whose spec names another flag are not exposed).
    pub features: Vec<String>,
    /// Turns a tool that succeeded in deliberate mode stays exposed after it.
    pub deliberate_retain_turns: u32,
    /// Keep the (redacted) arguments in the journal; off keeps only their hash.
    pub audit_arguments: bool,
    /// Background jobs running at once in one session.
    pub max_jobs_per_session: usize,
    /// Background jobs running at once in the whole process.
    pub max_jobs: usize,
    /// Bytes of a job's output kept (the last ones).
    pub job_output_bytes: usize,
    /// How long a background job may run, in milliseconds.
    pub job_timeout_ms: u64,
    /// Per-tool settings (`[tools.NAME]` in `toolgate.toml`, outside `[engine]`).
    #[serde(skip)]
    pub tools: std::collections::BTreeMap<String, ToolSettings>,
}

/// `[tools.NAME]`: settings over one tool's own spec (a built-in or an upstream `SERVER__tool`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolSettings {
    /// `standard`, `terminal` (ends the turn after it runs) or `dangerous` (capped per turn).
    pub category: Option<crate::tool::Category>,
    /// Calls allowed to run per turn.
    pub max_per_turn: Option<u32>,
    /// Per-attempt timeout, milliseconds (never above `[engine] timeout_ms`).
    pub timeout_ms: Option<u64>,
    /// Truncation budget, bytes of serialised JSON.
    pub budget_bytes: Option<usize>,
    /// The loop detector neither counts nor resets on this tool's batches.
    pub loop_exempt: bool,
    /// Replace secret-shaped text in the tool's results (default true).
    pub redact_results: Option<bool>,
    /// `ask` (default), `deny` or `allow`: a call of an open-world tool whose arguments carry a
    /// secret.
    pub secret_arguments: Option<crate::tool::SecretArguments>,
    /// `forbidden`, `optional` or `required`: whether an MCP client that declared the tasks
    /// extension gets a task for a call of this tool.
    pub task: Option<crate::tool::TaskSupport>,
}

impl ToolSettings {
    /// Sets what these settings name over `spec`.
    pub fn apply(&self, spec: &mut crate::tool::ToolSpec) {
        if let Some(c) = self.category {
            spec.category = c;
        }
        if let Some(n) = self.max_per_turn {
            spec.max_per_turn = Some(n);
        }
        if let Some(ms) = self.timeout_ms {
            spec.timeout = Some(Duration::from_millis(ms));
        }
        if let Some(b) = self.budget_bytes {
            spec.budget = Some(b);
        }
        if let Some(on) = self.redact_results {
            spec.secrets.results = on;
        }
        if let Some(a) = self.secret_arguments {
            spec.secrets.arguments = a;
        }
        if let Some(t) = self.task {
            spec.task = t;
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            timeout_ms: 300_000,
            deadline_ms: 600_000,
            retry_attempts: 4,
            retry_base_ms: 1_000,
            retry_factor: 2,
            retry_cap_ms: 10_000,
            budget_bytes: 65_536,
            malformed: MalformedPolicy::Report,
            loop_threshold: 3,
            loop_exempt: Vec::new(),
            max_parallel: 8,
            max_consecutive_errors: 5,
            dangerous_max_per_turn: 1,
            results_per_session: 64,
            results_bytes_per_session: 64 << 20,
            approval_timeout_ms: 120_000,
            trace_content: false,
            features: Vec::new(),
            deliberate_retain_turns: 2,
            audit_arguments: true,
            max_jobs_per_session: 4,
            max_jobs: 32,
            job_output_bytes: 1 << 20,
            job_timeout_ms: 3_600_000,
            tools: std::collections::BTreeMap::new(),
        }
    }
}

impl EngineConfig {
    /// The caps and buffers of background jobs.
    pub fn job_limits(&self) -> crate::jobs::JobLimits {
        crate::jobs::JobLimits {
            per_session: self.max_jobs_per_session,
            global: self.max_jobs,
            output_bytes: self.job_output_bytes,
            ..crate::jobs::JobLimits::default()
        }
    }

    /// The default retry policy.
    pub fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.retry_attempts.max(1),
            base: Duration::from_millis(self.retry_base_ms),
            factor: self.retry_factor.max(1),
            cap: Duration::from_millis(self.retry_cap_ms),
        }
    }

    /// Checks values that would make the engine misbehave.
    pub fn check(&self) -> Result<(), String> {
        if self.timeout_ms == 0 || self.deadline_ms == 0 {
            return Err("engine.timeout_ms and engine.deadline_ms must be greater than 0".into());
        }
        if self.max_parallel == 0 {
            return Err("engine.max_parallel must be at least 1".into());
        }
        if self.max_jobs_per_session == 0 || self.max_jobs == 0 || self.job_timeout_ms == 0 {
            return Err(
                "engine.max_jobs_per_session, engine.max_jobs and engine.job_timeout_ms must be greater than 0".into(),
            );
        }
        if self.loop_threshold == 1 {
            return Err("engine.loop_threshold must be at least 2 (or 0 to switch the detector off)".into());
        }
        for (name, t) in &self.tools {
            if t.timeout_ms == Some(0) || t.budget_bytes == Some(0) {
                return Err(format!(
                    "tools.{name}: timeout_ms and budget_bytes must be greater than 0"
                ));
            }
            if t.category == Some(crate::tool::Category::Background) {
                return Err(format!(
                    "tools.{name}: category \"background\" cannot be set by configuration"
                ));
            }
        }
        Ok(())
    }
}
