//! The two SQL stores. SQLite and PostgreSQL share the schema text and every statement (both read
//! `$N` parameters and `ON CONFLICT … DO UPDATE`); the functions that bind and decode are written
//! once in [`dialect!`] and stamped out per database, because sqlx's driver types differ.

use crate::writer::{Apply, Op, Writer, describe};
use async_trait::async_trait;
use serde_json::Value;
use sqlx::{PgPool, Row, SqlitePool};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolgate_core::result::{MemoryResults, ResultStore};
use toolgate_core::store::{JournalFilter, JournalRow, PendingRecord, Store, StoreError};
use toolgate_core::{CallId, Principal, SessionId};

/// Schema migrations, applied in order at start; each is valid SQLite and PostgreSQL.
pub(crate) const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/0001_state.sql")),
    (2, include_str!("migrations/0002_expiry_indexes.sql")),
    (3, include_str!("migrations/0003_replica_leases.sql")),
    (4, include_str!("migrations/0004_journal_jobs.sql")),
];
const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS toolgate_schema (version BIGINT NOT NULL)";
const SCHEMA_VERSION: &str = "SELECT COALESCE(MAX(version), 0) FROM toolgate_schema";
const SCHEMA_RECORD: &str = "INSERT INTO toolgate_schema (version) VALUES ($1)";

fn check_version(version: i64) -> Result<(), sqlx::Error> {
    let known = MIGRATIONS.last().map_or(0, |(v, _)| *v);
    if version > known {
        return Err(sqlx::Error::Protocol(format!(
            "the database's schema is version {version}, newer than this toolgate knows ({known}); upgrade toolgate"
        )));
    }
    Ok(())
}

/// The 21 journal columns bound in order, by `Query::bind` or a builder's `push_bind`.
macro_rules! bind_journal {
    ($q:expr, $bind:ident, $r:expr) => {
        $q.$bind($r.session_id.as_str())
            .$bind($r.call_id.as_str())
            .$bind($r.turn_id.as_str())
            .$bind($r.tool.as_str())
            .$bind($r.arguments_hash as i64)
            .$bind(json_text(&$r.arguments))
            .$bind($r.repaired)
            .$bind($r.raw.as_deref())
            .$bind($r.state.as_ref())
            .$bind($r.error_type.as_deref())
            .$bind($r.decision.as_deref())
            .$bind($r.source.as_deref())
            .$bind(json_text(&$r.hooks))
            .$bind($r.cache_hit)
            .$bind(i64::from($r.attempts))
            .$bind($r.started_at.map(micros))
            .$bind(i64::try_from($r.waiting_ms).unwrap_or(i64::MAX))
            .$bind(i64::try_from($r.running_ms).unwrap_or(i64::MAX))
            .$bind($r.may_have_run)
            .$bind($r.finished_at.map(micros))
            .$bind($r.owner.as_deref())
            .$bind(json_text(&$r.job))
    };
}

macro_rules! journal_insert {
    () => {
        "INSERT INTO journal (session_id, call_id, turn_id, tool, arguments_hash, arguments, repaired, raw, \
         state, error_type, decision, source, hooks, cache_hit, attempts, started_at, waiting_ms, running_ms, \
         may_have_run, finished_at, owner, job) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)"
    };
}
/// The head of a multi-row insert (`VALUES` follows) and its conflict clause.
const JOURNAL_INSERT_HEAD: &str = "INSERT INTO journal (session_id, call_id, turn_id, tool, arguments_hash, arguments, \
     repaired, raw, state, error_type, decision, source, hooks, cache_hit, attempts, started_at, waiting_ms, \
     running_ms, may_have_run, finished_at, owner, job) ";
/// Rows per multi-row statement: 22 parameters each stays under both databases' limits.
const ROWS_PER_STATEMENT: usize = 400;
macro_rules! journal_update {
    () => {
        " ON CONFLICT (session_id, call_id) DO UPDATE SET turn_id = excluded.turn_id, tool = excluded.tool, \
     arguments_hash = excluded.arguments_hash, arguments = excluded.arguments, repaired = excluded.repaired, \
     raw = excluded.raw, state = excluded.state, error_type = excluded.error_type, decision = excluded.decision, \
     source = excluded.source, hooks = excluded.hooks, cache_hit = excluded.cache_hit, attempts = excluded.attempts, \
     started_at = excluded.started_at, waiting_ms = excluded.waiting_ms, running_ms = excluded.running_ms, \
     may_have_run = excluded.may_have_run, finished_at = excluded.finished_at, \
     owner = COALESCE(excluded.owner, journal.owner), job = COALESCE(excluded.job, journal.job) \
     WHERE journal.turn_id = excluded.turn_id"
    };
}
const JOURNAL_UPDATE_TAIL: &str = journal_update!();
/// PostgreSQL's many-row form: one array per column.
const JOURNAL_UNNEST: &str = concat!(
    "INSERT INTO journal (session_id, call_id, turn_id, tool, arguments_hash, arguments, repaired, raw, state, \
     error_type, decision, source, hooks, cache_hit, attempts, started_at, waiting_ms, running_ms, may_have_run, \
     finished_at, owner, job) SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], \
     $6::text[], $7::bool[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], \
     $14::bool[], $15::int8[], $16::int8[], $17::int8[], $18::int8[], $19::bool[], $20::int8[], $21::text[], \
     $22::text[])",
    journal_update!()
);

