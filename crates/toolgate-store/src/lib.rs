//! Durable state for toolgate: the `Store` trait of `toolgate-core` over SQLite (the embedded
//! default) and PostgreSQL (for several gateway replicas sharing state).
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolgate_store::OpenError> {
//! let url = toolgate_store::StoreUrl::parse("sqlite:///tmp/toolgate.db")?;
//! let store = toolgate_store::open(&url, &toolgate_store::StoreOptions::default()).await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! Both stores apply the same embedded migrations at start, write through one writer task per
//! process with group commit, and answer reads from a pool. SQLite runs in WAL mode with
//! `BEGIN IMMEDIATE` and a busy timeout, so several processes share one file.

mod lease;
mod nodelay;
mod owner;
mod sql;
mod writer;

pub use owner::{alive as owner_alive, this_process};
pub use sql::SqlStore;

use sql::{PgWriter, Reader, ResultLimits, SqliteWriter};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use toolgate_core::store::{JournalRow, MemoryStore, Store, StoreError};

/// Where state is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// Nothing kept beyond the process.
    Memory,
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL server (the URL as given).
    Postgres(String),
}

impl StoreUrl {
    /// Parses `memory`, `sqlite://PATH` (`sqlite:PATH` too) or `postgres://…` / `postgresql://…`.
    pub fn parse(text: &str) -> Result<Self, OpenError> {
        let text = text.trim();
        if text == "memory" || text == "memory:" {
            return Ok(Self::Memory);
        }
        if let Some(path) = text.strip_prefix("sqlite://").or_else(|| text.strip_prefix("sqlite:")) {
            let path = path.split('?').next().unwrap_or(path);
            if path.is_empty() {
                return Err(OpenError::Url(format!("{text:?} names no file; write sqlite://PATH")));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            PgConnectOptions::from_str(text).map_err(|e| OpenError::Url(format!("{}: {e}", redact_url(text))))?;
            return Ok(Self::Postgres(text.to_owned()));
        }
        let scheme = text.split_once(':').map_or(text, |(s, _)| s);
        Err(OpenError::Url(format!(
            "unsupported store {scheme:?}; use sqlite://PATH, postgres://USER@HOST/DB or memory"
        )))
    }

    /// The URL without credentials, for messages.
    pub fn label(&self) -> String {
        match self {
            Self::Memory => "memory".into(),
            Self::Sqlite(p) => format!("sqlite://{}", p.display()),
            Self::Postgres(u) => redact_url(u),
        }
    }
}

/// A URL with its password hidden.
fn redact_url(url: &str) -> String {
    toolgate_core::redact::redact_text(url).into_owned()
}

/// How the journal reaches the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Every commit someone waits for is synced (SQLite `synchronous = FULL`): a row committed
    /// before a tool runs, a grant, an ask survive a power loss. Rows closed at the end of a call
    /// (nobody waits for them) are committed without a sync of their own, and reach the disk with
    /// the next synced commit or checkpoint.
    #[default]
    Full,
    /// Commits survive a crash of the process, not of the machine (SQLite `synchronous = NORMAL`).
    Normal,
}

/// Tuning; every field has a default.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// How commits reach the disk (SQLite).
    pub durability: Durability,
    /// How long a queued journal row may wait for others to share its commit.
    pub group_delay: Duration,
    /// How long a SQLite writer waits for another process's lock.
    pub busy_timeout: Duration,
    /// Largest full result kept in the database (larger ones stay in the process).
    pub result_max_bytes: usize,
    /// How long full results are kept.
    pub result_ttl: Duration,
    /// Full results kept per session.
    pub results_per_session: usize,
    /// Connections in the read pool.
    pub max_connections: u32,
    /// How long to wait for a PostgreSQL server to answer.
    pub connect_timeout: Duration,
    /// How long a write someone waits for (the row of a call that is not read-only, a grant, an
    /// ask) is retried while the database is away, before it fails.
    pub write_timeout: Duration,
    /// A gateway replica's lease: the store renews it (every third of it) while this process
    /// lives, and closes the running calls and withdraws the asks of replicas whose lease
    /// expired. `None` (a CLI process): its rows are checked by process id at the next start.
    pub replica_lease: Option<Duration>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Full,
            group_delay: Duration::from_millis(2),
            busy_timeout: Duration::from_secs(30),
            result_max_bytes: 16 << 20,
            result_ttl: Duration::from_secs(24 * 3600),
            results_per_session: 64,
            max_connections: 4,
            connect_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            replica_lease: None,
        }
    }
}

