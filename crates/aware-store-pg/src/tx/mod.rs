//! The row primitives of [`ReadTx`]/[`WriteTx`] in PostgreSQL, on one connection inside the
//! writer's transaction or a reader's snapshot.

use crate::conn::{col, Conn, Owned, Param};
use aware_store::{BatchResult, FaultPlan, Result, StoreError};
use postgres::Row;
use std::cell::RefCell;

mod console;
mod dump;
mod keyed;
mod mapping;
mod read;
mod turns;
mod write;

pub(crate) use mapping::{compact_from_row, cursor_from_row, CURSOR_COLS};

/// An after-commit hook of one op, run by the writer once the batch committed.
pub(crate) type Hook = Box<dyn FnOnce() + Send>;

pub(crate) struct PgTx<'c> {
    /// The trait's reads take `&self`; the driver's calls take `&mut`. Never borrowed twice:
    /// every method borrows for its own statements only.
    conn: RefCell<&'c mut Conn>,
    faults: &'c FaultPlan,
    /// Reader snapshots honour the `failReads` fault; the writer's own reads never do.
    reader: bool,
    hooks: Vec<Hook>,
}

impl<'c> PgTx<'c> {
    pub(crate) fn new(conn: &'c mut Conn, faults: &'c FaultPlan, reader: bool) -> Self {
        PgTx {
            conn: RefCell::new(conn),
            faults,
            reader,
            hooks: Vec::new(),
        }
    }

    pub(crate) fn take_hooks(&mut self) -> Vec<Hook> {
        std::mem::take(&mut self.hooks)
    }

    /// The writer's row cache (readers have none: their snapshots are their own).
    fn with_cache<R>(&self, f: impl FnOnce(&mut crate::cache::RowCache) -> R) -> Option<R> {
        if self.reader {
            return None;
        }
        Some(f(&mut self.conn.borrow_mut().rows))
    }

    fn check_log_read(&self) -> Result<()> {
        if self.reader && self.faults.reads_fail() {
            return Err(StoreError::InjectedFault("signal-log reads fail"));
        }
        Ok(())
    }

    fn rows(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.conn.borrow_mut().query(sql, params)
    }

    fn map_vec<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        map: impl Fn(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.rows(sql, params)?.iter().map(map).collect()
    }

    fn map_opt<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        map: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<Option<T>> {
        match self.conn.borrow_mut().query_opt(sql, params)? {
            Some(row) => Ok(Some(map(&row)?)),
            None => Ok(None),
        }
    }

    /// A write whose row count is not needed: queued to travel with the next exchange.
    fn defer(&self, sql: &str, params: Vec<Owned>) -> Result<()> {
        self.conn.borrow_mut().defer(sql, params)
    }

    fn exec(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        self.conn.borrow_mut().execute(sql, params)
    }

    fn count(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        let n: i64 = self.map_opt(sql, params, |r| col(r, 0))?.unwrap_or(0);
        Ok(n.max(0) as u64)
    }
}

impl PgTx<'_> {
    /// Stamps each affected stream's pruned watermark (never creating or lowering a head), then
    /// deletes the same rows, inside the writer's transaction.
    fn stamp_and_delete(
        &mut self,
        victims: &str,
        args: &[Param<'_>],
        now: i64,
    ) -> Result<BatchResult> {
        let rows: Vec<(i64, String, String)> =
            self.map_vec(victims, args, |r| Ok((col(r, 0)?, col(r, 1)?, col(r, 2)?)))?;
        if rows.is_empty() {
            return Ok(BatchResult::default());
        }
        let mut per_stream: std::collections::BTreeMap<(&str, &str), i64> = Default::default();
        for (seq, key, agent) in &rows {
            let max = per_stream
                .entry((key.as_str(), agent.as_str()))
                .or_insert(*seq);
            *max = (*max).max(*seq);
        }
        for ((key, agent), max) in per_stream {
            self.exec(
                "UPDATE session_state_heads SET pruned_max_sequence = $3, updated_at = $4 \
                 WHERE session_key = $1 AND agent_id = $2 AND pruned_max_sequence < $3",
                &[&key, &agent, &max, &now],
            )?;
        }
        let seqs: Vec<i64> = rows.iter().map(|(s, _, _)| *s).collect();
        let deleted = self.exec(
            "DELETE FROM session_state_events WHERE sequence = ANY($1)",
            &[&seqs],
        )?;
        Ok(BatchResult { deleted })
    }
}
