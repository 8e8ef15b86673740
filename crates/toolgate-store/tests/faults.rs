//! A full disk under a serving store, made in a child process with `RLIMIT_FSIZE` = 0 (every
//! write to a file fails, as on a full disk, with no mount and no privilege): calls that need a
//! synced row fail clearly while it lasts, read-only calls go on with their rows held, and after
//! space is back every call succeeds again and no row is lost.

mod common;

use std::path::Path;
use std::sync::Arc;
use toolgate_core::store::{Backlog, JournalFilter, Store};
use toolgate_core::{SessionId, TurnOptions};
use toolgate_store::{StoreOptions, StoreUrl};

const CHILD: &str = "TOOLGATE_FAULTS_CHILD";

/// Every file write of this process fails from now on (`Some(0)`), or none does (`None`).
fn file_size_limit(limit: Option<u64>) {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_FSIZE).unwrap();
    setrlimit(Resource::RLIMIT_FSIZE, limit.unwrap_or(RLIM_INFINITY).min(hard), hard).unwrap();
}

/// The calls of one turn; the error types of those that failed.
async fn turn(
    engine: &Arc<toolgate_core::Engine>,
    session: &Arc<toolgate_core::Session>,
    ids: &[&str],
) -> Vec<Option<String>> {
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    let turn = engine
        .run_turn(session, &common::answer("noop", &ids), TurnOptions::default())
        .await;
    turn.outcomes.iter().map(common::error_type).collect()
}

async fn rows(store: &dyn Store) -> Vec<(String, String)> {
    let filter = JournalFilter {
        session: Some(SessionId::new("disk")),
        ..JournalFilter::default()
    };
    let mut rows: Vec<(String, String)> = store
        .journal_list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.call_id.to_string(), r.state.into_owned()))
        .collect();
    rows.sort();
    rows
}

async fn full_disk(path: &Path) {
    // The kernel sends SIGXFSZ with EFBIG; ignored, the write fails as on a full disk.
    // SAFETY: setting a signal to be ignored runs no code in the handler.
    unsafe { nix::sys::signal::signal(nix::sys::signal::SIGXFSZ, nix::sys::signal::SigHandler::SigIgn) }.unwrap();
    let store: Arc<dyn Store> = toolgate_store::open(&StoreUrl::Sqlite(path.to_owned()), &StoreOptions::default())
        .await
        .unwrap();
    let reader = common::engine(vec![common::Noop::tool(true)]);
    let writer = common::engine(vec![common::Noop::tool(false)]);
    let on_reader = common::session(&reader, store.clone(), "disk");
    let on_writer = common::session(&writer, store.clone(), "disk");
    assert_eq!(turn(&writer, &on_writer, &["w-before"]).await, [None]);
    store.flush().await.unwrap();

    file_size_limit(Some(0));
    // A call that is not read-only needs its row synced before it runs: refused, clearly.
    let during = turn(&writer, &on_writer, &["w-during"]).await;
    assert!(during[0].is_some(), "a write-needing call ran with a full disk");
    // Read-only calls run; their rows are held, not dropped.
    assert_eq!(
        turn(&reader, &on_reader, &["r-1", "r-2", "r-3"]).await,
        [None, None, None]
    );
    let flushed = store.flush().await;
    assert!(
        flushed.as_ref().is_err_and(|e| e.0.contains("wait for the store")),
        "{flushed:?}"
    );
    assert!(store.backlog().held >= 3, "{:?}", store.backlog());
    assert!(
        store
            .grant_put(&SessionId::new("disk"), "read_file", None)
            .await
            .is_err()
    );

    file_size_limit(None);
    // Space is back: the same process writes again (it used to fail every write until restart).
    assert_eq!(turn(&writer, &on_writer, &["w-after"]).await, [None]);
    store
        .grant_put(&SessionId::new("disk"), "read_file", None)
        .await
        .unwrap();
    store.flush().await.unwrap();
    assert_eq!(store.backlog(), Backlog::default(), "every held row written, none lost");
    let rows = rows(store.as_ref()).await;
    let ran: Vec<(&str, &str)> = rows.iter().map(|(c, s)| (c.as_str(), s.as_str())).collect();
    assert_eq!(
        ran,
        [
            ("r-1", "success"),
            ("r-2", "success"),
            ("r-3", "success"),
            ("w-after", "success"),
            ("w-before", "success"),
        ],
        "the refused call has no row (it never ran); every call that ran has its row"
    );
}

/// Runs in the child process the test below starts.
#[tokio::test]
async fn child() {
    let Ok(path) = std::env::var(CHILD) else {
        return;
    };
    full_disk(Path::new(&path)).await;
}

#[tokio::test]
async fn a_full_disk_fails_calls_while_it_lasts_and_loses_no_row() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, dir.path().join("state.db"))
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("test child ... ok"));
}
