//! A PostgreSQL schema per test or benchmark, dropped when it ends, even when it fails.
//! Included by the tests' `common` module and by `benches/audit.rs`.
#![allow(dead_code)]

use sqlx::Connection;

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