/// How a batch runs: closed journal rows that follow one another go in one statement (the last
/// write of a key wins, as PostgreSQL refuses one key twice in a statement); the rest one by one.
enum Step {
    One(usize),
    Rows(Vec<usize>),
    /// Writes a later write of the same key replaced in this batch: done, nothing to run.
    Superseded(Vec<usize>),
}

fn plan(ops: &[&Op]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut run: Vec<usize> = Vec::new();
    let flush = |run: &mut Vec<usize>, steps: &mut Vec<Step>| {
        if run.is_empty() {
            return;
        }
        // Keep only the last write of each key, in order.
        let mut seen = std::collections::HashSet::new();
        let mut keep: Vec<usize> = run
            .iter()
            .rev()
            .copied()
            .filter(|&i| match ops[i] {
                Op::Journal { row, .. } => seen.insert((row.session_id.clone(), row.call_id.clone())),
                _ => false,
            })
            .collect();
        keep.reverse();
        let mut kept = vec![false; ops.len()];
        for &i in &keep {
            kept[i] = true;
        }
        let superseded: Vec<usize> = run.iter().copied().filter(|&i| !kept[i]).collect();
        steps.push(Step::Rows(keep));
        if !superseded.is_empty() {
            steps.push(Step::Superseded(superseded));
        }
        run.clear();
    };
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Journal { claim: false, .. } => run.push(i),
            _ => {
                flush(&mut run, &mut steps);
                steps.push(Step::One(i));
            }
        }
    }
    flush(&mut run, &mut steps);
    steps
}

const JOURNAL_CLAIM: &str = concat!(journal_insert!(), " ON CONFLICT (session_id, call_id) DO NOTHING");
const JOURNAL_UPSERT: &str = concat!(journal_insert!(), journal_update!());
macro_rules! journal_select {
    () => {
        "SELECT session_id, call_id, turn_id, tool, arguments_hash, arguments, repaired, raw, \
         state, error_type, decision, source, hooks, cache_hit, attempts, started_at, waiting_ms, running_ms, \
         may_have_run, finished_at, owner, job FROM journal"
    };
}
const JOURNAL_CONTAINS: &str = "SELECT 1 FROM journal WHERE session_id = $1 AND call_id = $2";
const JOURNAL_UNFINISHED: &str = concat!(
    journal_select!(),
    " WHERE state = 'started' ORDER BY started_at, call_id"
);
const JOURNAL_LIST: &str = concat!(
    journal_select!(),
    " WHERE ($1 IS NULL OR session_id = $1) AND ($2 IS NULL OR tool = $2) AND ($3 IS NULL OR started_at >= $3) \
     AND ($4 IS NULL OR state = $4 OR error_type = $4) \
     AND ($6 IS NULL OR substr(session_id, 1, length(CAST($6 AS TEXT))) = CAST($6 AS TEXT)) \
     ORDER BY started_at DESC, call_id DESC LIMIT $5"
);
const JOURNAL_PRUNE: &str = "DELETE FROM journal WHERE state <> 'started' AND started_at < $1";
const GRANT_PUT: &str = "INSERT INTO grants (session_id, rule, expires_at) VALUES ($1, $2, $3) \
     ON CONFLICT (session_id, rule) DO UPDATE SET expires_at = excluded.expires_at";
const GRANTS: &str =
    "SELECT rule FROM grants WHERE session_id = $1 AND (expires_at IS NULL OR expires_at > $2) ORDER BY rule";
const CACHE_PUT: &str = "INSERT INTO cache (key, value, expires_at) VALUES ($1, $2, $3) \
     ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at";
const CACHE_GET: &str = "SELECT value FROM cache WHERE key = $1 AND expires_at > $2";
const MEMORY_PUT: &str = "INSERT INTO memory (principal, key, value, updated_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (principal, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at";
const MEMORY_GET: &str = "SELECT value FROM memory WHERE principal = $1 AND key = $2";
const MEMORY_LIST: &str = "SELECT key FROM memory WHERE principal = $1 AND substr(key, 1, length($2)) = $2";
const APPROVAL_PUT: &str = "INSERT INTO approvals (id, session_id, request, answer, created_at, owner) \
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, \
     request = excluded.request, answer = excluded.answer";
const LEASE_RENEW: &str = "INSERT INTO replicas (id, started_at, lease_until) VALUES ($1, $2, $3) \
     ON CONFLICT (id) DO UPDATE SET lease_until = excluded.lease_until";
pub(crate) const LEASES_EXPIRED: &str = "SELECT id FROM replicas WHERE id <> $1 AND lease_until < $2 ORDER BY id";
// A reap happens only while the lease is still expired (its replica may have come back).
const LEASE_TAKE: &str = "DELETE FROM replicas WHERE id = $1 AND lease_until < $2";
const REAP_CALLS: &str = "UPDATE journal SET state = 'canceled', error_type = 'interrupted', may_have_run = TRUE, \
     finished_at = $2 WHERE state = 'started' AND owner = $1";
