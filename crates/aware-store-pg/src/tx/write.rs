//! `WriteTx` on PostgreSQL.

use super::mapping::*;
use super::PgTx;
use crate::conn::{col, Owned, Param};
use aware_store::dump::{Row, Table};
use aware_store::{
    BatchResult, CursorRow, LinkRow, NewEvent, Result, RunRow, SessionRow, StoreError, SweepBatch,
    TurnRow, WriteTx,
};

impl WriteTx for PgTx<'_> {
    fn import_rows(&mut self, table: &Table, rows: &[Row]) -> Result<()> {
        self.exclusive()?;
        self.load_rows(table, rows)
    }
    fn raise_counter(&mut self, table: &Table, to: i64) -> Result<()> {
        self.exclusive()?;
        self.load_counter(table, to)
    }
    // Savepoints are lazy and releases queued (see `Conn::savepoint`): a savepoint reaches the
    // server only when an exchange happens inside it. A failure already known is reported at
    // the release, where the caller can still roll back (01 §12: a failed append leaves its
    // primary action standing); one the server reports later fails the whole op or batch.
    fn savepoint(&mut self, name: &str) -> Result<()> {
        self.conn.get_mut().savepoint(name);
        Ok(())
    }
    fn release(&mut self, name: &str) -> Result<()> {
        let conn = self.conn.get_mut();
        if let Some(why) = conn.failure() {
            return Err(StoreError::CommitFailed(format!(
                "a statement inside savepoint {name} failed: {why}"
            )));
        }
        conn.release_queued(name);
        Ok(())
    }
    fn rollback_to(&mut self, name: &str) -> Result<()> {
        self.conn.get_mut().rollback_to(name)
    }
    fn after_commit(&mut self, hook: Box<dyn FnOnce() + Send>) {
        self.hooks.push(hook);
    }

    fn insert_event(&mut self, e: &NewEvent) -> Result<i64> {
        self.stream(&e.session_key, &e.agent_id)?;
        if self.faults.append_fails(&e.session_key) {
            return Err(StoreError::InjectedFault("signal-log appends fail"));
        }
        let payload = e
            .payload
            .as_ref()
            .map(|p| serde_json::Value::Object(p.clone()).to_string());
        if !self.reader {
            // The writer numbers the event itself (see `Conn::next_sequence`), so the insert
            // is a queued write: its failure is reported by the append's release.
            let sequence = self.conn.get_mut().next_sequence()?;
            self.defer(
                "INSERT INTO session_state_events (sequence, dedupe_key, session_key, \
                 session_id, agent_id, kind, actor_type, actor_id, run_id, occurred_at, summary, \
                 payload_json) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                vec![
                    Box::new(sequence),
                    Box::new(e.dedupe_key.clone()),
                    Box::new(e.session_key.clone()),
                    Box::new(e.session_id.clone()),
                    Box::new(e.agent_id.clone()),
                    Box::new(e.kind.as_str().to_string()),
                    Box::new(e.actor_type.as_str().to_string()),
                    Box::new(e.actor_id.clone()),
                    Box::new(e.run_id.clone()),
                    Box::new(e.occurred_at),
                    Box::new(e.summary.clone()),
                    Box::new(payload),
                ],
            )?;
            return Ok(sequence);
        }
        let row = self.map_opt(
            "INSERT INTO session_state_events (dedupe_key, session_key, session_id, agent_id, \
             kind, actor_type, actor_id, run_id, occurred_at, summary, payload_json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING sequence",
            &[
                &e.dedupe_key,
                &e.session_key,
                &e.session_id,
                &e.agent_id,
                &e.kind.as_str(),
                &e.actor_type.as_str(),
                &e.actor_id,
                &e.run_id,
                &e.occurred_at,
                &e.summary,
                &payload,
            ],
            |r| col::<i64>(r, 0),
        )?;
        row.ok_or_else(|| corrupt("INSERT … RETURNING gave no row".into()))
    }

    fn upsert_head(&mut self, key: &str, agent: &str, sequence: i64, now: i64) -> Result<()> {
        self.stream(key, agent)?;
        self.defer(
            "INSERT INTO session_state_heads (session_key, agent_id, last_sequence, \
             pruned_max_sequence, updated_at) VALUES ($1, $2, $3, 0, $4) \
             ON CONFLICT (session_key, agent_id) DO UPDATE SET last_sequence = \
             GREATEST(session_state_heads.last_sequence, EXCLUDED.last_sequence), \
             updated_at = EXCLUDED.updated_at",
            vec![
                Box::new(key.to_string()),
                Box::new(agent.to_string()),
                Box::new(sequence),
                Box::new(now),
            ],
        )
    }

    fn put_cursor(&mut self, c: &CursorRow) -> Result<()> {
        self.stream(&c.target_key, &c.target_agent)?;
        crate::debug_check(&c.state);
        self.with_cache(|cache| cache.put_cursor(c));
        let s = &c.state;
        self.defer(
            "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, \
             target_agent_id, last_seen_sequence, notified_sequence, material_sequence, muted, \
             origin, notice_opened_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (watcher_session_key, target_session_key, target_agent_id) DO UPDATE SET \
             last_seen_sequence = EXCLUDED.last_seen_sequence, \
             notified_sequence = EXCLUDED.notified_sequence, \
             material_sequence = EXCLUDED.material_sequence, muted = EXCLUDED.muted, \
             origin = EXCLUDED.origin, notice_opened_at = EXCLUDED.notice_opened_at, \
             updated_at = EXCLUDED.updated_at",
            vec![
                Box::new(c.watcher.clone()),
                Box::new(c.target_key.clone()),
                Box::new(c.target_agent.clone()),
                Box::new(s.last_seen),
                Box::new(s.notified),
                Box::new(s.material),
                Box::new(i64::from(s.muted)),
                Box::new(s.origin.as_str().to_string()),
                Box::new(s.notice_opened_at),
                Box::new(c.created_at),
                Box::new(s.updated_at),
            ],
        )
    }

    fn delete_cursor(
        &mut self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<bool> {
        self.stream(target_key, target_agent)?;
        let n = self.exec(
            "DELETE FROM session_watch_cursors WHERE watcher_session_key = $1 \
             AND target_session_key = $2 AND target_agent_id = $3",
            &[&watcher, &target_key, &target_agent],
        )?;
        self.with_cache(|c| c.deleted_cursor(watcher, target_key, target_agent));
        Ok(n > 0)
    }

    fn delete_cursors_of_watcher(&mut self, watcher: &str) -> Result<u64> {
        self.exclusive()?;
        self.with_cache(|c| c.forget_cursors());
        self.exec(
            "DELETE FROM session_watch_cursors WHERE watcher_session_key = $1",
            &[&watcher],
        )
    }

    fn delete_cursors_of_target(&mut self, target_key: &str, target_agent: &str) -> Result<u64> {
        self.stream(target_key, target_agent)?;
        self.with_cache(|c| c.forget_cursors());
        self.exec(
            "DELETE FROM session_watch_cursors WHERE target_session_key = $1 \
             AND target_agent_id = $2",
            &[&target_key, &target_agent],
        )
    }

    // Waited for: creating a session that exists must fail here (the contract's nested
    // savepoint case relies on it).
    fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        self.session_keys(s)?;
        let params = session_params(s);
        let refs: Vec<Param<'_>> = params.iter().map(|p| &**p as Param<'_>).collect();
        self.exec(
            &format!(
                "INSERT INTO sessions ({SESSION_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
                 $9, $10, $11, $12, $13, $14, $15, $16, $17)"
            ),
            &refs,
        )?;
        self.with_cache(|c| c.inserted_session(s));
        Ok(())
    }

    fn update_session(&mut self, s: &SessionRow) -> Result<()> {
        self.session_keys(s)?;
        self.with_cache(|c| c.updated_session(s));
        self.defer(
            "UPDATE sessions SET session_id = $3, kind = $4, label = $5, \
             parent_session_key = $6, created_via = $7, active_run_id = $8, goal_text = $9, \
             goal_status = $10, goal_updated_at = $11, orphaned = $12, created_at = $13, \
             updated_at = $14, upstream_catalog = $15, upstream_host = $16, \
             upstream_thread = $17 WHERE session_key = $1 AND agent_id = $2",
            session_params(s),
        )
    }

    // Exclusive in keyed mode: a watcher's existence is read without its key (see
    // `watcher_cursors`), so a session may disappear only when no keyed batch runs.
    fn delete_session(&mut self, key: &str, agent: &str) -> Result<bool> {
        self.exclusive()?;
        let existed = self.exec(
            "DELETE FROM sessions WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
        )? > 0;
        for table in [
            "turns",
            "runs",
            "session_system_events",
            "session_state_events",
            "session_state_heads",
            "session_upstream_links",
        ] {
            self.exec(
                &format!("DELETE FROM {table} WHERE session_key = $1 AND agent_id = $2"),
                &[&key, &agent],
            )?;
        }
        // (A failure above rolls the op back, which empties the cache.)
        self.with_cache(|c| c.deleted_session(key, agent));
        Ok(existed)
    }

    fn mark_children_orphaned(&mut self, parent_key: &str, agent: Option<&str>) -> Result<u64> {
        self.exclusive()?;
        self.with_cache(|c| c.forget_sessions());
        self.exec(
            "UPDATE sessions SET orphaned = 1 WHERE parent_session_key = $1 \
             AND ($2::TEXT IS NULL OR agent_id = $2)",
            &[&parent_key, &agent],
        )
    }

    fn put_link(&mut self, l: &LinkRow) -> Result<()> {
        self.stream(&l.session_key, &l.agent_id)?;
        if self.faults.link_settles_fail() {
            return Err(StoreError::InjectedFault("link settles fail"));
        }
        self.exec(
            &format!(
                "INSERT INTO session_upstream_links ({LINK_COLS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (session_key, agent_id) DO UPDATE SET \
                 catalog_id = EXCLUDED.catalog_id, host_id = EXCLUDED.host_id, \
                 thread_id = EXCLUDED.thread_id, upstream_kind = EXCLUDED.upstream_kind, \
                 upstream_ref_json = EXCLUDED.upstream_ref_json, \
                 last_marker_json = EXCLUDED.last_marker_json, \
                 last_scanned_at = EXCLUDED.last_scanned_at, updated_at = EXCLUDED.updated_at"
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
        self.stream(key, agent)?;
        Ok(self.exec(
            "DELETE FROM session_upstream_links WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
        )? > 0)
    }

    fn insert_turn(&mut self, key: &str, agent: &str, t: &TurnRow) -> Result<()> {
        self.stream(key, agent)?;
        self.with_cache(|c| c.inserted_turn(key, agent, t.index));
        self.defer(
            "INSERT INTO turns (session_key, agent_id, idx, id, role, text, at, actor_type, \
             actor_id, provenance_json, channel, run_id, origin, upstream_text, idempotency_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
            vec![
                Box::new(key.to_string()),
                Box::new(agent.to_string()),
                Box::new(t.index),
                Box::new(t.id.clone()),
                Box::new(t.role.clone()),
                Box::new(t.text.clone()),
                Box::new(t.at),
                Box::new(t.actor_type.as_str().to_string()),
                Box::new(t.actor_id.clone()),
                Box::new(t.provenance_json.clone()),
                Box::new(t.channel.clone()),
                Box::new(t.run_id.clone()),
                Box::new(t.origin.clone()),
                Box::new(t.upstream_text.clone()),
                Box::new(t.idempotency_key.clone()),
            ],
        )
    }

    fn delete_turns(&mut self, key: &str, agent: &str) -> Result<u64> {
        self.stream(key, agent)?;
        self.with_cache(|c| c.deleted_turns(key, agent));
        self.exec(
            "DELETE FROM turns WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
        )
    }

    fn insert_run(&mut self, r: &RunRow) -> Result<()> {
        self.stream(&r.session_key, &r.agent_id)?;
        // Run ids are unique across sessions: two inserts of one id must not meet on the
        // unique index while holding other keys.
        self.lock(&["\u{1}run", &r.run_id])?;
        self.exec(
            &format!("INSERT INTO runs ({RUN_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
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
        self.stream(&r.session_key, &r.agent_id)?;
        self.exec(
            "UPDATE runs SET ended_at = $2, outcome = $3, deadline_at = $4, event_sequence = $5 \
             WHERE run_id = $1",
            &[
                &r.run_id,
                &r.ended_at,
                &r.outcome,
                &r.deadline_at,
                &r.event_sequence,
            ],
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
        self.stream(key, agent)?;
        let id = self.map_opt(
            "INSERT INTO session_system_events (session_key, agent_id, text, context_key, \
             enqueued_at) VALUES ($1, $2, $3, $4, $5) RETURNING id",
            &[&key, &agent, &text, &context_key, &now],
            |r| col::<i64>(r, 0),
        )?;
        id.ok_or_else(|| corrupt("INSERT … RETURNING gave no row".into()))
    }

    fn fifo_delete(&mut self, key: &str, agent: &str, ids: &[i64]) -> Result<u64> {
        self.stream(key, agent)?;
        if ids.is_empty() {
            return Ok(0);
        }
        self.exec(
            "DELETE FROM session_system_events WHERE session_key = $1 AND agent_id = $2 \
             AND id = ANY($3)",
            &[&key, &agent, &ids],
        )
    }

    fn fifo_clear(&mut self, key: &str, agent: &str) -> Result<u64> {
        self.stream(key, agent)?;
        self.exec(
            "DELETE FROM session_system_events WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
        )
    }

    fn prune_age_batch(&mut self, cutoff: i64, limit: u32, now: i64) -> Result<BatchResult> {
        self.exclusive()?;
        self.stamp_and_delete(
            "SELECT sequence, session_key, agent_id FROM session_state_events \
             WHERE occurred_at < $1 ORDER BY sequence LIMIT $2",
            &[&cutoff, &i64::from(limit)],
            now,
        )
    }

    fn prune_lowest_batch(&mut self, count: u64, now: i64) -> Result<BatchResult> {
        self.exclusive()?;
        let count = count.min(i64::MAX as u64) as i64;
        self.stamp_and_delete(
            "SELECT sequence, session_key, agent_id FROM session_state_events \
             ORDER BY sequence LIMIT $1",
            &[&count],
            now,
        )
    }

    fn expire_cursors_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult> {
        self.exclusive()?;
        self.with_cache(|c| c.forget_cursors());
        let n = self.exec(
            "DELETE FROM session_watch_cursors WHERE row_id IN (SELECT row_id \
             FROM session_watch_cursors WHERE muted = 0 AND updated_at < $1 LIMIT $2)",
            &[&cutoff, &i64::from(limit)],
        )?;
        Ok(BatchResult { deleted: n })
    }

    fn expire_fifo_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult> {
        self.exclusive()?;
        let n = self.exec(
            "DELETE FROM session_system_events WHERE id IN (SELECT id FROM session_system_events \
             WHERE enqueued_at < $1 ORDER BY id LIMIT $2)",
            &[&cutoff, &i64::from(limit)],
        )?;
        Ok(BatchResult { deleted: n })
    }

    fn sweep_batch(&mut self, after_rowid: i64, limit: u32, now: i64) -> Result<SweepBatch> {
        self.exclusive()?;
        self.with_cache(|c| c.forget_cursors());
        // `last`: no pending cursor of the same watcher has a higher row id, so the watcher is
        // fully re-frozen once this batch commits; the engine wakes it then and keeps no set of
        // the watchers already seen (D55).
        let rows: Vec<(i64, String, bool)> = self.map_vec(
            "SELECT c.row_id, c.watcher_session_key, \
             NOT EXISTS (SELECT 1 FROM session_watch_cursors p \
             WHERE p.watcher_session_key = c.watcher_session_key AND p.muted = 0 \
             AND p.notified_sequence > p.last_seen_sequence AND p.row_id > c.row_id) \
             FROM session_watch_cursors c \
             WHERE c.row_id > $1 AND c.muted = 0 AND c.notified_sequence > c.last_seen_sequence \
             AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key) \
             ORDER BY c.row_id LIMIT $2",
            &[&after_rowid, &i64::from(limit)],
            |r| Ok((col(r, 0)?, col(r, 1)?, col(r, 2)?)),
        )?;
        if rows.is_empty() {
            return Ok(SweepBatch::default());
        }
        let ids: Vec<i64> = rows.iter().map(|(id, ..)| *id).collect();
        self.exec(
            "UPDATE session_watch_cursors SET notified_sequence = material_sequence, \
             updated_at = $2, notice_opened_at = COALESCE(notice_opened_at, $2) \
             WHERE row_id = ANY($1)",
            &[&ids, &now],
        )?;
        Ok(SweepBatch {
            last: ids.last().copied(),
            cursors: ids.len() as u64,
            finished_watchers: rows
                .into_iter()
                .filter(|(_, _, is_last)| *is_last)
                .map(|(_, w, _)| w)
                .collect(),
        })
    }
}

/// The 17 columns of a session row in `SESSION_COLS` order, owned for a queued write.
fn session_params(s: &SessionRow) -> Vec<Owned> {
    let goal = s.goal.as_ref();
    let up = s.upstream.as_ref();
    vec![
        Box::new(s.key.clone()),
        Box::new(s.agent_id.clone()),
        Box::new(s.session_id.clone()),
        Box::new(s.kind.clone()),
        Box::new(s.label.clone()),
        Box::new(s.parent_key.clone()),
        Box::new(s.created_via.clone()),
        Box::new(s.active_run_id.clone()),
        Box::new(goal.map(|g| g.text.clone())),
        Box::new(goal.map(|g| g.status.as_str().to_string())),
        Box::new(goal.map(|g| g.updated_at)),
        Box::new(i64::from(s.orphaned)),
        Box::new(s.created_at),
        Box::new(s.updated_at),
        Box::new(up.map(|u| u.catalog_id.clone())),
        Box::new(up.map(|u| u.host_id.clone())),
        Box::new(up.map(|u| u.thread_id.clone())),
    ]
}
