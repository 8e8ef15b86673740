//! Stage 9: the result cache, for tools whose spec says cacheable and that are read-only or
//! idempotent. The key is the tool name, a hash of its schema, the canonical (key-sorted)
//! arguments, the workspace and the principal, plus the session id (session scope) or the turn
//! id (turn scope). Concurrent identical calls run once; failures are never cached; the cache
//! holds the untruncated result, and a hit skips only execution.

use crate::tool::CacheScope;
use moka::Expiry;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cached result and how long it is good for.
#[derive(Debug)]
pub struct Cached {
    /// The untruncated result.
    pub content: Value,
    ttl: Duration,
}

struct PerEntry;

impl Expiry<String, Arc<Cached>> for PerEntry {
    fn expire_after_create(&self, _: &String, value: &Arc<Cached>, _: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// The in-memory turn and session cache (the persistent scope lives in the `Store`).
pub struct ResultCache {
    entries: moka::future::Cache<String, Arc<Cached>>,
}

impl ResultCache {
    /// A cache holding at most `capacity` entries.
    pub fn new(capacity: u64) -> Self {
        Self {
            entries: moka::future::Cache::builder()
                .max_capacity(capacity)
                .expire_after(PerEntry)
                .build(),
        }
    }

    /// The cached value for `key`, or the result of `init`, which runs once for concurrent
    /// callers of the same key; an `Err` is returned to every waiter and not cached.
    pub async fn get_or_run<F, E>(&self, key: String, ttl: Duration, init: F) -> Result<Arc<Cached>, Arc<E>>
    where
        F: Future<Output = Result<Value, E>>,
        E: Send + Sync + 'static,
    {
        self.entries
            .try_get_with(key, async {
                init.await.map(|content| Arc::new(Cached { content, ttl }))
            })
            .await
    }
}

/// The parts a cache key is made of.
pub struct KeyParts<'a> {
    /// The tool.
    pub tool: &'a str,
    /// A hash of the schema the arguments were validated against.
    pub schema_hash: u64,
    /// The validated arguments.
    pub args: &'a Value,
    /// The workspace.
    pub workspace: &'a str,
    /// The principal.
    pub principal: &'a str,
    /// The scope.
    pub scope: CacheScope,
    /// The session id.
    pub session: &'a str,
    /// The turn id.
    pub turn: &'a str,
}

/// The cache key. Arguments enter as canonical JSON, not a hash, so two calls can never share
/// an entry unless their arguments are equal.
pub fn key(p: &KeyParts<'_>) -> String {
    let mut out = String::with_capacity(128);
    out.push_str(p.tool);
    out.push('\u{0}');
    out.push_str(&format!("{:016x}", p.schema_hash));
    out.push('\u{0}');
    canonical_json(p.args, &mut out);
    for part in [p.workspace, p.principal] {
        out.push('\u{0}');
        out.push_str(part);
    }
    match p.scope {
        CacheScope::Turn => {
            out.push_str("\u{0}turn\u{0}");
            out.push_str(p.turn);
        }
        CacheScope::Session => {
            out.push_str("\u{0}session\u{0}");
            out.push_str(p.session);
        }
        CacheScope::Persistent => out.push_str("\u{0}persistent"),
    }
    out
}

/// JSON with object keys sorted, recursively.
pub fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&o[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_ignore_key_order_and_separate_scopes() {
        let schema = json!({"type": "object"});
        let parts = |args: &Value, scope, session: &'static str| {
            key(&KeyParts {
                tool: "t",
                schema_hash: crate::guard::canonical_hash(&schema),
                args: leaked(args.clone()),
                workspace: "/w",
                principal: "p",
                scope,
                session,
                turn: "turn1",
            })
        };
        let a = json!({"x": 1, "y": [1, {"b": 2, "a": 1}]});
        let b = json!({"y": [1, {"a": 1, "b": 2}], "x": 1});
        assert_eq!(
            parts(&a, CacheScope::Session, "s1"),
            parts(&b, CacheScope::Session, "s1")
        );
        assert_ne!(
            parts(&a, CacheScope::Session, "s1"),
            parts(&a, CacheScope::Session, "s2")
        );
        assert_eq!(
            parts(&a, CacheScope::Persistent, "s1"),
            parts(&a, CacheScope::Persistent, "s2")
        );
        assert_ne!(parts(&a, CacheScope::Turn, "s1"), parts(&a, CacheScope::Session, "s1"));
    }

    fn leaked(v: Value) -> &'static Value {
        Box::leak(Box::new(v))
    }
}