const REAP_ASKS: &str = "DELETE FROM approvals WHERE owner = $1";
const APPROVAL_ANSWER: &str = "UPDATE approvals SET answer = $2 WHERE id = $1 AND answer IS NULL";
const APPROVAL_GET: &str = "SELECT id, session_id, request, answer FROM approvals WHERE id = $1";
const APPROVALS_PENDING: &str =
    "SELECT id, session_id, request, answer FROM approvals WHERE answer IS NULL ORDER BY created_at, id";
const APPROVAL_DELETE: &str = "DELETE FROM approvals WHERE id = $1";
// `tool` exactly, or `tool(` followed by a pattern: compared as a prefix, so no LIKE escaping.
const GRANTS_REVOKE: &str = "DELETE FROM grants WHERE rule = $1 OR substr(rule, 1, length($1) + 1) = $1 || '('";
const RESULT_PUT: &str = "INSERT INTO results (session_id, handle, value, bytes, created_at, expires_at) \
     VALUES ($1, $2, $3, $4, $5, $6)";
const RESULT_TRIM: &str = "DELETE FROM results WHERE session_id = $1 AND created_at < \
     (SELECT created_at FROM results WHERE session_id = $1 ORDER BY created_at DESC LIMIT 1 OFFSET $2)";
const RESULT_GET: &str = "SELECT value FROM results WHERE session_id = $1 AND handle = $2 AND expires_at > $3";
// `$1` is unused (the text helper binds a first argument); `$2` is now.
const ANY_EXPIRED: &str = "SELECT 'x' WHERE $1 = $1 AND (\
     EXISTS (SELECT 1 FROM results WHERE expires_at <= $2) \
     OR EXISTS (SELECT 1 FROM cache WHERE expires_at <= $2) \
     OR EXISTS (SELECT 1 FROM grants WHERE expires_at IS NOT NULL AND expires_at <= $2))";
const SWEEP_CACHE: &str = "DELETE FROM cache WHERE expires_at <= $1";
const SWEEP_RESULTS: &str = "DELETE FROM results WHERE expires_at <= $1";
const SWEEP_GRANTS: &str = "DELETE FROM grants WHERE expires_at IS NOT NULL AND expires_at <= $1";

