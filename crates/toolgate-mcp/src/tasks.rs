//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663): a `tools/call` of a
//! task-supporting tool from a client that declared the extension returns a task at once; the
//! call runs on through the whole pipeline (permission, approval, journal) and the client polls
//! `tasks/get` for its result or stops it with `tasks/cancel`.
//!
//! A task is session state kept in the store (a cache entry per task, for its TTL), so any
//! replica sharing the store answers `tasks/get` and `tasks/cancel`. A cancel given to another
//! replica is a mark in the store that the replica running the task looks for every
//! [`WATCH_EVERY`]. Tasks belong to the principal that made them: another principal's task id
//! is unknown (-32602), as is a made-up one.

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload, TaskStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;
use toolgate_core::audit::rfc3339;
use toolgate_core::store::Store;

/// The extension's id, as clients declare it.
pub const EXTENSION: &str = rmcp::model::TASKS_EXTENSION_ID;
/// How long a task's record is kept after it was made (its `ttlMs`).
pub const TTL: Duration = Duration::from_secs(3600);
/// The polling interval suggested to clients (`pollIntervalMs`).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The shortest TTL a client may ask for.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Tasks listed per session (the oldest are dropped from the list, not forgotten).
pub const MAX_LISTED: usize = 256;
/// How often the replica running a task looks for a cancel given to another replica.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);

/// What the store keeps of a task.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The wire task (id, status, times, TTL, poll interval).
    #[serde(flatten)]
    pub task: Task,
    /// The call's result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<JsonObject>,
    /// The JSON-RPC error, once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JsonObject>,
    /// The toolgate session the call runs in.
    pub session: String,
    /// The tool called.
    pub tool: String,
    /// The call's id (its journal row).
    pub call_id: String,
}

impl Record {
    /// The `tasks/get` answer.
    pub fn detailed(&self) -> DetailedTask {
        let payload = match self.task.status {
            TaskStatus::Completed => TaskPayload::Completed {
                result: self.result.clone().unwrap_or_default(),
            },
            TaskStatus::Failed => TaskPayload::Failed {
                error: self.error.clone().unwrap_or_default(),
            },
            TaskStatus::Cancelled => TaskPayload::Cancelled,
            _ => TaskPayload::Working,
        };
        DetailedTask::new(self.task.clone(), payload)
    }
}

/// How a task's call ended.
pub enum End {
    /// It produced a result (a tool error included: that is a result with `isError`).
    Completed(CallToolResult),
    /// It was canceled (by `tasks/cancel`, the session's end or the gateway's shutdown).
    Cancelled,
    /// The engine failed, not the tool: a JSON-RPC error.
    Failed(McpError),
}

/// The tasks of one gateway.
pub struct Tasks {
    store: Arc<dyn Store>,
    /// The tasks this replica runs, by store key: their stop.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Each task this replica ended, with its principal (status notifications).
    ended: tokio::sync::broadcast::Sender<(String, Record)>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}

fn key(principal: &str, id: &str) -> String {
    format!("mcp-task/{principal}/{id}")
}

fn index_key(principal: &str, session: &str) -> String {
    format!("mcp-task-index/{principal}/{session}")
}

fn cancel_key(principal: &str, id: &str) -> String {
    format!("mcp-task-cancel/{principal}/{id}")
}

fn unknown(id: &str) -> McpError {
    McpError::invalid_params(format!("Unknown task: {id}"), None)
}

fn store_error(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(format!("the task store failed: {e}"), None)
}

