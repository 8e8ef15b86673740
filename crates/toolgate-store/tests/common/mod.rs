//! Test helpers: a fresh PostgreSQL schema per test (dropped when the test ends, even when it
//! fails), and the three stores side by side.
#![allow(dead_code)]

use sqlx::Connection;
use std::sync::Arc;
use toolgate_core::store::Store;
use toolgate_store::{StoreOptions, StoreUrl};

/// The server tests use.
pub fn pg_base() -> String {
    std::env::var("TOOLGATE_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema of this test's own; dropped with everything in it when the value is dropped.
pub struct PgSchema {
    pub name: String,
    pub url: String,
}

impl PgSchema {
    /// A fresh schema, or `None` (with a message) when no server answers and CI is not set.
    /// Under `CI=true` an unreachable server fails the test.
    pub async fn create(test: &str) -> Option<Self> {
        let base = pg_base();
        let mut conn = match sqlx::PgConnection::connect(&base).await {
            Ok(c) => c,
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("skipped {test}: no PostgreSQL at {base} ({e}); set TOOLGATE_TEST_PG or start one");
                return None;
            }
            Err(e) => panic!("CI=true and PostgreSQL at {base} is unreachable: {e}"),
        };
        let name = format!(
            "tg_{}_{}",
            test.chars().filter(char::is_ascii_alphanumeric).collect::<String>(),
            uuid::Uuid::now_v7().simple()
        )
        .to_ascii_lowercase();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&mut conn)
            .await
            .expect("create the test schema");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options[search_path]={name}");
        Some(Self { name, url })
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let (base, name) = (pg_base(), self.name.clone());
        // Its own thread and runtime: drop may run inside (or outside) a test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = sqlx::PgConnection::connect(&base).await.ok()?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Options with small result limits, so eviction is visible.
pub fn options() -> StoreOptions {
    StoreOptions {
        results_per_session: 3,
        ..StoreOptions::default()
    }
}

/// A store of each kind; the guards keep the SQLite directory and the PostgreSQL schema alive.
pub struct Stores {
    pub all: Vec<(&'static str, Arc<dyn Store>)>,
    _dir: tempfile::TempDir,
    _schema: Option<PgSchema>,
}

pub async fn stores(test: &str) -> Stores {
    let dir = tempfile::tempdir().unwrap();
    let opts = options();
    let mut all: Vec<(&'static str, Arc<dyn Store>)> = vec![
        ("memory", toolgate_store::open(&StoreUrl::Memory, &opts).await.unwrap()),
        (
            "sqlite",
            toolgate_store::open(&StoreUrl::Sqlite(dir.path().join("state.db")), &opts)
                .await
                .unwrap(),
        ),
    ];
    let schema = PgSchema::create(test).await;
    if let Some(s) = &schema {
        all.push((
            "postgres",
            toolgate_store::open(&StoreUrl::Postgres(s.url.clone()), &opts)
                .await
                .unwrap(),
        ));
    }
    Stores {
        all,
        _dir: dir,
        _schema: schema,
    }
}
