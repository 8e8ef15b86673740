//! Who answers asks in the gateway: the HTTP approval queue (asks kept in the store, so any
//! replica sharing it can answer them), MCP elicitation to the connected client, or nobody.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use toolgate_core::permit::{Answer, ApprovalRequest, Approver};
use toolgate_core::store::{PendingRecord, Store};

/// How asks are answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The HTTP approval queue (`GET /v1/approvals`, `POST /v1/approvals/{id}`).
    #[default]
    Queue,
    /// An MCP elicitation to the client that made the call.
    Elicitation,
    /// Nobody: every ask is refused.
    Deny,
    /// `--yes`: every ask is approved once (a deny still wins).
    #[serde(skip)]
    Yes,
}

/// The approval queue: pending asks in the store; answers wake the local waiter at once and
/// other replicas' waiters at their next look.
pub struct Queue {
    store: Arc<dyn Store>,
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
    /// How often a waiter looks at the store for an answer given elsewhere.
    poll: Duration,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}

/// Why an answer was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// No ask with that id is waiting.
    NotFound,
    /// The body does not say what to do.
    Invalid(String),
    /// The store failed.
    Store(String),
}

impl Queue {
    /// A queue over this store.
    pub fn new(store: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            store,
            waiting: Mutex::new(HashMap::new()),
            poll: Duration::from_millis(250),
        })
    }

    /// The asks this process waits on (the queue in the store is every replica's).
    pub fn waiting_here(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The asks waiting for an answer, oldest first.
    pub async fn pending(&self) -> Result<Vec<PendingRecord>, String> {
        self.store.approvals_pending().await.map_err(|e| e.to_string())
    }

    /// Answers an ask: `{"decision": "approve_once" | "approve_session" | "approve_tool" |
    /// "approve_rule" | "reject", "rule": "…", "reason": "…"}`. The first answer wins.
    pub async fn answer(&self, id: &str, body: &Value) -> Result<(), AnswerError> {
        parse_answer(body).map_err(AnswerError::Invalid)?;
        match self.store.approval_answer(id, body).await {
            Ok(true) => {
                if let Some(n) = self.waiting.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
                    n.notify_one();
                }
                Ok(())
            }
            Ok(false) => Err(AnswerError::NotFound),
            Err(e) => Err(AnswerError::Store(e.to_string())),
        }
    }
}

/// Reads an answer body.
pub fn parse_answer(body: &Value) -> Result<Answer, String> {
    let decision = body
        .get("decision")
        .and_then(Value::as_str)
        .ok_or("the body needs a \"decision\": approve_once, approve_session, approve_tool, approve_rule or reject")?;
    let reason = body.get("reason").and_then(Value::as_str).map(str::to_owned);
    Ok(match decision {
        "approve_once" => Answer::ApproveOnce,
        "approve_session" => Answer::ApproveSession,
        "approve_tool" => Answer::ApproveTool,
        "approve_rule" => Answer::ApproveRule(
            body.get("rule")
                .and_then(Value::as_str)
                .ok_or("approve_rule needs the \"rule\" to grant")?
                .to_owned(),
        ),
        "reject" => Answer::Reject(reason),
        other => return Err(format!("unknown decision {other:?}")),
    })
}

/// The ask as the queue shows it, from `asker`, asked now and expiring after `timeout`.
pub fn describe(asker: &QueueApprover, request: &ApprovalRequest) -> Value {
    let now = std::time::SystemTime::now();
    json!({
        "session_id": asker.session,
        "principal": asker.principal,
        "client": asker.client,
        "created_at": toolgate_core::audit::rfc3339(now),
        "expires_at": toolgate_core::audit::rfc3339(now + asker.timeout),
        "call_id": request.call.id.as_str(),
        "tool": request.call.name.as_str(),
        "arguments": toolgate_core::redact::redact_value(&request.arguments()),
        "subject": request.subject,
        "reason": request.reason,
        "suggested_rule": request.suggested_rule,
    })
}

/// One session's approver over the queue.
pub struct QueueApprover {
    /// The queue.
    pub queue: Arc<Queue>,
    /// The session asking.
    pub session: String,
    /// Whose session it is.
    pub principal: String,
    /// The client program (an MCP client's `clientInfo.name`, `rest` for `/v1/execute`).
    pub client: String,
    /// How long an ask waits before it is refused (the engine's approval timeout).
    pub timeout: Duration,
}

/// Removes a finished ask from the store and the waiters, whatever ended the wait.
struct Pending {
    queue: Arc<Queue>,
    id: String,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.queue
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
        let (store, id) = (self.queue.store.clone(), self.id.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = store.approval_delete(&id).await {
                    tracing::warn!(id = %id, error = %e, "could not remove a finished approval");
                }
            });
        }
    }
}