impl Tasks {
    /// Tasks kept in `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            running: Mutex::new(HashMap::new()),
            ended: tokio::sync::broadcast::channel(64).0,
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes a `working` task for a call about to start, durably (a `tasks/get` on any replica
    /// finds it once this returns), and the token that stops the call.
    pub async fn create(
        &self,
        principal: &str,
        session: &str,
        tool: &str,
        call_id: &str,
    ) -> Result<(Record, CancellationToken), McpError> {
        self.create_for(principal, session, tool, call_id, TTL).await
    }

    /// [`Tasks::create`] with the TTL a client asked for (bounded by [`MIN_TTL`] and [`TTL`]),
    /// and the task listed for its session (`tasks/list` of the 2025-11-25 revision).
    pub async fn create_for(
        &self,
        principal: &str,
        session: &str,
        tool: &str,
        call_id: &str,
        ttl: Duration,
    ) -> Result<(Record, CancellationToken), McpError> {
        let ttl = ttl.clamp(MIN_TTL, TTL);
        let id = uuid::Uuid::new_v4().to_string();
        let now = rfc3339(SystemTime::now());
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(ttl.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64)
            .with_status_message(format!("{tool} is running"));
        let record = Record {
            task,
            result: None,
            error: None,
            session: session.to_owned(),
            tool: tool.to_owned(),
            call_id: call_id.to_owned(),
        };
        self.put(principal, &record).await?;
        // The session's list: read, add, write. Two replicas adding to one session's list at the
        // same instant can lose an entry from the list (never a task: tasks/get still finds it).
        let index = index_key(principal, session);
        let mut ids: Vec<String> = match self.store.cache_get(&index).await.map_err(store_error)? {
            Some(value) => serde_json::from_value(value).unwrap_or_default(),
            None => Vec::new(),
        };
        ids.push(id.clone());
        if ids.len() > MAX_LISTED {
            ids.drain(..ids.len() - MAX_LISTED);
        }
        self.store
            .cache_put(&index, &json!(ids), TTL)
            .await
            .map_err(store_error)?;
        let stop = CancellationToken::new();
        self.running().insert(key(principal, &id), stop.clone());
        Ok((record, stop))
    }

    async fn put(&self, principal: &str, record: &Record) -> Result<(), McpError> {
        let value = serde_json::to_value(record).map_err(store_error)?;
        let ttl = record.task.ttl_ms.map_or(TTL, Duration::from_millis);
        self.store
            .cache_put(&key(principal, &record.task.task_id), &value, ttl)
            .await
            .map_err(store_error)
    }

    /// The task, if `principal` has one by that id.
    pub async fn record(&self, principal: &str, id: &str) -> Result<Option<Record>, McpError> {
        match self.store.cache_get(&key(principal, id)).await.map_err(store_error)? {
            Some(value) => Ok(serde_json::from_value(value).ok()),
            None => Ok(None),
        }
    }

    /// The session's tasks that are still kept, oldest first.
    pub async fn list(&self, principal: &str, session: &str) -> Result<Vec<Record>, McpError> {
        let ids: Vec<String> = match self
            .store
            .cache_get(&index_key(principal, session))
            .await
            .map_err(store_error)?
        {
            Some(value) => serde_json::from_value(value).unwrap_or_default(),
            None => Vec::new(),
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(record) = self.record(principal, &id).await? {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// `tasks/get`: the task with its result or error once it ended; -32602 for a task the
    /// principal does not have.
    pub async fn get(&self, principal: &str, id: &str) -> Result<GetTaskResult, McpError> {
        let record = self.record(principal, id).await?.ok_or_else(|| unknown(id))?;
        Ok(GetTaskResult::new(record.detailed()))
    }

    /// `tasks/cancel`: stops the task's call (here at once, on another replica within
    /// [`WATCH_EVERY`]); an ended task is left as it is. -32602 for a task the principal does
    /// not have.
    pub async fn cancel(&self, principal: &str, id: &str) -> Result<(), McpError> {
        let record = self.record(principal, id).await?.ok_or_else(|| unknown(id))?;
        if record.task.status.is_terminal() {
            return Ok(());
        }
        if let Some(stop) = self.running().get(&key(principal, id)) {
            stop.cancel();
            return Ok(());
        }
        self.store
            .cache_put(&cancel_key(principal, id), &json!(true), TTL)
            .await
            .map_err(store_error)
    }

    /// Cancels `stop` when a cancel for the task is marked in the store (given to another
    /// replica), until `done`.
    pub fn watch(self: &Arc<Self>, principal: &str, id: &str, stop: CancellationToken, done: CancellationToken) {
        let tasks = self.clone();
        let mark = cancel_key(principal, id);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = done.cancelled() => return,
                    () = tokio::time::sleep(WATCH_EVERY) => {}
                }
                if let Ok(Some(Value::Bool(true))) = tasks.store.cache_get(&mark).await {
                    stop.cancel();
                    return;
                }
            }
        });
    }

    /// The tasks this replica ends from now on, as they end (a receiver that lags loses the
    /// oldest: notifications are a courtesy, `tasks/get` is the truth).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<(String, Record)> {
        self.ended.subscribe()
    }

    /// Records how the task's call ended; the task as recorded.
    pub async fn finish(&self, principal: &str, mut record: Record, end: End) -> Record {
        self.running().remove(&key(principal, &record.task.task_id));
        record.task.last_updated_at = rfc3339(SystemTime::now());
        record.task.status_message = None;
        match end {
            End::Completed(result) => {
                record.task.status = TaskStatus::Completed;
                record.result = match serde_json::to_value(&result) {
                    Ok(Value::Object(map)) => Some(map),
                    _ => None,
                };
            }
            End::Cancelled => {
                record.task.status = TaskStatus::Cancelled;
                record.task.status_message = Some("canceled".into());
            }
            End::Failed(error) => {
                record.task.status = TaskStatus::Failed;
                record.error = match serde_json::to_value(&error) {
                    Ok(Value::Object(map)) => Some(map),
                    _ => None,
                };
            }
        }
        if let Err(e) = self.put(principal, &record).await {
            tracing::warn!(task = %record.task.task_id, error = %e.message, "could not record the end of a task");
        }
        let _ = self.ended.send((principal.to_owned(), record.clone()));
        record
    }

    /// Runs a task's call: `work` in a task of its own (a panic in it fails the task instead of
    /// losing it), stopped by a cancel given to any replica; its end recorded on the task. The
    /// handle gives the task as recorded.
    pub fn run<F>(
        self: &Arc<Self>,
        principal: String,
        record: Record,
        stop: CancellationToken,
        work: F,
    ) -> tokio::task::JoinHandle<Record>
    where
        F: std::future::Future<Output = CallToolResult> + Send + 'static,
    {
        let tasks = self.clone();
        let done = CancellationToken::new();
        self.watch(&principal, &record.task.task_id, stop, done.clone());
        tokio::spawn(async move {
            let _watching = done.drop_guard();
            let end = match tokio::spawn(work).await {
                Ok(result) => end_of(result),
                Err(e) => End::Failed(McpError::internal_error(format!("the task's call failed: {e}"), None)),
            };
            tasks.finish(&principal, record, end).await
        })
    }

    /// Stops every task this replica runs (the gateway's shutdown).
    pub fn cancel_all(&self) {
        for stop in self.running().values() {
            stop.cancel();
        }
    }
}

