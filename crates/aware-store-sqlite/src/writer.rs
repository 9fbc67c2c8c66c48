//! The write side: leader-follower group commit on one connection (01 §8).

use super::checkpoint::{take_wal_pages, Checkpointer};
use super::options::*;
use super::schema::run_cached;
use super::sqltx::*;
use aware_store::FaultPlan;
use aware_store::StoreError;
use aware_store::StoreMetrics;
use aware_store::{Completion, WriteOp};
use rusqlite::Connection;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One writer op: `run` executes it inside its savepoint and returns its error text, if any;
/// `complete` answers the caller with the commit outcome (and the op's own result, which `run`
/// left in a slot they share). An op whose transaction never started is only completed.
pub(super) struct Job {
    pub(super) run: WriteOp,
    pub(super) complete: Completion,
}

/// The write side: one connection and a queue, run by a leader. At most one thread leads at a
/// time; the leader takes queued ops as one batch, commits them, answers them, and gives up the
/// lead. A blocking caller that finds no leader and an empty queue leads itself and runs its
/// own op on its own thread (no hand-off to another thread and back: measured, the two thread
/// wake-ups were most of the cost of a lone write). Everything else (ops queued behind a
/// leader, and async submitters, whose threads must not block) is led by the writer thread,
/// which also takes over whatever queued while a caller led. Commit order is the order in
/// which leaders take batches, and a batch's hooks run before its leader gives up the lead, so
/// after-commit hooks still run in commit order. 01 §8 speaks of "the writer thread"; what it
/// promises (one writing connection, ≤ 256 ops per transaction, one COMMIT, callers answered and
/// effects emitted only after it, no waiting for more ops) holds whichever thread leads.
pub(super) struct Writer {
    pub(super) state: Mutex<WriterState>,
    /// Signalled when ops wait and nobody leads, and on close.
    pub(super) work: Condvar,
    /// Locked only by the leader (never contended); a mutex so `Writer` is `Sync`.
    pub(super) conn: Mutex<Connection>,
    pub(super) faults: Arc<FaultPlan>,
    pub(super) metrics: Arc<StoreMetrics>,
    pub(super) checkpointer: Arc<Checkpointer>,
}

#[derive(Default)]
pub(super) struct WriterState {
    pub(super) queue: VecDeque<Job>,
    pub(super) leading: bool,
    pub(super) closed: bool,
}

impl Writer {
    pub(super) fn state(&self) -> MutexGuard<'_, WriterState> {
        // The state is a queue and two flags, consistent at every unlock: a panic elsewhere
        // while it was held cannot have left it half-changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one batch as the leader (the caller set `leading`).
    pub(super) fn lead(&self, batch: Vec<Job>) {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        run_batch(&conn, batch, &self.faults, &self.metrics);
        // After the answers: a checkpoint the WAL's length calls for is the checkpointer's, or
        // (past its bound) this leader's, but never the callers' wait (decision D60).
        self.checkpointer.after_commit(&conn, take_wal_pages());
    }
}

/// Gives up the lead when a caller-led batch ends (also on unwinding): the writer thread is
/// woken if ops queued meanwhile, or to let it finish a close.
pub(super) struct CallerLead<'a>(pub(super) &'a Writer);

impl Drop for CallerLead<'_> {
    fn drop(&mut self) {
        let mut s = self.0.state();
        s.leading = false;
        let wake = !s.queue.is_empty() || s.closed;
        drop(s);
        if wake {
            self.0.work.notify_one();
        }
    }
}

