//! Audited calls per second through the whole pipeline, with a no-op read-only tool: journal off,
//! in memory, SQLite and PostgreSQL. Each measurement ends with a flush, so every row it counts is
//! committed. A second group runs a tool that is not read-only, whose row is committed (synced)
//! before each call.
//!
//! `cargo bench -p toolgate-store --bench audit`; PostgreSQL from `TOOLGATE_TEST_PG` (skipped when
//! unreachable).

use async_trait::async_trait;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};
use toolgate_core::result::ResultStore;
use toolgate_core::store::{JournalFilter, JournalRow, MemoryStore, PendingRecord, Store, StoreError};
use toolgate_core::tool::{Annotations, ToolContext, ToolOutput, ToolSpec};
use toolgate_core::{
    Answer, CallId, Engine, EngineConfig, Format, Principal, Registry, Session, SessionId, SessionOptions, Tool,
    ToolError, TurnOptions,
};
use toolgate_store::{StoreOptions, StoreUrl};

const BATCH: usize = 64;

struct Noop(ToolSpec, Value);

#[async_trait]
impl Tool for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "does nothing"
    }
    fn parameters(&self) -> &Value {
        &self.1
    }
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn execute(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(json!("ok")))
    }
}

/// The in-memory store with the journal switched off: the pipeline without any audit.
#[derive(Debug, Default)]
struct NoJournal(MemoryStore);

#[async_trait]
impl ResultStore for NoJournal {
    async fn put(&self, s: &SessionId, v: Arc<Value>, b: usize) -> String {
        self.0.put(s, v, b).await
    }
    async fn get(&self, s: &SessionId, h: &str) -> Option<Arc<Value>> {
        self.0.get(s, h).await
    }
}

#[async_trait]
impl Store for NoJournal {
    async fn journal_begin(&self, _: &JournalRow) -> Result<bool, StoreError> {
        Ok(true)
    }
    async fn journal_finish(&self, _: JournalRow) -> Result<(), StoreError> {
        Ok(())
    }
    async fn journal_contains(&self, _: &SessionId, _: &CallId) -> Result<bool, StoreError> {
        Ok(false)
    }
    async fn journal_unfinished(&self) -> Result<Vec<JournalRow>, StoreError> {
        Ok(Vec::new())
    }
    async fn journal_list(&self, _: &JournalFilter) -> Result<Vec<JournalRow>, StoreError> {
        Ok(Vec::new())
    }
    async fn journal_prune(&self, _: SystemTime) -> Result<u64, StoreError> {
        Ok(0)
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
    async fn memory_list(&self, p: &Principal, x: &str) -> Result<Vec<String>, StoreError> {
        self.0.memory_list(p, x).await
    }
    async fn approval_put(&self, r: &PendingRecord) -> Result<(), StoreError> {
        self.0.approval_put(r).await
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

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A batch of calls with fresh ids and arguments (so the loop detector never fires).
fn batch(n: usize) -> Answer {
    let calls: Vec<Value> = (0..n)
        .map(|_| {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            json!({"id": format!("c{i}"), "type": "function",
                   "function": {"name": "noop", "arguments": format!("{{\"i\":{i}}}")}})
        })
        .collect();
    Answer::parse(
        Format::Openai,
        &json!({"role": "assistant", "content": null, "tool_calls": calls}),
    )
    .unwrap_or_else(|e| panic!("bench answer: {e}"))
}

fn setup(read_only: bool, store: Arc<dyn Store>) -> (Arc<Engine>, Arc<Session>) {
    let spec = if read_only {
        ToolSpec::with_annotations(Annotations::READ_ONLY)
    } else {
        ToolSpec::default()
    };
    let mut registry = Registry::new();
    registry.register(Arc::new(Noop(spec, json!({"type": "object"}))));
    let engine = Arc::new(Engine::new(registry, EngineConfig::default()));
    let session = Arc::new(Session::new(
        engine.config(),
        SessionOptions {
            store: Some(store),
            approver: Arc::new(toolgate_core::permit::ApproveAll),
            ..SessionOptions::default()
        },
    ));
    (engine, session)
}

#[path = "../tests/common/pg.rs"]
mod pg;

async fn postgres() -> Option<(pg::PgSchema, Arc<dyn Store>)> {
    let schema = pg::PgSchema::create("bench").await?;
    let url = StoreUrl::Postgres(schema.url.clone());
    let store = toolgate_store::open(&url, &StoreOptions::default()).await.ok()?;
    Some((schema, store))
}

fn run_group(c: &mut Criterion, rt: &tokio::runtime::Runtime, read_only: bool, name: &str, calls: usize) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let mut stores: Vec<(&str, Arc<dyn Store>)> = Vec::new();
    if read_only {
        stores.push(("journal_off", Arc::new(NoJournal::default())));
        stores.push(("memory", Arc::new(MemoryStore::new())));
    }
    let sqlite = rt
        .block_on(toolgate_store::open(
            &StoreUrl::Sqlite(dir.path().join("bench.db")),
            &StoreOptions::default(),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    stores.push(("sqlite", sqlite));
    let pg = rt.block_on(postgres());
    if let Some((_, store)) = &pg {
        stores.push(("postgres", store.clone()));
    }
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(calls as u64));
    for (label, store) in stores {
        let (engine, session) = setup(read_only, store.clone());
        group.bench_function(label, |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (engine, session, store) = (engine.clone(), session.clone(), store.clone());
                async move {
                    let answers: Vec<Answer> = (0..iters).map(|_| batch(calls)).collect();
                    let start = Instant::now();
                    for answer in &answers {
                        let turn = engine.run_turn(&session, answer, TurnOptions::default()).await;
                        assert!(
                            turn.outcomes.iter().all(|o| o.entry().is_some_and(|e| !e.is_error)),
                            "a call failed"
                        );
                    }
                    // Every row counted is committed.
                    store.flush().await.unwrap_or_else(|e| panic!("{e}"));
                    start.elapsed()
                }
            });
        });
    }
    group.finish();
    drop(pg);
}

fn audited(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    run_group(c, &rt, true, "audited_read_only_calls", BATCH);
    run_group(c, &rt, false, "audited_writer_calls_synced_before_each", 8);
}

criterion_group!(benches, audited);
criterion_main!(benches);