/// Microseconds since the epoch.
pub(crate) fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub(crate) fn from_micros(us: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

fn json_text(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(Value::to_string)
}

fn parse_json(text: Option<String>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

fn cow(s: Option<String>) -> Option<Cow<'static, str>> {
    s.map(Cow::Owned)
}

/// The bind and decode functions, written once and stamped out per database.
macro_rules! dialect {
    ($db:ty, $row:ty) => {
        use super::*;

        fn bind_row<'q>(
            q: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments>,
            r: &JournalRow,
        ) -> sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments> {
            bind_journal!(q, bind, r)
        }

        fn row(r: &$row) -> Result<JournalRow, sqlx::Error> {
            Ok(JournalRow {
                session_id: SessionId::new(r.try_get::<String, _>("session_id")?),
                call_id: CallId::new(r.try_get::<String, _>("call_id")?),
                turn_id: toolgate_core::TurnId::new(r.try_get::<String, _>("turn_id")?),
                tool: toolgate_core::ToolName::new(r.try_get::<String, _>("tool")?),
                arguments_hash: r.try_get::<i64, _>("arguments_hash")? as u64,
                arguments: parse_json(r.try_get("arguments")?),
                repaired: r.try_get("repaired")?,
                raw: r.try_get("raw")?,
                state: Cow::Owned(r.try_get("state")?),
                error_type: cow(r.try_get("error_type")?),
                decision: cow(r.try_get("decision")?),
                source: cow(r.try_get("source")?),
                hooks: parse_json(r.try_get("hooks")?),
                cache_hit: r.try_get("cache_hit")?,
                attempts: u32::try_from(r.try_get::<i64, _>("attempts")?).unwrap_or(u32::MAX),
                started_at: r.try_get::<Option<i64>, _>("started_at")?.map(from_micros),
                waiting_ms: u64::try_from(r.try_get::<i64, _>("waiting_ms")?).unwrap_or(0),
                running_ms: u64::try_from(r.try_get::<i64, _>("running_ms")?).unwrap_or(0),
                may_have_run: r.try_get("may_have_run")?,
                finished_at: r.try_get::<Option<i64>, _>("finished_at")?.map(from_micros),
                owner: r.try_get("owner")?,
                job: parse_json(r.try_get("job")?),
            })
        }

        /// Runs a planned batch: single statements, and runs of closed rows together.
        pub(crate) async fn run_steps(
            conn: &mut <$db as sqlx::Database>::Connection,
            ops: &[&Op],
        ) -> Result<Vec<u64>, sqlx::Error> {
            let mut counts = vec![0; ops.len()];
            for step in plan(ops) {
                match step {
                    Step::One(i) => counts[i] = apply_one(conn, ops[i]).await?,
                    Step::Rows(idx) => {
                        let rows: Vec<&JournalRow> = idx
                            .iter()
                            .filter_map(|&i| match ops[i] {
                                Op::Journal { row, .. } => Some(row.as_ref()),
                                _ => None,
                            })
                            .collect();
                        upsert_rows(conn, &rows).await?;
                        for i in idx {
                            counts[i] = 1;
                        }
                    }
                    Step::Superseded(idx) => {
                        for i in idx {
                            counts[i] = 1;
                        }
                    }
                }
            }
            Ok(counts)
        }

        /// Applies the migrations the database lacks (the caller holds the lock and the transaction).
        pub(crate) async fn migrate(conn: &mut <$db as sqlx::Database>::Connection) -> Result<(), sqlx::Error> {
            sqlx::query(SCHEMA_TABLE).execute(&mut *conn).await?;
            let version: i64 = sqlx::query_scalar(SCHEMA_VERSION).fetch_one(&mut *conn).await?;
            check_version(version)?;
            for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > version) {
                sqlx::raw_sql(*sql).execute(&mut *conn).await?;
                sqlx::query(SCHEMA_RECORD).bind(*v).execute(&mut *conn).await?;
            }
            Ok(())
        }

        /// One write on a connection inside the writer's transaction.
        pub(crate) async fn apply_one(
            conn: &mut <$db as sqlx::Database>::Connection,
            op: &Op,
        ) -> Result<u64, sqlx::Error> {
            let done = match op {
                Op::Journal { row, claim } => {
                    let sql = if *claim { JOURNAL_CLAIM } else { JOURNAL_UPSERT };
                    bind_row(sqlx::query(sql), row).execute(&mut *conn).await?
                }
                Op::Grant {
                    session,
                    rule,
                    expires,
                } => {
                    sqlx::query(GRANT_PUT)
                        .bind(session)
                        .bind(rule)
                        .bind(*expires)
                        .execute(&mut *conn)
                        .await?
                }
                Op::CachePut { key, value, expires } => {
                    sqlx::query(CACHE_PUT)
                        .bind(key)
                        .bind(value)
                        .bind(*expires)
                        .execute(&mut *conn)
                        .await?
                }
                Op::MemoryPut {
                    principal,
                    key,
                    value,
                    now,
                } => {
                    sqlx::query(MEMORY_PUT)
                        .bind(principal)
                        .bind(key)
                        .bind(value)
                        .bind(*now)
                        .execute(&mut *conn)
                        .await?
                }
                Op::ApprovalPut { record, now, owner } => {
                    sqlx::query(APPROVAL_PUT)
                        .bind(&record.id)
                        .bind(&record.session_id)
                        .bind(record.request.to_string())
                        .bind(record.answer.as_ref().map(Value::to_string))
                        .bind(*now)
                        .bind(owner)
                        .execute(&mut *conn)
                        .await?
                }
                Op::Lease { id, started, until } => {
                    sqlx::query(LEASE_RENEW)
                        .bind(id)
                        .bind(*started)
                        .bind(*until)
                        .execute(&mut *conn)
                        .await?
                }
                Op::Reap { id, now } => {
                    let taken = sqlx::query(LEASE_TAKE)
                        .bind(id)
                        .bind(*now)
                        .execute(&mut *conn)
                        .await?
                        .rows_affected();
                    if taken == 0 {
                        return Ok(0);
                    }
                    // The calls closed; the asks withdrawn are not counted.
                    let closed = sqlx::query(REAP_CALLS)
                        .bind(id)
                        .bind(*now)
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query(REAP_ASKS).bind(id).execute(&mut *conn).await?;
                    closed
                }
                Op::ApprovalAnswer { id, answer } => {
                    sqlx::query(APPROVAL_ANSWER)
                        .bind(id)
                        .bind(answer)
                        .execute(&mut *conn)
                        .await?
                }
                Op::ApprovalDelete { id } => sqlx::query(APPROVAL_DELETE).bind(id).execute(&mut *conn).await?,
                Op::GrantsRevoke { tool } => sqlx::query(GRANTS_REVOKE).bind(tool).execute(&mut *conn).await?,
                Op::ResultPut {
                    session,
                    handle,
                    value,
                    bytes,
                    now,
                    expires,
                    keep,
                } => {
                    let put = sqlx::query(RESULT_PUT)
                        .bind(session)
                        .bind(handle)
                        .bind(value)
                        .bind(*bytes)
                        .bind(*now)
                        .bind(*expires)
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query(RESULT_TRIM)
                        .bind(session)
                        .bind((*keep - 1).max(0))
                        .execute(&mut *conn)
                        .await?;
                    put
                }
                Op::Prune { before } => {
                    sqlx::query(JOURNAL_PRUNE)
                        .bind(*before)
                        .execute(&mut *conn)
                        .await?
                }
                Op::Sweep { now } => {
                    let mut n = 0;
                    for sql in [SWEEP_CACHE, SWEEP_RESULTS, SWEEP_GRANTS] {
                        n += sqlx::query(sql)
                            .bind(*now)
                            .execute(&mut *conn)
                            .await?
                            .rows_affected();
                    }
                    return Ok(n);
                }
                Op::Flush => return Ok(0),
            };
            Ok(done.rows_affected())
        }

        pub(crate) async fn contains(pool: &sqlx::Pool<$db>, session: &str, call: &str) -> Result<bool, sqlx::Error> {
            Ok(sqlx::query(JOURNAL_CONTAINS)
                .bind(session)
                .bind(call)
                .fetch_optional(pool)
                .await?
                .is_some())
        }

        pub(crate) async fn unfinished(pool: &sqlx::Pool<$db>) -> Result<Vec<JournalRow>, sqlx::Error> {
            let rows = sqlx::query(JOURNAL_UNFINISHED).fetch_all(pool).await?;
            rows.iter().map(row).collect()
        }

        pub(crate) async fn list(pool: &sqlx::Pool<$db>, f: &JournalFilter) -> Result<Vec<JournalRow>, sqlx::Error> {
            let limit = if f.limit == 0 {
                i64::MAX
            } else {
                i64::try_from(f.limit).unwrap_or(i64::MAX)
            };
            let rows = sqlx::query(JOURNAL_LIST)
                .bind(f.session.as_ref().map(|s| s.as_str()))
                .bind(f.tool.as_deref())
                .bind(f.since.map(micros))
                .bind(f.outcome.as_deref())
                .bind(limit)
                .bind(f.session_prefix.as_deref())
                .fetch_all(pool)
                .await?;
            rows.iter().map(row).collect()
        }

        pub(crate) async fn texts(
            pool: &sqlx::Pool<$db>,
            sql: &'static str,
            a: &str,
            b: Option<&str>,
            now: Option<i64>,
        ) -> Result<Vec<String>, sqlx::Error> {
            let mut q = sqlx::query(sql).bind(a);
            if let Some(b) = b {
                q = q.bind(b);
            }
            if let Some(now) = now {
                q = q.bind(now);
            }
            let rows = q.fetch_all(pool).await?;
            rows.iter().map(|r| r.try_get::<String, _>(0)).collect()
        }

        pub(crate) async fn approval(pool: &sqlx::Pool<$db>, id: &str) -> Result<Option<PendingRecord>, sqlx::Error> {
            let Some(r) = sqlx::query(APPROVAL_GET).bind(id).fetch_optional(pool).await? else {
                return Ok(None);
            };
            pending_record(&r).map(Some)
        }

        pub(crate) async fn approvals_pending(pool: &sqlx::Pool<$db>) -> Result<Vec<PendingRecord>, sqlx::Error> {
            let rows = sqlx::query(APPROVALS_PENDING).fetch_all(pool).await?;
            rows.iter().map(pending_record).collect()
        }

        fn pending_record(r: &$row) -> Result<PendingRecord, sqlx::Error> {
            Ok(PendingRecord {
                id: r.try_get("id")?,
                session_id: r.try_get("session_id")?,
                request: parse_json(Some(r.try_get("request")?)).unwrap_or(Value::Null),
                answer: parse_json(r.try_get("answer")?),
            })
        }
    };
}

