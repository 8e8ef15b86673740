//! Opening stores: bad files, bad URLs and unreachable servers give one clear error and write
//! nothing; expired entries are swept at start; results beyond the cap stay in the process.

mod common;

use serde_json::json;
use sqlx::Connection;
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::SessionId;
use toolgate_store::{OpenError, StoreOptions, StoreUrl};

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

async fn open_err(url: &str) -> String {
    let e: OpenError = match StoreUrl::parse(url) {
        Err(e) => e,
        Ok(u) => match toolgate_store::open(&u, &StoreOptions::default()).await {
            Err(e) => e,
            Ok(_) => panic!("{url} opened"),
        },
    };
    let text = e.to_string();
    assert!(!text.contains('\n'), "one line: {text:?}");
    text
}

#[tokio::test]
async fn a_corrupt_file_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let junk = b"this is not a database, it is a shopping list\n".repeat(200);
    std::fs::write(&path, &junk).unwrap();
    let before = listing(dir.path());
    let e = open_err(&format!("sqlite://{}", path.display())).await;
    assert!(e.contains("not a database") && e.contains("state.db"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), junk, "the file is untouched");
    assert_eq!(listing(dir.path()), before, "no -wal or -shm file appeared");
}

#[tokio::test]
async fn unwritable_places_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    // A parent that is a file (no permission bits can stand in: tests may run as root).
    let e = open_err(&format!("sqlite://{}/state.db", file.display())).await;
    assert!(e.contains("cannot open the store"), "{e}");
    let e = open_err(&format!("sqlite://{}", dir.path().display())).await;
    assert!(e.contains("directory"), "{e}");
    let e = open_err("sqlite:///proc/version").await;
    assert!(e.contains("cannot open the store"), "{e}");
    assert_eq!(listing(dir.path()), ["plain-file"]);
}

#[tokio::test]
async fn bad_urls_and_unreachable_servers() {
    let e = open_err("mysql://root@127.0.0.1/x").await;
    assert!(e.contains("\"mysql\"") && e.contains("sqlite://PATH"), "{e}");
    let e = open_err("redis://127.0.0.1").await;
    assert!(e.contains("\"redis\""), "{e}");
    let e = open_err("postgres://postgres:hunter2@127.0.0.1:1/test").await;
    assert!(e.contains("cannot open the store") && e.contains("refused"), "{e}");
    assert!(!e.contains("hunter2"), "no password in messages: {e}");
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = toolgate_store::open(&StoreUrl::Sqlite(path.clone()), &StoreOptions::default())
        .await
        .unwrap();
    store.flush().await.unwrap();
    drop(store);
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("INSERT INTO toolgate_schema (version) VALUES (99)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let e = open_err(&format!("sqlite://{}", path.display())).await;
    assert!(e.contains("version 99") && e.contains("upgrade toolgate"), "{e}");
}

#[tokio::test]
async fn expired_entries_are_swept_at_start_and_results_expire() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let options = StoreOptions {
        result_ttl: Duration::ZERO,
        ..StoreOptions::default()
    };
    let store = toolgate_store::open(&StoreUrl::Sqlite(path.clone()), &options)
        .await
        .unwrap();
    store.cache_put("stale", &json!(1), Duration::ZERO).await.unwrap();
    store
        .cache_put("fresh", &json!(2), Duration::from_secs(600))
        .await
        .unwrap();
    let sid = SessionId::new("s");
    let h = store.put(&sid, Arc::new(json!({"big": "x"})), 20).await;
    assert!(store.get(&sid, &h).await.is_none(), "an expired result is not served");
    store.flush().await.unwrap();
    drop(store);

    let _reopened = toolgate_store::open(&StoreUrl::Sqlite(path.clone()), &StoreOptions::default())
        .await
        .unwrap();
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let keys: Vec<String> = sqlx::query_scalar("SELECT key FROM cache")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys, ["fresh"]);
    let results: i64 = sqlx::query_scalar("SELECT count(*) FROM results")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(results, 0);
}

#[tokio::test]
async fn results_beyond_the_cap_stay_readable_in_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        result_max_bytes: 100,
        ..StoreOptions::default()
    };
    let store = toolgate_store::open(&StoreUrl::Sqlite(dir.path().join("s.db")), &options)
        .await
        .unwrap();
    let sid = SessionId::new("s");
    let big = Arc::new(json!({"text": "y".repeat(500)}));
    let h = store.put(&sid, big.clone(), 512).await;
    assert_eq!(store.get(&sid, &h).await, Some(big));
    let small = Arc::new(json!({"text": "z"}));
    let h2 = store.put(&sid, small.clone(), 14).await;
    assert!(h2.starts_with('h') && h2 != h);
    assert_eq!(store.get(&sid, &h2).await, Some(small));
}

