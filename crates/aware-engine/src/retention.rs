//! Prune passes (01 §9) and the restart sweep (02 §12). Each batch is its own writer op, so
//! other writers interleave between batches.

use crate::types::{PruneReport, SweepReport};
use crate::{request_state_wakes, Engine, EngineMetrics, Result};
use aware_core::retention::MAX_BATCH_ROWS;

/// Rows re-frozen per sweep transaction.
const SWEEP_BATCH: u32 = 1000;

impl Engine {
    /// Runs one prune pass; `None` when another pass is running (single flight).
    ///
    /// `batches` counts the transactions that deleted events. 01 §9 says "transactions that
    /// deleted at least one row", but S78 and S79 count only event batches even though their
    /// parent cursor also expires in the same pass; we follow the scenarios (see ARCHITECTURE.md).
    pub fn prune_pass(&self) -> Option<PruneReport> {
        let inner = self.inner.clone();
        let _guard = inner.prune_lock.try_lock().ok()?;
        let policy = inner.config.retention;
        let batch = policy.batch_rows.min(MAX_BATCH_ROWS);
        let mut report = PruneReport::default();
        let outcome: Result<()> = (|| {
            // 1. Age.
            loop {
                let deleted = self.write(move |tx, ctx| {
                    Ok(tx
                        .prune_age_batch(policy.age_cutoff(ctx.now), batch, ctx.now)?
                        .deleted)
                })?;
                if deleted == 0 {
                    break;
                }
                report.deleted_by_age += deleted;
                report.batches += 1;
                EngineMetrics::inc(&inner.metrics.prune_batches, 1);
                EngineMetrics::inc(&inner.metrics.prune_deleted_age, deleted);
            }
            // 2. Row cap.
            loop {
                let deleted = self.write(move |tx, ctx| {
                    let n = policy.cap_batch(tx.event_count()?);
                    if n == 0 {
                        return Ok(0);
                    }
                    Ok(tx.prune_lowest_batch(n, ctx.now)?.deleted)
                })?;
                if deleted == 0 {
                    break;
                }
                report.deleted_by_cap += deleted;
                report.batches += 1;
                EngineMetrics::inc(&inner.metrics.prune_batches, 1);
                EngineMetrics::inc(&inner.metrics.prune_deleted_cap, deleted);
            }
            // 3. Cursor expiry (muted rows never expire).
            loop {
                let deleted = self.write(move |tx, ctx| {
                    Ok(tx
                        .expire_cursors_batch(policy.cursor_cutoff(ctx.now), batch)?
                        .deleted)
                })?;
                if deleted == 0 {
                    break;
                }
                report.expired_cursors += deleted;
                EngineMetrics::inc(&inner.metrics.cursors_expired, deleted);
            }
            // 4. FIFO expiry.
            loop {
                let deleted = self.write(move |tx, ctx| {
                    Ok(tx
                        .expire_fifo_batch(policy.age_cutoff(ctx.now), batch)?
                        .deleted)
                })?;
                if deleted == 0 {
                    break;
                }
                report.expired_system_events += deleted;
            }
            Ok(())
        })();
        if let Ok(mut last) = inner.last_prune_at.lock() {
            *last = Some(self.now());
        }
        if let Err(e) = outcome {
            tracing::warn!(event = "prune_failed", error = %e, "prune batch failed; the next pass retries");
            EngineMetrics::inc(&inner.metrics.prune_failures, 1);
            return Some(report);
        }
        // 5. Passive checkpoint so the WAL does not grow without bound.
        if let Err(e) = inner.store.maintain() {
            tracing::warn!(event = "checkpoint_failed", error = %e, "passive WAL checkpoint failed");
        }
        tracing::info!(
            event = "prune_pass",
            deleted_by_age = report.deleted_by_age,
            deleted_by_cap = report.deleted_by_cap,
            expired_cursors = report.expired_cursors,
            expired_system_events = report.expired_system_events,
            batches = report.batches,
            "prune pass done"
        );
        Some(report)
    }

    /// The restart sweep (02 §12): re-freeze pending cursors of existing watchers, then one
    /// `session-state` wake per distinct eligible watcher. Each watcher is woken as the batch
    /// that re-froze its last pending cursor commits (the store names it there, once per
    /// sweep), so nothing here grows with the watchers (D55).
    pub fn restart_sweep(&self) -> Result<SweepReport> {
        let mut after = 0i64;
        let mut report = SweepReport::default();
        loop {
            let batch =
                self.write(move |tx, ctx| Ok(tx.sweep_batch(after, SWEEP_BATCH, ctx.now)?))?;
            // No checkpoint between batches: on SQLite no commit carries one any more (the
            // store's checkpointer thread runs them, D60), which is what D45's checkpoint here
            // was for.
            report.cursors += batch.cursors;
            report.watchers += batch.finished_watchers.len() as u64;
            report.woken += request_state_wakes(&self.inner, &batch.finished_watchers, self.now());
            match batch.last {
                Some(rowid) => after = rowid,
                None => break,
            }
        }
        Ok(report)
    }
}
