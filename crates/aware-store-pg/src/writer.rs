//! The writer thread: group commit under the cluster-wide write lock, and the epoch / write-log
//! protocol that keeps every gateway's row cache exact.

use crate::conn::Conn;
use crate::connector::Connector;
use crate::epoch;
use crate::keys::{Mode, Need};
use crate::schema::{FOLD_AT, FOLD_COUNTS_SQL};
use crate::stats::{self, Role};
use crate::tx::{Hook, PgTx};
use aware_store::{Completion, FaultPlan, Result, StoreError, StoreMetrics, WriteOp};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Most ops one commit takes (as the SQLite writer).
const MAX_GROUP: usize = 256;

pub(crate) struct Job {
    pub(crate) run: WriteOp,
    pub(crate) complete: Completion,
}

/// Moves every op already queued into `batch`, up to [`MAX_GROUP`].
fn take_queued(rx: &mpsc::Receiver<Job>, batch: &mut Vec<(Job, u32)>) {
    while batch.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(job) => batch.push((job, 0)),
            Err(_) => break,
        }
    }
}

/// Fails `batch` and every op queued behind it with `error`.
fn fail_all(
    rx: &mpsc::Receiver<Job>,
    mut batch: Vec<(Job, u32)>,
    error: fn(String) -> StoreError,
    why: &str,
) {
    take_queued(rx, &mut batch);
    for (job, _) in batch {
        (job.complete)(Err(error(why.to_string())));
    }
}

