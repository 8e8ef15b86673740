//! Background jobs: a call that returns at once with a job handle while its work goes on under
//! the session's cancellation (a tool of category `background`, or a call that sets the tool's
//! background argument, such as `exec_shell`'s `"background": true`).
//!
//! A job is governed like any call — validated, permitted and approved when it starts, its
//! journal row left `started` until it ends — and capped per session and per engine. Its output
//! is kept in a bounded buffer (the last `job_output_bytes`) that the model pages by byte offset;
//! its final result is shaped like any result (secrets redacted, truncated with the full result
//! behind a `read_result` handle). Jobs end with their owner: a kill or stop of the session, the
//! end of an agent run, the engine's shutdown, and toolgate's death (the tool's own containment).

use crate::types::{CallId, SessionId, ToolName};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// The tools a model polls a job with: exempt from the loop detector (a poll is not a loop).
pub const POLLING_TOOLS: &[&str] = &["job_status", "job_output", "job_wait", "job_list"];

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Still working.
    Running,
    /// Finished, and its work succeeded.
    Succeeded,
    /// Finished, and its work failed (a non-zero exit, an error).
    Failed,
    /// Stopped by its time limit.
    TimedOut,
    /// Stopped by `job_kill`, a kill or stop of its session, or the end of its owner.
    Killed,
}

impl JobState {
    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Killed => "killed",
        }
    }
}

/// The caps and buffers of jobs (`[engine] max_jobs_per_session`, `max_jobs`, `job_output_bytes`).
#[derive(Clone, Copy, Debug)]
pub struct JobLimits {
    /// Jobs running at once in one session.
    pub per_session: usize,
    /// Jobs running at once in the whole engine (every session).
    pub global: usize,
    /// Bytes of output kept per job (the last ones).
    pub output_bytes: usize,
    /// Finished jobs remembered per session (the oldest are forgotten first), and eight times as
    /// many in all.
    pub finished_kept: usize,
}

impl Default for JobLimits {
    fn default() -> Self {
        Self {
            per_session: 4,
            global: 32,
            output_bytes: 1 << 20,
            finished_kept: 32,
        }
    }
}

/// How a job ended, as its tool reported it.
#[derive(Clone, Debug)]
pub struct JobEnd {
    /// The state it ended in.
    pub state: JobState,
    /// The result the model gets from `job_status` / `job_wait` (already shaped).
    pub result: Value,
    /// The error type, when it failed.
    pub error_type: Option<&'static str>,
}

struct Inner {
    state: JobState,
    /// The last `output_bytes` bytes of output, and how many came before them.
    kept: VecDeque<u8>,
    total: u64,
    /// Where the last `job_output` read without an offset ended.
    cursor: u64,
    /// Output total at the last poll, and how many polls in a row saw nothing new.
    polled_total: Option<u64>,
    idle_polls: u32,
    end: Option<JobEnd>,
    finished: Option<Instant>,
}

/// One background job.
pub struct Job {
    /// The handle the model names (`j` and 12 hex digits).
    pub id: String,
    /// The tool that runs.
    pub tool: ToolName,
    /// The call that started it.
    pub call_id: CallId,
    session: SessionId,
    started_at: SystemTime,
    started: Instant,
    cancel: CancellationToken,
    cap: usize,
    inner: Mutex<Inner>,
    changed: tokio::sync::watch::Sender<u64>,
}

/// A page of a job's output.
#[derive(Clone, Debug, Serialize)]
pub struct OutputPage {
    /// The byte offset of the first byte returned.
    pub offset: u64,
    /// The offset after the last byte returned: pass it to read on.
    pub next_offset: u64,
    /// Bytes produced so far.
    pub total_bytes: u64,
    /// The text (bytes that are not UTF-8 replaced).
    pub text: String,
    /// Bytes before `offset` that were asked for but are no longer kept.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Job {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session the job belongs to.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// Appends output (the tool writes what its work prints, as it prints it).
    pub fn write(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let total = {
            let mut inner = self.lock();
            inner.total += bytes.len() as u64;
            let keep = bytes.len().min(self.cap);
            inner.kept.extend(&bytes[bytes.len() - keep..]);
            let excess = inner.kept.len().saturating_sub(self.cap);
            inner.kept.drain(..excess);
            inner.total
        };
        self.changed.send_replace(total);
    }

    /// Whether the job still runs.
    pub fn running(&self) -> bool {
        self.lock().state == JobState::Running
    }

    /// The token its work runs under (cancelled by `kill`).
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Asks the work to stop (its tool kills what it started).
    pub fn kill(&self) {
        self.cancel.cancel();
    }