/// The writer thread: leads whenever ops wait and no caller leads; takes every queued op
/// (≤ 256) as one batch. It never waits for more ops to arrive. Exits once the store is closed,
/// nothing is queued and nobody leads.
pub(super) fn writer_loop(w: &Writer) {
    loop {
        let mut s = w.state();
        while s.leading || s.queue.is_empty() {
            if s.closed && !s.leading && s.queue.is_empty() {
                return;
            }
            s = w.work.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.leading = true;
        let n = s.queue.len().min(MAX_GROUP);
        let batch: Vec<Job> = s.queue.drain(..n).collect();
        drop(s);
        w.lead(batch);
        w.state().leading = false;
    }
}

/// One group commit: runs `batch` in one transaction with a savepoint per op, commits once,
/// then runs each op's after-commit hooks and answers it.
pub(super) fn run_batch(
    conn: &Connection,
    batch: Vec<Job>,
    faults: &FaultPlan,
    metrics: &StoreMetrics,
) {
    {
        while faults.writer_stalled() {
            std::thread::sleep(Duration::from_millis(5));
        }
        for sql in faults.take_writer_pragmas() {
            let applied = conn
                .prepare(&sql)
                .and_then(|mut stmt| stmt.query([]).and_then(|mut rows| rows.next().map(|_| ())));
            if let Err(e) = applied {
                tracing::warn!(event = "writer_pragma_failed", sql = %sql, error = %e, "test seam pragma failed");
            }
        }
        let started = Instant::now();
        if let Err(e) = run_cached(conn, "BEGIN IMMEDIATE") {
            let msg = e.to_string();
            for job in batch {
                (job.complete)(Err(StoreError::CommitFailed(msg.clone())));
            }
            return;
        }
        let mut done: Vec<(Completion, Vec<Hook>)> = Vec::with_capacity(batch.len());
        // Set when SQLite itself rolled the batch's transaction back (SQLITE_FULL, SQLITE_IOERR
        // and the like abort the whole transaction, not just the statement): every op so far is
        // gone, and ops run now would commit one by one outside the batch, so none runs.
        let mut lost: Option<String> = None;
        for mut job in batch {
            if let Some(msg) = &lost {
                (job.complete)(Err(StoreError::CommitFailed(msg.clone())));
                continue;
            }
            let mut tx = SqlTx {
                conn,
                faults,
                reader: false,
                hooks: Vec::new(),
            };
            if let Err(e) = run_cached(conn, "SAVEPOINT op") {
                (job.complete)(Err(StoreError::CommitFailed(e.to_string())));
                continue;
            }
            let failed = (job.run)(&mut tx);
            let complete = job.complete;
            let mut hooks = std::mem::take(&mut tx.hooks);
            if conn.is_autocommit() {
                hooks.clear();
                lost = Some(format!(
                    "{TXN_LOST}: {}",
                    failed.as_deref().unwrap_or(
                        "a statement failed with a disk-full, I/O or out-of-memory error"
                    )
                ));
                done.push((complete, hooks));
                continue;
            }
            if failed.is_some() {
                hooks.clear();
                let _ = conn.execute_batch("ROLLBACK TO op; RELEASE op");
            } else if run_cached(conn, "RELEASE op").is_err() {
                hooks.clear();
            }
            done.push((complete, hooks));
        }
        let commit = if let Some(msg) = lost {
            Err(StoreError::CommitFailed(msg))
        } else if faults.take_commit_failure() {
            Err(StoreError::CommitFailed("injected commit failure".into()))
        } else {
            run_cached(conn, "COMMIT").map_err(|e| StoreError::CommitFailed(e.to_string()))
        };
        match commit {
            Ok(()) => {
                metrics.record_commit(done.len() as u64, started.elapsed().as_micros() as u64);
                for (complete, hooks) in done {
                    for hook in hooks {
                        // A panicking hook must not take the leader (a caller's thread, or
                        // the writer thread) down with the rest of the batch unanswered.
                        if catch_unwind(AssertUnwindSafe(hook)).is_err() {
                            tracing::error!(
                                event = "after_commit_hook_panicked",
                                "an after-commit hook panicked"
                            );
                        }
                    }
                    complete(Ok(()));
                }
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                metrics
                    .commit_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(event = "commit_failed", error = %e, ops = done.len(), "commit failed");
                let msg = match e {
                    StoreError::CommitFailed(m) => m,
                    other => other.to_string(),
                };
                for (complete, _) in done {
                    complete(Err(StoreError::CommitFailed(msg.clone())));
                }
            }
        }
    }
}
