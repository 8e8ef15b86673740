//! The `Store` trait: what a session keeps beyond one process's memory — the audit journal,
//! session grants, the persistent cache, memory records, pending approvals and full results.
//! [`MemoryStore`] implements it in memory (the library default and the tests); the durable
//! SQLite and PostgreSQL stores live in `toolgate-store`.

use crate::result::ResultStore;
use crate::types::{CallId, Principal, SessionId, ToolName, TurnId};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// A failure of the store itself.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("state store: {0}")]
pub struct StoreError(pub String);

/// Writes nobody waited for (journal rows of read-only calls) that a store has not committed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Held while the database refuses them (it is away, or its disk is full), to be retried.
    pub held: usize,
    /// Dropped since the store opened (more were held than the bound, or one was refused where
    /// others were taken); each is also logged.
    pub lost: u64,
}

/// One journal row, keyed by (session, call id).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalRow {
    /// The session.
    pub session_id: SessionId,
    /// The call.
    pub call_id: CallId,
    /// The turn.
    pub turn_id: TurnId,
    /// The tool.
    pub tool: ToolName,
    /// A hash of the canonical arguments.
    pub arguments_hash: u64,
    /// The arguments, secrets redacted (`None` when `[audit] store_arguments = false`).
    pub arguments: Option<Value>,
    /// Whether stage 1 repaired the call.
    pub repaired: bool,
    /// The model's text before the repair, secrets redacted (repaired calls only).
    pub raw: Option<String>,
    /// `started` while the tool may be running, then the outcome: `success`, `error` or `canceled`.
    pub state: Cow<'static, str>,
    /// The error type of a call that did not succeed (`permission_denied`, `timeout`, …).
    pub error_type: Option<Cow<'static, str>>,
    /// The verdict's decision (`allow`, `deny`, `canceled`).
    pub decision: Option<Cow<'static, str>>,
    /// Where the verdict came from.
    pub source: Option<Cow<'static, str>>,
    /// What the hooks said, when one decided, rewrote, replaced or stopped:
    /// `{"pre": {"decision", "reason", "rewrote"}, "post": {"replaced", "stop"}}`.
    pub hooks: Option<Value>,
    /// Whether the cache answered.
    pub cache_hit: bool,
    /// Attempts made.
    pub attempts: u32,
    /// When the row was opened.
    pub started_at: Option<SystemTime>,
    /// Time in gates and approval, milliseconds.
    pub waiting_ms: u64,
    /// Time in the tool, milliseconds.
    pub running_ms: u64,
    /// Whether the tool may have run (a row closed `canceled` after it started).
    pub may_have_run: bool,
    /// When the row was closed.
    pub finished_at: Option<SystemTime>,
    /// The process that opened the row (`host/pid/start`), stamped by durable stores so a later
    /// start can tell a crashed process's rows from a live one's.
    pub owner: Option<String>,
    /// The background job the call started: `{"id"}` while it runs, then `{"id", "state",
    /// "exit_code", "output_bytes"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Value>,
}

impl JournalRow {
    /// Whether the row matches a filter (the in-memory form of the stores' query).
    pub fn matches(&self, filter: &JournalFilter) -> bool {
        filter.session.as_ref().is_none_or(|s| s == &self.session_id)
            && filter
                .session_prefix
                .as_deref()
                .is_none_or(|p| self.session_id.as_str().starts_with(p))
            && filter.tool.as_deref().is_none_or(|t| t == self.tool.as_str())
            && filter
                .since
                .is_none_or(|since| self.started_at.is_some_and(|at| at >= since))
            && filter
                .outcome
                .as_deref()
                .is_none_or(|o| o == self.state || self.error_type.as_deref() == Some(o))
    }
}

/// Which journal rows to list; every field narrows, none means all.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JournalFilter {
    /// One session.
    pub session: Option<SessionId>,
    /// Sessions whose id starts with this (a gateway principal's sessions: `NAME/`).
    pub session_prefix: Option<String>,
    /// One tool.
    pub tool: Option<String>,
    /// Rows started at or after this time.
    pub since: Option<SystemTime>,
    /// An outcome (`started`, `success`, `error`, `canceled`) or an error type (`timeout`, …).
    pub outcome: Option<String>,
    /// At most this many rows (0: no limit).
    pub limit: usize,
}

/// A pending approval, so any replica can answer it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingRecord {
    /// Its id.
    pub id: String,
    /// The session asking.
    pub session_id: String,
    /// What is asked (the request as JSON).
    pub request: Value,
    /// The answer, once given.
    pub answer: Option<Value>,
}

