//! One writer task per process: every write goes through it, batched into transactions (group
//! commit). A batch holding a write someone waits for (a journal row opened before a tool runs,
//! a grant, …) is committed at once; a batch of writes nobody waits for (journal rows closed at
//! the end of a call) waits up to the group delay for company, so a busy engine pays one commit
//! for many calls. Busy and serialisation failures are retried; a batch that still fails is
//! applied op by op so one bad write cannot take the others down with it.
//!
//! A batch holding a write someone waits for is synced to the disk before it is acknowledged. A
//! batch of writes nobody waits for (journal rows closed at the end of a call) is committed
//! without a sync where the database can tell the two apart (SQLite): committed, it is visible
//! to every process and survives toolgate's own crash; it reaches the disk with the next synced
//! commit or checkpoint, so only a power loss can take it. A call that is not read-only had its
//! `started` row synced before it ran, so what a power loss can cost is that call's outcome (it
//! is then closed as interrupted, `may_have_run`) or the row of a read-only call; in exchange a
//! read-only call pays no fsync.
//!
//! A write someone waits for fails within the write timeout (plus one attempt). A write nobody
//! waits for (the journal row of a read-only call) is never dropped because the database is away
//! or its disk is full: it is held and retried with the next batch, up to [`HELD`] rows; beyond
//! that, or when it fails where other writes succeed, it is dropped, logged and counted.

use async_trait::async_trait;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use toolgate_core::store::{JournalRow, PendingRecord, StoreError};

/// Ops in one transaction at most.
const MAX_BATCH: usize = 512;
/// Queued writes at most; senders wait beyond it (back-pressure instead of unbounded memory).
const QUEUE: usize = 8_192;
/// Attempts at a batch that fails with a transient error (busy, deadlock, serialisation).
const ATTEMPTS: u32 = 8;
/// Writes nobody waits for, kept while the database refuses them.
pub(crate) const HELD: usize = 16_384;
/// The first and the longest pause before held writes are tried again.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// One write.
#[derive(Debug)]
pub(crate) enum Op {
    /// Opens a row, only when the call id is new (`claim`), or writes it whatever is there.
    Journal {
        row: Box<JournalRow>,
        claim: bool,
    },
    Grant {
        session: String,
        rule: String,
        expires: Option<i64>,
    },
    CachePut {
        key: String,
        value: String,
        expires: i64,
    },
    MemoryPut {
        principal: String,
        key: String,
        value: String,
        now: i64,
    },
    ApprovalPut {
        record: PendingRecord,
        now: i64,
        owner: String,
    },
    /// Renews (or takes) a replica's lease.
    Lease {
        id: String,
        started: i64,
        until: i64,
    },
    /// Closes an expired replica's running calls and withdraws its asks, if its lease is still
    /// expired; how many calls were closed.
    Reap {
        id: String,
        now: i64,
    },
    ApprovalAnswer {
        id: String,
        answer: String,
    },
    ApprovalDelete {
        id: String,
    },
    GrantsRevoke {
        tool: String,
    },
    ResultPut {
        session: String,
        handle: String,
        value: String,
        bytes: i64,
        now: i64,
        expires: i64,
        keep: i64,
    },
    Prune {
        before: i64,
    },
    Sweep {
        now: i64,
    },
    /// Nothing: its acknowledgement says every earlier write is committed.
    Flush,
}

/// A database the writer can commit to.
#[async_trait]
pub(crate) trait Apply: Send + 'static {
    /// Applies the ops in one transaction; how many rows each affected. `sync`: the commit must
    /// be on the disk before this returns (someone waits for one of the ops); otherwise a commit
    /// that survives a crash of the process is enough.
    async fn apply(&mut self, ops: &[&Op], sync: bool) -> Result<Vec<u64>, sqlx::Error>;
}

type Ack = oneshot::Sender<Result<u64, StoreError>>;

struct Msg {
    op: Op,
    ack: Option<Ack>,
    /// Failed commits so far (writes nobody waits for).
    tries: u32,
}

/// What the writer has not managed to commit.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Writes nobody waits for, held while the database refuses them.
    pub(crate) held: AtomicUsize,
    /// Writes nobody waits for that were dropped.
    pub(crate) lost: AtomicU64,
}

/// The handle the store writes through.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Msg>,
    /// Writes queued and not yet committed that nobody waits for.
    unacked: Arc<AtomicUsize>,
    pub(crate) backlog: Arc<Counters>,
}