pub(crate) mod lite {
    dialect!(sqlx::Sqlite, sqlx::sqlite::SqliteRow);

    /// Closed journal rows in multi-row statements (one round trip per chunk, not per row).
    pub(crate) async fn upsert_rows(
        conn: &mut sqlx::SqliteConnection,
        rows: &[&JournalRow],
    ) -> Result<(), sqlx::Error> {
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(JOURNAL_INSERT_HEAD);
            q.push_values(chunk, |mut b, r| {
                bind_journal!(b, push_bind, r);
            });
            q.push(JOURNAL_UPDATE_TAIL);
            q.build().execute(&mut *conn).await?;
        }
        Ok(())
    }
}

pub(crate) mod pg {
    dialect!(sqlx::Postgres, sqlx::postgres::PgRow);

    /// Closed journal rows in one statement over arrays: one prepared text whatever the count,
    /// where a `VALUES` list would be planned anew for every length.
    pub(crate) async fn upsert_rows(conn: &mut sqlx::PgConnection, rows: &[&JournalRow]) -> Result<(), sqlx::Error> {
        fn col<T>(rows: &[&JournalRow], f: impl Fn(&JournalRow) -> T) -> Vec<T> {
            rows.iter().map(|r| f(r)).collect()
        }
        sqlx::query(JOURNAL_UNNEST)
            .bind(col(rows, |r| r.session_id.to_string()))
            .bind(col(rows, |r| r.call_id.to_string()))
            .bind(col(rows, |r| r.turn_id.to_string()))
            .bind(col(rows, |r| r.tool.to_string()))
            .bind(col(rows, |r| r.arguments_hash as i64))
            .bind(col(rows, |r| json_text(&r.arguments)))
            .bind(col(rows, |r| r.repaired))
            .bind(col(rows, |r| r.raw.clone()))
            .bind(col(rows, |r| r.state.to_string()))
            .bind(col(rows, |r| r.error_type.as_deref().map(str::to_owned)))
            .bind(col(rows, |r| r.decision.as_deref().map(str::to_owned)))
            .bind(col(rows, |r| r.source.as_deref().map(str::to_owned)))
            .bind(col(rows, |r| json_text(&r.hooks)))
            .bind(col(rows, |r| r.cache_hit))
            .bind(col(rows, |r| i64::from(r.attempts)))
            .bind(col(rows, |r| r.started_at.map(micros)))
            .bind(col(rows, |r| i64::try_from(r.waiting_ms).unwrap_or(i64::MAX)))
            .bind(col(rows, |r| i64::try_from(r.running_ms).unwrap_or(i64::MAX)))
            .bind(col(rows, |r| r.may_have_run))
            .bind(col(rows, |r| r.finished_at.map(micros)))
            .bind(col(rows, |r| r.owner.clone()))
            .bind(col(rows, |r| json_text(&r.job)))
            .execute(conn)
            .await?;
        Ok(())
    }
}