#[async_trait]
impl Approver for QueueApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Answer {
        let id = uuid::Uuid::now_v7().to_string();
        let notify = Arc::new(Notify::new());
        self.queue
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), notify.clone());
        let _pending = Pending {
            queue: self.queue.clone(),
            id: id.clone(),
        };
        let record = PendingRecord {
            id: id.clone(),
            session_id: self.session.clone(),
            request: describe(self, request),
            answer: None,
        };
        if let Err(e) = self.queue.store.approval_put(&record).await {
            tracing::error!(error = %e, "could not queue the approval");
            return Answer::Failed(e.to_string());
        }
        tracing::info!(approval = %id, tool = %request.call.name, "waiting for approval (POST /v1/approvals/{id})");
        // The engine ends the wait at approval_timeout (dropping this future).
        loop {
            match self.queue.store.approval_get(&id).await {
                Ok(Some(PendingRecord {
                    answer: Some(answer), ..
                })) => {
                    return parse_answer(&answer).unwrap_or(Answer::Reject(Some("the answer was not readable".into())));
                }
                Ok(Some(_)) => {}
                Ok(None) => return Answer::Unavailable,
                Err(e) => tracing::warn!(error = %e, "could not read the approval"),
            }
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep(self.queue.poll) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_strictly() {
        assert_eq!(
            parse_answer(&json!({"decision": "approve_once"})),
            Ok(Answer::ApproveOnce)
        );
        assert_eq!(
            parse_answer(&json!({"decision": "approve_rule", "rule": "x(y:*)"})),
            Ok(Answer::ApproveRule("x(y:*)".into()))
        );
        assert_eq!(
            parse_answer(&json!({"decision": "reject", "reason": "no"})),
            Ok(Answer::Reject(Some("no".into())))
        );
        assert!(parse_answer(&json!({"decision": "approve_rule"})).is_err());
        assert!(parse_answer(&json!({"decision": "yes"})).is_err());
        assert!(parse_answer(&json!({})).is_err());
    }
}

#[cfg(test)]
mod store_failure {
    use super::*;
    use std::time::SystemTime;
    use toolgate_core::store::{JournalFilter, JournalRow, MemoryStore, StoreError};
    use toolgate_core::{CallId, Principal, SessionId};

    /// A store whose asks cannot be written (its database is away); the rest works.
    #[derive(Debug, Default)]
    struct NoAsks(MemoryStore);

    #[async_trait]
    impl toolgate_core::result::ResultStore for NoAsks {
        async fn put(&self, s: &SessionId, v: Arc<Value>, b: usize) -> String {
            self.0.put(s, v, b).await
        }
        async fn get(&self, s: &SessionId, h: &str) -> Option<Arc<Value>> {
            self.0.get(s, h).await
        }
    }

    #[async_trait]
    impl Store for NoAsks {
        async fn journal_begin(&self, r: &JournalRow) -> Result<bool, StoreError> {
            self.0.journal_begin(r).await
        }
        async fn journal_finish(&self, r: JournalRow) -> Result<(), StoreError> {
            self.0.journal_finish(r).await
        }
        async fn journal_contains(&self, s: &SessionId, c: &CallId) -> Result<bool, StoreError> {
            self.0.journal_contains(s, c).await
        }
        async fn journal_unfinished(&self) -> Result<Vec<JournalRow>, StoreError> {
            self.0.journal_unfinished().await
        }
        async fn journal_list(&self, f: &JournalFilter) -> Result<Vec<JournalRow>, StoreError> {
            self.0.journal_list(f).await
        }
        async fn journal_prune(&self, b: SystemTime) -> Result<u64, StoreError> {
            self.0.journal_prune(b).await
        }
        async fn grant_put(&self, s: &SessionId, r: &str, e: Option<SystemTime>) -> Result<(), StoreError> {
            self.0.grant_put(s, r, e).await
        }
        async fn grants(&self, s: &SessionId) -> Result<Vec<String>, StoreError> {
            self.0.grants(s).await
        }
        async fn cache_get(&self, k: &str) -> Result<Option<Value>, StoreError> {
            self.0.cache_get(k).await
        }
        async fn cache_put(&self, k: &str, v: &Value, t: Duration) -> Result<(), StoreError> {
            self.0.cache_put(k, v, t).await
        }
        async fn memory_get(&self, p: &Principal, k: &str) -> Result<Option<String>, StoreError> {
            self.0.memory_get(p, k).await
        }
        async fn memory_put(&self, p: &Principal, k: &str, v: &str) -> Result<(), StoreError> {
            self.0.memory_put(p, k, v).await
        }
        async fn memory_list(&self, p: &Principal, k: &str) -> Result<Vec<String>, StoreError> {
            self.0.memory_list(p, k).await
        }
        async fn approval_put(&self, _: &PendingRecord) -> Result<(), StoreError> {
            Err(StoreError("connection refused".into()))
        }
        async fn approval_answer(&self, i: &str, a: &Value) -> Result<bool, StoreError> {
            self.0.approval_answer(i, a).await
        }
        async fn approval_get(&self, i: &str) -> Result<Option<PendingRecord>, StoreError> {
            self.0.approval_get(i).await
        }
        async fn approvals_pending(&self) -> Result<Vec<PendingRecord>, StoreError> {
            self.0.approvals_pending().await
        }
        async fn approval_delete(&self, i: &str) -> Result<(), StoreError> {
            self.0.approval_delete(i).await
        }
        async fn grants_revoke(&self, t: &str) -> Result<u64, StoreError> {
            self.0.grants_revoke(t).await
        }
    }

    #[tokio::test]
    async fn an_ask_the_store_refuses_is_a_failure_not_a_rejection() {
        let approver = QueueApprover {
            queue: Queue::new(Arc::new(NoAsks::default())),
            session: "s".into(),
            principal: "local".into(),
            client: "test".into(),
            timeout: Duration::from_secs(5),
        };
        let call = toolgate_core::ToolCall::new("c1", "write_file", serde_json::Map::new());
        let request = ApprovalRequest {
            call,
            subject: None,
            reason: "not read-only".into(),
            suggested_rule: None,
        };
        let answer = approver.approve(&request).await;
        assert!(
            matches!(&answer, Answer::Failed(why) if why.contains("connection refused")),
            "{answer:?}"
        );
    }
}
