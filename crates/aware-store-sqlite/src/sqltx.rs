//! `SqlTx`: one connection viewed as a transaction (the writer's, or a reader snapshot), with
//! the query helpers the `ReadTx`/`WriteTx` implementations share.

use crate::Sq;
use aware_store::rows::*;
use aware_store::FaultPlan;
use aware_store::{Result, StoreError};
use rusqlite::{Connection, OptionalExtension, Row, ToSql};

/// An after-commit hook of one op.
pub(super) type Hook = Box<dyn FnOnce() + Send>;

/// One connection viewed as a transaction: the writer's (inside `BEGIN IMMEDIATE`) or a
/// reader's snapshot.
pub(crate) struct SqlTx<'c> {
    pub(super) conn: &'c Connection,
    pub(super) faults: &'c FaultPlan,
    /// Reader snapshots honour the `failReads` fault; the writer's own reads never do.
    pub(super) reader: bool,
    pub(super) hooks: Vec<Hook>,
}

/// Why every op of a batch fails after SQLite rolled its transaction back.
pub(super) const TXN_LOST: &str = "SQLite rolled back the batch's transaction";

impl SqlTx<'_> {
    /// The writer's statements run only inside the batch's transaction: once SQLite rolled it
    /// back (see `writer_loop`), a statement would autocommit on its own, half-writing the op.
    pub(super) fn live(&self) -> Result<()> {
        if !self.reader && self.conn.is_autocommit() {
            return Err(StoreError::CommitFailed(TXN_LOST.into()));
        }
        Ok(())
    }

    pub(super) fn check_log_read(&self) -> Result<()> {
        if self.reader && self.faults.reads_fail() {
            return Err(StoreError::InjectedFault("signal-log reads fail"));
        }
        Ok(())
    }

    pub(super) fn query_vec<T>(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
        map: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        self.live()?;
        let mut stmt = self.conn.prepare_cached(sql).sq()?;
        let rows = stmt.query_map(params, map).sq()?;
        rows.collect::<rusqlite::Result<Vec<T>>>().sq()
    }

    pub(super) fn query_opt<T>(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
        map: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Option<T>> {
        self.live()?;
        let mut stmt = self.conn.prepare_cached(sql).sq()?;
        stmt.query_row(params, map).optional().sq()
    }

    pub(super) fn exec(&self, sql: &str, params: &[&dyn ToSql]) -> Result<usize> {
        self.live()?;
        let mut stmt = self.conn.prepare_cached(sql).sq()?;
        stmt.execute(params).sq()
    }
}

impl SqlTx<'_> {
    /// Stamps each affected stream's pruned watermark (never creating or lowering a head), then
    /// deletes the same rows. Both statements see the same victims inside one transaction.
    /// `delete` removes the victims as one range (`?1` lowest and `?2` highest victim sequence,
    /// `?3` the age cutoff when given) instead of one statement per row (measured: the per-row
    /// deletes were most of a 1,000-row batch); it must match exactly the victims, which the
    /// count check confirms.
    pub(super) fn stamp_and_delete(
        &mut self,
        victims: &str,
        args: &[&dyn ToSql],
        delete: &str,
        cutoff: Option<i64>,
        now: i64,
    ) -> Result<BatchResult> {
        let rows: Vec<(i64, String, String)> =
            self.query_vec(victims, args, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        if rows.is_empty() {
            return Ok(BatchResult::default());
        }
        let mut per_stream: std::collections::HashMap<(&str, &str), i64> = Default::default();
        for (seq, key, agent) in &rows {
            let max = per_stream
                .entry((key.as_str(), agent.as_str()))
                .or_insert(*seq);
            *max = (*max).max(*seq);
        }
        for ((key, agent), max) in per_stream {
            self.exec(
                "UPDATE session_state_heads SET pruned_max_sequence = ?3, updated_at = ?4 \
                 WHERE session_key = ?1 AND agent_id = ?2 AND pruned_max_sequence < ?3",
                &[&key, &agent, &max, &now],
            )?;
        }
        let lowest = rows.iter().map(|r| r.0).min().unwrap_or_default();
        let highest = rows.iter().map(|r| r.0).max().unwrap_or_default();
        let deleted = match cutoff {
            Some(cutoff) => self.exec(delete, &[&lowest, &highest, &cutoff])?,
            None => self.exec(delete, &[&lowest, &highest])?,
        } as u64;
        if deleted != rows.len() as u64 {
            // Cannot happen inside the writer's transaction; an error rolls the batch back
            // rather than commit a delete that differs from the stamped victims.
            return Err(StoreError::Corrupt(format!(
                "prune batch deleted {deleted} rows for {} victims",
                rows.len()
            )));
        }
        Ok(BatchResult { deleted })
    }
}