/// Reads go to a pool; writes go through the process's writer task.
#[derive(Debug, Clone)]
pub(crate) enum Reader {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The SQLite writer: one connection, `BEGIN IMMEDIATE` so a writer waits for the lock up front
/// (under the busy timeout) instead of failing when it upgrades a read.
///
/// A failed transaction closes the connection and the next write opens a new one: a commit that
/// fails (a full disk) can leave the connection inside a transaction that SQLite has already
/// rolled back, and every later write would then fail until the process restarted.
pub(crate) struct SqliteWriter {
    pub(crate) conn: Option<sqlx::SqliteConnection>,
    pub(crate) connect: sqlx::sqlite::SqliteConnectOptions,
    /// The configured durability: `Full` syncs every commit someone waits for.
    pub(crate) full: bool,
    /// Whether the open connection is at `synchronous = FULL` now (it opens at the configured
    /// level; a batch nobody waits for lowers it to `NORMAL`).
    pub(crate) synced: bool,
}

#[async_trait]
impl Apply for SqliteWriter {
    async fn apply(&mut self, ops: &[&Op], sync: bool) -> Result<Vec<u64>, sqlx::Error> {
        use sqlx::{ConnectOptions, Connection};
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                self.synced = self.full;
                self.conn.insert(self.connect.connect().await?)
            }
        };
        let synced = &mut self.synced;
        let want = self.full && sync;
        let result = async {
            // `synchronous` is per connection and cheap to change between transactions (it does
            // no I/O); in WAL mode a later synced commit syncs the frames of earlier ones too.
            if *synced != want {
                let pragma = if want {
                    "PRAGMA synchronous = FULL"
                } else {
                    "PRAGMA synchronous = NORMAL"
                };
                sqlx::query(pragma).execute(&mut *conn).await?;
                *synced = want;
            }
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
            let counts = lite::run_steps(&mut tx, ops).await?;
            tx.commit().await?;
            Ok(counts)
        }
        .await;
        if result.is_err()
            && let Some(conn) = self.conn.take()
        {
            let _ = conn.close().await;
        }
        result
    }
}

/// The PostgreSQL writer: a transaction on a pooled connection.
pub(crate) struct PgWriter(pub(crate) PgPool);

#[async_trait]
impl Apply for PgWriter {
    async fn apply(&mut self, ops: &[&Op], _sync: bool) -> Result<Vec<u64>, sqlx::Error> {
        // Every commit waits for PostgreSQL's WAL flush: `synchronous_commit = off` would lose
        // the last commits to a crash of the server, not only of the machine.
        let mut tx = self.0.begin().await?;
        let counts = pg::run_steps(&mut tx, ops).await?;
        tx.commit().await?;
        Ok(counts)
    }
}

/// Limits on full results kept behind `read_result` handles.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResultLimits {
    pub(crate) max_bytes: usize,
    pub(crate) ttl: Duration,
    pub(crate) per_session: usize,
}

/// A durable store: SQLite or PostgreSQL.
pub struct SqlStore {
    reader: Reader,
    writer: Writer,
    limits: ResultLimits,
    /// Results too large for the database, or whose write failed: kept in this process.
    overflow: MemoryResults,
    owner: String,
    label: String,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("at", &self.label).finish()
    }
}

impl SqlStore {
    pub(crate) fn new(reader: Reader, writer: Writer, limits: ResultLimits, label: String, owner: String) -> Self {
        Self {
            reader,
            writer,
            limits,
            overflow: MemoryResults::new(limits.per_session, limits.max_bytes.saturating_mul(4)),
            owner,
            label,
        }
    }

    /// Who opens this store's journal rows and asks: this process, or this replica (`…#ID`).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Renews this replica's lease until `lease` from now.
    pub(crate) async fn renew(&self, started: i64, lease: Duration) -> Result<(), StoreError> {
        let until = now().saturating_add(i64::try_from(lease.as_micros()).unwrap_or(i64::MAX));
        self.writer
            .write(Op::Lease {
                id: self.owner.clone(),
                started,
                until,
            })
            .await
            .map(|_| ())
    }

    /// Closes the running calls and withdraws the asks of every other replica whose lease has
    /// expired; the replicas reaped, with the calls closed of each.
    pub async fn reap_expired(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let now = now();
        let expired = match &self.reader {
            Reader::Sqlite(p) => lite::texts(p, LEASES_EXPIRED, &self.owner, None, Some(now)).await,
            Reader::Postgres(p) => pg::texts(p, LEASES_EXPIRED, &self.owner, None, Some(now)).await,
        }
        .map_err(describe)?;
        let mut reaped = Vec::new();
        for id in expired {
            let closed = self.writer.write(Op::Reap { id: id.clone(), now }).await?;
            reaped.push((id, closed));
        }
        Ok(reaped)
    }