#[tokio::test]
async fn two_stores_on_one_file_see_each_others_state() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::Sqlite(dir.path().join("shared.db"));
    let a = toolgate_store::open(&url, &StoreOptions::default()).await.unwrap();
    let b = toolgate_store::open(&url, &StoreOptions::default()).await.unwrap();
    let sid = SessionId::new("s");
    a.grant_put(&sid, "read_file", None).await.unwrap();
    assert_eq!(b.grants(&sid).await.unwrap(), ["read_file"]);
    let h = b.put(&sid, Arc::new(json!([1, 2, 3])), 7).await;
    assert_eq!(a.get(&sid, &h).await, Some(Arc::new(json!([1, 2, 3]))));
    let record = toolgate_core::store::PendingRecord {
        id: "ask1".into(),
        session_id: "s".into(),
        request: json!({}),
        answer: None,
    };
    a.approval_put(&record).await.unwrap();
    assert!(b.approval_answer("ask1", &json!("approve_once")).await.unwrap());
    assert_eq!(
        a.approval_get("ask1").await.unwrap().unwrap().answer,
        Some(json!("approve_once"))
    );
}

/// The sweeps that run at every start, as the store writes them, and the look that comes
/// before them.
const SWEEPS: [(&str, &str); 6] = [
    ("SELECT 1 FROM results WHERE expires_at <= 1", "results_by_expiry"),
    ("SELECT 1 FROM cache WHERE expires_at <= 1", "cache_by_expiry"),
    (
        "SELECT 1 FROM grants WHERE expires_at IS NOT NULL AND expires_at <= 1",
        "grants_by_expiry",
    ),
    ("DELETE FROM results WHERE expires_at <= 1", "results_by_expiry"),
    ("DELETE FROM cache WHERE expires_at <= 1", "cache_by_expiry"),
    (
        "DELETE FROM grants WHERE expires_at IS NOT NULL AND expires_at <= 1",
        "grants_by_expiry",
    ),
];

#[tokio::test]
async fn every_start_up_sweep_reads_an_index_also_in_a_store_made_before_the_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let url = format!("sqlite://{}", path.display());
    drop(
        toolgate_store::open(&StoreUrl::Sqlite(path.clone()), &StoreOptions::default())
            .await
            .unwrap(),
    );
    // Make it a version-1 file, as an older toolgate left it: no expiry indexes.
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    for (_, index) in &SWEEPS[3..] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP INDEX {index}")))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    // Nor what later versions added.
    for undo in [
        "DROP INDEX journal_open_by_owner",
        "DROP TABLE replicas",
        "ALTER TABLE approvals DROP COLUMN owner",
        "ALTER TABLE journal DROP COLUMN job",
    ] {
        sqlx::query(undo).execute(&mut conn).await.unwrap();
    }
    sqlx::query("DELETE FROM toolgate_schema WHERE version > 1")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let _store = toolgate_store::open(&StoreUrl::Sqlite(path.clone()), &StoreOptions::default())
        .await
        .unwrap();
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    for (sweep, index) in SWEEPS {
        let plan: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sweep}")))
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| sqlx::Row::get::<String, _>(r, "detail"))
            .collect();
        assert!(
            plan.iter().any(|d| d.contains(&format!("INDEX {index}"))),
            "{sweep}: {plan:?}"
        );
    }
}

#[tokio::test]
async fn postgres_gets_the_expiry_indexes() {
    let Some(schema) = common::PgSchema::create("expiry_indexes").await else {
        return;
    };
    let _store = toolgate_store::open(&StoreUrl::Postgres(schema.url.clone()), &StoreOptions::default())
        .await
        .unwrap();
    let mut conn = sqlx::PgConnection::connect(&schema.url).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar("SELECT indexname::text FROM pg_indexes WHERE schemaname = $1")
        .bind(&schema.name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    for (_, index) in SWEEPS {
        assert!(names.iter().any(|n| n == index), "{index} in {names:?}");
    }
}

/// Processes that start at once on a new file race to create it and switch it to WAL; SQLite
/// answers that race "database is locked" without waiting (1 open in ~600 before the retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_opening_a_new_file_at_once_all_open() {
    let mut errors = Vec::new();
    for round in 0..60 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let url = StoreUrl::Sqlite(path.clone());
                tokio::spawn(async move { toolgate_store::open(&url, &StoreOptions::default()).await })
            })
            .collect();
        for o in opens {
            match o.await.unwrap() {
                Err(e) => errors.push(format!("round {round}: {e}")),
                Ok(store) => assert!(store.grants(&SessionId::new("s")).await.unwrap().is_empty()),
            }
        }
    }
    assert!(
        errors.is_empty(),
        "{} of 360 opens failed, first: {}",
        errors.len(),
        errors[0]
    );
}
