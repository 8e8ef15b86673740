//! `toolgate audit`: the journal as a table or JSON lines, filtered; `--follow` goes on printing
//! rows as they are written — a new call when its row opens, and again when it closes — by any
//! process or replica writing to the same store.

use crate::time;
use anyhow::{Result, anyhow, bail};
use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use toolgate_core::SessionId;
use toolgate_core::store::{JournalFilter, JournalRow, Store};

/// `toolgate audit`'s filters and output.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Only calls of this tool.
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Only calls started since: RFC 3339, a date, or an age such as 30m, 2h, 7d.
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only this outcome (started, success, error, canceled) or error type (timeout, …).
    #[arg(long, value_name = "KIND")]
    outcome: Option<String>,
    /// At most this many rows (0: all).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Then keep printing rows as they are written (a call when it starts and when it ends),
    /// until interrupted.
    #[arg(long)]
    follow: bool,
}

/// How often `--follow` reads the journal.
const POLL: Duration = Duration::from_millis(250);
/// Rows written by other hosts may carry clocks this far behind.
const SKEW: Duration = Duration::from_secs(5);

/// Runs `toolgate audit`.
pub async fn run(args: &AuditArgs, session: Option<&str>, store: &dyn Store) -> Result<ExitCode> {
    if args.follow && !store.durable() {
        bail!(
            "--follow reads rows other processes write, and a memory store holds only this process's: use a sqlite or postgres store"
        );
    }
    let filter = JournalFilter {
        session: session.map(SessionId::new),
        session_prefix: None,
        tool: args.tool.clone(),
        since: args
            .since
            .as_deref()
            .map(|s| time::parse_since(s, SystemTime::now()))
            .transpose()?,
        outcome: args.outcome.clone(),
        limit: args.limit,
    };
    let started = SystemTime::now();
    let rows = store
        .journal_list(&filter)
        .await
        .map_err(|e| anyhow!("cannot read the journal: {e}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        for row in &rows {
            serde_json::to_writer(&mut out, &toolgate_core::audit::row_json(row))?;
            writeln!(out)?;
        }
    } else {
        write_table(&mut out, &rows)?;
    }
    out.flush()?;
    drop(out);
    if args.follow {
        follow(args, filter, rows, started, store).await?;
    }
    Ok(ExitCode::SUCCESS)
}

type Key = (String, String);

fn key(r: &JournalRow) -> Key {
    (r.session_id.to_string(), r.call_id.to_string())
}

/// What makes a row worth printing again: its state and when it closed.
fn version(r: &JournalRow) -> (String, Option<SystemTime>) {
    (r.state.to_string(), r.finished_at)
}

/// Prints rows as they open and close, oldest first, until stdout closes (a pipe's reader went
/// away: a normal end) or the process is interrupted.
async fn follow(
    args: &AuditArgs,
    filter: JournalFilter,
    shown: Vec<JournalRow>,
    started: SystemTime,
    store: &dyn Store,
) -> Result<()> {
    let mut seen: HashMap<Key, (String, Option<SystemTime>)> = shown.iter().map(|r| (key(r), version(r))).collect();
    // Rows still open are read again until they close; new rows start after the last read.
    let mut open: HashMap<Key, SystemTime> = shown
        .iter()
        .filter(|r| r.finished_at.is_none())
        .filter_map(|r| r.started_at.map(|at| (key(r), at)))
        .collect();
    let mut last_read = started;
    loop {
        tokio::time::sleep(POLL).await;
        let now = SystemTime::now();
        let floor = last_read.checked_sub(SKEW).unwrap_or(last_read);
        let since = open.values().copied().chain([floor]).min().unwrap_or(floor);
        let mut rows = store
            .journal_list(&JournalFilter {
                since: Some(filter.since.map_or(since, |s| s.max(since))),
                limit: 0,
                ..filter.clone()
            })
            .await
            .map_err(|e| anyhow!("cannot read the journal: {e}"))?;
        last_read = now;
        rows.sort_by_key(|r| (r.started_at, r.finished_at));
        let mut out = std::io::stdout().lock();
        for row in rows {
            let k = key(&row);
            let v = version(&row);
            if seen.get(&k) == Some(&v) {
                continue;
            }
            match (row.finished_at, row.started_at) {
                (None, Some(at)) => {
                    open.insert(k.clone(), at);
                }
                _ => {
                    open.remove(&k);
                }
            }
            seen.insert(k, v);
            let written = if args.json {
                serde_json::to_writer(&mut out, &toolgate_core::audit::row_json(&row))
                    .map_err(std::io::Error::from)
                    .and_then(|()| writeln!(out))
            } else {
                writeln!(out, "{}", cells(&row).join("  "))
            };
            if written.and_then(|()| out.flush()).is_err() {
                return Ok(()); // nobody reads any more
            }
        }
    }
}

/// A row's table cells; a model chooses call ids, so each is cut to a width a terminal can show
/// (and that `format!` accepts: widths above 65,535 panic).
fn cells(r: &JournalRow) -> [String; 11] {
    let mut flags = Vec::new();
    if r.repaired {
        flags.push("repaired");
    }
    if r.cache_hit {
        flags.push("cached");
    }
    if r.may_have_run {
        flags.push("may_have_run");
    }
    if r.job.is_some() {
        flags.push("job");
    }
    [
        r.started_at.map(time::rfc3339).unwrap_or_default(),
        r.session_id.to_string(),
        r.call_id.to_string(),
        r.tool.to_string(),
        r.error_type.as_deref().unwrap_or(&r.state).to_owned(),
        r.decision.as_deref().unwrap_or("-").to_owned(),
        r.source.as_deref().unwrap_or("-").to_owned(),
        r.attempts.to_string(),
        r.waiting_ms.to_string(),
        r.running_ms.to_string(),
        if flags.is_empty() { "-".into() } else { flags.join(",") },
    ]
    .map(|c| clip(&c, 64))
}

fn write_table(out: &mut impl Write, rows: &[JournalRow]) -> Result<()> {
    let header = [
        "STARTED", "SESSION", "CALL", "TOOL", "OUTCOME", "DECISION", "SOURCE", "TRIES", "WAIT_MS", "RUN_MS", "FLAGS",
    ];
    let cells: Vec<[String; 11]> = rows.iter().map(cells).collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn Write, row: &[&str]| -> std::io::Result<()> {
        let text: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        writeln!(out, "{}", text.join("  ").trim_end())
    };
    line(out, &header)?;
    for row in &cells {
        line(out, &row.each_ref().map(String::as_str))?;
    }
    if rows.is_empty() {
        writeln!(out, "(no journal rows match)")?;
    }
    Ok(())
}

/// `text` cut to `max` characters, the cut marked with `…`.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}
