//! Replica leases: a gateway replica writes a lease into the shared store and renews it every
//! third of its length; at every renewal it also looks for other replicas whose lease has
//! expired (killed, frozen, cut off) and closes their running calls as `interrupted`
//! (`may_have_run`) and withdraws their asks. Liveness is the lease, never a hostname or a pid:
//! pods share neither, and containers on one host share both.

use crate::sql::SqlStore;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use toolgate_core::store::StoreError;

/// Takes the lease, reaps what expired already, and keeps both going while the store lives.
pub(crate) async fn hold(store: &Arc<SqlStore>, lease: Duration) -> Result<(), StoreError> {
    let lease = lease.max(Duration::from_millis(300));
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    store.renew(started, lease).await?;
    reap(store).await;
    let weak = Arc::downgrade(store);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(store) = weak.upgrade() else {
                return;
            };
            if let Err(e) = store.renew(started, lease).await {
                tracing::warn!(error = %e, "could not renew this replica's lease");
                continue;
            }
            reap(&store).await;
        }
    });
    Ok(())
}

async fn reap(store: &SqlStore) {
    match store.reap_expired().await {
        Ok(reaped) => {
            for (replica, closed) in reaped {
                tracing::warn!(
                    replica = %replica,
                    calls = closed,
                    "a replica's lease expired: its running calls are closed as interrupted and its asks withdrawn"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not look for expired replica leases"),
    }
}
