//! The storage seam: the row-level primitives the engine composes into operations.

use crate::dump::{Row, Table, Value};
use crate::rows::*;
use crate::Result;
use aware_core::StoredEvent;

/// Reads. Implemented on a snapshot (a read transaction) or inside the writer's transaction.
pub trait ReadTx {
    fn session(&self, key: &str, agent: &str) -> Result<Option<SessionRow>>;
    fn session_exists(&self, key: &str, agent: &str) -> Result<bool>;
    fn session_by_label(&self, agent: &str, label: &str) -> Result<Option<SessionRow>>;
    fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<SessionRow>>;
    /// One page of the console's session table and the number of rows matching the filter.
    fn console_sessions(&self, filter: &ConsoleFilter) -> Result<(Vec<ConsoleRow>, u64)>;
    /// Every cursor held by any of `watchers`, ordered by watcher key, target key, target
    /// agent: the watch graph's edges for a whole node set in one query (the caller keeps
    /// those whose target is a node too). Callers pass at most a few hundred keys.
    fn console_cursors_held_by(&self, watchers: &[String]) -> Result<Vec<CursorRow>>;

    fn head(&self, key: &str, agent: &str) -> Result<Option<HeadRow>>;
    /// Heads of many streams; a missing head is `None`, in input order.
    fn heads(&self, pairs: &[(String, String)]) -> Result<Vec<Option<HeadRow>>>;
    /// Up to `limit` events of the stream with `sequence > after`, ascending.
    fn events_after(
        &self,
        key: &str,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>>;
    fn earliest_sequence(&self, key: &str, agent: &str) -> Result<Option<i64>>;
    /// Up to `limit` events of the stream with `sequence < before`, newest first.
    fn events_before(
        &self,
        key: &str,
        agent: &str,
        before: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>>;
    fn event_by_dedupe(&self, dedupe_key: &str) -> Result<Option<StoredEvent>>;
    fn event_by_sequence(&self, sequence: i64) -> Result<Option<StoredEvent>>;
    fn event_count(&self) -> Result<u64>;

    fn cursor(
        &self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<Option<CursorRow>>;
    /// Ordered by target key, then target agent.
    fn cursors_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>>;
    /// Ordered by watcher key.
    fn cursors_by_target(&self, target_key: &str, target_agent: &str) -> Result<Vec<CursorRow>>;
    /// Watcher keys of non-muted cursors on the target, in key order.
    fn live_watchers_of(&self, target_key: &str, target_agent: &str) -> Result<Vec<String>>;
    /// For each `(watcher key, watcher agent)`, in order: whether that watcher's session
    /// exists, and its cursor on the target. The append's per-watcher step (02 §3) needs both
    /// for every candidate; a backend may read them for all candidates at once. The default is
    /// `session_exists` and `cursor` per watcher.
    fn watcher_cursors(
        &self,
        target_key: &str,
        target_agent: &str,
        watchers: &[(&str, &str)],
    ) -> Result<Vec<(bool, Option<CursorRow>)>> {
        watchers
            .iter()
            .map(|(key, agent)| {
                let exists = self.session_exists(key, agent)?;
                let cursor = if exists {
                    self.cursor(key, target_key, target_agent)?
                } else {
                    None
                };
                Ok((exists, cursor))
            })
            .collect()
    }
    /// Pending, non-muted cursors of a watcher, ordered by notified, target key, target agent.
    fn pending_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>>;
    /// [`ReadTx::pending_by_watcher`] of each listed watcher (a restart-sweep batch's), in
    /// that order within a watcher; the watchers in any order. A backend with a round trip per
    /// statement answers it with one statement.
    fn pending_by_watchers(&self, watchers: &[String]) -> Result<Vec<CursorRow>> {
        let mut out = Vec::new();
        for w in watchers {
            out.extend(self.pending_by_watcher(w)?);
        }
        Ok(out)
    }
    /// Distinct watcher keys that have at least one pending cursor.
    fn watchers_with_pending(&self) -> Result<Vec<String>>;
    fn count_pending(&self) -> Result<u64>;
    /// Sessions, distinct watchers and pending notices, for the metrics gauges. Must stay cheap
    /// (index-only) at 10,000 sessions and 100,000 cursors: it runs on every scrape.
    fn gauges(&self) -> Result<StoreGauges>;

    fn system_events(&self, key: &str, agent: &str) -> Result<Vec<SystemEventRow>>;
    /// The first `limit` FIFO entries (ascending id).
    fn system_events_limit(
        &self,
        key: &str,
        agent: &str,
        limit: u32,
    ) -> Result<Vec<SystemEventRow>>;
    /// The first `limit` pending cursors of a watcher, in `pending_by_watcher` order.
    fn pending_by_watcher_limit(&self, watcher: &str, limit: u32) -> Result<Vec<CursorRow>>;
    /// Turns with `index > after`, ascending, at most `limit`, stopping before the texts
    /// (`text` plus `upstream_text`) would pass `max_bytes`; the first turn always comes. The
    /// flag says the byte budget cut the page. Rows past the budget are never loaded.
    fn turns_within(
        &self,
        key: &str,
        agent: &str,
        after: Option<i64>,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<TurnRow>, bool)>;
    /// A page for reading a transcript: from index `from` on (ascending) or, without `from`, the
    /// newest `limit` (returned ascending); `tool` turns only with `include_tools`; texts cut in
    /// SQL to `max_chars + 1` characters, so a caller can tell a text was longer.
    fn turns_page(
        &self,
        key: &str,
        agent: &str,
        from: Option<i64>,
        include_tools: bool,
        limit: u32,
        max_chars: u32,
    ) -> Result<Vec<TurnRow>>;

    /// Turns with `index > after` (all when `None`), ascending, at most `limit`.
    fn turns(&self, key: &str, agent: &str, after: Option<i64>, limit: u32)
        -> Result<Vec<TurnRow>>;
    fn turn_count(&self, key: &str, agent: &str) -> Result<i64>;
    fn turn_by_idempotency(
        &self,
        key: &str,
        agent: &str,
        idempotency_key: &str,
    ) -> Result<Option<TurnRow>>;
    /// The newest `limit` user turns not imported at adoption, newest first (the self-echo list).
    fn recent_own_user_turns(&self, key: &str, agent: &str, limit: u32) -> Result<Vec<TurnRow>>;
    /// The first assistant turn of the session carrying `run_id`.
    fn reply_for_run(&self, key: &str, agent: &str, run_id: &str) -> Result<Option<TurnRow>>;

    fn link(&self, key: &str, agent: &str) -> Result<Option<LinkRow>>;
    /// Links of sessions targeted by at least one non-muted cursor, by catalog then key.
    fn watched_links(&self) -> Result<Vec<LinkRow>>;

    fn run(&self, run_id: &str) -> Result<Option<RunRow>>;
    /// The newest `limit` runs of a session, newest start first.
    fn runs_of(&self, key: &str, agent: &str, limit: u32) -> Result<Vec<RunRow>>;
    /// Active runs whose deadline is at or before `now`, oldest deadline first.
    fn due_runs(&self, now: i64) -> Result<Vec<RunRow>>;
    fn next_run_deadline(&self) -> Result<Option<i64>>;

    /// Whole-state export (`aware_store::dump`): up to `limit` rows of `table`, every column of
    /// `table.columns` in that order, in primary-key order, after the row whose key columns
    /// are `after`.
    fn export_rows(&self, table: &Table, after: Option<&[Value]>, limit: u32) -> Result<Vec<Row>>;
    fn row_count(&self, table: &Table) -> Result<u64>;
    /// The highest number the counter of `table` (a `table.counter` table) ever issued,
    /// deleted rows included; 0 when none.
    fn counter(&self, table: &Table) -> Result<i64>;
}

/// Writes, inside the writer's transaction and the op's savepoint.
pub trait WriteTx: ReadTx {
    /// Nested savepoints let an append fail without undoing the op's primary action (01 §8).
    fn savepoint(&mut self, name: &str) -> Result<()>;
    fn release(&mut self, name: &str) -> Result<()>;
    fn rollback_to(&mut self, name: &str) -> Result<()>;
    /// Runs after the batch commits, in op order; discarded when the op or the commit fails.
    fn after_commit(&mut self, hook: Box<dyn FnOnce() + Send>);

    /// Inserts an event and returns its sequence. Fails when a fault is injected for it.
    fn insert_event(&mut self, event: &NewEvent) -> Result<i64>;
    /// Inserts or raises `last_sequence`; never touches `pruned_max_sequence`.
    fn upsert_head(&mut self, key: &str, agent: &str, sequence: i64, now: i64) -> Result<()>;

    fn put_cursor(&mut self, row: &CursorRow) -> Result<()>;
    /// Writes `row` over `before`, the same cursor as read earlier in this transaction. The
    /// result is the same as `put_cursor(row)`; a backend may write only the columns that
    /// changed (the append's common case moves only `material_sequence` and `updated_at`, and
    /// rewriting every column maintains every cursor index). The default is `put_cursor`.
    fn update_cursor(&mut self, before: &CursorRow, row: &CursorRow) -> Result<()> {
        let _ = before;
        self.put_cursor(row)
    }
    fn delete_cursor(
        &mut self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<bool>;
    fn delete_cursors_of_watcher(&mut self, watcher: &str) -> Result<u64>;
    fn delete_cursors_of_target(&mut self, target_key: &str, target_agent: &str) -> Result<u64>;

    fn insert_session(&mut self, row: &SessionRow) -> Result<()>;
    fn update_session(&mut self, row: &SessionRow) -> Result<()>;
    /// Removes the session row, turns, runs, FIFO, stream events and head, and upstream link.
    /// Cursors and the children's orphan flags are the engine's business.
    fn delete_session(&mut self, key: &str, agent: &str) -> Result<bool>;
    /// Sets `orphaned` on every session whose parent key is `parent_key`, of `agent` only or,
    /// with `None`, of any agent. Returns how many rows it touched.
    fn mark_children_orphaned(&mut self, parent_key: &str, agent: Option<&str>) -> Result<u64>;

    /// Inserts or replaces the link of a session (fails when link settles are faulted).
    fn put_link(&mut self, link: &LinkRow) -> Result<()>;
    fn delete_link(&mut self, key: &str, agent: &str) -> Result<bool>;

    fn insert_turn(&mut self, key: &str, agent: &str, turn: &TurnRow) -> Result<()>;
    fn delete_turns(&mut self, key: &str, agent: &str) -> Result<u64>;
    fn insert_run(&mut self, run: &RunRow) -> Result<()>;
    fn update_run(&mut self, run: &RunRow) -> Result<()>;

    /// Appends one entry to the session's system-event FIFO and returns its id (ids ascend).
    /// No dedupe and no cap here: the engine applies both (02 §8.3).
    fn fifo_insert(
        &mut self,
        key: &str,
        agent: &str,
        text: &str,
        context_key: Option<&str>,
        now: i64,
    ) -> Result<i64>;
    fn fifo_delete(&mut self, key: &str, agent: &str, ids: &[i64]) -> Result<u64>;
    fn fifo_clear(&mut self, key: &str, agent: &str) -> Result<u64>;

    /// One age batch: stamp watermarks, delete up to `limit` events older than `cutoff`.
    fn prune_age_batch(&mut self, cutoff: i64, limit: u32, now: i64) -> Result<BatchResult>;
    /// One cap batch: stamp watermarks, delete the `count` lowest sequences.
    fn prune_lowest_batch(&mut self, count: u64, now: i64) -> Result<BatchResult>;
    fn expire_cursors_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult>;
    fn expire_fifo_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult>;
    /// Restart sweep batch (02 §12): re-freezes up to `limit` pending cursors of existing
    /// watchers with rowid above `after_rowid`, in rowid order, and names the watchers it
    /// finished ([`SweepBatch::finished_watchers`]).
    fn sweep_batch(&mut self, after_rowid: i64, limit: u32, now: i64) -> Result<SweepBatch>;

    /// Whole-state import (`aware_store::dump`): inserts `rows` of `table` as they are,
    /// numbered columns included. Rows already checked against `table.columns`.
    fn import_rows(&mut self, table: &Table, rows: &[Row]) -> Result<()>;
    /// Makes the counter of `table` issue only numbers above `to` from now on.
    fn raise_counter(&mut self, table: &Table, to: i64) -> Result<()>;
}
