//! `ReadTx` on SQLite: every read primitive of the seam.

use super::mapping::*;
use super::schema::*;
use super::sqltx::*;
use crate::Sq;
use aware_core::StoredEvent;
use aware_store::dump::{Row, Table, Value};
use aware_store::rows::*;
use aware_store::ReadTx;
use aware_store::Result;
use rusqlite::ToSql;

impl ReadTx for SqlTx<'_> {
    fn export_rows(&self, table: &Table, after: Option<&[Value]>, limit: u32) -> Result<Vec<Row>> {
        self.dump_rows(table, after, limit)
    }
    fn row_count(&self, table: &Table) -> Result<u64> {
        self.dump_count(table)
    }
    fn counter(&self, table: &Table) -> Result<i64> {
        self.dump_counter(table)
    }

    fn session(&self, key: &str, agent: &str) -> Result<Option<SessionRow>> {
        self.query_opt(
            &format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE session_key = ?1 AND agent_id = ?2"
            ),
            &[&key, &agent],
            session_from_row,
        )
    }

    fn session_exists(&self, key: &str, agent: &str) -> Result<bool> {
        Ok(self
            .query_opt(
                "SELECT 1 FROM sessions WHERE session_key = ?1 AND agent_id = ?2",
                &[&key, &agent],
                |_| Ok(()),
            )?
            .is_some())
    }

    fn session_by_label(&self, agent: &str, label: &str) -> Result<Option<SessionRow>> {
        self.query_opt(
            &format!("SELECT {SESSION_COLS} FROM sessions WHERE agent_id = ?1 AND label = ?2"),
            &[&agent, &label],
            session_from_row,
        )
    }

    fn list_sessions(&self, f: &SessionFilter) -> Result<Vec<SessionRow>> {
        let mut sql = format!("SELECT {SESSION_COLS} FROM sessions WHERE 1=1");
        let mut args: Vec<Box<dyn ToSql>> = Vec::new();
        let in_list =
            |sql: &mut String, col: &str, values: &[String], args: &mut Vec<Box<dyn ToSql>>| {
                if values.is_empty() {
                    return;
                }
                let marks: Vec<String> = values
                    .iter()
                    .map(|v| {
                        args.push(Box::new(v.clone()));
                        format!("?{}", args.len())
                    })
                    .collect();
                sql.push_str(&format!(" AND {col} IN ({})", marks.join(",")));
            };
        in_list(&mut sql, "agent_id", &f.agents, &mut args);
        in_list(&mut sql, "kind", &f.kinds, &mut args);
        if let Some(parent) = &f.parent_key {
            args.push(Box::new(parent.clone()));
            sql.push_str(&format!(" AND parent_session_key = ?{}", args.len()));
        }
        if let Some(label) = &f.label {
            args.push(Box::new(label.clone()));
            sql.push_str(&format!(" AND label = ?{}", args.len()));
        }
        if let Some(since) = f.updated_since {
            args.push(Box::new(since));
            sql.push_str(&format!(" AND updated_at >= ?{}", args.len()));
        }
        if let Some(kind) = &f.kind_not {
            args.push(Box::new(kind.clone()));
            sql.push_str(&format!(" AND kind <> ?{}", args.len()));
        }
        args.push(Box::new(i64::from(f.limit)));
        let limit_at = args.len();
        args.push(Box::new(f.offset as i64));
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, session_key, agent_id LIMIT ?{limit_at} OFFSET ?{}",
            args.len()
        ));
        let refs: Vec<&dyn ToSql> = args.iter().map(|b| b.as_ref()).collect();
        self.live()?;
        let mut stmt = self.conn.prepare(&sql).sq()?;
        let rows = stmt.query_map(refs.as_slice(), session_from_row).sq()?;
        rows.collect::<rusqlite::Result<Vec<_>>>().sq()
    }

    fn console_sessions(&self, f: &ConsoleFilter) -> Result<(Vec<ConsoleRow>, u64)> {
        self.console_sessions_page(f)
    }

    fn console_cursors_held_by(&self, watchers: &[String]) -> Result<Vec<CursorRow>> {
        self.console_edges_of(watchers)
    }

    fn head(&self, key: &str, agent: &str) -> Result<Option<HeadRow>> {
        self.check_log_read()?;
        self.query_opt(
            "SELECT last_sequence, pruned_max_sequence, updated_at FROM session_state_heads \
             WHERE session_key = ?1 AND agent_id = ?2",
            &[&key, &agent],
            |r| {
                Ok(HeadRow {
                    last_sequence: r.get(0)?,
                    pruned_max_sequence: r.get(1)?,
                    updated_at: r.get(2)?,
                })
            },
        )
    }

    fn heads(&self, pairs: &[(String, String)]) -> Result<Vec<Option<HeadRow>>> {
        pairs.iter().map(|(k, a)| self.head(k, a)).collect()
    }

    fn events_after(
        &self,
        key: &str,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.check_log_read()?;
        self.query_vec(
            &format!(
                "SELECT {EVENT_COLS} FROM session_state_events WHERE session_key = ?1 AND agent_id = ?2 \
                 AND sequence > ?3 ORDER BY sequence LIMIT ?4"
            ),
            &[&key, &agent, &after, &i64::from(limit)],
            event_from_row,
        )
    }

    fn events_before(
        &self,
        key: &str,
        agent: &str,
        before: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.check_log_read()?;
        self.query_vec(
            &format!(
                "SELECT {EVENT_COLS} FROM session_state_events WHERE session_key = ?1 AND agent_id = ?2 \
                 AND sequence < ?3 ORDER BY sequence DESC LIMIT ?4"
            ),
            &[&key, &agent, &before, &i64::from(limit)],
            event_from_row,
        )
    }

    fn earliest_sequence(&self, key: &str, agent: &str) -> Result<Option<i64>> {
        self.check_log_read()?;
        self.query_opt(
            "SELECT sequence FROM session_state_events WHERE session_key = ?1 AND agent_id = ?2 \
                 ORDER BY sequence LIMIT 1",
            &[&key, &agent],
            |r| r.get(0),
        )
    }

    fn event_by_dedupe(&self, dedupe_key: &str) -> Result<Option<StoredEvent>> {
        self.query_opt(
            &format!("SELECT {EVENT_COLS} FROM session_state_events WHERE dedupe_key = ?1"),
            &[&dedupe_key],
            event_from_row,
        )
    }

    fn event_by_sequence(&self, sequence: i64) -> Result<Option<StoredEvent>> {
        self.query_opt(
            &format!("SELECT {EVENT_COLS} FROM session_state_events WHERE sequence = ?1"),
            &[&sequence],
            event_from_row,
        )
    }

    fn event_count(&self) -> Result<u64> {
        let n: i64 = self
            .query_opt("SELECT COUNT(*) FROM session_state_events", &[], |r| {
                r.get(0)
            })?
            .unwrap_or(0);
        Ok(n.max(0) as u64)
    }

    fn cursor(
        &self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<Option<CursorRow>> {
        self.query_opt(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = ?1 \
                 AND target_session_key = ?2 AND target_agent_id = ?3"
            ),
            &[&watcher, &target_key, &target_agent],
            cursor_from_row,
        )
    }

    fn cursors_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>> {
        self.query_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = ?1 \
                 ORDER BY target_session_key, target_agent_id"
            ),
            &[&watcher],
            cursor_from_row,
        )
    }

    fn cursors_by_target(&self, target_key: &str, target_agent: &str) -> Result<Vec<CursorRow>> {
        self.query_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE target_session_key = ?1 \
                 AND target_agent_id = ?2 ORDER BY watcher_session_key"
            ),
            &[&target_key, &target_agent],
            cursor_from_row,
        )
    }

    fn live_watchers_of(&self, target_key: &str, target_agent: &str) -> Result<Vec<String>> {
        self.query_vec(LIVE_WATCHERS_SQL, &[&target_key, &target_agent], |r| {
            r.get(0)
        })
    }

    fn watcher_cursors(
        &self,
        target_key: &str,
        target_agent: &str,
        watchers: &[(&str, &str)],
    ) -> Result<Vec<(bool, Option<CursorRow>)>> {
        if watchers.is_empty() {
            return Ok(Vec::new());
        }
        // One statement for every candidate instead of two primary-key lookups each: with ten
        // watchers those twenty statements were a third of an append (W2). The candidates go
        // in as one JSON array of [key, agent] pairs, so the statement text (and its cached
        // plan) is the same whatever their number.
        let list = serde_json::Value::Array(
            watchers
                .iter()
                .map(|(k, a)| serde_json::json!([k, a]))
                .collect(),
        )
        .to_string();
        let rows = self.query_vec(
            &format!(
                "SELECT {CURSOR_COLS_C}, EXISTS (SELECT 1 FROM sessions s                  WHERE s.session_key = w.value ->> 0 AND s.agent_id = w.value ->> 1)                  FROM json_each(?1) w LEFT JOIN session_watch_cursors c                  ON c.watcher_session_key = w.value ->> 0 AND c.target_session_key = ?2                  AND c.target_agent_id = ?3 ORDER BY w.key"
            ),
            &[&list, &target_key, &target_agent],
            |r| {
                let exists = r.get::<_, i64>(11)? != 0;
                let cursor = match r.get_ref(0)? {
                    rusqlite::types::ValueRef::Null => None,
                    _ if exists => Some(cursor_from_row(r)?),
                    _ => None,
                };
                Ok((exists, cursor))
            },
        )?;
        if rows.len() != watchers.len() {
            return Err(aware_store::StoreError::Corrupt(format!(
                "watcher lookup returned {} rows for {} watchers",
                rows.len(),
                watchers.len()
            )));
        }
        Ok(rows)
    }

    fn pending_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>> {
        self.query_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = ?1 \
                 AND muted = 0 AND notified_sequence > last_seen_sequence \
                 ORDER BY notified_sequence, target_session_key, target_agent_id"
            ),
            &[&watcher],
            cursor_from_row,
        )
    }

    fn watchers_with_pending(&self) -> Result<Vec<String>> {
        self.query_vec(
            "SELECT DISTINCT watcher_session_key FROM session_watch_cursors WHERE muted = 0 \
             AND notified_sequence > last_seen_sequence ORDER BY watcher_session_key",
            &[],
            |r| r.get(0),
        )
    }

    fn count_pending(&self) -> Result<u64> {
        let n: i64 = self
            .query_opt(COUNT_PENDING_SQL, &[], |r| r.get(0))?
            .unwrap_or(0);
        Ok(n.max(0) as u64)
    }

    fn gauges(&self) -> Result<StoreGauges> {
        // Sessions and pending are the trigger-kept rows of `aware_counts` (decision D51);
        // watchers are a count over the primary key (watcher first, so DISTINCT is a
        // sequential index scan), never the cursor table itself.
        let count = |sql: &str| -> Result<u64> {
            let n: i64 = self.query_opt(sql, &[], |r| r.get(0))?.unwrap_or(0);
            Ok(n.max(0) as u64)
        };
        Ok(StoreGauges {
            sessions: count(COUNT_SESSIONS_SQL)?,
            watchers: count(COUNT_WATCHERS_SQL)?,
            pending: self.count_pending()?,
        })
    }

    fn system_events_limit(
        &self,
        key: &str,
        agent: &str,
        limit: u32,
    ) -> Result<Vec<SystemEventRow>> {
        self.query_vec(
            "SELECT id, text, context_key, enqueued_at FROM session_system_events \
             WHERE session_key = ?1 AND agent_id = ?2 ORDER BY id LIMIT ?3",
            &[&key, &agent, &i64::from(limit)],
            |r| {
                Ok(SystemEventRow {
                    id: r.get(0)?,
                    text: r.get(1)?,
                    context_key: r.get(2)?,
                    enqueued_at: r.get(3)?,
                })
            },
        )
    }

    fn pending_by_watcher_limit(&self, watcher: &str, limit: u32) -> Result<Vec<CursorRow>> {
        self.query_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = ?1 \
                 AND muted = 0 AND notified_sequence > last_seen_sequence \
                 ORDER BY notified_sequence, target_session_key, target_agent_id LIMIT ?2"
            ),
            &[&watcher, &i64::from(limit)],
            cursor_from_row,
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
        self.live()?;
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
            "SELECT {TURN_COLS} FROM turns WHERE session_key = ?1 AND agent_id = ?2 AND idx > ?3 \
             ORDER BY idx LIMIT ?4"
        ))
            .sq()?;
        let params: [&dyn ToSql; 4] = [&key, &agent, &after.unwrap_or(-1), &i64::from(limit)];
        let mut rows = stmt.query(&params[..]).sq()?;
        let (mut out, mut used) = (Vec::new(), 0usize);
        while let Some(row) = rows.next().sq()? {
            let turn = turn_from_row(row).sq()?;
            let size = turn.text.len() + turn.upstream_text.as_ref().map_or(0, String::len);
            if !out.is_empty() && used.saturating_add(size) > max_bytes {
                return Ok((out, true));
            }
            used = used.saturating_add(size);
            out.push(turn);
        }
        Ok((out, false))
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
        // TURN_COLS with both texts cut in SQL, so a long transcript never loads in full.
        const CUT_COLS: &str = "id, idx, role, substr(text, 1, ?4), at, actor_type, actor_id, \
             provenance_json, channel, run_id, origin, substr(upstream_text, 1, ?4), idempotency_key";
        let cut = i64::from(max_chars) + 1;
        let filter = "session_key = ?1 AND agent_id = ?2 AND (?3 OR role <> 'tool')";
        match from {
            Some(from) => self.query_vec(
                &format!(
                    "SELECT {CUT_COLS} FROM turns WHERE {filter} AND idx >= ?5 ORDER BY idx LIMIT ?6"
                ),
                &[&key, &agent, &include_tools, &cut, &from, &i64::from(limit)],
                turn_from_row,
            ),
            None => {
                let mut rows = self.query_vec(
                    &format!(
                        "SELECT {CUT_COLS} FROM turns WHERE {filter} ORDER BY idx DESC LIMIT ?5"
                    ),
                    &[&key, &agent, &include_tools, &cut, &i64::from(limit)],
                    turn_from_row,
                )?;
                rows.reverse();
                Ok(rows)
            }
        }
    }

    fn system_events(&self, key: &str, agent: &str) -> Result<Vec<SystemEventRow>> {
        self.query_vec(
            "SELECT id, text, context_key, enqueued_at FROM session_system_events \
             WHERE session_key = ?1 AND agent_id = ?2 ORDER BY id",
            &[&key, &agent],
            |r| {
                Ok(SystemEventRow {
                    id: r.get(0)?,
                    text: r.get(1)?,
                    context_key: r.get(2)?,
                    enqueued_at: r.get(3)?,
                })
            },
        )
    }

    fn turns(
        &self,
        key: &str,
        agent: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TurnRow>> {
        self.query_vec(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = ?1 AND agent_id = ?2 AND idx > ?3 \
                 ORDER BY idx LIMIT ?4"
            ),
            &[&key, &agent, &after.unwrap_or(-1), &i64::from(limit)],
            turn_from_row,
        )
    }

    fn turn_count(&self, key: &str, agent: &str) -> Result<i64> {
        Ok(self
            .query_opt(
                // Indices are 0..n within an incarnation (reset deletes them all), so the next
                // index is one index-seek away; COUNT(*) would scan the whole transcript.
                "SELECT COALESCE(MAX(idx) + 1, 0) FROM turns WHERE session_key = ?1 AND agent_id = ?2",
                &[&key, &agent],
                |r| r.get(0),
            )?
            .unwrap_or(0))
    }

    fn turn_by_idempotency(
        &self,
        key: &str,
        agent: &str,
        idempotency_key: &str,
    ) -> Result<Option<TurnRow>> {
        self.query_opt(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = ?1 AND agent_id = ?2 \
                 AND idempotency_key = ?3"
            ),
            &[&key, &agent, &idempotency_key],
            turn_from_row,
        )
    }

    fn recent_own_user_turns(&self, key: &str, agent: &str, limit: u32) -> Result<Vec<TurnRow>> {
        self.query_vec(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = ?1 AND agent_id = ?2 AND role = 'user' \
                 AND (origin IS NULL OR origin <> 'import') ORDER BY idx DESC LIMIT ?3"
            ),
            &[&key, &agent, &i64::from(limit)],
            turn_from_row,
        )
    }

    fn reply_for_run(&self, key: &str, agent: &str, run_id: &str) -> Result<Option<TurnRow>> {
        self.query_opt(
            &format!(
                "SELECT {TURN_COLS} FROM turns WHERE session_key = ?1 AND agent_id = ?2 \
                 AND run_id = ?3 AND role = 'assistant' ORDER BY idx LIMIT 1"
            ),
            &[&key, &agent, &run_id],
            turn_from_row,
        )
    }

    fn link(&self, key: &str, agent: &str) -> Result<Option<LinkRow>> {
        self.query_opt(
            &format!("SELECT {LINK_COLS} FROM session_upstream_links WHERE session_key = ?1 AND agent_id = ?2"),
            &[&key, &agent],
            link_from_row,
        )
    }

    fn watched_links(&self) -> Result<Vec<LinkRow>> {
        self.query_vec(
            &format!(
                "SELECT {LINK_COLS} FROM session_upstream_links l WHERE EXISTS (SELECT 1 FROM \
                 session_watch_cursors c WHERE c.target_session_key = l.session_key AND \
                 c.target_agent_id = l.agent_id AND c.muted = 0) ORDER BY catalog_id, session_key, agent_id"
            ),
            &[],
            link_from_row,
        )
    }

    fn runs_of(&self, key: &str, agent: &str, limit: u32) -> Result<Vec<RunRow>> {
        self.query_vec(
            &format!(
                "SELECT {RUN_COLS} FROM runs WHERE session_key = ?1 AND agent_id = ?2 \
                 ORDER BY started_at DESC, run_id LIMIT ?3"
            ),
            &[&key, &agent, &i64::from(limit)],
            run_from_row,
        )
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRow>> {
        self.query_opt(
            &format!("SELECT {RUN_COLS} FROM runs WHERE run_id = ?1"),
            &[&run_id],
            run_from_row,
        )
    }

    fn due_runs(&self, now: i64) -> Result<Vec<RunRow>> {
        self.query_vec(
            &format!(
                "SELECT {RUN_COLS} FROM runs WHERE ended_at IS NULL AND deadline_at IS NOT NULL \
                 AND deadline_at <= ?1 ORDER BY deadline_at, run_id"
            ),
            &[&now],
            run_from_row,
        )
    }

    fn next_run_deadline(&self) -> Result<Option<i64>> {
        Ok(self
            .query_opt(
                "SELECT MIN(deadline_at) FROM runs WHERE ended_at IS NULL AND deadline_at IS NOT NULL",
                &[],
                |r| r.get::<_, Option<i64>>(0),
            )?
            .flatten())
    }
}