impl Writer {
    /// Starts the writer task on the current runtime; a write someone waits for is retried for
    /// at most `timeout`.
    pub(crate) fn spawn<A: Apply>(db: A, delay: Duration, timeout: Duration) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let unacked = Arc::new(AtomicUsize::new(0));
        let backlog = Arc::new(Counters::default());
        let task = Task {
            db,
            delay,
            timeout,
            unacked: unacked.clone(),
            backlog: backlog.clone(),
            held: VecDeque::new(),
        };
        tokio::spawn(task.run(rx));
        Self { tx, unacked, backlog }
    }

    /// Queues a write and waits until it is committed; what it affected.
    pub(crate) async fn write(&self, op: Op) -> Result<u64, StoreError> {
        let (ack, done) = oneshot::channel();
        let msg = Msg {
            op,
            ack: Some(ack),
            tries: 0,
        };
        self.tx.send(msg).await.map_err(|_| stopped())?;
        done.await.map_err(|_| stopped())?
    }

    /// Queues a write without waiting for its commit (it is committed within the group delay).
    pub(crate) async fn queue(&self, op: Op) -> Result<(), StoreError> {
        self.unacked.fetch_add(1, Ordering::SeqCst);
        if self
            .tx
            .send(Msg {
                op,
                ack: None,
                tries: 0,
            })
            .await
            .is_err()
        {
            self.unacked.fetch_sub(1, Ordering::SeqCst);
            return Err(stopped());
        }
        Ok(())
    }

    /// Waits until every write queued so far is committed.
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        self.write(Op::Flush).await.map(|_| ())
    }

    /// Flushes only when writes nobody waited for are still queued (reads of the journal see
    /// this process's own rows).
    pub(crate) async fn settle(&self) -> Result<(), StoreError> {
        if self.unacked.load(Ordering::SeqCst) > 0 {
            self.flush().await?;
        }
        Ok(())
    }
}

fn stopped() -> StoreError {
    StoreError("the store's writer has stopped".into())
}

struct Task<A> {
    db: A,
    delay: Duration,
    timeout: Duration,
    unacked: Arc<AtomicUsize>,
    backlog: Arc<Counters>,
    /// Writes nobody waits for whose commit failed, oldest first.
    held: VecDeque<Msg>,
}

