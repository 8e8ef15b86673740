//! One writer task per process: every write goes through it, batched into transactions (group
//! commit). A batch holding a write someone waits for (a journal row opened before a tool runs,
//! a grant, …) is committed at once; a batch of writes nobody waits for (journal rows closed at
//! the end of a call) waits up to the group delay for company, so a busy engine pays one commit
//! for many calls. Busy and serialisation failures are retried; a batch that still fails is
//! applied op by op so one bad write cannot take the others down with it.

use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use toolgate_core::store::{JournalRow, PendingRecord, StoreError};

/// Ops in one transaction at most.
const MAX_BATCH: usize = 512;
/// Queued writes at most; senders wait beyond it (back-pressure instead of unbounded memory).
const QUEUE: usize = 8_192;
/// Attempts at a batch that fails with a transient error (busy, deadlock, serialisation).
const ATTEMPTS: u32 = 8;

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
    /// Applies the ops in one transaction; how many rows each affected.
    async fn apply(&mut self, ops: &[&Op]) -> Result<Vec<u64>, sqlx::Error>;
}

type Ack = oneshot::Sender<Result<u64, StoreError>>;

struct Msg {
    op: Op,
    ack: Option<Ack>,
}

/// The handle the store writes through.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Msg>,
    /// Writes queued and not yet committed that nobody waits for.
    unacked: Arc<AtomicUsize>,
}

impl Writer {
    /// Starts the writer task on the current runtime.
    pub(crate) fn spawn<A: Apply>(db: A, delay: Duration) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let unacked = Arc::new(AtomicUsize::new(0));
        tokio::spawn(run(db, rx, delay, unacked.clone()));
        Self { tx, unacked }
    }

    /// Queues a write and waits until it is committed; what it affected.
    pub(crate) async fn write(&self, op: Op) -> Result<u64, StoreError> {
        let (ack, done) = oneshot::channel();
        self.tx.send(Msg { op, ack: Some(ack) }).await.map_err(|_| stopped())?;
        done.await.map_err(|_| stopped())?
    }

    /// Queues a write without waiting for its commit (it is committed within the group delay).
    pub(crate) async fn queue(&self, op: Op) -> Result<(), StoreError> {
        self.unacked.fetch_add(1, Ordering::SeqCst);
        if self.tx.send(Msg { op, ack: None }).await.is_err() {
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

async fn run<A: Apply>(mut db: A, mut rx: mpsc::Receiver<Msg>, delay: Duration, unacked: Arc<AtomicUsize>) {
    let mut batch: Vec<Msg> = Vec::with_capacity(MAX_BATCH);
    loop {
        if rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
        // Nobody waits: wait a little for company, bounded by the group delay.
        if batch.iter().all(|m| m.ack.is_none()) && !delay.is_zero() {
            let until = tokio::time::Instant::now() + delay;
            while batch.len() < MAX_BATCH && batch.iter().all(|m| m.ack.is_none()) {
                let room = MAX_BATCH - batch.len();
                match tokio::time::timeout_at(until, rx.recv_many(&mut batch, room)).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        let results = commit(&mut db, &batch).await;
        let mut queued = 0;
        for (msg, result) in batch.drain(..).zip(results) {
            match msg.ack {
                Some(ack) => {
                    let _ = ack.send(result);
                }
                None => {
                    queued += 1;
                    if let Err(e) = result {
                        tracing::error!(error = %e, op = ?msg.op, "a queued write was lost");
                    }
                }
            }
        }
        unacked.fetch_sub(queued, Ordering::SeqCst);
    }
}

/// One result per message: the batch in one transaction, retried while the failure is transient;
/// op by op when it still fails.
async fn commit<A: Apply>(db: &mut A, batch: &[Msg]) -> Vec<Result<u64, StoreError>> {
    let ops: Vec<&Op> = batch.iter().map(|m| &m.op).collect();
    match with_retries(db, &ops).await {
        Ok(counts) => counts.into_iter().map(Ok).collect(),
        Err(_) if ops.len() > 1 => {
            let mut out = Vec::with_capacity(ops.len());
            for op in ops {
                out.push(
                    with_retries(db, &[op])
                        .await
                        .map(|c| c.first().copied().unwrap_or(0))
                        .map_err(describe),
                );
            }
            out
        }
        Err(e) => vec![Err(describe(e))],
    }
}

async fn with_retries<A: Apply>(db: &mut A, ops: &[&Op]) -> Result<Vec<u64>, sqlx::Error> {
    let mut pause = Duration::from_millis(5);
    let mut attempt = 1;
    loop {
        match db.apply(ops).await {
            Err(e) if attempt < ATTEMPTS && transient(&e) => {
                tracing::debug!(error = %e, attempt, "store write retried");
                tokio::time::sleep(pause + Duration::from_millis(fastrand::u64(0..=pause.as_millis() as u64))).await;
                pause = (pause * 2).min(Duration::from_millis(500));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Busy or locked (SQLite), serialisation failure or deadlock (PostgreSQL), a dropped connection.
pub(crate) fn transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(
            d.code().as_deref(),
            Some("5" | "6" | "261" | "262" | "517" | "40001" | "40P01" | "55P03")
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
