//! Stage 11: check a result's shape, truncate it structurally to the byte budget, and keep the
//! full result under a `read_result` handle.

use crate::types::SessionId;
use async_trait::async_trait;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// What an empty result becomes, so the model is never handed nothing.
pub const NO_OUTPUT: &str = "(no output)";

/// The smallest budget honoured; smaller settings are raised to it.
pub const MIN_BUDGET: usize = 256;

/// Where full results live so the model can page through a truncated one.
#[async_trait]
pub trait ResultStore: Send + Sync + std::fmt::Debug {
    /// Keeps `value` for the session and returns its handle.
    async fn put(&self, session: &SessionId, value: Arc<Value>, bytes: usize) -> String;
    /// The value behind a handle of this session (handles of other sessions are not visible).
    async fn get(&self, session: &SessionId, handle: &str) -> Option<Arc<Value>>;
}

/// In-memory result store, bounded per session; the oldest entries are evicted first.
#[derive(Debug)]
pub struct MemoryResults {
    max_entries: usize,
    max_bytes: usize,
    sessions: Mutex<HashMap<SessionId, SessionResults>>,
}

#[derive(Debug, Default)]
struct SessionResults {
    next: u64,
    bytes: usize,
    order: VecDeque<(String, usize)>,
    values: HashMap<String, Arc<Value>>,
}

impl MemoryResults {
    /// A store keeping at most `max_entries` results and `max_bytes` per session.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            max_entries: max_entries.max(1),
            max_bytes,
            sessions: Mutex::new(HashMap::new()),
        }
    }
}

impl Default for MemoryResults {
    fn default() -> Self {
        Self::new(64, 64 << 20)
    }
}

#[async_trait]
impl ResultStore for MemoryResults {
    async fn put(&self, session: &SessionId, value: Arc<Value>, bytes: usize) -> String {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let s = sessions.entry(session.clone()).or_default();
        s.next += 1;
        let handle = format!("r{}", s.next);
        s.order.push_back((handle.clone(), bytes));
        s.bytes += bytes;
        s.values.insert(handle.clone(), value);
        while s.order.len() > self.max_entries || (s.bytes > self.max_bytes && s.order.len() > 1) {
            if let Some((old, size)) = s.order.pop_front() {
                s.values.remove(&old);
                s.bytes -= size;
            }
        }
        handle
    }

    async fn get(&self, session: &SessionId, handle: &str) -> Option<Arc<Value>> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(session)?.values.get(handle).cloned()
    }
}

/// An empty result (null, or blank text) becomes an explicit `(no output)`.
pub fn normalize_empty(value: Value) -> Value {
    match &value {
        Value::Null => Value::String(NO_OUTPUT.into()),
        Value::String(s) if s.trim().is_empty() => Value::String(NO_OUTPUT.into()),
        _ => value,
    }
}

/// The serialised size of a value in compact JSON, computed without serialising it.
pub fn json_size(v: &Value) -> usize {
    match v {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => number_len(n),
        Value::String(s) => escaped_len(s) + 2,
        Value::Array(a) => 2 + a.iter().map(json_size).sum::<usize>() + a.len().saturating_sub(1),
        Value::Object(o) => {
            2 + o.iter().map(|(k, v)| escaped_len(k) + 3 + json_size(v)).sum::<usize>() + o.len().saturating_sub(1)
        }
    }
}

fn number_len(n: &serde_json::Number) -> usize {
    if let Some(i) = n.as_i64() {
        let mut buf = itoa_len(i.unsigned_abs());
        if i < 0 {
            buf += 1;
        }
        buf
    } else if let Some(u) = n.as_u64() {
        itoa_len(u)
    } else {
        n.to_string().len()
    }
}

fn itoa_len(u: u64) -> usize {
    u.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// Bytes of a string's JSON escaping, without quotes.
pub fn escaped_len(s: &str) -> usize {
    let mut n = s.len();
    for &b in s.as_bytes() {
        if b < 0x20 {
            n += if matches!(b, b'\n' | b'\r' | b'\t' | 0x08 | 0x0c) {
                1
            } else {
                5
            };
        } else if b == b'"' || b == b'\\' {
            n += 1;
        }
    }
    n
}

mod truncate;
pub use truncate::{Truncation, truncate};