    /// Where the store is (a path, or a server without its credentials).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Drops expired cache entries, results and grants. Looks first (a read, through the expiry
    /// indexes): most starts find nothing to drop, and a write would cost them the write lock
    /// and a synced commit.
    pub async fn sweep(&self) -> Result<u64, StoreError> {
        let now = micros(SystemTime::now());
        let expired = match &self.reader {
            Reader::Sqlite(p) => lite::texts(p, ANY_EXPIRED, "", None, Some(now)).await,
            Reader::Postgres(p) => pg::texts(p, ANY_EXPIRED, "", None, Some(now)).await,
        }
        .map_err(describe)?;
        if expired.is_empty() {
            return Ok(0);
        }
        self.writer.write(Op::Sweep { now }).await
    }
}

fn now() -> i64 {
    micros(SystemTime::now())
}

macro_rules! read {
    ($self:ident, $f:ident ( $($arg:expr),* )) => {
        match &$self.reader {
            Reader::Sqlite(p) => lite::$f(p, $($arg),*).await,
            Reader::Postgres(p) => pg::$f(p, $($arg),*).await,
        }
        .map_err(describe)
    };
}

#[async_trait]
impl ResultStore for SqlStore {
    async fn put(&self, session: &SessionId, value: Arc<Value>, bytes: usize) -> String {
        if bytes <= self.limits.max_bytes {
            let handle = format!("h{}", uuid::Uuid::now_v7().simple());
            let now = now();
            let ttl = i64::try_from(self.limits.ttl.as_micros()).unwrap_or(i64::MAX);
            let op = Op::ResultPut {
                session: session.to_string(),
                handle: handle.clone(),
                value: value.to_string(),
                bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
                now,
                expires: now.saturating_add(ttl),
                keep: i64::try_from(self.limits.per_session).unwrap_or(i64::MAX),
            };
            match self.writer.write(op).await {
                Ok(_) => return handle,
                Err(e) => tracing::warn!(error = %e, "the full result is kept in this process only"),
            }
        }
        self.overflow.put(session, value, bytes).await
    }

    async fn get(&self, session: &SessionId, handle: &str) -> Option<Arc<Value>> {
        if !handle.starts_with('h') {
            return self.overflow.get(session, handle).await;
        }
        let texts = read!(self, texts(RESULT_GET, session.as_str(), Some(handle), Some(now())));
        match texts {
            Ok(t) => t
                .into_iter()
                .next()
                .and_then(|t| serde_json::from_str(&t).ok())
                .map(Arc::new),
            Err(e) => {
                tracing::warn!(error = %e, "could not read a full result");
                None
            }
        }
    }
}