/// Durable session state. Every method is cancel-safe and must not block the runtime.
#[async_trait]
pub trait Store: ResultStore {
    /// Opens a journal row (before a non-read-only tool runs, committed before it runs). Returns
    /// false, writing nothing, when the journal already holds the call id for the session: the
    /// claim is atomic, so two processes sharing a store never both run one call.
    async fn journal_begin(&self, row: &JournalRow) -> Result<bool, StoreError>;
    /// Closes a journal row with its outcome (or writes it whole, for a call that ran without a
    /// `started` row). A row that another turn's call opened under the same id is left as it is:
    /// a call id reused by a later call never rewrites the record of the one that ran first.
    async fn journal_finish(&self, row: JournalRow) -> Result<(), StoreError>;
    /// Whether the journal already holds this call id for the session.
    async fn journal_contains(&self, session: &SessionId, call: &CallId) -> Result<bool, StoreError>;
    /// Rows left `started` (after a crash: calls that may have run).
    async fn journal_unfinished(&self) -> Result<Vec<JournalRow>, StoreError>;
    /// Journal rows matching the filter, newest first.
    async fn journal_list(&self, filter: &JournalFilter) -> Result<Vec<JournalRow>, StoreError>;
    /// Deletes finished rows started before `before` (retention); returns how many went.
    async fn journal_prune(&self, before: SystemTime) -> Result<u64, StoreError>;
    /// Whether the state outlives the process (other processes of a session see it): session
    /// cache entries are then kept here too.
    fn durable(&self) -> bool {
        false
    }
    /// Waits until every write made so far is durable (before a process exits).
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Writes nobody waited for that are not committed yet, or were dropped.
    fn backlog(&self) -> Backlog {
        Backlog::default()
    }
    /// The lease id of the replica this store serves, when it holds one.
    fn replica(&self) -> Option<&str> {
        None
    }
    /// Records a grant (a rule's text) for the session, until `expires`.
    async fn grant_put(&self, session: &SessionId, rule: &str, expires: Option<SystemTime>) -> Result<(), StoreError>;
    /// The session's grants that have not expired.
    async fn grants(&self, session: &SessionId) -> Result<Vec<String>, StoreError>;
    /// A persistent cache entry, if present and not expired.
    async fn cache_get(&self, key: &str) -> Result<Option<Value>, StoreError>;
    /// Stores a persistent cache entry for `ttl`.
    async fn cache_put(&self, key: &str, value: &Value, ttl: Duration) -> Result<(), StoreError>;
    /// A memory record.
    async fn memory_get(&self, principal: &Principal, key: &str) -> Result<Option<String>, StoreError>;
    /// Writes a memory record.
    async fn memory_put(&self, principal: &Principal, key: &str, value: &str) -> Result<(), StoreError>;
    /// Memory keys starting with `prefix`, sorted.
    async fn memory_list(&self, principal: &Principal, prefix: &str) -> Result<Vec<String>, StoreError>;
    /// Records a pending approval.
    async fn approval_put(&self, record: &PendingRecord) -> Result<(), StoreError>;
    /// Answers a pending approval; the first answer wins. False when no approval with that id
    /// is waiting (none, or already answered).
    async fn approval_answer(&self, id: &str, answer: &Value) -> Result<bool, StoreError>;
    /// A pending approval by id.
    async fn approval_get(&self, id: &str) -> Result<Option<PendingRecord>, StoreError>;
    /// The approvals still waiting for an answer, oldest first.
    async fn approvals_pending(&self) -> Result<Vec<PendingRecord>, StoreError>;
    /// Forgets an approval (its ask ended: answered, timed out or canceled).
    async fn approval_delete(&self, id: &str) -> Result<(), StoreError>;
    /// Revokes, in every session, the grants of this tool (the rule naming it exactly, with or
    /// without a pattern): its definition changed, so approvals given for the old one no longer
    /// hold. Returns how many went.
    async fn grants_revoke(&self, tool: &str) -> Result<u64, StoreError>;
}

/// Whether a grant's rule text names exactly this tool (`tool` or `tool(pattern)`).
pub fn grant_names_tool(rule: &str, tool: &str) -> bool {
    rule.strip_prefix(tool)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('('))
}

/// Journal rows kept in memory at most (finished rows are dropped beyond it): the in-memory
/// journal serves the running process; durable audit is the SQL stores' job.
const MAX_JOURNAL_ROWS: usize = 10_000;