/// The writer: wait for one op, take every op already queued (≤ 256), run them in one
/// transaction under the cluster-wide lock with a savepoint each, commit once, then answer and
/// run after-commit hooks. Mirrors the SQLite writer; a broken connection is dropped and made
/// again for the next batch. With `after_lock` (decision D47) the queued ops are taken once the
/// lock is granted: while another gateway's batch holds it, this gateway's clients keep
/// arriving, and they join this commit instead of the one after it.
pub(crate) fn writer_loop(
    mut slot: Option<Conn>,
    connector: &Connector,
    rx: mpsc::Receiver<Job>,
    faults: &FaultPlan,
    metrics: &StoreMetrics,
    (after_lock, keyed): (bool, bool),
) {
    // Keyed mode: ops rolled back because a key was busy (or the cluster key was needed
    // exclusively), to run first in the next batch, with what that batch must take first.
    let mut carried: VecDeque<Carried> = VecDeque::new();
    loop {
        let (first, need) = match carried.pop_front() {
            Some(c) => (c.job, Some(c.need)),
            None => match rx.recv() {
                Ok(job) => (job, None),
                Err(_) => break,
            },
        };
        while faults.writer_stalled() {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SQLite-only seams (page counts, query_only) have no meaning here.
        let _ = faults.take_writer_pragmas();
        let mut batch = vec![(first, need.map_or(0, |n| n.1))];
        batch.extend(carried.drain(..).map(|c| (c.job, c.need.1)));
        if !after_lock {
            take_queued(&rx, &mut batch);
        }
        let started = Instant::now();
        let conn = match connector
            .ensure(&mut slot, Role::Writer)
            .and_then(|conn| epoch::claim_mode(conn, keyed).map(|()| conn))
        {
            Ok(conn) => conn,
            Err(e) => {
                // Everything queued fails with it, as before D47: one connect timeout for the
                // lot, not one each.
                fail_all(&rx, batch, StoreError::Unreachable, &e.to_string());
                continue;
            }
        };
        let begun = if keyed {
            epoch::begin_keyed(conn, need.map(|n| n.0))
        } else {
            epoch::begin(conn, false).map(|(epoch, log)| {
                conn.rows.begin_batch(epoch, &log);
                epoch
            })
        };
        let epoch = match begun {
            Ok(epoch) => {
                if after_lock {
                    take_queued(&rx, &mut batch);
                }
                epoch
            }
            Err(e) => {
                let _ = conn.batch("ROLLBACK");
                conn.end_transaction();
                conn.rows.clear();
                if conn.is_closed() || matches!(e, StoreError::Unreachable(_)) {
                    slot = None;
                }
                // A lock that was not granted (the statement timeout) fails everything queued
                // behind it at once, not one op per timeout.
                fail_all(&rx, batch, StoreError::CommitFailed, &e.to_string());
                continue;
            }
        };
        let begun = started.elapsed();
        let (done, lost, deferred) = run_ops(conn, batch, faults);
        carried.extend(deferred);
        let committing = Instant::now();
        let commit = commit(conn, lost, faults, epoch);
        conn.end_transaction();
        if settle(
            conn,
            commit,
            epoch,
            done,
            metrics,
            (started, begun, committing),
        ) {
            slot = None;
        }
    }
}

/// An op of keyed mode that could not go on in its batch: what the next batch must take first,
/// and how many times it was rolled back.
struct Carried {
    job: Job,
    need: (Need, u32),
}

/// Rolled back this many times, an op runs next in a batch that holds the cluster key
/// exclusively, where nothing can be busy: an op that needs several contended keys cannot
/// bounce for ever.
const MAX_RERUNS: u32 = 3;

/// What an op left for the commit: its completion, its after-commit hooks, and a failure of this
/// op alone that the commit does not undo.
type Done = (Completion, Vec<Hook>, Option<String>);

/// Runs each op of the batch under its own savepoint. Answers what each op left, and why the
/// transaction can no longer be used when the connection broke: ops not run yet are then failed
/// without running and the batch is rolled back.
fn run_ops(
    conn: &mut Conn,
    batch: Vec<(Job, u32)>,
    faults: &FaultPlan,
) -> (Vec<Done>, Option<String>, Vec<Carried>) {
    let mut done: Vec<Done> = Vec::with_capacity(batch.len());
    let mut deferred: Vec<Carried> = Vec::new();
    // Set when the transaction can no longer be used (the connection broke): ops not run
    // yet are failed without running and the batch is rolled back.
    let mut lost: Option<String> = None;
    for (mut job, reruns) in batch {
        if let Some(msg) = &lost {
            (job.complete)(Err(StoreError::CommitFailed(msg.clone())));
            continue;
        }
        conn.savepoint("op");
        let (failed, mut hooks) = {
            let mut tx = PgTx::new(conn, faults, false);
            let failed = (job.run)(&mut tx);
            (failed, tx.take_hooks())
        };
        if let Some(need) = conn.keys.take_blocked() {
            // Keyed mode: the op met a key another batch holds, or needs the cluster key
            // exclusively. Whatever it answered, undo it and run it again first in the next
            // batch, which takes that first (its hooks and result are those of that run).
            match conn.rollback_to("op") {
                Ok(()) => {
                    let need = if reruns + 1 >= MAX_RERUNS {
                        Need::Exclusive
                    } else {
                        need
                    };
                    deferred.push(Carried {
                        job,
                        need: (need, reruns + 1),
                    });
                }
                Err(e) => {
                    lost = Some(e.to_string());
                    done.push((job.complete, Vec::new(), None));
                }
            }
            continue;
        }
        // The op's queued writes are not waited for: they travel with the next exchange
        // (a later op's read, or the COMMIT), so ops stream to the server without a round
        // trip each. A queued write that the server refuses is found by that exchange and
        // fails the batch (see `Conn`), unless it is found within its own op.
        let clean = failed.is_none() && conn.healthy();
        let settled = if clean {
            conn.release_queued("op");
            Ok(None)
        } else {
            hooks.clear();
            // The op failed, or swallowed a failed statement (PostgreSQL then refuses
            // everything until a rollback): undo the op, and in the second case say so,
            // instead of a COMMIT that PostgreSQL would turn into a silent rollback of the
            // whole batch. (A failed rollback loses the batch: the safe side.)
            let why = conn.failure().unwrap_or("a statement failed").to_string();
            conn.rollback_to("op").map(|()| {
                failed
                    .is_none()
                    .then(|| format!("the op's writes were rolled back: {why}"))
            })
        };
        match settled {
            Ok(own_failure) => done.push((job.complete, hooks, own_failure)),
            Err(e) => {
                lost = Some(e.to_string());
                done.push((job.complete, Vec::new(), None));
            }
        }
    }
    (done, lost, deferred)
}

/// Commits the batch unless an op lost the transaction, a failed statement stands, or a commit
/// failure is injected.
fn commit(conn: &mut Conn, lost: Option<String>, faults: &FaultPlan, epoch: i64) -> Result<()> {
    if let Some(msg) = lost {
        Err(StoreError::CommitFailed(msg))
    } else if let Some(why) = conn.failure() {
        // Every op ends healthy or rolled back; this is the last guard before a COMMIT
        // that PostgreSQL would turn into a rollback.
        Err(StoreError::CommitFailed(format!(
            "a failed statement stands: {why}"
        )))
    } else if faults.take_commit_failure() {
        Err(StoreError::CommitFailed("injected commit failure".into()))
    } else {
        conn.queue_sequence_catch_up()
            .and_then(|()| {
                // Keyed batches in share mode raise no epoch and log nothing (see `epoch`).
                if conn.keys.mode() == Mode::Shared {
                    epoch::log_key_versions(conn)
                } else {
                    epoch::log_batch(conn, epoch)
                }
            })
            // Travels with the COMMIT; folds the console's count deltas once there are enough
            // of them, so a read sums a bounded number of rows (decision D54).
            .and_then(|()| conn.defer(FOLD_COUNTS_SQL, vec![Box::new(FOLD_AT)]))
            .and_then(|()| conn.batch("COMMIT"))
            .map_err(|e| StoreError::CommitFailed(e.to_string()))
    }
}

/// Answers the batch's ops after its commit (running their hooks) or its failure. Answers
/// whether the connection is broken and must be made again.
fn settle(
    conn: &mut Conn,
    commit: Result<()>,
    epoch: i64,
    done: Vec<Done>,
    metrics: &StoreMetrics,
    (started, begun, committing): (Instant, Duration, Instant),
) -> bool {
    match commit {
        Ok(()) => {
            conn.rows.committed(epoch);
            conn.keys.committed();
            let total = started.elapsed().as_micros() as u64;
            metrics.record_commit(done.len() as u64, total);
            stats::batch(
                done.len() as u64,
                begun.as_micros() as u64,
                committing.elapsed().as_micros() as u64,
                total,
            );
            for (complete, hooks, own_failure) in done {
                match own_failure {
                    Some(msg) => complete(Err(StoreError::CommitFailed(msg))),
                    None => {
                        for hook in hooks {
                            hook();
                        }
                        complete(Ok(()));
                    }
                }
            }
            false
        }
        Err(e) => {
            // The outcome may be unknown (a lost answer to COMMIT): the cache is not kept.
            conn.rows.clear();
            let broken = conn.batch("ROLLBACK").is_err() || conn.is_closed();
            conn.end_transaction();
            metrics.commit_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(event = "commit_failed", error = %e, ops = done.len(), "commit failed");
            let msg = match e {
                StoreError::CommitFailed(m) => m,
                other => other.to_string(),
            };
            for (complete, _, _) in done {
                complete(Err(StoreError::CommitFailed(msg.clone())));
            }
            broken
        }
    }
}