    /// Records how the job ended (once; later calls are ignored).
    pub fn finish(&self, end: JobEnd) {
        {
            let mut inner = self.lock();
            if inner.end.is_some() {
                return;
            }
            inner.state = end.state;
            inner.end = Some(end);
            inner.finished = Some(Instant::now());
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Output from `offset` (default: where the last such read ended), at most `max` bytes.
    pub fn read(&self, offset: Option<u64>, max: usize) -> OutputPage {
        let mut inner = self.lock();
        let first_kept = inner.total - inner.kept.len() as u64;
        let wanted = offset.unwrap_or(inner.cursor).min(inner.total);
        let from = wanted.max(first_kept);
        let skip = (from - first_kept) as usize;
        let take = (inner.kept.len() - skip).min(max);
        let bytes: Vec<u8> = inner.kept.range(skip..skip + take).copied().collect();
        let next = from + take as u64;
        if offset.is_none() {
            inner.cursor = next;
        }
        OutputPage {
            offset: from,
            next_offset: next,
            total_bytes: inner.total,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            dropped_bytes: from - wanted,
        }
    }

    /// The job as `job_status` and `job_list` show it. A poll (`poll: true`) that finds neither
    /// new output nor an end since the last one says so, so the model stops spinning.
    pub fn status(&self, poll: bool) -> Value {
        let mut inner = self.lock();
        let elapsed = inner.finished.unwrap_or_else(Instant::now) - self.started;
        let mut v = json!({
            "job_id": self.id,
            "tool": self.tool.as_str(),
            "call_id": self.call_id.as_str(),
            "state": inner.state.as_str(),
            "started_at": crate::audit::rfc3339(self.started_at),
            "elapsed_ms": elapsed.as_millis() as u64,
            "output_bytes": inner.total,
        });
        if poll {
            let new = inner.polled_total != Some(inner.total);
            inner.idle_polls = if new || inner.state != JobState::Running {
                0
            } else {
                inner.idle_polls + 1
            };
            inner.polled_total = Some(inner.total);
            v["new_output"] = json!(new);
            if inner.idle_polls > 0 {
                v["note"] = json!(format!(
                    "no new output since the last poll ({} polls in a row); use job_wait to wait for the job instead of polling",
                    inner.idle_polls
                ));
            }
        }
        if let Some(end) = &inner.end {
            v["result"] = end.result.clone();
            if let Some(t) = end.error_type {
                v["error_type"] = json!(t);
            }
        }
        v
    }

    /// Waits until the job ends, or `limit` passes; true if it ended.
    pub async fn wait(&self, limit: Duration) -> bool {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if !self.running() {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => return !self.running(),
            }
        }
    }

    /// Waits until the job has produced at least `bytes` bytes of output or ended, or `limit`
    /// passes; true if the output is there.
    pub async fn wait_for_output(&self, bytes: u64, limit: Duration) -> bool {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.output_bytes() >= bytes {
                return true;
            }
            if !self.running() {
                return false;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => return self.output_bytes() >= bytes,
            }
        }
    }

    /// How long it has run (or ran).
    pub fn elapsed(&self) -> Duration {
        self.lock().finished.unwrap_or_else(Instant::now) - self.started
    }

    /// Bytes of output produced.
    pub fn output_bytes(&self) -> u64 {
        self.lock().total
    }
}

/// Every job of an engine, by session.
pub struct JobRegistry {
    limits: JobLimits,
    jobs: Mutex<Vec<Arc<Job>>>,
}

