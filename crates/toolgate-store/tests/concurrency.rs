//! Concurrency: 8 tasks × 1,000 calls through the engine against one SQLite file, two processes at
//! once on one file, and 8 tasks against PostgreSQL. No row may be lost and no "database is
//! locked" may reach a call.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use toolgate_core::store::{JournalFilter, Store};
use toolgate_core::{SessionId, TurnOptions};
use toolgate_store::{StoreOptions, StoreUrl};

const TASKS: usize = 8;
const CALLS: usize = 1_000;

/// Every task runs its calls in batches of 4: odd batches call the read-only tool, even ones the
/// writer (whose rows are committed before it runs). Returns the failures seen.
async fn hammer(store: Arc<dyn Store>, tag: &str) -> Vec<String> {
    let reader = common::engine(vec![common::Noop::tool(true)]);
    let writer = common::engine(vec![common::Noop::tool(false)]);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (reader, writer, store) = (reader.clone(), writer.clone(), store.clone());
        let session_id = format!("{tag}-task{t}");
        tasks.push(tokio::spawn(async move {
            let on_reader = common::session(&reader, store.clone(), &session_id);
            let on_writer = common::session(&writer, store, &session_id);
            let mut failures = Vec::new();
            for b in 0..CALLS / 4 {
                let ids: Vec<String> = (0..4).map(|i| format!("{session_id}-{}", b * 4 + i)).collect();
                let (engine, session) = if b % 2 == 0 {
                    (&writer, &on_writer)
                } else {
                    (&reader, &on_reader)
                };
                let turn = engine
                    .run_turn(session, &common::answer("noop", &ids), TurnOptions::default())
                    .await;
                for o in &turn.outcomes {
                    if let Some(e) = common::error_type(o) {
                        failures.push(format!(
                            "{e}: {}",
                            o.entry().map(|e| e.content.to_string()).unwrap_or_default()
                        ));
                    }
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    store.flush().await.unwrap();
    failures
}

async fn count_rows(store: &dyn Store, tag: &str) -> usize {
    let mut seen = HashSet::new();
    for t in 0..TASKS {
        let rows = store
            .journal_list(&JournalFilter {
                session: Some(SessionId::new(format!("{tag}-task{t}"))),
                ..JournalFilter::default()
            })
            .await
            .unwrap();
        for r in rows {
            assert_eq!(r.state, "success", "{r:?}");
            assert!(seen.insert(r.call_id.to_string()), "duplicate {}", r.call_id);
        }
    }
    seen.len()
}

async fn sqlite(path: &Path) -> Arc<dyn Store> {
    toolgate_store::open(&StoreUrl::Sqlite(path.to_owned()), &StoreOptions::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_tasks_on_one_sqlite_file() {
    if std::env::var("TOOLGATE_CONCURRENCY_CHILD").is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("state.db")).await;
    let failures = hammer(store.clone(), "one").await;
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        failures.first()
    );
    assert_eq!(count_rows(store.as_ref(), "one").await, TASKS * CALLS);
}

/// In a child process: hammers the file named by the variable under the tag `child<pid>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn child_process() {
    let Ok(path) = std::env::var("TOOLGATE_CONCURRENCY_CHILD") else {
        return;
    };
    let store = sqlite(Path::new(&path)).await;
    let tag = std::env::var("TOOLGATE_CONCURRENCY_TAG").unwrap();
    let failures = hammer(store, &tag).await;
    for f in &failures {
        println!("@@failure {f}");
    }
}

#[tokio::test]
async fn two_processes_on_one_sqlite_file() {
    if std::env::var("TOOLGATE_CONCURRENCY_CHILD").is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let spawn = |tag: &str| {
        tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["child_process", "--exact", "--nocapture", "--test-threads=1"])
            .env("TOOLGATE_CONCURRENCY_CHILD", &path)
            .env("TOOLGATE_CONCURRENCY_TAG", tag)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .output()
    };
    // Both start before either opens the file: they also race to create and migrate it.
    let (a, b) = tokio::join!(spawn("p1"), spawn("p2"));
    for out in [a.unwrap(), b.unwrap()] {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "a child failed: {stdout}\n{stderr}");
        let failures: Vec<&str> = stdout.lines().filter(|l| l.contains("@@failure")).collect();
        assert!(
            failures.is_empty(),
            "{} failures, first: {:?}",
            failures.len(),
            failures.first()
        );
    }
    let store = sqlite(&path).await;
    assert_eq!(count_rows(store.as_ref(), "p1").await, TASKS * CALLS);
    assert_eq!(count_rows(store.as_ref(), "p2").await, TASKS * CALLS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_tasks_and_two_replicas_on_postgres() {
    if std::env::var("TOOLGATE_CONCURRENCY_CHILD").is_ok() {
        return;
    }
    let Some(schema) = common::PgSchema::create("concurrency").await else {
        return;
    };
    let url = StoreUrl::Postgres(schema.url.clone());
    // Two replicas (two stores, two pools, two writers) share the schema.
    let a = toolgate_store::open(&url, &StoreOptions::default()).await.unwrap();
    let b = toolgate_store::open(&url, &StoreOptions::default()).await.unwrap();
    let (fa, fb) = tokio::join!(hammer(a.clone(), "pga"), hammer(b.clone(), "pgb"));
    assert!(fa.is_empty() && fb.is_empty(), "{:?} {:?}", fa.first(), fb.first());
    assert_eq!(count_rows(a.as_ref(), "pga").await, TASKS * CALLS);
    assert_eq!(count_rows(a.as_ref(), "pgb").await, TASKS * CALLS);

    // Both replicas write the same session's grants and cache keys at once: upserts, no errors.
    let sid = SessionId::new("shared");
    let mut writes = Vec::new();
    for i in 0..50 {
        for s in [a.clone(), b.clone()] {
            let sid = sid.clone();
            writes.push(tokio::spawn(async move {
                s.grant_put(&sid, &format!("rule{}", i % 5), None).await?;
                s.cache_put(
                    &format!("k{}", i % 3),
                    &serde_json::json!(i),
                    std::time::Duration::from_secs(60),
                )
                .await
            }));
        }
    }
    for w in writes {
        w.await.unwrap().unwrap();
    }
    assert_eq!(a.grants(&sid).await.unwrap().len(), 5);
    assert!(b.cache_get("k0").await.unwrap().is_some());

    // Both replicas claim the same call ids: each id is claimed exactly once.
    let mut claims = Vec::new();
    for i in 0..100 {
        for s in [a.clone(), b.clone()] {
            claims.push(tokio::spawn(async move {
                let row = toolgate_core::store::JournalRow {
                    session_id: "race".into(),
                    call_id: format!("c{i}").into(),
                    state: "started".into(),
                    ..Default::default()
                };
                s.journal_begin(&row).await.unwrap()
            }));
        }
    }
    let mut won = 0;
    for c in claims {
        won += usize::from(c.await.unwrap());
    }
    assert_eq!(won, 100, "every id claimed once across the replicas");
}
