//! `ReadTx` on PostgreSQL.

use super::mapping::*;
use super::PgTx;
use crate::conn::{col, Param};
use crate::schema::{COUNT_PENDING_SQL, COUNT_SESSIONS_SQL};
use aware_core::StoredEvent;
use aware_store::dump::{Row, Table, Value};
use aware_store::{
    ConsoleFilter, ConsoleRow, CursorRow, HeadRow, LinkRow, ReadTx, Result, RunRow, SessionFilter,
    SessionRow, StoreGauges, SystemEventRow, TurnRow,
};

impl ReadTx for PgTx<'_> {
    fn export_rows(&self, table: &Table, after: Option<&[Value]>, limit: u32) -> Result<Vec<Row>> {
        self.exclusive()?;
        self.dump_rows(table, after, limit)
    }
    fn row_count(&self, table: &Table) -> Result<u64> {
        self.exclusive()?;
        self.dump_count(table)
    }
    fn counter(&self, table: &Table) -> Result<i64> {
        self.exclusive()?;
        self.dump_counter(table)
    }
    fn session(&self, key: &str, agent: &str) -> Result<Option<SessionRow>> {
        self.stream(key, agent)?;
        if let Some(Some(known)) = self.with_cache(|c| c.session(key, agent)) {
            return Ok(known);
        }
        let row = self.map_opt(
            &format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE session_key = $1 AND agent_id = $2"
            ),
            &[&key, &agent],
            session_from_row,
        )?;
        self.with_cache(|c| c.saw_session(key, agent, row.clone()));
        Ok(row)
    }

    fn session_exists(&self, key: &str, agent: &str) -> Result<bool> {
        if !self.reader {
            // The writer reads the whole row, so the next look at it is free.
            return Ok(self.session(key, agent)?.is_some());
        }
        Ok(self
            .map_opt(
                "SELECT 1 FROM sessions WHERE session_key = $1 AND agent_id = $2",
                &[&key, &agent],
                |_| Ok(()),
            )?
            .is_some())
    }

    fn session_by_label(&self, agent: &str, label: &str) -> Result<Option<SessionRow>> {
        self.lock(&["\u{1}label", agent, label])?;
        self.keyed_read_opt(
            || {
                self.map_opt(
                    &format!(
                        "SELECT {SESSION_COLS} FROM sessions WHERE agent_id = $1 AND label = $2"
                    ),
                    &[&agent, &label],
                    session_from_row,
                )
            },
            |r: &SessionRow| (r.key.clone(), r.agent_id.clone()),
        )
    }

    fn list_sessions(&self, f: &SessionFilter) -> Result<Vec<SessionRow>> {
        self.exclusive()?;
        let mut sql = format!("SELECT {SESSION_COLS} FROM sessions WHERE TRUE");
        let mut args: Vec<Arg> = Vec::new();
        in_list(&mut sql, "agent_id", &f.agents, &mut args);
        in_list(&mut sql, "kind", &f.kinds, &mut args);
        if let Some(parent) = &f.parent_key {
            let m = push(&mut args, Arg::Text(parent.clone()));
            sql.push_str(&format!(" AND parent_session_key = {m}"));
        }
        if let Some(label) = &f.label {
            let m = push(&mut args, Arg::Text(label.clone()));
            sql.push_str(&format!(" AND label = {m}"));
        }
        if let Some(since) = f.updated_since {
            let m = push(&mut args, Arg::Int(since));
            sql.push_str(&format!(" AND updated_at >= {m}"));
        }
        if let Some(kind) = &f.kind_not {
            let m = push(&mut args, Arg::Text(kind.clone()));
            sql.push_str(&format!(" AND kind <> {m}"));
        }
        let limit = push(&mut args, Arg::Int(i64::from(f.limit)));
        let offset = push(&mut args, Arg::Int(f.offset.min(i64::MAX as u64) as i64));
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, session_key, agent_id LIMIT {limit} OFFSET {offset}"
        ));
        let params: Vec<Param<'_>> = args.iter().map(Arg::param).collect();
        self.map_vec(&sql, &params, session_from_row)
    }

    fn console_sessions(&self, f: &ConsoleFilter) -> Result<(Vec<ConsoleRow>, u64)> {
        self.exclusive()?;
        self.console_page(f)
    }

    fn head(&self, key: &str, agent: &str) -> Result<Option<HeadRow>> {
        self.stream(key, agent)?;
        self.check_log_read()?;
        self.map_opt(
            "SELECT last_sequence, pruned_max_sequence, updated_at FROM session_state_heads \
             WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
            |r| {
                Ok(HeadRow {
                    last_sequence: col(r, 0)?,
                    pruned_max_sequence: col(r, 1)?,
                    updated_at: col(r, 2)?,
                })
            },
        )
    }

    fn heads(&self, pairs: &[(String, String)]) -> Result<Vec<Option<HeadRow>>> {
        for (key, agent) in pairs {
            self.stream(key, agent)?;
        }
        pairs.iter().map(|(k, a)| self.head(k, a)).collect()
    }

    fn events_after(
        &self,
        key: &str,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.stream(key, agent)?;
        self.check_log_read()?;
        self.map_vec(
            &format!(
                "SELECT {EVENT_COLS} FROM session_state_events WHERE session_key = $1 \
                 AND agent_id = $2 AND sequence > $3 ORDER BY sequence LIMIT $4"
            ),
            &[&key, &agent, &after, &i64::from(limit)],
            event_from_row,
        )
    }

    fn earliest_sequence(&self, key: &str, agent: &str) -> Result<Option<i64>> {
        self.stream(key, agent)?;
        self.check_log_read()?;
        self.map_opt(
            "SELECT sequence FROM session_state_events WHERE session_key = $1 AND agent_id = $2 \
             ORDER BY sequence LIMIT 1",
            &[&key, &agent],
            |r| col(r, 0),
        )
    }

    fn events_before(
        &self,
        key: &str,
        agent: &str,
        before: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.stream(key, agent)?;
        self.check_log_read()?;
        self.map_vec(
            &format!(
                "SELECT {EVENT_COLS} FROM session_state_events WHERE session_key = $1 \
                 AND agent_id = $2 AND sequence < $3 ORDER BY sequence DESC LIMIT $4"
            ),
            &[&key, &agent, &before, &i64::from(limit)],
            event_from_row,
        )
    }

    fn event_by_dedupe(&self, dedupe_key: &str) -> Result<Option<StoredEvent>> {
        self.lock(&["\u{1}dedupe", dedupe_key])?;
        self.map_opt(
            &format!("SELECT {EVENT_COLS} FROM session_state_events WHERE dedupe_key = $1"),
            &[&dedupe_key],
            event_from_row,
        )
    }

    fn event_by_sequence(&self, sequence: i64) -> Result<Option<StoredEvent>> {
        self.map_opt(
            &format!("SELECT {EVENT_COLS} FROM session_state_events WHERE sequence = $1"),
            &[&sequence],
            event_from_row,
        )
    }

    fn event_count(&self) -> Result<u64> {
        self.exclusive()?;
        self.count("SELECT COUNT(*) FROM session_state_events", &[])
    }

    fn cursor(
        &self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<Option<CursorRow>> {
        self.stream(target_key, target_agent)?;
        if let Some(Some(known)) = self.with_cache(|c| c.cursor(watcher, target_key, target_agent))
        {
            return Ok(known);
        }
        let row = self.map_opt(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 AND target_session_key = $2 AND target_agent_id = $3"
            ),
            &[&watcher, &target_key, &target_agent],
            cursor_from_row,
        )?;
        self.with_cache(|c| c.saw_cursor(watcher, target_key, target_agent, row.clone()));
        Ok(row)
    }

    fn watcher_cursors(
        &self,
        target_key: &str,
        target_agent: &str,
        watchers: &[(&str, &str)],
    ) -> Result<Vec<(bool, Option<CursorRow>)>> {
        self.watcher_cursors_keyed(target_key, target_agent, watchers)
    }

    fn cursors_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>> {
        self.keyed_cursors(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 ORDER BY target_session_key, target_agent_id"
            ),
            &[&watcher],
        )
    }

    fn pending_by_watchers(&self, watchers: &[String]) -> Result<Vec<CursorRow>> {
        self.cursors_held_by(
            watchers,
            "AND muted = 0 AND notified_sequence > last_seen_sequence",
            "notified_sequence, ",
        )
    }

    fn console_cursors_held_by(&self, watchers: &[String]) -> Result<Vec<CursorRow>> {
        self.cursors_held_by(watchers, "", "")
    }

    fn cursors_by_target(&self, target_key: &str, target_agent: &str) -> Result<Vec<CursorRow>> {
        self.stream(target_key, target_agent)?;
        self.map_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE target_session_key = $1 \
                 AND target_agent_id = $2 ORDER BY watcher_session_key"
            ),
            &[&target_key, &target_agent],
            cursor_from_row,
        )
    }

    fn live_watchers_of(&self, target_key: &str, target_agent: &str) -> Result<Vec<String>> {
        self.stream(target_key, target_agent)?;
        if let Some(Some(known)) = self.with_cache(|c| c.live_watchers(target_key, target_agent)) {
            return Ok(known);
        }
        let list: Vec<String> = self.map_vec(
            "SELECT watcher_session_key FROM session_watch_cursors WHERE target_session_key = $1 \
             AND target_agent_id = $2 AND muted = 0 ORDER BY watcher_session_key",
            &[&target_key, &target_agent],
            |r| col(r, 0),
        )?;
        self.with_cache(|c| c.saw_live_watchers(target_key, target_agent, &list));
        Ok(list)
    }

    fn pending_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>> {
        self.keyed_cursors(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 AND muted = 0 AND notified_sequence > last_seen_sequence \
                 ORDER BY notified_sequence, target_session_key, target_agent_id"
            ),
            &[&watcher],
        )
    }

    fn watchers_with_pending(&self) -> Result<Vec<String>> {
        self.exclusive()?;
        self.map_vec(
            "SELECT DISTINCT watcher_session_key FROM session_watch_cursors WHERE muted = 0 \
             AND notified_sequence > last_seen_sequence ORDER BY watcher_session_key",
            &[],
            |r| col(r, 0),
        )
    }

    fn count_pending(&self) -> Result<u64> {
        self.exclusive()?;
        // Kept by triggers (decision D54), not counted over the pending index.
        self.count(COUNT_PENDING_SQL, &[])
    }

    fn gauges(&self) -> Result<StoreGauges> {
        self.exclusive()?;
        Ok(StoreGauges {
            sessions: self.count(COUNT_SESSIONS_SQL, &[])?,
            watchers: self.count(
                "SELECT COUNT(DISTINCT watcher_session_key) FROM session_watch_cursors",
                &[],
            )?,
            pending: self.count_pending()?,
        })
    }

    fn system_events(&self, key: &str, agent: &str) -> Result<Vec<SystemEventRow>> {
        self.stream(key, agent)?;
        self.map_vec(
            "SELECT id, text, context_key, enqueued_at FROM session_system_events \
             WHERE session_key = $1 AND agent_id = $2 ORDER BY id",
            &[&key, &agent],
            system_event_from_row,
        )
    }

    fn system_events_limit(
        &self,
        key: &str,
        agent: &str,
        limit: u32,
    ) -> Result<Vec<SystemEventRow>> {
        self.stream(key, agent)?;
        self.map_vec(
            "SELECT id, text, context_key, enqueued_at FROM session_system_events \
             WHERE session_key = $1 AND agent_id = $2 ORDER BY id LIMIT $3",
            &[&key, &agent, &i64::from(limit)],
            system_event_from_row,
        )
    }

    fn pending_by_watcher_limit(&self, watcher: &str, limit: u32) -> Result<Vec<CursorRow>> {
        self.keyed_cursors(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 AND muted = 0 AND notified_sequence > last_seen_sequence \
                 ORDER BY notified_sequence, target_session_key, target_agent_id LIMIT $2"
            ),
            &[&watcher, &i64::from(limit)],
        )
    }

    fn turns_within(
        &self,
        key: &str,
        agent: &str,
        after: Option<i64>,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<TurnRow>, bool)> {
        self.turns_within_budget(key, agent, after, limit, max_bytes)
    }

    fn turns_page(
        &self,
        key: &str,
        agent: &str,
        from: Option<i64>,
        include_tools: bool,
        limit: u32,
        max_chars: u32,
    ) -> Result<Vec<TurnRow>> {
        self.turns_cut(key, agent, from, include_tools, limit, max_chars)
    }

    fn turns(
        &self,
        key: &str,
        agent: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TurnRow>> {
        self.stream(key, agent)?;
        self.map_vec(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = $1 AND agent_id = $2 \
                 AND idx > $3 ORDER BY idx LIMIT $4"
            ),
            &[&key, &agent, &after.unwrap_or(-1), &i64::from(limit)],
            turn_from_row,
        )
    }

    fn turn_count(&self, key: &str, agent: &str) -> Result<i64> {
        self.stream(key, agent)?;
        if let Some(Some(n)) = self.with_cache(|c| c.turn_count(key, agent)) {
            return Ok(n);
        }
        let n = self
            .map_opt(
                "SELECT COALESCE(MAX(idx) + 1, 0)::BIGINT FROM turns \
                 WHERE session_key = $1 AND agent_id = $2",
                &[&key, &agent],
                |r| col(r, 0),
            )?
            .unwrap_or(0);
        self.with_cache(|c| c.saw_turn_count(key, agent, n));
        Ok(n)
    }

    fn turn_by_idempotency(
        &self,
        key: &str,
        agent: &str,
        idempotency_key: &str,
    ) -> Result<Option<TurnRow>> {
        self.stream(key, agent)?;
        self.map_opt(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = $1 AND agent_id = $2 \
                 AND idempotency_key = $3"
            ),
            &[&key, &agent, &idempotency_key],
            turn_from_row,
        )
    }

    fn recent_own_user_turns(&self, key: &str, agent: &str, limit: u32) -> Result<Vec<TurnRow>> {
        self.stream(key, agent)?;
        self.map_vec(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = $1 AND agent_id = $2 \
                 AND role = 'user' AND (origin IS NULL OR origin <> 'import') \
                 ORDER BY idx DESC LIMIT $3"
            ),
            &[&key, &agent, &i64::from(limit)],
            turn_from_row,
        )
    }

    fn reply_for_run(&self, key: &str, agent: &str, run_id: &str) -> Result<Option<TurnRow>> {
        self.stream(key, agent)?;
        self.map_opt(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = $1 AND agent_id = $2 \
                 AND run_id = $3 AND role = 'assistant' ORDER BY idx LIMIT 1"
            ),
            &[&key, &agent, &run_id],
            turn_from_row,
        )
    }

    fn link(&self, key: &str, agent: &str) -> Result<Option<LinkRow>> {
        self.stream(key, agent)?;
        self.map_opt(
            &format!(
                "SELECT {LINK_COLS} FROM session_upstream_links \
                 WHERE session_key = $1 AND agent_id = $2"
            ),
            &[&key, &agent],
            link_from_row,
        )
    }

    fn watched_links(&self) -> Result<Vec<LinkRow>> {
        self.exclusive()?;
        self.map_vec(
            &format!(
                "SELECT {LINK_COLS} FROM session_upstream_links l WHERE EXISTS (SELECT 1 FROM \
                 session_watch_cursors c WHERE c.target_session_key = l.session_key AND \
                 c.target_agent_id = l.agent_id AND c.muted = 0) \
                 ORDER BY catalog_id, session_key, agent_id"
            ),
            &[],
            link_from_row,
        )
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRow>> {
        self.keyed_read_opt(
            || {
                self.map_opt(
                    &format!("SELECT {RUN_COLS} FROM runs WHERE run_id = $1"),
                    &[&run_id],
                    run_from_row,
                )
            },
            |r: &RunRow| (r.session_key.clone(), r.agent_id.clone()),
        )
    }

    fn runs_of(&self, key: &str, agent: &str, limit: u32) -> Result<Vec<RunRow>> {
        self.stream(key, agent)?;
        self.map_vec(
            &format!(
                "SELECT {RUN_COLS} FROM runs WHERE session_key = $1 AND agent_id = $2 \
                 ORDER BY started_at DESC, run_id LIMIT $3"
            ),
            &[&key, &agent, &i64::from(limit)],
            run_from_row,
        )
    }

    fn due_runs(&self, now: i64) -> Result<Vec<RunRow>> {
        self.exclusive()?;
        self.map_vec(
            &format!(
                "SELECT {RUN_COLS} FROM runs WHERE ended_at IS NULL AND deadline_at IS NOT NULL \
                 AND deadline_at <= $1 ORDER BY deadline_at, run_id"
            ),
            &[&now],
            run_from_row,
        )
    }

    fn next_run_deadline(&self) -> Result<Option<i64>> {
        self.exclusive()?;
        Ok(self
            .map_opt(
                "SELECT MIN(deadline_at) FROM runs WHERE ended_at IS NULL AND deadline_at IS NOT NULL",
                &[],
                |r| col::<Option<i64>>(r, 0),
            )?
            .flatten())
    }
}

impl PgTx<'_> {
    /// The cursors any of `watchers` holds, narrowed by `filter`, by watcher then `order` then
    /// target: one array parameter instead of an IN list, so one statement text whatever the
    /// set size.
    fn cursors_held_by(
        &self,
        watchers: &[String],
        filter: &str,
        order: &str,
    ) -> Result<Vec<CursorRow>> {
        self.exclusive()?;
        if watchers.is_empty() {
            return Ok(Vec::new());
        }
        self.map_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors \
                 WHERE watcher_session_key = ANY($1) {filter} \
                 ORDER BY watcher_session_key, {order}target_session_key, target_agent_id"
            ),
            &[&watchers],
            cursor_from_row,
        )
    }
}