/// Why a store could not be opened; each is one line naming the problem.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URL is malformed or of an unknown kind.
    #[error("bad store URL: {0}")]
    Url(String),
    /// The database could not be opened, read or migrated.
    #[error("cannot open the store {at}: {message}")]
    Open {
        /// Where.
        at: String,
        /// Why.
        message: String,
    },
}

fn open_error(at: &str, e: impl std::fmt::Display) -> OpenError {
    OpenError::Open {
        at: at.to_owned(),
        message: e.to_string(),
    }
}

fn sqlx_error(at: &str, e: sqlx::Error) -> OpenError {
    match e {
        sqlx::Error::PoolTimedOut => open_error(at, "the server did not answer in time"),
        other => open_error(at, writer::describe(other).0),
    }
}

/// Opens (creating and migrating when needed) the store a URL names, sweeps its expired entries,
/// and starts its writer on the current runtime.
pub async fn open(url: &StoreUrl, options: &StoreOptions) -> Result<Arc<dyn Store>, OpenError> {
    Ok(match url {
        StoreUrl::Memory => Arc::new(MemoryStore::with_result_limits(
            options.results_per_session,
            options.result_max_bytes.saturating_mul(options.results_per_session),
        )),
        StoreUrl::Sqlite(path) => leased(open_sqlite(path, options).await?, options).await?,
        StoreUrl::Postgres(text) => leased(open_postgres(text, options).await?, options).await?,
    })
}

/// The store, holding a replica lease when the options ask for one.
async fn leased(store: SqlStore, options: &StoreOptions) -> Result<Arc<dyn Store>, OpenError> {
    let store = Arc::new(store);
    if let Some(lease) = options.replica_lease {
        lease::hold(&store, lease)
            .await
            .map_err(|e| open_error(store.label(), e.0))?;
    }
    Ok(store)
}

/// This process (`host/pid/start`), and for a replica holding a lease `#` and an id of its own:
/// pids and hostnames repeat across containers, a replica id never does.
fn owner(options: &StoreOptions) -> String {
    match options.replica_lease {
        Some(_) => format!("{}#{}", this_process(), uuid::Uuid::now_v7().simple()),
        None => this_process(),
    }
}

fn limits(options: &StoreOptions) -> ResultLimits {
    ResultLimits {
        max_bytes: options.result_max_bytes,
        ttl: options.result_ttl,
        per_session: options.results_per_session.max(1),
    }
}

/// Opens a SQLite store at `path`, creating the file (not its directory) on first use.
pub async fn open_sqlite(path: &Path, options: &StoreOptions) -> Result<SqlStore, OpenError> {
    let at = format!("sqlite://{}", path.display());
    if path.is_dir() {
        return Err(open_error(&at, "it is a directory"));
    }
    let connect = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(match options.durability {
            Durability::Full => SqliteSynchronous::Full,
            Durability::Normal => SqliteSynchronous::Normal,
        })
        .busy_timeout(options.busy_timeout)
        .foreign_keys(false)
        .disable_statement_logging();
    // Processes that create the file at once race for the lock that switches it to WAL, which
    // SQLite answers "database is locked" without waiting (1 open in ~600 here): retried.
    let deadline = std::time::Instant::now() + options.busy_timeout;
    let conn = while_busy(deadline, || async {
        let mut conn = connect.connect().await?;
        migrate_sqlite(&mut conn).await?;
        Ok(conn)
    })
    .await
    .map_err(|e| sqlx_error(&at, e))?;
    let pool = while_busy(deadline, || {
        SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .connect_with(connect.clone())
    })
    .await
    .map_err(|e| sqlx_error(&at, e))?;
    let full = options.durability == Durability::Full;
    let db = SqliteWriter {
        conn: Some(conn),
        connect: connect.clone(),
        full,
        synced: full,
    };
    let writer = writer::Writer::spawn(db, options.group_delay, options.write_timeout);
    let store = SqlStore::new(
        Reader::Sqlite(pool),
        writer,
        limits(options),
        at.clone(),
        owner(options),
    );
    store.sweep().await.map_err(|e| open_error(&at, e.0))?;
    Ok(store)
}

