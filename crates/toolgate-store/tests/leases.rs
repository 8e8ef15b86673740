//! Replica leases on one store: a live replica's running calls are never closed by another,
//! however long they run; once a replica stops renewing, another closes them as interrupted.

use std::sync::Arc;
use std::time::{Duration, SystemTime};
use toolgate_core::store::{JournalFilter, JournalRow, Store};
use toolgate_store::{StoreOptions, StoreUrl};

async fn replica(url: &StoreUrl, lease: Duration) -> Arc<dyn Store> {
    let options = StoreOptions {
        replica_lease: Some(lease),
        ..StoreOptions::default()
    };
    toolgate_store::open(url, &options).await.unwrap()
}

async fn state(store: &dyn Store) -> (String, bool) {
    let rows = store.journal_list(&JournalFilter::default()).await.unwrap();
    (rows[0].state.to_string(), rows[0].may_have_run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_replica_that_stopped_renewing_is_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::Sqlite(dir.path().join("state.db"));
    let lease = Duration::from_millis(600);
    let a = replica(&url, lease).await;
    let b = replica(&url, lease).await;
    let row = JournalRow {
        session_id: "s".into(),
        call_id: "long".into(),
        tool: "exec_shell".into(),
        state: "started".into(),
        started_at: Some(SystemTime::now()),
        ..JournalRow::default()
    };
    assert!(a.journal_begin(&row).await.unwrap());
    // Several lease lengths, B looking at every third of one: A renews, nothing is reaped.
    tokio::time::sleep(lease * 3).await;
    assert_eq!(state(b.as_ref()).await, ("started".into(), false));

    drop(a); // A stops renewing, as a killed process does
    for _ in 0..200 {
        if state(b.as_ref()).await.0 != "started" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state(b.as_ref()).await, ("canceled".into(), true));
    let rows = b.journal_list(&JournalFilter::default()).await.unwrap();
    assert_eq!(rows[0].error_type.as_deref(), Some("interrupted"));
    assert!(
        rows[0].owner.as_deref().is_some_and(|o| o.contains('#')),
        "{:?}",
        rows[0].owner
    );
}
