//! Crash test: a child process runs a long series of non-read-only calls against a SQLite store
//! and is killed with SIGKILL at random points. After each kill the journal must open cleanly,
//! hold a row for every call whose tool started, hold no duplicate, report the rows left
//! `started`, and a replay of the same calls must run none of them twice.
//!
//! The child is this test binary again, running `child_process` with `TOOLGATE_CRASH_CHILD` set.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, BufReader};
use toolgate_core::store::{JournalFilter, Store};
use toolgate_core::{SessionId, TurnOptions};
use toolgate_store::{StoreOptions, StoreUrl};

const CALLS: usize = 240;
const ROUNDS: usize = 10;
const SESSION: &str = "crash-session";

fn ids() -> Vec<String> {
    (0..CALLS).map(|i| format!("c{i:04}")).collect()
}

/// Runs in the child: every call id in order (batches of 1–3), printing one line per result.
#[tokio::test]
async fn child_process() {
    let Ok(dir) = std::env::var("TOOLGATE_CRASH_CHILD") else {
        return; // only a child does anything
    };
    let dir = PathBuf::from(dir);
    let store = toolgate_store::open(&StoreUrl::Sqlite(dir.join("state.db")), &StoreOptions::default())
        .await
        .expect("the child opens the store");
    let engine = common::engine(vec![common::Append::tool(dir.join("ran.txt"))]);
    let session = common::session(&engine, store.clone(), SESSION);
    let ids = ids();
    let mut i = 0;
    while i < ids.len() {
        let n = (1 + i % 3).min(ids.len() - i);
        let batch = &ids[i..i + n];
        let turn = engine
            .run_turn(&session, &common::answer("append", batch), TurnOptions::default())
            .await;
        for (id, o) in batch.iter().zip(&turn.outcomes) {
            println!("@@result {id} {}", common::error_type(o).unwrap_or_else(|| "ok".into()));
        }
        i += n;
    }
    store.flush().await.expect("flush");
    println!("done");
}

async fn run_child(dir: &Path, kill_after: Option<usize>) -> HashMap<String, String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args(["child_process", "--exact", "--nocapture", "--test-threads=1"])
        .env("TOOLGATE_CRASH_CHILD", dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut results = HashMap::new();
    let mut fresh = 0;
    while let Some(line) = lines.next_line().await.unwrap() {
        // libtest may print its own text before ours on the first line.
        if let Some((_, rest)) = line.split_once("@@result ") {
            let (id, outcome) = rest.split_once(' ').unwrap();
            if outcome == "ok" {
                fresh += 1;
            }
            results.insert(id.to_owned(), outcome.to_owned());
            if kill_after.is_some_and(|k| fresh >= k) {
                // The child is somewhere in its next call: commit, append, act, close, print.
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .unwrap();
                break;
            }
        }
    }
    let status = child.wait().await.unwrap();
    if kill_after.is_none() {
        assert!(status.success(), "the last child finishes");
    }
    results
}

fn ran(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("ran.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What every kill must leave: clean open, a row per started tool, no duplicates, and the rows
/// left `started` reported (and closed) by the next start.
async fn check(dir: &Path, round: usize) -> usize {
    let store: Arc<dyn Store> = toolgate_store::open(&StoreUrl::Sqlite(dir.join("state.db")), &StoreOptions::default())
        .await
        .unwrap_or_else(|e| panic!("round {round}: the journal does not open cleanly: {e}"));
    let file = ran(dir);
    let unique: HashSet<&String> = file.iter().collect();
    assert_eq!(unique.len(), file.len(), "round {round}: a call ran twice: {file:?}");
    let rows = store
        .journal_list(&JournalFilter {
            session: Some(SessionId::new(SESSION)),
            ..JournalFilter::default()
        })
        .await
        .unwrap();
    let row_ids: HashSet<String> = rows.iter().map(|r| r.call_id.to_string()).collect();
    assert_eq!(row_ids.len(), rows.len(), "round {round}: duplicated rows");
    for id in &file {
        assert!(row_ids.contains(id), "round {round}: {id} ran without a journal row");
    }
    let started: HashSet<String> = store
        .journal_unfinished()
        .await
        .unwrap()
        .iter()
        .map(|r| r.call_id.to_string())
        .collect();
    let recovery = toolgate_store::recover(store.as_ref()).await.unwrap();
    let reported: HashSet<String> = recovery.closed.iter().map(|r| r.call_id.to_string()).collect();
    assert_eq!(
        reported, started,
        "round {round}: the next start reports every started row"
    );
    assert!(
        recovery.running_elsewhere.is_empty(),
        "round {round}: the child is dead"
    );
    assert!(recovery.closed.iter().all(|r| r.may_have_run && r.state == "canceled"));
    assert!(store.journal_unfinished().await.unwrap().is_empty());
    started.len()
}

#[tokio::test]
async fn sigkill_at_random_points_loses_no_call_and_runs_none_twice() {
    if std::env::var("TOOLGATE_CRASH_CHILD").is_ok() {
        return;
    }
    let seed = std::env::var("TOOLGATE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("crash test seed: {seed} (TOOLGATE_CRASH_SEED={seed} repeats it)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut reported = 0;
    for round in 0..ROUNDS {
        let before = ran(dir.path()).len();
        if before >= CALLS {
            break;
        }
        let kill_after = rng.usize(1..=(CALLS / ROUNDS));
        let results = run_child(dir.path(), Some(kill_after)).await;
        // Every id that already ran was refused on replay, never run again.
        for (id, outcome) in &results {
            if ran(dir.path())[..before].contains(id) {
                assert_eq!(outcome, "execution_failed", "round {round}: {id} replayed");
            }
        }
        reported += check(dir.path(), round).await;
    }
    // A last child replays everything to the end without a kill.
    let results = run_child(dir.path(), None).await;
    check(dir.path(), ROUNDS).await;
    let file = ran(dir.path());
    let all: HashSet<String> = ids().into_iter().collect();
    let refused = results.values().filter(|o| *o == "execution_failed").count();
    assert_eq!(results.len(), CALLS, "the last child got a result for every call");
    assert!(refused >= 1, "the last child replayed journaled calls");
    assert!(file.iter().all(|id| all.contains(id)));
    eprintln!(
        "crash test: {} calls ran once each, {reported} interrupted call(s) reported, {refused} refused on the final replay",
        file.len()
    );
}