/// Opens a PostgreSQL store (schema from the URL's `search_path`, e.g.
/// `?options[search_path]=toolgate`).
pub async fn open_postgres(url: &str, options: &StoreOptions) -> Result<SqlStore, OpenError> {
    let at = redact_url(url);
    let connect = PgConnectOptions::from_str(url)
        .map_err(|e| OpenError::Url(format!("{at}: {e}")))?
        .disable_statement_logging();
    // One connection first: its error says why (refused, unknown database, auth), where the
    // pool would only say it timed out.
    match tokio::time::timeout(options.connect_timeout, sqlx::PgConnection::connect_with(&connect)).await {
        Err(_) => return Err(open_error(&at, "the server did not answer in time")),
        Ok(Err(e)) => return Err(sqlx_error(&at, e)),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
    }
    let port = connect.get_port();
    let pool = PgPoolOptions::new()
        .after_connect(move |_, _| {
            Box::pin(async move {
                nodelay::set_for_peer_port(port);
                Ok(())
            })
        })
        .max_connections(options.max_connections.max(1) + 1)
        .acquire_timeout(options.connect_timeout)
        .connect_with(connect)
        .await
        .map_err(|e| sqlx_error(&at, e))?;
    migrate_postgres(&pool).await.map_err(|e| sqlx_error(&at, e))?;
    let writer = writer::Writer::spawn(PgWriter(pool.clone()), options.group_delay, options.write_timeout);
    let store = SqlStore::new(
        Reader::Postgres(pool),
        writer,
        limits(options),
        at.clone(),
        owner(options),
    );
    store.sweep().await.map_err(|e| open_error(&at, e.0))?;
    Ok(store)
}

/// Runs `step` again while SQLite answers busy or locked, until `deadline`.
async fn while_busy<T, F, Fut>(deadline: std::time::Instant, mut step: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    let mut pause = Duration::from_millis(2);
    loop {
        match step().await {
            Err(sqlx::Error::Database(d))
                if matches!(d.code().as_deref(), Some("5" | "6" | "261" | "262" | "517"))
                    && std::time::Instant::now() + pause < deadline =>
            {
                tracing::debug!(error = %d, "store open retried: the file is locked");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Applies the migrations this file lacks, under the write lock (`BEGIN IMMEDIATE`), so two
/// processes starting at once migrate once.
async fn migrate_sqlite(conn: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    sql::lite::migrate(&mut tx).await?;
    tx.commit().await
}

/// The same under a transaction-scoped advisory lock, so replicas starting at once migrate once.
async fn migrate_postgres(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(745020190)")
        .execute(&mut *tx)
        .await?;
    sql::pg::migrate(&mut tx).await?;
    tx.commit().await
}

/// What a start found of calls an earlier process left running.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Rows of processes that are gone: closed now as `canceled`, `may_have_run`.
    pub closed: Vec<JournalRow>,
    /// Rows of processes still running, or of another host: left as they are.
    pub running_elsewhere: Vec<JournalRow>,
}

/// Finds the journal rows left `started` and closes those whose process is gone: those calls may
/// have run, and the journal now says so. Rows of live processes are left alone.
pub async fn recover(store: &dyn Store) -> Result<Recovery, StoreError> {
    let mut out = Recovery::default();
    for row in store.journal_unfinished().await? {
        match row.owner.as_deref().and_then(owner_alive) {
            Some(false) => {
                let closed = JournalRow {
                    state: "canceled".into(),
                    error_type: Some("interrupted".into()),
                    may_have_run: true,
                    finished_at: Some(SystemTime::now()),
                    ..row
                };
                store.journal_finish(closed.clone()).await?;
                out.closed.push(closed);
            }
            _ => out.running_elsewhere.push(row),
        }
    }
    store.flush().await?;
    Ok(out)
}

/// Deletes finished journal rows older than `keep_days` (0 keeps everything).
pub async fn retain(store: &dyn Store, keep_days: u32) -> Result<u64, StoreError> {
    if keep_days == 0 {
        return Ok(0);
    }
    let before = SystemTime::now() - Duration::from_secs(u64::from(keep_days) * 86_400);
    store.journal_prune(before).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(StoreUrl::parse("memory").unwrap(), StoreUrl::Memory);
        assert_eq!(
            StoreUrl::parse("sqlite:///var/x.db").unwrap(),
            StoreUrl::Sqlite("/var/x.db".into())
        );
        assert_eq!(
            StoreUrl::parse("sqlite:rel.db").unwrap(),
            StoreUrl::Sqlite("rel.db".into())
        );
        assert!(matches!(
            StoreUrl::parse("postgres://u@127.0.0.1/db").unwrap(),
            StoreUrl::Postgres(_)
        ));
        let e = StoreUrl::parse("mysql://root@localhost/x").unwrap_err().to_string();
        assert!(e.contains("\"mysql\"") && e.contains("sqlite://"), "{e}");
        assert!(StoreUrl::parse("sqlite://").is_err());
        let label = StoreUrl::parse("postgres://u:hunter2@h/db").unwrap().label();
        assert!(!label.contains("hunter2"), "{label}");
    }
}