/// How a call's result ends its task: a canceled call is `cancelled`, a crashed tool `failed`,
/// anything else (tool errors included) `completed` with the result.
pub fn end_of(result: CallToolResult) -> End {
    if result.is_error == Some(true) {
        let text = result
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.as_str())
            .unwrap_or_default();
        if let Ok(Value::Object(body)) = serde_json::from_str::<Value>(text)
            && let Some(error) = body.get("error")
        {
            match error.get("type").and_then(Value::as_str) {
                Some("canceled") => return End::Cancelled,
                Some("execution_failed")
                    if error.get("message").and_then(Value::as_str) == Some(toolgate_core::error::TOOL_CRASHED) =>
                {
                    return End::Failed(McpError::internal_error(toolgate_core::error::TOOL_CRASHED, None));
                }
                _ => {}
            }
        }
    }
    End::Completed(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;
    use toolgate_core::store::MemoryStore;

    fn refusal(kind: &str, message: &str) -> CallToolResult {
        let body = json!({"error": {"type": kind, "message": message}});
        CallToolResult::error(vec![ContentBlock::text(body.to_string())])
    }

    #[test]
    fn a_call_s_end_decides_the_task_s_status() {
        assert!(matches!(
            end_of(CallToolResult::success(vec![ContentBlock::text("ok")])),
            End::Completed(_)
        ));
        // A tool error or a refusal is a result the model reads: completed, with isError.
        assert!(matches!(end_of(refusal("execution_failed", "exit 1")), End::Completed(r) if r.is_error == Some(true)));
        assert!(matches!(end_of(refusal("permission_denied", "no")), End::Completed(_)));
        assert!(matches!(end_of(refusal("canceled", "stopped")), End::Cancelled));
        assert!(matches!(
            end_of(refusal("execution_failed", toolgate_core::error::TOOL_CRASHED)),
            End::Failed(_)
        ));
        // A tool whose own text looks like a crash report is still the tool's result.
        let text = json!({"error": {"type": "execution_failed", "message": toolgate_core::error::TOOL_CRASHED}});
        assert!(matches!(
            end_of(CallToolResult::success(vec![ContentBlock::text(text.to_string())])),
            End::Completed(_)
        ));
    }

    #[tokio::test]
    async fn tasks_are_the_principal_s_own_and_cancel_is_idempotent() {
        let tasks = Arc::new(Tasks::new(Arc::new(MemoryStore::new())));
        let (record, stop) = tasks.create("alice", "alice/s1", "exec_shell", "c1").await.unwrap();
        let id = record.task.task_id.clone();
        assert_eq!(
            tasks.get("alice", &id).await.unwrap().task.status(),
            TaskStatus::Working
        );
        assert!(
            tasks.get("bob", &id).await.is_err(),
            "another principal's task is unknown"
        );
        assert!(tasks.cancel("bob", &id).await.is_err());
        assert!(!stop.is_cancelled(), "bob's cancel stopped nothing");
        tasks.cancel("alice", &id).await.unwrap();
        assert!(stop.is_cancelled());
        tasks.finish("alice", record, End::Cancelled).await;
        let got = serde_json::to_value(tasks.get("alice", &id).await.unwrap()).unwrap();
        assert_eq!(got["status"], "cancelled");
        assert!(got.get("result").is_none() && got.get("error").is_none(), "{got}");
        tasks.cancel("alice", &id).await.unwrap();
        assert!(tasks.get("alice", "made-up").await.is_err());
    }

    #[tokio::test]
    async fn a_cancel_marked_in_the_store_reaches_the_replica_running_the_task() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let runner = Arc::new(Tasks::new(store.clone()));
        let other = Arc::new(Tasks::new(store));
        let (record, stop) = runner.create("alice", "alice/s1", "exec_shell", "c1").await.unwrap();
        let done = CancellationToken::new();
        runner.watch("alice", &record.task.task_id, stop.clone(), done.clone());
        other.cancel("alice", &record.task.task_id).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), stop.cancelled())
            .await
            .expect("the runner saw the cancel");
        done.cancel();
    }
}
