//! The writer thread: group commit under the cluster-wide write lock, and the epoch / write-log
//! protocol that keeps every gateway's row cache exact.

use crate::cache;
use crate::conn::{self, col, Conn};
use crate::connector::Connector;
use crate::stats::{self, Role};
use crate::tx::{Hook, PgTx};
use aware_store::{Completion, FaultPlan, Result, StoreError, StoreMetrics, WriteOp};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Most ops one commit takes (as the SQLite writer).
const MAX_GROUP: usize = 256;

pub(crate) struct Job {
    pub(crate) run: WriteOp,
    pub(crate) complete: Completion,
}

/// Batches kept in `aware_write_log`: a writer whose last commit is older finds a gap and
/// empties its whole cache, which is always right.
const WRITE_LOG_KEPT: i64 = 1_024;

/// Queues this batch's `aware_write_log` row (it commits or rolls back with the batch), and
/// now and then the pruning of rows no writer still needs.
fn log_batch(conn: &mut conn::Conn, epoch: i64) -> Result<()> {
    let (everything, keys) = conn.rows.touched();
    conn.defer(
        "INSERT INTO aware_write_log (epoch, everything, keys) VALUES ($1, $2, $3)",
        vec![Box::new(epoch), Box::new(everything), Box::new(keys)],
    )?;
    if epoch % 128 == 0 {
        conn.defer(
            "DELETE FROM aware_write_log WHERE epoch < $1",
            vec![Box::new(epoch - WRITE_LOG_KEPT)],
        )?;
    }
    Ok(())
}

/// Moves every op already queued into `batch`, up to [`MAX_GROUP`].
fn take_queued(rx: &mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
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
    after_lock: bool,
) {
    while let Ok(first) = rx.recv() {
        while faults.writer_stalled() {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SQLite-only seams (page counts, query_only) have no meaning here.
        let _ = faults.take_writer_pragmas();
        let mut batch = vec![first];
        if !after_lock {
            take_queued(&rx, &mut batch);
        }
        let started = Instant::now();
        let conn = match connector.ensure(&mut slot, Role::Writer) {
            Ok(conn) => conn,
            Err(e) => {
                // Everything queued fails with it, as before D47: one connect timeout for the
                // lot, not one each.
                take_queued(&rx, &mut batch);
                for job in batch {
                    (job.complete)(Err(StoreError::Unreachable(e.to_string())));
                }
                continue;
            }
        };
        // One round trip: the transaction; the lock that orders it among all gateways (the
        // row lock of the epoch's UPDATE, held to the commit: an advisory lock any connecting
        // role could hold, decision D33); the write epoch, which says whether another writer
        // committed since this one's last batch; and the log of those batches (the keys they
        // wrote, so only those rows leave the row cache), read once the lock is held so it sees
        // the last holder's batch. Each op's savepoint release travels with the next op's.
        conn.end_transaction();
        conn.defer_simple(
            "BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE aware_write_epoch SET epoch = epoch + 1",
        );
        let since = conn.rows.last_epoch().unwrap_or(i64::MAX);
        let begun_with = conn
            .query(
                "SELECT e.epoch, l.epoch, l.everything, l.keys FROM aware_write_epoch e \
                 LEFT JOIN aware_write_log l ON l.epoch > $1 AND l.epoch < e.epoch \
                 WHERE e.id = 1 ORDER BY l.epoch",
                &[&since],
            )
            .and_then(|rows| {
                let mut epoch = None;
                let mut log = Vec::new();
                for row in &rows {
                    epoch = Some(col::<i64>(row, 0)?);
                    if let Some(e) = col::<Option<i64>>(row, 1)? {
                        log.push(cache::LoggedBatch {
                            epoch: e,
                            everything: col::<Option<bool>>(row, 2)?.unwrap_or(true),
                            keys: col::<Option<Vec<String>>>(row, 3)?.unwrap_or_default(),
                        });
                    }
                }
                match epoch {
                    Some(epoch) => Ok((epoch, log)),
                    None => Err(StoreError::Corrupt("aware_write_epoch has no row".into())),
                }
            });
        let epoch = match begun_with {
            Ok((epoch, log)) => {
                conn.rows.begin_batch(epoch, &log);
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
                let msg = e.to_string();
                // A lock that was not granted (the statement timeout) fails everything queued
                // behind it at once, not one op per timeout.
                take_queued(&rx, &mut batch);
                for job in batch {
                    (job.complete)(Err(StoreError::CommitFailed(msg.clone())));
                }
                continue;
            }
        };
        let begun = started.elapsed();
        // (completion, hooks, a failure of this op alone that the commit does not undo)
        let mut done: Vec<(Completion, Vec<Hook>, Option<String>)> =
            Vec::with_capacity(batch.len());
        // Set when the transaction can no longer be used (the connection broke): ops not run
        // yet are failed without running and the batch is rolled back.
        let mut lost: Option<String> = None;
        for job in batch {
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
        let committing = Instant::now();
        let commit = if let Some(msg) = lost {
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
                .and_then(|()| log_batch(conn, epoch))
                .and_then(|()| conn.batch("COMMIT"))
                .map_err(|e| StoreError::CommitFailed(e.to_string()))
        };
        conn.end_transaction();
        match commit {
            Ok(()) => {
                conn.rows.committed(epoch);
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
            }
            Err(e) => {
                // The outcome may be unknown (a lost answer to COMMIT): the cache is not kept.
                conn.rows.clear();
                let broken = conn.batch("ROLLBACK").is_err() || conn.is_closed();
                conn.end_transaction();
                if broken {
                    slot = None;
                }
                metrics.commit_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(event = "commit_failed", error = %e, ops = done.len(), "commit failed");
                let msg = match e {
                    StoreError::CommitFailed(m) => m,
                    other => other.to_string(),
                };
                for (complete, _, _) in done {
                    complete(Err(StoreError::CommitFailed(msg.clone())));
                }
            }
        }
    }
}
