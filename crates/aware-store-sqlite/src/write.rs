//! `WriteTx` on SQLite: every write primitive of the seam.

use super::mapping::*;
use super::schema::{run_cached, EXPIRE_CURSORS_SQL};
use super::sqltx::*;
use crate::Sq;
use aware_store::dump::{Row, Table};
use aware_store::rows::*;
use aware_store::WriteTx;
use aware_store::{Result, StoreError};
use rusqlite::{params, ToSql};

impl WriteTx for SqlTx<'_> {
    fn import_rows(&mut self, table: &Table, rows: &[Row]) -> Result<()> {
        self.load_rows(table, rows)
    }
    fn raise_counter(&mut self, table: &Table, to: i64) -> Result<()> {
        self.load_counter(table, to)
    }

    fn savepoint(&mut self, name: &str) -> Result<()> {
        self.live()?;
        run_cached(self.conn, &format!("SAVEPOINT \"{name}\"")).sq()
    }
    fn release(&mut self, name: &str) -> Result<()> {
        self.live()?;
        run_cached(self.conn, &format!("RELEASE \"{name}\"")).sq()
    }
    fn rollback_to(&mut self, name: &str) -> Result<()> {
        self.conn
            .execute_batch(&format!("ROLLBACK TO \"{name}\"; RELEASE \"{name}\""))
            .sq()
    }
    fn after_commit(&mut self, hook: Box<dyn FnOnce() + Send>) {
        self.hooks.push(hook);
    }

    fn insert_event(&mut self, e: &NewEvent) -> Result<i64> {
        if self.faults.append_fails(&e.session_key) {
            return Err(StoreError::InjectedFault("signal-log appends fail"));
        }
        self.live()?;
        let payload = payload_text(e);
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO session_state_events (dedupe_key, session_key, session_id, agent_id, kind, \
             actor_type, actor_id, run_id, occurred_at, summary, payload_json) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        ).sq()?;
        stmt.execute(params![
            e.dedupe_key,
            e.session_key,
            e.session_id,
            e.agent_id,
            e.kind.as_str(),
            e.actor_type.as_str(),
            e.actor_id,
            e.run_id,
            e.occurred_at,
            e.summary,
            payload
        ])
        .sq()?;
        Ok(self.conn.last_insert_rowid())
    }

    fn upsert_head(&mut self, key: &str, agent: &str, sequence: i64, now: i64) -> Result<()> {
        self.exec(
            "INSERT INTO session_state_heads (session_key, agent_id, last_sequence, pruned_max_sequence, updated_at) \
             VALUES (?1, ?2, ?3, 0, ?4) ON CONFLICT (session_key, agent_id) DO UPDATE SET \
             last_sequence = MAX(last_sequence, excluded.last_sequence), updated_at = excluded.updated_at",
            &[&key, &agent, &sequence, &now],
        )?;
        Ok(())
    }

    fn put_cursor(&mut self, c: &CursorRow) -> Result<()> {
        debug_assert!(c.state.invariant_holds(), "cursor invariant broken: {c:?}");
        let s = &c.state;
        self.exec(
            "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, target_agent_id, \
             last_seen_sequence, notified_sequence, material_sequence, muted, origin, notice_opened_at, \
             created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
             ON CONFLICT (watcher_session_key, target_session_key, target_agent_id) DO UPDATE SET \
             last_seen_sequence = excluded.last_seen_sequence, notified_sequence = excluded.notified_sequence, \
             material_sequence = excluded.material_sequence, muted = excluded.muted, origin = excluded.origin, \
             notice_opened_at = excluded.notice_opened_at, updated_at = excluded.updated_at",
            &[
                &c.watcher,
                &c.target_key,
                &c.target_agent,
                &s.last_seen,
                &s.notified,
                &s.material,
                &i64::from(s.muted),
                &s.origin.as_str(),
                &s.notice_opened_at,
                &c.created_at,
                &s.updated_at,
            ],
        )?;
        Ok(())
    }

    fn update_cursor(&mut self, before: &CursorRow, c: &CursorRow) -> Result<()> {
        let (b, s) = (&before.state, &c.state);
        // The append's usual change to a cursor whose notice is already open: only the frozen
        // watermark and the time move. Writing just those two columns leaves the key, target and
        // pending indexes alone (SQLite maintains an index only when a column it reads, or its
        // WHERE clause reads, is assigned); the full upsert rewrote all five.
        let narrow = before.watcher == c.watcher
            && before.target_key == c.target_key
            && before.target_agent == c.target_agent
            && before.created_at == c.created_at
            && b.last_seen == s.last_seen
            && b.notified == s.notified
            && b.muted == s.muted
            && b.origin == s.origin
            && b.notice_opened_at == s.notice_opened_at;
        if narrow {
            debug_assert!(s.invariant_holds(), "cursor invariant broken: {c:?}");
            let changed = self.exec(
                "UPDATE session_watch_cursors SET material_sequence = ?4, updated_at = ?5 \
                 WHERE watcher_session_key = ?1 AND target_session_key = ?2 AND target_agent_id = ?3",
                &[&c.watcher, &c.target_key, &c.target_agent, &s.material, &s.updated_at],
            )?;
            if changed == 1 {
                return Ok(());
            }
        }
        self.put_cursor(c)
    }

    fn delete_cursor(
        &mut self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<bool> {
        Ok(self.exec(
            "DELETE FROM session_watch_cursors WHERE watcher_session_key = ?1 AND target_session_key = ?2 \
             AND target_agent_id = ?3",
            &[&watcher, &target_key, &target_agent],
        )? > 0)
    }

    fn delete_cursors_of_watcher(&mut self, watcher: &str) -> Result<u64> {
        Ok(self.exec(
            "DELETE FROM session_watch_cursors WHERE watcher_session_key = ?1",
            &[&watcher],
        )? as u64)
    }

    fn delete_cursors_of_target(&mut self, target_key: &str, target_agent: &str) -> Result<u64> {
        Ok(self.exec(
            "DELETE FROM session_watch_cursors WHERE target_session_key = ?1 AND target_agent_id = ?2",
            &[&target_key, &target_agent],
        )? as u64)
    }

    fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        let values = session_values(s);
        let args: Vec<&dyn ToSql> = values.iter().map(|v| v as &dyn ToSql).collect();
        self.exec(
            &format!("INSERT INTO sessions ({SESSION_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"),
            &args,
        )?;
        Ok(())
    }

    fn update_session(&mut self, s: &SessionRow) -> Result<()> {
        let values = session_values(s);
        let args: Vec<&dyn ToSql> = values.iter().map(|v| v as &dyn ToSql).collect();
        self.exec(
            "UPDATE sessions SET session_id = ?3, kind = ?4, label = ?5, parent_session_key = ?6, \
             created_via = ?7, active_run_id = ?8, goal_text = ?9, goal_status = ?10, goal_updated_at = ?11, \
             orphaned = ?12, created_at = ?13, updated_at = ?14, upstream_catalog = ?15, upstream_host = ?16, \
             upstream_thread = ?17 WHERE session_key = ?1 AND agent_id = ?2",
            &args,
        )?;
        Ok(())
    }

    fn delete_session(&mut self, key: &str, agent: &str) -> Result<bool> {
        let existed = self.exec(
            "DELETE FROM sessions WHERE session_key = ?1 AND agent_id = ?2",
            &[&key, &agent],
        )? > 0;
        for sql in [
            "DELETE FROM turns WHERE session_key = ?1 AND agent_id = ?2",
            "DELETE FROM runs WHERE session_key = ?1 AND agent_id = ?2",
            "DELETE FROM session_system_events WHERE session_key = ?1 AND agent_id = ?2",
            "DELETE FROM session_state_events WHERE session_key = ?1 AND agent_id = ?2",
            "DELETE FROM session_state_heads WHERE session_key = ?1 AND agent_id = ?2",
            "DELETE FROM session_upstream_links WHERE session_key = ?1 AND agent_id = ?2",
        ] {
            self.exec(sql, &[&key, &agent])?;
        }
        Ok(existed)
    }

    fn mark_children_orphaned(&mut self, parent_key: &str, agent: Option<&str>) -> Result<u64> {
        Ok(self.exec(
            "UPDATE sessions SET orphaned = 1 WHERE parent_session_key = ?1 \
             AND (?2 IS NULL OR agent_id = ?2)",
            &[&parent_key, &agent],
        )? as u64)
    }

    fn put_link(&mut self, l: &LinkRow) -> Result<()> {
        if self.faults.link_settles_fail() {
            return Err(StoreError::InjectedFault("link settles fail"));
        }
        self.exec(
            &format!(
                "INSERT INTO session_upstream_links ({LINK_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
                 ON CONFLICT (session_key, agent_id) DO UPDATE SET catalog_id = excluded.catalog_id, \
                 host_id = excluded.host_id, thread_id = excluded.thread_id, upstream_kind = excluded.upstream_kind, \
                 upstream_ref_json = excluded.upstream_ref_json, last_marker_json = excluded.last_marker_json, \
                 last_scanned_at = excluded.last_scanned_at, updated_at = excluded.updated_at"
            ),
            &[
                &l.session_key,
                &l.agent_id,
                &l.catalog_id,
                &l.host_id,
                &l.thread_id,
                &l.upstream_kind,
                &l.upstream_ref_json,
                &l.last_marker_json,
                &l.last_scanned_at,
                &l.created_at,
                &l.updated_at,
            ],
        )?;
        Ok(())
    }

    fn delete_link(&mut self, key: &str, agent: &str) -> Result<bool> {
        Ok(self.exec(
            "DELETE FROM session_upstream_links WHERE session_key = ?1 AND agent_id = ?2",
            &[&key, &agent],
        )? > 0)
    }

    fn insert_turn(&mut self, key: &str, agent: &str, t: &TurnRow) -> Result<()> {
        self.exec(
            "INSERT INTO turns (session_key, agent_id, idx, id, role, text, at, actor_type, actor_id, \
             provenance_json, channel, run_id, origin, upstream_text, idempotency_key) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            &[
                &key,
                &agent,
                &t.index,
                &t.id,
                &t.role,
                &t.text,
                &t.at,
                &t.actor_type.as_str(),
                &t.actor_id,
                &t.provenance_json,
                &t.channel,
                &t.run_id,
                &t.origin,
                &t.upstream_text,
                &t.idempotency_key,
            ],
        )?;
        Ok(())
    }

    fn delete_turns(&mut self, key: &str, agent: &str) -> Result<u64> {
        Ok(self.exec(
            "DELETE FROM turns WHERE session_key = ?1 AND agent_id = ?2",
            &[&key, &agent],
        )? as u64)
    }

    fn insert_run(&mut self, r: &RunRow) -> Result<()> {
        self.exec(
            &format!("INSERT INTO runs ({RUN_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
            &[
                &r.run_id,
                &r.session_key,
                &r.agent_id,
                &r.session_id,
                &r.started_at,
                &r.ended_at,
                &r.outcome,
                &r.deadline_at,
                &r.event_sequence,
            ],
        )?;
        Ok(())
    }

    fn update_run(&mut self, r: &RunRow) -> Result<()> {
        self.exec(
            "UPDATE runs SET ended_at = ?2, outcome = ?3, deadline_at = ?4, event_sequence = ?5 WHERE run_id = ?1",
            &[&r.run_id, &r.ended_at, &r.outcome, &r.deadline_at, &r.event_sequence],
        )?;
        Ok(())
    }

    fn fifo_insert(
        &mut self,
        key: &str,
        agent: &str,
        text: &str,
        context_key: Option<&str>,
        now: i64,
    ) -> Result<i64> {
        self.exec(
            "INSERT INTO session_system_events (session_key, agent_id, text, context_key, enqueued_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            &[&key, &agent, &text, &context_key, &now],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    fn fifo_delete(&mut self, key: &str, agent: &str, ids: &[i64]) -> Result<u64> {
        let mut n = 0;
        for id in ids {
            n += self.exec(
                "DELETE FROM session_system_events WHERE session_key = ?1 AND agent_id = ?2 AND id = ?3",
                &[&key, &agent, id],
            )? as u64;
        }
        Ok(n)
    }

    fn fifo_clear(&mut self, key: &str, agent: &str) -> Result<u64> {
        Ok(self.exec(
            "DELETE FROM session_system_events WHERE session_key = ?1 AND agent_id = ?2",
            &[&key, &agent],
        )? as u64)
    }

    fn prune_age_batch(&mut self, cutoff: i64, limit: u32, now: i64) -> Result<BatchResult> {
        let limit = i64::from(limit);
        let victims = "SELECT sequence, session_key, agent_id FROM session_state_events \
                       WHERE occurred_at < ?1 ORDER BY sequence LIMIT ?2";
        // The victims are the lowest sequences with `occurred_at < cutoff`, so every such row
        // between the lowest and highest victim is a victim: one range delete removes them.
        let delete = "DELETE FROM session_state_events WHERE sequence BETWEEN ?1 AND ?2 \
                      AND occurred_at < ?3";
        self.stamp_and_delete(victims, &[&cutoff, &limit], delete, Some(cutoff), now)
    }

    fn prune_lowest_batch(&mut self, count: u64, now: i64) -> Result<BatchResult> {
        let count = count as i64;
        let victims = "SELECT sequence, session_key, agent_id FROM session_state_events \
                       ORDER BY sequence LIMIT ?1";
        // The victims are the `count` lowest sequences: exactly the rows up to the highest one.
        let delete = "DELETE FROM session_state_events WHERE sequence BETWEEN ?1 AND ?2";
        self.stamp_and_delete(victims, &[&count], delete, None, now)
    }

    fn expire_cursors_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult> {
        let n = self.exec(EXPIRE_CURSORS_SQL, &[&cutoff, &i64::from(limit)])?;
        Ok(BatchResult { deleted: n as u64 })
    }

    fn expire_fifo_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult> {
        let n = self.exec(
            "DELETE FROM session_system_events WHERE id IN (SELECT id FROM session_system_events \
             WHERE enqueued_at < ?1 ORDER BY id LIMIT ?2)",
            &[&cutoff, &i64::from(limit)],
        )?;
        Ok(BatchResult { deleted: n as u64 })
    }

    fn sweep_batch(&mut self, after_rowid: i64, limit: u32, now: i64) -> Result<SweepBatch> {
        // `last`: no pending cursor of the same watcher has a higher rowid, so the watcher is
        // fully re-frozen once this batch commits (one probe of the pending-watcher index, whose
        // entries end in the rowid). The engine wakes each watcher at its last row and keeps
        // no set of the watchers already seen (D55).
        let rows: Vec<(i64, String, bool, bool)> = self.query_vec(
            "SELECT c.rowid, c.watcher_session_key, c.notified_sequence = c.material_sequence, \
             NOT EXISTS (SELECT 1 FROM session_watch_cursors p \
             WHERE p.watcher_session_key = c.watcher_session_key AND p.muted = 0 \
             AND p.notified_sequence > p.last_seen_sequence AND p.rowid > c.rowid) \
             FROM session_watch_cursors c \
             WHERE c.rowid > ?1 AND c.muted = 0 AND c.notified_sequence > c.last_seen_sequence \
             AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key) \
             ORDER BY c.rowid LIMIT ?2",
            &[&after_rowid, &i64::from(limit)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let mut finished_watchers = Vec::new();
        for (rowid, _, frozen, _) in &rows {
            // A statement that names `notified_sequence` rewrites the entries of both pending
            // partial indexes (their WHERE reads it), at scattered places in big indexes: twice
            // the pages per batch. A cursor already frozen at its material sequence keeps its
            // value, so leave the column out of its update (docs/performance.md, D45).
            let sql = if *frozen {
                "UPDATE session_watch_cursors SET updated_at = ?2, \
                 notice_opened_at = COALESCE(notice_opened_at, ?2) WHERE rowid = ?1"
            } else {
                "UPDATE session_watch_cursors SET notified_sequence = material_sequence, updated_at = ?2, \
                 notice_opened_at = COALESCE(notice_opened_at, ?2) WHERE rowid = ?1"
            };
            self.exec(sql, &[rowid, &now])?;
        }
        let last = rows.last().map(|(r, ..)| *r);
        let cursors = rows.len() as u64;
        for (_, watcher, _, is_last) in rows {
            if is_last {
                finished_watchers.push(watcher);
            }
        }
        Ok(SweepBatch {
            last,
            cursors,
            finished_watchers,
        })
    }
}