impl<A: Apply> Task<A> {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut batch: Vec<Msg> = Vec::with_capacity(MAX_BATCH);
        let mut retry = RETRY_FIRST;
        loop {
            let open = if self.held.is_empty() {
                rx.recv_many(&mut batch, MAX_BATCH).await > 0
            } else {
                // Held writes are tried again with the next batch, or after a pause.
                !matches!(
                    tokio::time::timeout(retry, rx.recv_many(&mut batch, MAX_BATCH)).await,
                    Ok(0)
                )
            };
            if !open {
                self.stop().await;
                return;
            }
            gather(self.delay, &mut rx, &mut batch).await;
            if !self.held.is_empty() {
                let take = self.held.len().min(MAX_BATCH);
                let mut front: Vec<Msg> = self.held.drain(..take).collect();
                front.append(&mut batch);
                batch = front;
            }
            let held_before = self.held.len();
            let results = self.commit(&batch).await;
            self.settle(&mut batch, results);
            retry = if self.held.len() > held_before {
                (retry * 2).min(RETRY_MAX)
            } else {
                RETRY_FIRST
            };
        }
    }

    /// Answers the writes someone waits for; holds or drops the others that failed.
    fn settle(&mut self, batch: &mut Vec<Msg>, results: Vec<Result<u64, StoreError>>) {
        let some_committed = results.iter().any(Result::is_ok);
        let mut acks = Vec::new();
        let mut done = 0;
        let mut last_error = None;
        for (mut msg, result) in batch.drain(..).zip(results) {
            match (msg.ack.take(), result) {
                (Some(ack), result) => acks.push((ack, matches!(msg.op, Op::Flush), result)),
                (None, Ok(_)) => done += 1,
                (None, Err(e)) if msg.tries > 0 && some_committed => {
                    // It fails where other writes succeed: retrying will not help.
                    tracing::error!(error = %e, op = ?msg.op, "a queued write was dropped: the store refuses it");
                    self.backlog.lost.fetch_add(1, Ordering::Relaxed);
                    done += 1;
                }
                (None, Err(e)) => {
                    msg.tries += 1;
                    if msg.tries == 1 {
                        tracing::warn!(error = %e, "a queued write is held until the store takes it");
                    }
                    last_error = Some(e);
                    self.held.push_back(msg);
                    if self.held.len() > HELD
                        && let Some(old) = self.held.pop_front()
                    {
                        tracing::error!(op = ?old.op, "a queued write was dropped: {HELD} writes were already held");
                        self.backlog.lost.fetch_add(1, Ordering::Relaxed);
                        done += 1;
                    }
                }
            }
        }
        self.unacked.fetch_sub(done, Ordering::SeqCst);
        self.backlog.held.store(self.held.len(), Ordering::Relaxed);
        let held = self.held.len();
        for (ack, flush, result) in acks {
            // A flush promises every earlier write is committed: not while some are held.
            let result = match result {
                Ok(_) if flush && held > 0 => Err(StoreError(format!(
                    "{held} queued writes wait for the store ({})",
                    last_error.as_ref().map_or("it refused them", |e| e.0.as_str())
                ))),
                other => other,
            };
            let _ = ack.send(result);
        }
    }

    /// The channel closed: one last try for the held writes; what still fails is lost.
    async fn stop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let mut batch: Vec<Msg> = self.held.drain(..).collect();
        let results = self.commit(&batch).await;
        let lost = results.iter().filter(|r| r.is_err()).count();
        batch.clear();
        if lost > 0 {
            tracing::error!(
                lost,
                "queued writes were lost: the store did not take them before the writer stopped"
            );
            self.backlog.lost.fetch_add(lost as u64, Ordering::Relaxed);
        }
        self.backlog.held.store(0, Ordering::Relaxed);
    }

    /// One result per message: the batch in one transaction, retried while the failure is
    /// transient; op by op when it fails otherwise (an outage fails them all alike).
    async fn commit(&mut self, batch: &[Msg]) -> Vec<Result<u64, StoreError>> {
        let ops: Vec<&Op> = batch.iter().map(|m| &m.op).collect();
        let sync = needs_sync(batch);
        match self.with_retries(&ops, sync).await {
            Ok(counts) => counts.into_iter().map(Ok).collect(),
            Err(e) if ops.len() > 1 && !transient(&e) => {
                let mut out = Vec::with_capacity(ops.len());
                for op in ops {
                    out.push(
                        self.with_retries(&[op], sync)
                            .await
                            .map(|c| c.first().copied().unwrap_or(0))
                            .map_err(describe),
                    );
                }
                out
            }
            Err(e) => {
                let e = describe(e);
                batch.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// Retries transient failures, for at most the write timeout.
    async fn with_retries(&mut self, ops: &[&Op], sync: bool) -> Result<Vec<u64>, sqlx::Error> {
        let deadline = Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(5);
        let mut attempt = 1;
        loop {
            match self.db.apply(ops, sync).await {
                Err(e) if attempt < ATTEMPTS && transient(&e) && Instant::now() + pause < deadline => {
                    tracing::debug!(error = %e, attempt, "store write retried");
                    tokio::time::sleep(pause + Duration::from_millis(fastrand::u64(0..=pause.as_millis() as u64)))
                        .await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// Whether a batch must be on the disk when it is acknowledged: it holds a write someone waits
/// for. A flush waits only for the commit of what came before it, not for a sync.
fn needs_sync(batch: &[Msg]) -> bool {
    batch.iter().any(|m| m.ack.is_some() && !matches!(m.op, Op::Flush))
}

/// Nobody waits: waits a little for company, bounded by the group delay.
async fn gather(delay: Duration, rx: &mut mpsc::Receiver<Msg>, batch: &mut Vec<Msg>) {
    if !batch.iter().all(|m| m.ack.is_none()) || delay.is_zero() {
        return;
    }
    let until = tokio::time::Instant::now() + delay;
    while batch.len() < MAX_BATCH && batch.iter().all(|m| m.ack.is_none()) {
        let room = MAX_BATCH - batch.len();
        match tokio::time::timeout_at(until, rx.recv_many(batch, room)).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Busy or locked (SQLite), serialisation failure or deadlock (PostgreSQL), a dropped connection.
pub(crate) fn transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(
            d.code().as_deref(),
            Some(
                "5" | "6"
                    | "261"
                    | "262"
                    | "517"
                    | "40001"
                    | "40P01"
                    | "55P03"
                    | "57P01"
                    | "57P02"
                    | "57P03"
                    | "08000"
                    | "08001"
                    | "08003"
                    | "08004"
                    | "08006"
            )
        ),
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        _ => false,
    }
}

/// A store error in one line.
pub(crate) fn describe(e: sqlx::Error) -> StoreError {
    StoreError(match &e {
        sqlx::Error::Database(d) => d.message().to_owned(),
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(op: Op, waited: bool) -> Msg {
        Msg {
            op,
            ack: waited.then(|| oneshot::channel().0),
            tries: 0,
        }
    }

    fn row(claim: bool) -> Op {
        Op::Journal {
            row: Box::default(),
            claim,
        }
    }

    #[test]
    fn a_batch_is_synced_when_someone_waits_for_a_write_in_it_and_a_flush_alone_does_not_count() {
        assert!(!needs_sync(&[msg(row(false), false), msg(row(false), false)]));
        assert!(!needs_sync(&[msg(row(false), false), msg(Op::Flush, true)]));
        assert!(needs_sync(&[msg(row(false), false), msg(row(true), true)]));
        let grant = Op::Grant {
            session: "s".into(),
            rule: "read_file".into(),
            expires: None,
        };
        assert!(needs_sync(&[msg(Op::Flush, true), msg(grant, true)]));
    }
}