impl JobRegistry {
    /// An empty registry with these limits.
    pub fn new(limits: JobLimits) -> Self {
        Self {
            limits,
            jobs: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why a new job of `session` may not start now (the caps), naming the jobs that run.
    pub fn refusal(&self, session: &SessionId) -> Option<String> {
        let jobs = self.lock();
        let running: Vec<&Arc<Job>> = jobs.iter().filter(|j| j.running()).collect();
        let mine: Vec<String> = running
            .iter()
            .filter(|j| &j.session == session)
            .map(|j| format!("{} ({})", j.id, j.tool))
            .collect();
        if mine.len() >= self.limits.per_session {
            return Some(format!(
                "This session already runs {} background jobs, its limit: {}. Wait for one or stop one with job_kill.",
                mine.len(),
                mine.join(", ")
            ));
        }
        if running.len() >= self.limits.global {
            return Some(format!(
                "toolgate already runs {} background jobs, its limit for all sessions; this session's: {}.",
                running.len(),
                if mine.is_empty() {
                    "none".to_owned()
                } else {
                    mine.join(", ")
                }
            ));
        }
        None
    }

    /// Registers a running job of `session` under `parent` (cancelled with it), or says why not.
    pub fn start(
        &self,
        session: &SessionId,
        tool: ToolName,
        call_id: CallId,
        parent: &CancellationToken,
    ) -> Result<Arc<Job>, String> {
        if let Some(why) = self.refusal(session) {
            return Err(why);
        }
        let id = format!("j{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
        let job = Arc::new(Job {
            id,
            tool,
            call_id,
            session: session.clone(),
            started_at: SystemTime::now(),
            started: Instant::now(),
            cancel: parent.child_token(),
            cap: self.limits.output_bytes.max(1),
            inner: Mutex::new(Inner {
                state: JobState::Running,
                kept: VecDeque::new(),
                total: 0,
                cursor: 0,
                polled_total: None,
                idle_polls: 0,
                end: None,
                finished: None,
            }),
            changed: tokio::sync::watch::channel(0).0,
        });
        let mut jobs = self.lock();
        jobs.push(job.clone());
        // Finished jobs beyond what is remembered are forgotten, oldest first: per session, and
        // in all (a gateway sees many sessions, and a job keeps up to its output buffer).
        let finished = jobs.iter().filter(|j| &j.session == session && !j.running()).count();
        let mut excess = finished.saturating_sub(self.limits.finished_kept);
        jobs.retain(|j| {
            let forget = excess > 0 && &j.session == session && !j.running();
            excess -= usize::from(forget);
            !forget
        });
        let finished = jobs.iter().filter(|j| !j.running()).count();
        let mut excess = finished.saturating_sub(self.limits.finished_kept * 8);
        jobs.retain(|j| {
            let forget = excess > 0 && !j.running();
            excess -= usize::from(forget);
            !forget
        });
        Ok(job)
    }

    /// The jobs of a session, oldest first.
    pub fn list(&self, session: &SessionId) -> Vec<Arc<Job>> {
        self.lock().iter().filter(|j| &j.session == session).cloned().collect()
    }

    /// One job of a session (another session's job is not found).
    pub fn get(&self, session: &SessionId, id: &str) -> Option<Arc<Job>> {
        self.lock()
            .iter()
            .find(|j| &j.session == session && j.id == id)
            .cloned()
    }

    /// Kills every running job of a session; returns how many.
    pub fn kill_session(&self, session: &SessionId) -> usize {
        let jobs = self.list(session);
        jobs.iter().filter(|j| j.running()).map(|j| j.kill()).count()
    }

    /// Kills every running job (the engine shuts down); returns how many.
    pub fn kill_all(&self) -> usize {
        let jobs: Vec<Arc<Job>> = self.lock().clone();
        jobs.iter().filter(|j| j.running()).map(|j| j.kill()).count()
    }

    /// Jobs running now, in every session.
    pub fn running(&self) -> usize {
        self.lock().iter().filter(|j| j.running()).count()
    }

    /// Waits until no job runs, or `limit` passes; true if none runs.
    pub async fn drained(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let jobs: Vec<Arc<Job>> = self.lock().clone();
        for job in jobs {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !job.wait(left).await {
                return false;
            }
        }
        true
    }
}

impl Drop for JobRegistry {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// What a tool sees of jobs (`ToolContext::jobs`): its session's jobs, and the job it runs as
/// when it runs in the background.
#[derive(Clone)]
pub struct Jobs {
    registry: Arc<JobRegistry>,
    session: SessionId,
    current: Option<Arc<Job>>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs")
            .field("session", &self.session)
            .field("current", &self.current.as_ref().map(|j| &j.id))
            .finish()
    }
}

impl Jobs {
    /// The jobs of `session` in `registry`.
    pub fn new(registry: Arc<JobRegistry>, session: SessionId) -> Self {
        Self {
            registry,
            session,
            current: None,
        }
    }

    /// The same, running as `job`.
    pub fn running_as(mut self, job: Arc<Job>) -> Self {
        self.current = Some(job);
        self
    }

    /// The job this call runs as, when it runs in the background: its output goes there.
    pub fn current(&self) -> Option<&Arc<Job>> {
        self.current.as_ref()
    }

    /// The session's jobs, oldest first.
    pub fn list(&self) -> Vec<Arc<Job>> {
        self.registry.list(&self.session)
    }

    /// One of the session's jobs.
    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.registry.get(&self.session, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(per_session: usize, global: usize, output_bytes: usize) -> JobRegistry {
        JobRegistry::new(JobLimits {
            per_session,
            global,
            output_bytes,
            finished_kept: 2,
        })
    }

    fn start(r: &JobRegistry, session: &str) -> Result<Arc<Job>, String> {
        r.start(
            &SessionId::new(session),
            ToolName::new("t"),
            CallId::new("c"),
            &CancellationToken::new(),
        )
    }

    #[test]
    fn output_keeps_the_last_bytes_and_pages_by_offset() {
        let r = registry(4, 4, 8);
        let job = start(&r, "s").unwrap();
        job.write(b"0123");
        let p = job.read(None, 100);
        assert_eq!((p.offset, p.next_offset, p.text.as_str()), (0, 4, "0123"));
        job.write(b"456789ab");
        // Without an offset, reading goes on where it ended; 4..12 is kept but 0..4 is not.
        let p = job.read(None, 3);
        assert_eq!(
            (p.offset, p.next_offset, p.text.as_str(), p.dropped_bytes),
            (4, 7, "456", 0)
        );
        let p = job.read(Some(0), 100);
        assert_eq!((p.offset, p.text.as_str(), p.dropped_bytes), (4, "456789ab", 4));
        // A tail: an offset past the end gives nothing and says where the end is.
        let p = job.read(Some(99), 100);
        assert_eq!(
            (p.offset, p.next_offset, p.text.as_str(), p.total_bytes),
            (12, 12, "", 12)
        );
        // One write larger than the buffer keeps its end.
        job.write(b"ABCDEFGHIJ");
        assert_eq!(job.read(Some(0), 100).text, "CDEFGHIJ");
    }

    #[test]
    fn caps_refuse_naming_the_running_jobs_and_finished_jobs_free_their_place() {
        let r = registry(2, 3, 8);
        let a = start(&r, "s").unwrap();
        let b = start(&r, "s").unwrap();
        let why = start(&r, "s").err().expect("the session cap");
        assert!(why.contains(&a.id) && why.contains(&b.id), "{why}");
        start(&r, "other").unwrap();
        let why = start(&r, "third").err().expect("the global cap");
        assert!(why.contains("for all sessions"), "{why}");
        a.finish(JobEnd {
            state: JobState::Succeeded,
            result: json!({}),
            error_type: None,
        });
        start(&r, "s").expect("a finished job frees its place");
        // Another session's job is not found.
        assert!(r.get(&SessionId::new("other"), &b.id).is_none());
    }

    #[test]
    fn finished_jobs_are_forgotten_oldest_first_per_session_and_in_all() {
        let r = registry(100, 100, 8); // finished_kept 2: 2 per session, 16 in all
        let end = |j: &Arc<Job>| {
            j.finish(JobEnd {
                state: JobState::Succeeded,
                result: json!({}),
                error_type: None,
            })
        };
        let first = start(&r, "s").unwrap();
        end(&first);
        for _ in 0..3 {
            end(&start(&r, "s").unwrap());
        }
        let kept = r.list(&SessionId::new("s"));
        assert!(
            kept.len() <= 3 && !kept.iter().any(|j| j.id == first.id),
            "the oldest went first"
        );
        for i in 0..40 {
            end(&start(&r, &format!("other{i}")).unwrap());
        }
        assert!(r.lock().len() <= 17, "{} jobs kept in all", r.lock().len());
        let running = start(&r, "s").unwrap();
        for i in 0..40 {
            end(&start(&r, &format!("more{i}")).unwrap());
        }
        assert!(
            r.get(&SessionId::new("s"), &running.id).is_some(),
            "a running job is never forgotten"
        );
    }

    #[test]
    fn idle_polls_are_counted_and_reset_by_output() {
        let r = registry(2, 2, 64);
        let job = start(&r, "s").unwrap();
        assert_eq!(job.status(true)["new_output"], true);
        assert_eq!(job.status(true)["new_output"], false);
        let v = job.status(true);
        assert!(v["note"].as_str().unwrap().contains("2 polls in a row"), "{v}");
        job.write(b"x");
        let v = job.status(true);
        assert_eq!(v["new_output"], true);
        assert!(v.get("note").is_none());
    }

    #[tokio::test]
    async fn wait_returns_at_the_end_or_the_limit_and_kill_cancels_the_token() {
        let r = registry(2, 2, 64);
        let job = start(&r, "s").unwrap();
        assert!(!job.wait(Duration::from_millis(10)).await);
        let token = job.cancel_token();
        let ender = job.clone();
        let waiter = tokio::spawn(async move { ender.wait(Duration::from_secs(60)).await });
        r.kill_session(&SessionId::new("s"));
        token.cancelled().await;
        job.finish(JobEnd {
            state: JobState::Killed,
            result: json!({}),
            error_type: Some("canceled"),
        });
        assert!(waiter.await.unwrap());
        assert_eq!(job.status(false)["state"], "killed");
    }
}
