//! The console's two reads on SQLite (a page of the session table, the edges of a node set).

use super::mapping::*;
use super::sqltx::SqlTx;
use crate::Sq;
use aware_store::rows::*;
use aware_store::Result;
use rusqlite::ToSql;

impl SqlTx<'_> {
    #[expect(
        clippy::too_many_lines,
        reason = "one query built clause by clause from the filter, then run and mapped"
    )]
    pub(super) fn console_sessions_page(
        &self,
        f: &ConsoleFilter,
    ) -> Result<(Vec<ConsoleRow>, u64)> {
        let mut filter = String::from(" WHERE 1=1");
        let mut args: Vec<Box<dyn ToSql>> = Vec::new();
        if !f.agents.is_empty() {
            let marks: Vec<String> = f
                .agents
                .iter()
                .map(|a| {
                    args.push(Box::new(a.clone()));
                    format!("?{}", args.len())
                })
                .collect();
            filter.push_str(&format!(" AND agent_id IN ({})", marks.join(",")));
        }
        if let Some(kind) = &f.kind {
            args.push(Box::new(kind.clone()));
            filter.push_str(&format!(" AND kind = ?{}", args.len()));
        }
        if let Some(text) = &f.text {
            args.push(Box::new(text.to_lowercase()));
            let n = args.len();
            filter.push_str(&format!(
                " AND (instr(lower(session_key), ?{n}) > 0 OR instr(lower(coalesce(label, '')), ?{n}) > 0)"
            ));
        }
        if !f.keys.is_empty() {
            let marks: Vec<String> = f
                .keys
                .iter()
                .map(|(k, a)| {
                    args.push(Box::new(k.clone()));
                    args.push(Box::new(a.clone()));
                    format!("(?{}, ?{})", args.len() - 1, args.len())
                })
                .collect();
            // Driven by the primary key: a row-value IN over the whole table would scan it.
            filter.push_str(&format!(
                " AND rowid IN (SELECT s2.rowid FROM (VALUES {}) v \
                 JOIN sessions s2 ON s2.session_key = v.column1 AND s2.agent_id = v.column2)",
                marks.join(",")
            ));
        }
        self.live()?;
        let refs: Vec<&dyn ToSql> = args.iter().map(|b| b.as_ref()).collect();
        // Filtered by agents at most (the console's table and overview), the total is a sum of
        // per-agent counts kept by triggers (decision D51); other filters count the rows.
        let counted = f.kind.is_none() && f.text.is_none() && f.keys.is_empty();
        let total_sql = if counted {
            format!("SELECT COALESCE(SUM(n), 0) FROM aware_counts{filter} AND counter = 'sessions'")
        } else {
            format!("SELECT COUNT(*) FROM sessions{filter}")
        };
        let total: i64 = self
            .conn
            .query_row(&total_sql, refs.as_slice(), |r| r.get(0))
            .sq()?;
        // The page is chosen first (only the sort key is computed for every matching row), then
        // the shown columns are computed for the page's rows alone by index lookups.
        const HEAD: &str = "(SELECT h.last_sequence FROM session_state_heads h \
             WHERE h.session_key = sessions.session_key AND h.agent_id = sessions.agent_id)";
        const HEAD_AT: &str = "(SELECT h.updated_at FROM session_state_heads h \
             WHERE h.session_key = sessions.session_key AND h.agent_id = sessions.agent_id)";
        const AS_WATCHER: &str = "(SELECT COUNT(*) FROM session_watch_cursors c \
             WHERE c.watcher_session_key = sessions.session_key AND c.muted = 0 \
             AND c.notified_sequence > c.last_seen_sequence)";
        const AS_TARGET: &str = "(SELECT COUNT(*) FROM session_watch_cursors c \
             WHERE c.target_session_key = sessions.session_key \
             AND c.target_agent_id = sessions.agent_id AND c.muted = 0 \
             AND c.notified_sequence > c.last_seen_sequence)";
        let order = match f.sort {
            ConsoleSort::Updated => "updated_at",
            ConsoleSort::Key => "session_key",
            ConsoleSort::Agent => "agent_id",
            ConsoleSort::Kind => "kind",
            ConsoleSort::LastEvent => HEAD_AT,
            ConsoleSort::StateVersion => HEAD,
            ConsoleSort::PendingAsWatcher => AS_WATCHER,
            ConsoleSort::PendingAsTarget => AS_TARGET,
        };
        let dir = if f.descending { "DESC" } else { "ASC" };
        args.push(Box::new(i64::from(f.limit)));
        let limit_at = args.len();
        args.push(Box::new(f.offset.min(i64::MAX as u64) as i64));
        let offset_at = args.len();
        // Agents are watchers by key only (a watcher key is agent-qualified), so the count as
        // watcher matches on the key alone, as `pending_by_watcher` does.
        let sql = format!(
            "SELECT {SESSION_COLS}, {HEAD}, \
             (SELECT e.occurred_at FROM session_state_events e WHERE e.sequence = {HEAD}), \
             (SELECT e.kind FROM session_state_events e WHERE e.sequence = {HEAD}), \
             {AS_WATCHER}, {AS_TARGET}, \
             (SELECT MAX(e.occurred_at) FROM session_state_events e \
              WHERE e.session_key = sessions.session_key AND e.agent_id = sessions.agent_id \
              AND e.actor_type = 'human'), \
             (SELECT l.last_scanned_at FROM session_upstream_links l \
              WHERE l.session_key = sessions.session_key AND l.agent_id = sessions.agent_id) \
             FROM (SELECT rowid AS rid, {order} AS sort_key FROM sessions{filter} \
                   ORDER BY sort_key {dir}, session_key, agent_id \
                   LIMIT ?{limit_at} OFFSET ?{offset_at}) page \
             JOIN sessions ON sessions.rowid = page.rid \
             ORDER BY page.sort_key {dir}, session_key, agent_id"
        );
        let refs: Vec<&dyn ToSql> = args.iter().map(|b| b.as_ref()).collect();
        let mut stmt = self.conn.prepare(&sql).sq()?;
        let rows = stmt
            .query_map(refs.as_slice(), |r| {
                Ok(ConsoleRow {
                    session: session_from_row(r)?,
                    state_version: r.get::<_, Option<i64>>(17)?.unwrap_or(0),
                    last_event_at: r.get(18)?,
                    last_event_kind: r.get(19)?,
                    pending_as_watcher: r.get::<_, i64>(20)?.max(0) as u64,
                    pending_as_target: r.get::<_, i64>(21)?.max(0) as u64,
                    last_human_at: r.get(22)?,
                    link_last_scanned_at: r.get(23)?,
                })
            })
            .sq()?;
        let rows = rows.collect::<rusqlite::Result<Vec<_>>>().sq()?;
        Ok((rows, total.max(0) as u64))
    }

    pub(super) fn console_edges_of(&self, watchers: &[String]) -> Result<Vec<CursorRow>> {
        if watchers.is_empty() {
            return Ok(Vec::new());
        }
        let marks: Vec<String> = (1..=watchers.len()).map(|i| format!("?{i}")).collect();
        let args: Vec<&dyn ToSql> = watchers.iter().map(|w| w as &dyn ToSql).collect();
        // Plain SQL (an IN list on the primary key's leading column) that another backend can
        // run with its own placeholders. Filtering the targets here as well (a row-value IN
        // over the node set) was slower: SQLite then probes the whole primary key once per
        // (watcher, target) pair, 90,000 probes at 300 nodes.
        let sql = format!(
            "SELECT {CURSOR_COLS} FROM session_watch_cursors \
             WHERE watcher_session_key IN ({}) \
             ORDER BY watcher_session_key, target_session_key, target_agent_id",
            marks.join(", ")
        );
        self.live()?;
        // Not the statement cache: the text differs with the number of watchers, and a few
        // hundred variants would evict the hot statements.
        let mut stmt = self.conn.prepare(&sql).sq()?;
        let rows = stmt.query_map(args.as_slice(), cursor_from_row).sq()?;
        rows.collect::<rusqlite::Result<Vec<_>>>().sq()
    }
}