#[async_trait]
impl Store for SqlStore {
    async fn journal_begin(&self, row: &JournalRow) -> Result<bool, StoreError> {
        let mut row = Box::new(row.clone());
        row.owner.get_or_insert_with(|| self.owner.clone());
        let n = self.writer.write(Op::Journal { row, claim: true }).await?;
        Ok(n > 0)
    }
    async fn journal_finish(&self, row: JournalRow) -> Result<(), StoreError> {
        self.writer
            .queue(Op::Journal {
                row: Box::new(row),
                claim: false,
            })
            .await
    }
    async fn journal_contains(&self, session: &SessionId, call: &CallId) -> Result<bool, StoreError> {
        self.writer.settle().await?;
        read!(self, contains(session.as_str(), call.as_str()))
    }
    async fn journal_unfinished(&self) -> Result<Vec<JournalRow>, StoreError> {
        self.writer.settle().await?;
        read!(self, unfinished())
    }
    async fn journal_list(&self, filter: &JournalFilter) -> Result<Vec<JournalRow>, StoreError> {
        self.writer.settle().await?;
        read!(self, list(filter))
    }
    async fn journal_prune(&self, before: SystemTime) -> Result<u64, StoreError> {
        self.writer.settle().await?;
        self.writer.write(Op::Prune { before: micros(before) }).await
    }
    fn durable(&self) -> bool {
        true
    }
    fn replica(&self) -> Option<&str> {
        self.owner.contains('#').then_some(self.owner.as_str())
    }
    fn backlog(&self) -> toolgate_core::store::Backlog {
        use std::sync::atomic::Ordering;
        toolgate_core::store::Backlog {
            held: self.writer.backlog.held.load(Ordering::Relaxed),
            lost: self.writer.backlog.lost.load(Ordering::Relaxed),
        }
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.writer.flush().await
    }
    async fn grant_put(&self, session: &SessionId, rule: &str, expires: Option<SystemTime>) -> Result<(), StoreError> {
        self.writer
            .write(Op::Grant {
                session: session.to_string(),
                rule: rule.to_owned(),
                expires: expires.map(micros),
            })
            .await
            .map(|_| ())
    }
    async fn grants(&self, session: &SessionId) -> Result<Vec<String>, StoreError> {
        read!(self, texts(GRANTS, session.as_str(), None, Some(now())))
    }
    async fn cache_get(&self, key: &str) -> Result<Option<Value>, StoreError> {
        let texts = read!(self, texts(CACHE_GET, key, None, Some(now())))?;
        Ok(texts.into_iter().next().and_then(|t| serde_json::from_str(&t).ok()))
    }
    async fn cache_put(&self, key: &str, value: &Value, ttl: Duration) -> Result<(), StoreError> {
        let ttl = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        self.writer
            .write(Op::CachePut {
                key: key.to_owned(),
                value: value.to_string(),
                expires: now().saturating_add(ttl),
            })
            .await
            .map(|_| ())
    }
    async fn memory_get(&self, principal: &Principal, key: &str) -> Result<Option<String>, StoreError> {
        Ok(read!(self, texts(MEMORY_GET, principal.as_str(), Some(key), None))?
            .into_iter()
            .next())
    }
    async fn memory_put(&self, principal: &Principal, key: &str, value: &str) -> Result<(), StoreError> {
        self.writer
            .write(Op::MemoryPut {
                principal: principal.to_string(),
                key: key.to_owned(),
                value: value.to_owned(),
                now: now(),
            })
            .await
            .map(|_| ())
    }
    async fn memory_list(&self, principal: &Principal, prefix: &str) -> Result<Vec<String>, StoreError> {
        // Sorted here: the databases' collations differ, byte order does not.
        let mut keys = read!(self, texts(MEMORY_LIST, principal.as_str(), Some(prefix), None))?;
        keys.sort();
        Ok(keys)
    }
    async fn approval_put(&self, record: &PendingRecord) -> Result<(), StoreError> {
        self.writer
            .write(Op::ApprovalPut {
                record: record.clone(),
                now: now(),
                owner: self.owner.clone(),
            })
            .await
            .map(|_| ())
    }
    async fn approval_answer(&self, id: &str, answer: &Value) -> Result<bool, StoreError> {
        let n = self
            .writer
            .write(Op::ApprovalAnswer {
                id: id.to_owned(),
                answer: answer.to_string(),
            })
            .await?;
        Ok(n > 0)
    }
    async fn approval_get(&self, id: &str) -> Result<Option<PendingRecord>, StoreError> {
        read!(self, approval(id))
    }
    async fn approvals_pending(&self) -> Result<Vec<PendingRecord>, StoreError> {
        read!(self, approvals_pending())
    }
    async fn approval_delete(&self, id: &str) -> Result<(), StoreError> {
        self.writer
            .write(Op::ApprovalDelete { id: id.to_owned() })
            .await
            .map(|_| ())
    }
    async fn grants_revoke(&self, tool: &str) -> Result<u64, StoreError> {
        self.writer.write(Op::GrantsRevoke { tool: tool.to_owned() }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(call: &str, claim: bool) -> Op {
        Op::Journal {
            row: Box::new(JournalRow {
                session_id: "s".into(),
                call_id: call.into(),
                ..JournalRow::default()
            }),
            claim,
        }
    }

    #[test]
    fn closed_rows_are_grouped_and_the_last_write_of_a_key_wins() {
        let ops = [
            journal("a", false),
            journal("b", false),
            journal("a", false),
            journal("c", true),
            Op::Flush,
            journal("d", false),
        ];
        let refs: Vec<&Op> = ops.iter().collect();
        let steps: Vec<String> = plan(&refs)
            .into_iter()
            .map(|s| match s {
                Step::One(i) => format!("one {i}"),
                Step::Rows(r) => format!("rows {r:?}"),
                Step::Superseded(r) => format!("superseded {r:?}"),
            })
            .collect();
        assert_eq!(steps, ["rows [1, 2]", "superseded [0]", "one 3", "one 4", "rows [5]"]);
    }

    /// The connection's `synchronous` level: 1 NORMAL, 2 FULL.
    async fn level(w: &mut SqliteWriter) -> i64 {
        let conn = w.conn.as_mut().expect("the writer holds its connection");
        sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(conn)
            .await
            .expect("PRAGMA synchronous answers")
    }

    async fn writer_at(path: &std::path::Path, full: bool) -> SqliteWriter {
        use sqlx::ConnectOptions;
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            });
        let mut conn = connect.connect().await.expect("opens");
        crate::migrate_sqlite(&mut conn).await.expect("migrates");
        SqliteWriter {
            conn: Some(conn),
            connect,
            full,
            synced: full,
        }
    }

    #[tokio::test]
    async fn only_a_batch_someone_waits_for_is_synced_and_an_unsynced_commit_is_visible_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let mut w = writer_at(&path, true).await;
        assert_eq!(level(&mut w).await, 2);
        // Closed rows nobody waits for: committed without a sync...
        w.apply(&[&journal("a", false)], false).await.expect("commits");
        assert_eq!(level(&mut w).await, 1);
        // ...and there for another connection (another process) at once.
        let other = SqlitePool::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("a second connection");
        let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM journal WHERE call_id = 'a'")
            .fetch_one(&other)
            .await
            .expect("reads");
        assert_eq!(seen, 1);
        // A write someone waits for is synced again, and so is everything before it.
        w.apply(&[&journal("b", true)], true).await.expect("commits");
        assert_eq!(level(&mut w).await, 2);
        // A reconnect starts at the configured level.
        w.conn = None;
        w.apply(&[&journal("c", true)], true)
            .await
            .expect("reconnects and commits");
        assert_eq!(level(&mut w).await, 2);
        // `durability = "normal"` never syncs a commit, waited for or not.
        let mut n = writer_at(&dir.path().join("n.db"), false).await;
        n.apply(&[&journal("d", true)], true).await.expect("commits");
        assert_eq!(level(&mut n).await, 1);
    }
}
