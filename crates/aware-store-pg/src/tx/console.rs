//! The console's session page on PostgreSQL: a filter and sort built per request, the page and
//! the total that matched in one round trip.

use super::mapping::*;
use super::PgTx;
use crate::conn::{col, Param};
use crate::schema::SESSION_COUNTS_REL;
use aware_store::{ConsoleFilter, ConsoleRow, ConsoleSort, Result};

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

impl PgTx<'_> {
    /// The console's filtered, sorted page of sessions and the total that matched.
    pub(super) fn console_page(&self, f: &ConsoleFilter) -> Result<(Vec<ConsoleRow>, u64)> {
        let mut filter = String::from(" WHERE TRUE");
        let mut args: Vec<Arg> = Vec::new();
        in_list(&mut filter, "agent_id", &f.agents, &mut args);
        if let Some(kind) = &f.kind {
            let m = push(&mut args, Arg::Text(kind.clone()));
            filter.push_str(&format!(" AND kind = {m}"));
        }
        if let Some(text) = &f.text {
            let m = push(&mut args, Arg::Text(text.to_lowercase()));
            filter.push_str(&format!(
                " AND (strpos(lower(session_key), {m}) > 0 \
                 OR strpos(lower(coalesce(label, '')), {m}) > 0)"
            ));
        }
        if !f.keys.is_empty() {
            let pairs: Vec<String> = f
                .keys
                .iter()
                .map(|(k, a)| {
                    let k = push(&mut args, Arg::Text(k.clone()));
                    let a = push(&mut args, Arg::Text(a.clone()));
                    format!("({k}, {a})")
                })
                .collect();
            filter.push_str(&format!(
                " AND (session_key, agent_id) IN (VALUES {})",
                pairs.join(",")
            ));
        }
        // Filtered by agents at most (the console's table and overview), the total is a sum of
        // the per-agent counts kept by triggers (decision D54); other filters count the rows.
        let kept = f.kind.is_none() && f.text.is_none() && f.keys.is_empty();
        let total = {
            let params: Vec<Param<'_>> = args.iter().map(Arg::param).collect();
            let sql = if kept {
                format!("SELECT COALESCE(SUM(n), 0)::BIGINT FROM {SESSION_COUNTS_REL} c{filter}")
            } else {
                format!("SELECT COUNT(*) FROM sessions{filter}")
            };
            self.count(&sql, &params)?
        };
        let (order, dir) = order_by(f);
        let limit = push(&mut args, Arg::Int(i64::from(f.limit)));
        let offset = push(&mut args, Arg::Int(f.offset.min(i64::MAX as u64) as i64));
        let sql = format!(
            "SELECT {SESSION_COLS_Q}, {HEAD}, \
             (SELECT e.occurred_at FROM session_state_events e WHERE e.sequence = {HEAD}), \
             (SELECT e.kind FROM session_state_events e WHERE e.sequence = {HEAD}), \
             {AS_WATCHER}, {AS_TARGET}, \
             (SELECT MAX(e.occurred_at) FROM session_state_events e \
              WHERE e.session_key = sessions.session_key AND e.agent_id = sessions.agent_id \
              AND e.actor_type = 'human'), \
             (SELECT l.last_scanned_at FROM session_upstream_links l \
              WHERE l.session_key = sessions.session_key AND l.agent_id = sessions.agent_id) \
             FROM (SELECT session_key AS pk, agent_id AS pa, {order} AS sort_key \
                   FROM sessions{filter} \
                   ORDER BY sort_key {dir}, session_key, agent_id \
                   LIMIT {limit} OFFSET {offset}) page \
             JOIN sessions ON sessions.session_key = page.pk AND sessions.agent_id = page.pa \
             ORDER BY page.sort_key {dir}, sessions.session_key, sessions.agent_id"
        );
        let params: Vec<Param<'_>> = args.iter().map(Arg::param).collect();
        let rows = self.map_vec(&sql, &params, |r| {
            Ok(ConsoleRow {
                session: session_from_row(r)?,
                state_version: col::<Option<i64>>(r, 17)?.unwrap_or(0),
                last_event_at: col(r, 18)?,
                last_event_kind: col(r, 19)?,
                pending_as_watcher: col::<i64>(r, 20)?.max(0) as u64,
                pending_as_target: col::<i64>(r, 21)?.max(0) as u64,
                last_human_at: col(r, 22)?,
                link_last_scanned_at: col(r, 23)?,
            })
        })?;
        Ok((rows, total))
    }
}

/// The sort key of the console's page and its direction.
fn order_by(f: &ConsoleFilter) -> (&'static str, &'static str) {
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
    // SQLite puts NULLs first ascending and last descending; PostgreSQL the other way. A
    // column that is never NULL keeps PostgreSQL's default, which the index on
    // `updated_at` (DESC, so NULLS FIRST) matches: with `NULLS LAST` spelled out the
    // default page sorted every matching row (decision D54).
    let never_null = matches!(
        f.sort,
        ConsoleSort::Updated | ConsoleSort::Key | ConsoleSort::Agent | ConsoleSort::Kind
    );
    let dir = match (f.descending, never_null) {
        (true, true) => "DESC",
        (false, true) => "ASC",
        (true, false) => "DESC NULLS LAST",
        (false, false) => "ASC NULLS FIRST",
    };
    (order, dir)
}