/// Every kind of state in memory; bounded results per session (see [`crate::result::MemoryResults`]).
#[derive(Debug, Default)]
pub struct MemoryStore {
    results: crate::result::MemoryResults,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    journal: HashMap<(SessionId, CallId), JournalRow>,
    grants: HashMap<String, Vec<(String, Option<SystemTime>)>>,
    cache: HashMap<String, (Value, SystemTime)>,
    memory: HashMap<String, BTreeMap<String, String>>,
    approvals: HashMap<String, PendingRecord>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store keeping at most `entries` full results and `bytes` per session.
    pub fn with_result_limits(entries: usize, bytes: usize) -> Self {
        Self {
            results: crate::result::MemoryResults::new(entries, bytes),
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ResultStore for MemoryStore {
    async fn put(&self, session: &SessionId, value: Arc<Value>, bytes: usize) -> String {
        self.results.put(session, value, bytes).await
    }
    async fn get(&self, session: &SessionId, handle: &str) -> Option<Arc<Value>> {
        self.results.get(session, handle).await
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn journal_begin(&self, row: &JournalRow) -> Result<bool, StoreError> {
        let key = (row.session_id.clone(), row.call_id.clone());
        if self.state().journal.contains_key(&key) {
            return Ok(false);
        }
        self.journal_finish(row.clone()).await?;
        Ok(true)
    }
    async fn journal_finish(&self, row: JournalRow) -> Result<(), StoreError> {
        let mut state = self.state();
        if state.journal.len() >= MAX_JOURNAL_ROWS {
            // Bounded in memory: finished rows go first; rows that may have run stay.
            state.journal.retain(|_, r| r.state == "started");
        }
        let key = (row.session_id.clone(), row.call_id.clone());
        // A row closes only the call that opened it: another turn's call reusing the id never
        // replaces the record of the one that ran first (the SQL stores say the same).
        if state.journal.get(&key).is_some_and(|old| old.turn_id != row.turn_id) {
            tracing::warn!(call_id = %row.call_id, "a call reused an earlier call's id; the earlier journal row is kept");
            return Ok(());
        }
        state.journal.insert(key, row);
        Ok(())
    }
    async fn journal_contains(&self, session: &SessionId, call: &CallId) -> Result<bool, StoreError> {
        Ok(self.state().journal.contains_key(&(session.clone(), call.clone())))
    }
    async fn journal_unfinished(&self) -> Result<Vec<JournalRow>, StoreError> {
        Ok(self
            .state()
            .journal
            .values()
            .filter(|r| r.state == "started")
            .cloned()
            .collect())
    }
    async fn journal_list(&self, filter: &JournalFilter) -> Result<Vec<JournalRow>, StoreError> {
        let mut rows: Vec<JournalRow> = self
            .state()
            .journal
            .values()
            .filter(|r| r.matches(filter))
            .cloned()
            .collect();
        rows.sort_by(|a, b| b.started_at.cmp(&a.started_at).then_with(|| b.call_id.cmp(&a.call_id)));
        if filter.limit > 0 {
            rows.truncate(filter.limit);
        }
        Ok(rows)
    }
    async fn journal_prune(&self, before: SystemTime) -> Result<u64, StoreError> {
        let mut state = self.state();
        let n = state.journal.len();
        state
            .journal
            .retain(|_, r| r.state == "started" || r.started_at.is_none_or(|at| at >= before));
        Ok((n - state.journal.len()) as u64)
    }
    async fn grant_put(&self, session: &SessionId, rule: &str, expires: Option<SystemTime>) -> Result<(), StoreError> {
        let mut state = self.state();
        let grants = state.grants.entry(session.to_string()).or_default();
        match grants.iter_mut().find(|(r, _)| r == rule) {
            Some(existing) => existing.1 = expires,
            None => grants.push((rule.to_owned(), expires)),
        }
        Ok(())
    }
    async fn grants(&self, session: &SessionId) -> Result<Vec<String>, StoreError> {
        let now = SystemTime::now();
        Ok(self
            .state()
            .grants
            .get(session.as_str())
            .map(|g| {
                g.iter()
                    .filter(|(_, e)| e.is_none_or(|e| e > now))
                    .map(|(r, _)| r.clone())
                    .collect()
            })
            .unwrap_or_default())
    }
    async fn cache_get(&self, key: &str) -> Result<Option<Value>, StoreError> {
        let mut state = self.state();
        match state.cache.get(key) {
            Some((v, until)) if *until > SystemTime::now() => Ok(Some(v.clone())),
            Some(_) => {
                state.cache.remove(key);
                Ok(None)
            }
            None => Ok(None),
        }
    }
    async fn cache_put(&self, key: &str, value: &Value, ttl: Duration) -> Result<(), StoreError> {
        self.state()
            .cache
            .insert(key.to_owned(), (value.clone(), SystemTime::now() + ttl));
        Ok(())
    }
    async fn memory_get(&self, principal: &Principal, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .state()
            .memory
            .get(principal.as_str())
            .and_then(|m| m.get(key).cloned()))
    }
    async fn memory_put(&self, principal: &Principal, key: &str, value: &str) -> Result<(), StoreError> {
        self.state()
            .memory
            .entry(principal.to_string())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
        Ok(())
    }
    async fn memory_list(&self, principal: &Principal, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .state()
            .memory
            .get(principal.as_str())
            .map(|m| m.keys().filter(|k| k.starts_with(prefix)).cloned().collect())
            .unwrap_or_default())
    }
    async fn approval_put(&self, record: &PendingRecord) -> Result<(), StoreError> {
        self.state().approvals.insert(record.id.clone(), record.clone());
        Ok(())
    }
    async fn approval_answer(&self, id: &str, answer: &Value) -> Result<bool, StoreError> {
        Ok(match self.state().approvals.get_mut(id) {
            Some(r) if r.answer.is_none() => {
                r.answer = Some(answer.clone());
                true
            }
            _ => false,
        })
    }
    async fn approval_get(&self, id: &str) -> Result<Option<PendingRecord>, StoreError> {
        Ok(self.state().approvals.get(id).cloned())
    }
    async fn approvals_pending(&self) -> Result<Vec<PendingRecord>, StoreError> {
        let mut pending: Vec<PendingRecord> = self
            .state()
            .approvals
            .values()
            .filter(|r| r.answer.is_none())
            .cloned()
            .collect();
        // Ids are UUIDv7: their order is the order they were asked in.
        pending.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(pending)
    }
    async fn approval_delete(&self, id: &str) -> Result<(), StoreError> {
        self.state().approvals.remove(id);
        Ok(())
    }
    async fn grants_revoke(&self, tool: &str) -> Result<u64, StoreError> {
        let mut n = 0;
        for grants in self.state().grants.values_mut() {
            let before = grants.len();
            grants.retain(|(rule, _)| !grant_names_tool(rule, tool));
            n += (before - grants.len()) as u64;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_kind_of_state_round_trips() {
        let s = MemoryStore::new();
        let session = SessionId::new("s");
        let row = JournalRow {
            session_id: "s".into(),
            call_id: "c".into(),
            turn_id: "t".into(),
            tool: "x".into(),
            state: "started".into(),
            ..JournalRow::default()
        };
        assert!(s.journal_begin(&row).await.unwrap());
        assert!(
            !s.journal_begin(&row).await.unwrap(),
            "a second claim of the call id fails"
        );
        assert!(s.journal_contains(&session, &CallId::new("c")).await.unwrap());
        assert_eq!(s.journal_unfinished().await.unwrap().len(), 1);
        s.journal_finish(JournalRow {
            state: "success".into(),
            ..row
        })
        .await
        .unwrap();
        assert!(s.journal_unfinished().await.unwrap().is_empty());

        s.grant_put(&session, "read_file", None).await.unwrap();
        s.grant_put(&session, "old", Some(SystemTime::now() - Duration::from_secs(1)))
            .await
            .unwrap();
        assert_eq!(s.grants(&session).await.unwrap(), ["read_file"]);

        s.cache_put("k", &serde_json::json!(1), Duration::from_secs(60))
            .await
            .unwrap();
        s.cache_put("gone", &serde_json::json!(2), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(s.cache_get("k").await.unwrap(), Some(serde_json::json!(1)));
        assert_eq!(s.cache_get("gone").await.unwrap(), None);

        let me = Principal::new("me");
        s.memory_put(&me, "notes/a", "1").await.unwrap();
        s.memory_put(&me, "notes/b", "2").await.unwrap();
        s.memory_put(&me, "todo", "3").await.unwrap();
        assert_eq!(s.memory_list(&me, "notes/").await.unwrap(), ["notes/a", "notes/b"]);
        assert_eq!(s.memory_get(&me, "todo").await.unwrap().as_deref(), Some("3"));
        assert_eq!(s.memory_get(&Principal::new("other"), "todo").await.unwrap(), None);

        let p = PendingRecord {
            id: "a1".into(),
            session_id: "s".into(),
            request: serde_json::json!({}),
            answer: None,
        };
        s.approval_put(&p).await.unwrap();
        assert!(
            s.approval_answer("a1", &serde_json::json!("approve_once"))
                .await
                .unwrap()
        );
        assert!(!s.approval_answer("nope", &serde_json::json!("x")).await.unwrap());
        assert_eq!(
            s.approval_get("a1").await.unwrap().unwrap().answer,
            Some(serde_json::json!("approve_once"))
        );
    }
}
