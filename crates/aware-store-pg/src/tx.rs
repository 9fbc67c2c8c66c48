//! The row primitives of [`ReadTx`]/[`WriteTx`] in PostgreSQL, on one connection inside the
//! writer's transaction or a reader's snapshot.

use crate::conn::{col, Conn, Param};
use crate::Hook;
use aware_core::event::compact_payload;
use aware_core::{ActorType, CompactEvent, CursorState, EventKind, Origin, StoredEvent};
use aware_store::{
    BatchResult, ConsoleFilter, ConsoleRow, ConsoleSort, CursorRow, FaultPlan, GoalRow, HeadRow,
    LinkRow, NewEvent, ReadTx, Result, RunRow, SessionFilter, SessionRow, StoreError, StoreGauges,
    SystemEventRow, TurnRow, UpstreamSource, WriteTx,
};
use postgres::Row;
use std::cell::RefCell;

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

    fn exec(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        self.conn.borrow_mut().execute(sql, params)
    }

    fn count(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        let n: i64 = self.map_opt(sql, params, |r| col(r, 0))?.unwrap_or(0);
        Ok(n.max(0) as u64)
    }
}

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

fn parse_payload(
    text: Option<String>,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>> {
    match text {
        None => Ok(None),
        Some(text) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
            _ => Err(corrupt(format!("payload_json is not an object: {text}"))),
        },
    }
}

fn kind(s: &str) -> Result<EventKind> {
    EventKind::parse(s).ok_or_else(|| corrupt(format!("unknown kind {s:?}")))
}

fn actor(s: &str) -> Result<ActorType> {
    ActorType::parse(s).ok_or_else(|| corrupt(format!("unknown actor type {s:?}")))
}

const EVENT_COLS: &str = "sequence, dedupe_key, session_key, session_id, agent_id, kind, \
     actor_type, actor_id, run_id, occurred_at, summary, payload_json";

fn event_from_row(row: &Row) -> Result<StoredEvent> {
    Ok(StoredEvent {
        sequence: col(row, 0)?,
        dedupe_key: col(row, 1)?,
        session_key: col(row, 2)?,
        session_id: col(row, 3)?,
        agent_id: col(row, 4)?,
        kind: kind(col(row, 5)?)?,
        actor_type: actor(col(row, 6)?)?,
        actor_id: col(row, 7)?,
        run_id: col(row, 8)?,
        occurred_at: col(row, 9)?,
        summary: col(row, 10)?,
        payload: parse_payload(col(row, 11)?)?,
    })
}

/// A page row of `state_page` (columns 1..=8) as the compact view.
pub(crate) fn compact_from_row(row: &Row) -> Result<CompactEvent> {
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let payload = parse_payload(col(row, 8)?)?;
    Ok(CompactEvent {
        sequence: col(row, 1)?,
        kind: kind(col(row, 2)?)?,
        actor_type: actor(col(row, 3)?)?,
        actor_id: non_empty(col(row, 4)?),
        run_id: non_empty(col(row, 5)?),
        occurred_at: col(row, 6)?,
        summary: col(row, 7)?,
        payload: compact_payload(payload.as_ref()),
    })
}

pub(crate) const CURSOR_COLS: &str = "watcher_session_key, target_session_key, target_agent_id, \
     last_seen_sequence, notified_sequence, material_sequence, muted, origin, notice_opened_at, \
     created_at, updated_at";

pub(crate) fn cursor_from_row(row: &Row) -> Result<CursorRow> {
    let origin: &str = col(row, 7)?;
    Ok(CursorRow {
        watcher: col(row, 0)?,
        target_key: col(row, 1)?,
        target_agent: col(row, 2)?,
        state: CursorState {
            last_seen: col(row, 3)?,
            notified: col(row, 4)?,
            material: col(row, 5)?,
            muted: col::<i64>(row, 6)? != 0,
            origin: Origin::parse(origin)
                .ok_or_else(|| corrupt(format!("unknown origin {origin:?}")))?,
            notice_opened_at: col(row, 8)?,
            updated_at: col(row, 10)?,
        },
        created_at: col(row, 9)?,
    })
}

const SESSION_COLS: &str = "session_key, agent_id, session_id, kind, label, parent_session_key, \
     created_via, active_run_id, goal_text, goal_status, goal_updated_at, orphaned, created_at, \
     updated_at, upstream_catalog, upstream_host, upstream_thread";

/// The same columns qualified by the table name, for statements that join.
const SESSION_COLS_Q: &str = "sessions.session_key, sessions.agent_id, sessions.session_id, \
     sessions.kind, sessions.label, sessions.parent_session_key, sessions.created_via, \
     sessions.active_run_id, sessions.goal_text, sessions.goal_status, sessions.goal_updated_at, \
     sessions.orphaned, sessions.created_at, sessions.updated_at, sessions.upstream_catalog, \
     sessions.upstream_host, sessions.upstream_thread";

fn session_from_row(row: &Row) -> Result<SessionRow> {
    let goal_text: Option<String> = col(row, 8)?;
    let goal = match goal_text {
        Some(text) => Some(GoalRow {
            text,
            status: col::<Option<String>>(row, 9)?.unwrap_or_else(|| "active".into()),
            updated_at: col::<Option<i64>>(row, 10)?.unwrap_or(0),
        }),
        None => None,
    };
    Ok(SessionRow {
        key: col(row, 0)?,
        agent_id: col(row, 1)?,
        session_id: col(row, 2)?,
        kind: col(row, 3)?,
        label: col(row, 4)?,
        parent_key: col(row, 5)?,
        created_via: col(row, 6)?,
        active_run_id: col(row, 7)?,
        goal,
        orphaned: col::<i64>(row, 11)? != 0,
        created_at: col(row, 12)?,
        updated_at: col(row, 13)?,
        upstream: match (
            col::<Option<String>>(row, 14)?,
            col::<Option<String>>(row, 15)?,
            col::<Option<String>>(row, 16)?,
        ) {
            (Some(catalog_id), Some(host_id), Some(thread_id)) => Some(UpstreamSource {
                catalog_id,
                host_id,
                thread_id,
            }),
            _ => None,
        },
    })
}

const LINK_COLS: &str = "session_key, agent_id, catalog_id, host_id, thread_id, upstream_kind, \
     upstream_ref_json, last_marker_json, last_scanned_at, created_at, updated_at";

fn link_from_row(row: &Row) -> Result<LinkRow> {
    Ok(LinkRow {
        session_key: col(row, 0)?,
        agent_id: col(row, 1)?,
        catalog_id: col(row, 2)?,
        host_id: col(row, 3)?,
        thread_id: col(row, 4)?,
        upstream_kind: col(row, 5)?,
        upstream_ref_json: col(row, 6)?,
        last_marker_json: col(row, 7)?,
        last_scanned_at: col(row, 8)?,
        created_at: col(row, 9)?,
        updated_at: col(row, 10)?,
    })
}

const TURN_COLS: &str = "id, idx, role, text, at, actor_type, actor_id, provenance_json, channel, \
     run_id, origin, upstream_text, idempotency_key";

fn turn_from_row(row: &Row) -> Result<TurnRow> {
    Ok(TurnRow {
        id: col(row, 0)?,
        index: col(row, 1)?,
        role: col(row, 2)?,
        text: col(row, 3)?,
        at: col(row, 4)?,
        actor_type: actor(col(row, 5)?)?,
        actor_id: col(row, 6)?,
        provenance_json: col(row, 7)?,
        channel: col(row, 8)?,
        run_id: col(row, 9)?,
        origin: col(row, 10)?,
        upstream_text: col(row, 11)?,
        idempotency_key: col(row, 12)?,
    })
}

const RUN_COLS: &str = "run_id, session_key, agent_id, session_id, started_at, ended_at, outcome, \
     deadline_at, event_sequence";

fn run_from_row(row: &Row) -> Result<RunRow> {
    Ok(RunRow {
        run_id: col(row, 0)?,
        session_key: col(row, 1)?,
        agent_id: col(row, 2)?,
        session_id: col(row, 3)?,
        started_at: col(row, 4)?,
        ended_at: col(row, 5)?,
        outcome: col(row, 6)?,
        deadline_at: col(row, 7)?,
        event_sequence: col(row, 8)?,
    })
}

fn system_event_from_row(r: &Row) -> Result<SystemEventRow> {
    Ok(SystemEventRow {
        id: col(r, 0)?,
        text: col(r, 1)?,
        context_key: col(r, 2)?,
        enqueued_at: col(r, 3)?,
    })
}

/// Owned parameter values of statements built from a filter.
enum Arg {
    Text(String),
    Int(i64),
}

impl Arg {
    fn param(&self) -> Param<'_> {
        match self {
            Arg::Text(s) => s,
            Arg::Int(i) => i,
        }
    }
}

fn push(args: &mut Vec<Arg>, a: Arg) -> String {
    args.push(a);
    format!("${}", args.len())
}

fn in_list(sql: &mut String, column: &str, values: &[String], args: &mut Vec<Arg>) {
    if values.is_empty() {
        return;
    }
    let marks: Vec<String> = values
        .iter()
        .map(|v| push(args, Arg::Text(v.clone())))
        .collect();
    sql.push_str(&format!(" AND {column} IN ({})", marks.join(",")));
}

impl ReadTx for PgTx<'_> {
    fn session(&self, key: &str, agent: &str) -> Result<Option<SessionRow>> {
        self.map_opt(
            &format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE session_key = $1 AND agent_id = $2"
            ),
            &[&key, &agent],
            session_from_row,
        )
    }

    fn session_exists(&self, key: &str, agent: &str) -> Result<bool> {
        Ok(self
            .map_opt(
                "SELECT 1 FROM sessions WHERE session_key = $1 AND agent_id = $2",
                &[&key, &agent],
                |_| Ok(()),
            )?
            .is_some())
    }

    fn session_by_label(&self, agent: &str, label: &str) -> Result<Option<SessionRow>> {
        self.map_opt(
            &format!("SELECT {SESSION_COLS} FROM sessions WHERE agent_id = $1 AND label = $2"),
            &[&agent, &label],
            session_from_row,
        )
    }

    fn list_sessions(&self, f: &SessionFilter) -> Result<Vec<SessionRow>> {
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
        let total = {
            let params: Vec<Param<'_>> = args.iter().map(Arg::param).collect();
            self.count(&format!("SELECT COUNT(*) FROM sessions{filter}"), &params)?
        };
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
        // SQLite puts NULLs first ascending and last descending; PostgreSQL the other way.
        let dir = if f.descending {
            "DESC NULLS LAST"
        } else {
            "ASC NULLS FIRST"
        };
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

    fn head(&self, key: &str, agent: &str) -> Result<Option<HeadRow>> {
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
        self.count("SELECT COUNT(*) FROM session_state_events", &[])
    }

    fn cursor(
        &self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<Option<CursorRow>> {
        self.map_opt(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 AND target_session_key = $2 AND target_agent_id = $3"
            ),
            &[&watcher, &target_key, &target_agent],
            cursor_from_row,
        )
    }

    fn cursors_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>> {
        self.map_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 ORDER BY target_session_key, target_agent_id"
            ),
            &[&watcher],
            cursor_from_row,
        )
    }

    fn console_cursors_held_by(&self, watchers: &[String]) -> Result<Vec<CursorRow>> {
        if watchers.is_empty() {
            return Ok(Vec::new());
        }
        // One array parameter instead of an IN list: one statement text whatever the set size.
        self.map_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors \
                 WHERE watcher_session_key = ANY($1) \
                 ORDER BY watcher_session_key, target_session_key, target_agent_id"
            ),
            &[&watchers],
            cursor_from_row,
        )
    }

    fn cursors_by_target(&self, target_key: &str, target_agent: &str) -> Result<Vec<CursorRow>> {
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
        self.map_vec(
            "SELECT watcher_session_key FROM session_watch_cursors WHERE target_session_key = $1 \
             AND target_agent_id = $2 AND muted = 0 ORDER BY watcher_session_key",
            &[&target_key, &target_agent],
            |r| col(r, 0),
        )
    }

    fn pending_by_watcher(&self, watcher: &str) -> Result<Vec<CursorRow>> {
        self.map_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 AND muted = 0 AND notified_sequence > last_seen_sequence \
                 ORDER BY notified_sequence, target_session_key, target_agent_id"
            ),
            &[&watcher],
            cursor_from_row,
        )
    }

    fn watchers_with_pending(&self) -> Result<Vec<String>> {
        self.map_vec(
            "SELECT DISTINCT watcher_session_key FROM session_watch_cursors WHERE muted = 0 \
             AND notified_sequence > last_seen_sequence ORDER BY watcher_session_key",
            &[],
            |r| col(r, 0),
        )
    }

    fn count_pending(&self) -> Result<u64> {
        self.count(
            "SELECT COUNT(*) FROM session_watch_cursors WHERE muted = 0 \
             AND notified_sequence > last_seen_sequence",
            &[],
        )
    }

    fn gauges(&self) -> Result<StoreGauges> {
        Ok(StoreGauges {
            sessions: self.count("SELECT COUNT(*) FROM sessions", &[])?,
            watchers: self.count(
                "SELECT COUNT(DISTINCT watcher_session_key) FROM session_watch_cursors",
                &[],
            )?,
            pending: self.count_pending()?,
        })
    }

    fn system_events(&self, key: &str, agent: &str) -> Result<Vec<SystemEventRow>> {
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
        self.map_vec(
            "SELECT id, text, context_key, enqueued_at FROM session_system_events \
             WHERE session_key = $1 AND agent_id = $2 ORDER BY id LIMIT $3",
            &[&key, &agent, &i64::from(limit)],
            system_event_from_row,
        )
    }

    fn pending_by_watcher_limit(&self, watcher: &str, limit: u32) -> Result<Vec<CursorRow>> {
        self.map_vec(
            &format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors WHERE watcher_session_key = $1 \
                 AND muted = 0 AND notified_sequence > last_seen_sequence \
                 ORDER BY notified_sequence, target_session_key, target_agent_id LIMIT $2"
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
        // The budget is applied in SQL (a running sum of the text sizes), so rows past it are
        // never sent; the first row always comes.
        // Only rows whose predecessors fit are sent (the page and the one row that overflows),
        // and the second row always, to tell whether an oversized first turn was alone.
        let budget = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        let rows = self.rows(
            &format!(
                "SELECT {TURN_COLS}, used FROM (SELECT {TURN_COLS}, \
                 SUM(size) OVER (ORDER BY idx)::BIGINT AS used, size, \
                 row_number() OVER (ORDER BY idx) AS rn FROM (SELECT {TURN_COLS}, \
                 octet_length(text) + COALESCE(octet_length(upstream_text), 0) AS size \
                 FROM turns WHERE session_key = $1 AND agent_id = $2 AND idx > $3 \
                 ORDER BY idx LIMIT $4) t) w WHERE used - size <= $5 OR rn <= 2 ORDER BY idx"
            ),
            &[
                &key,
                &agent,
                &after.unwrap_or(-1),
                &i64::from(limit),
                &budget,
            ],
        )?;
        let mut out = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let used: i64 = col(row, 13)?;
            if i > 0 && used.max(0) as u64 > max_bytes as u64 {
                return Ok((out, true));
            }
            out.push(turn_from_row(row)?);
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
        const CUT_COLS: &str = "id, idx, role, substr(text, 1, $4), at, actor_type, actor_id, \
             provenance_json, channel, run_id, origin, substr(upstream_text, 1, $4), \
             idempotency_key";
        // `substr` takes an INTEGER length.
        let cut = i32::try_from(u64::from(max_chars) + 1).unwrap_or(i32::MAX);
        let filter = "session_key = $1 AND agent_id = $2 AND ($3 OR role <> 'tool')";
        let limit = i64::from(limit);
        match from {
            Some(from) => self.map_vec(
                &format!(
                    "SELECT {CUT_COLS} FROM turns WHERE {filter} AND idx >= $5 ORDER BY idx LIMIT $6"
                ),
                &[&key, &agent, &include_tools, &cut, &from, &limit],
                turn_from_row,
            ),
            None => {
                let mut rows = self.map_vec(
                    &format!("SELECT {CUT_COLS} FROM turns WHERE {filter} ORDER BY idx DESC LIMIT $5"),
                    &[&key, &agent, &include_tools, &cut, &limit],
                    turn_from_row,
                )?;
                rows.reverse();
                Ok(rows)
            }
        }
    }

    fn turns(
        &self,
        key: &str,
        agent: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TurnRow>> {
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
        Ok(self
            .map_opt(
                "SELECT COALESCE(MAX(idx) + 1, 0)::BIGINT FROM turns \
                 WHERE session_key = $1 AND agent_id = $2",
                &[&key, &agent],
                |r| col(r, 0),
            )?
            .unwrap_or(0))
    }

    fn turn_by_idempotency(
        &self,
        key: &str,
        agent: &str,
        idempotency_key: &str,
    ) -> Result<Option<TurnRow>> {
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
        self.map_opt(
            &format!("SELECT {RUN_COLS} FROM runs WHERE run_id = $1"),
            &[&run_id],
            run_from_row,
        )
    }

    fn runs_of(&self, key: &str, agent: &str, limit: u32) -> Result<Vec<RunRow>> {
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
        Ok(self
            .map_opt(
                "SELECT MIN(deadline_at) FROM runs WHERE ended_at IS NULL AND deadline_at IS NOT NULL",
                &[],
                |r| col::<Option<i64>>(r, 0),
            )?
            .flatten())
    }
}

/// Quotes a savepoint name as an identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl WriteTx for PgTx<'_> {
    fn savepoint(&mut self, name: &str) -> Result<()> {
        self.conn
            .get_mut()
            .batch(&format!("SAVEPOINT {}", ident(name)))
    }
    fn release(&mut self, name: &str) -> Result<()> {
        self.conn
            .get_mut()
            .batch(&format!("RELEASE {}", ident(name)))
    }
    fn rollback_to(&mut self, name: &str) -> Result<()> {
        let n = ident(name);
        self.conn
            .get_mut()
            .batch(&format!("ROLLBACK TO {n}; RELEASE {n}"))
    }
    fn after_commit(&mut self, hook: Box<dyn FnOnce() + Send>) {
        self.hooks.push(hook);
    }

    fn insert_event(&mut self, e: &NewEvent) -> Result<i64> {
        if self.faults.append_fails(&e.session_key) {
            return Err(StoreError::InjectedFault("signal-log appends fail"));
        }
        let payload = e
            .payload
            .as_ref()
            .map(|p| serde_json::Value::Object(p.clone()).to_string());
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
        self.exec(
            "INSERT INTO session_state_heads (session_key, agent_id, last_sequence, \
             pruned_max_sequence, updated_at) VALUES ($1, $2, $3, 0, $4) \
             ON CONFLICT (session_key, agent_id) DO UPDATE SET last_sequence = \
             GREATEST(session_state_heads.last_sequence, EXCLUDED.last_sequence), \
             updated_at = EXCLUDED.updated_at",
            &[&key, &agent, &sequence, &now],
        )?;
        Ok(())
    }

    fn put_cursor(&mut self, c: &CursorRow) -> Result<()> {
        crate::debug_check(&c.state);
        let s = &c.state;
        self.exec(
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

    fn delete_cursor(
        &mut self,
        watcher: &str,
        target_key: &str,
        target_agent: &str,
    ) -> Result<bool> {
        Ok(self.exec(
            "DELETE FROM session_watch_cursors WHERE watcher_session_key = $1 \
             AND target_session_key = $2 AND target_agent_id = $3",
            &[&watcher, &target_key, &target_agent],
        )? > 0)
    }

    fn delete_cursors_of_watcher(&mut self, watcher: &str) -> Result<u64> {
        self.exec(
            "DELETE FROM session_watch_cursors WHERE watcher_session_key = $1",
            &[&watcher],
        )
    }

    fn delete_cursors_of_target(&mut self, target_key: &str, target_agent: &str) -> Result<u64> {
        self.exec(
            "DELETE FROM session_watch_cursors WHERE target_session_key = $1 \
             AND target_agent_id = $2",
            &[&target_key, &target_agent],
        )
    }

    fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        let goal = s.goal.as_ref();
        let up = s.upstream.as_ref();
        self.exec(
            &format!(
                "INSERT INTO sessions ({SESSION_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
                 $9, $10, $11, $12, $13, $14, $15, $16, $17)"
            ),
            &[
                &s.key,
                &s.agent_id,
                &s.session_id,
                &s.kind,
                &s.label,
                &s.parent_key,
                &s.created_via,
                &s.active_run_id,
                &goal.map(|g| g.text.as_str()),
                &goal.map(|g| g.status.as_str()),
                &goal.map(|g| g.updated_at),
                &i64::from(s.orphaned),
                &s.created_at,
                &s.updated_at,
                &up.map(|u| u.catalog_id.as_str()),
                &up.map(|u| u.host_id.as_str()),
                &up.map(|u| u.thread_id.as_str()),
            ],
        )?;
        Ok(())
    }

    fn update_session(&mut self, s: &SessionRow) -> Result<()> {
        let goal = s.goal.as_ref();
        let up = s.upstream.as_ref();
        self.exec(
            "UPDATE sessions SET session_id = $3, kind = $4, label = $5, \
             parent_session_key = $6, created_via = $7, active_run_id = $8, goal_text = $9, \
             goal_status = $10, goal_updated_at = $11, orphaned = $12, created_at = $13, \
             updated_at = $14, upstream_catalog = $15, upstream_host = $16, \
             upstream_thread = $17 WHERE session_key = $1 AND agent_id = $2",
            &[
                &s.key,
                &s.agent_id,
                &s.session_id,
                &s.kind,
                &s.label,
                &s.parent_key,
                &s.created_via,
                &s.active_run_id,
                &goal.map(|g| g.text.as_str()),
                &goal.map(|g| g.status.as_str()),
                &goal.map(|g| g.updated_at),
                &i64::from(s.orphaned),
                &s.created_at,
                &s.updated_at,
                &up.map(|u| u.catalog_id.as_str()),
                &up.map(|u| u.host_id.as_str()),
                &up.map(|u| u.thread_id.as_str()),
            ],
        )?;
        Ok(())
    }

    fn delete_session(&mut self, key: &str, agent: &str) -> Result<bool> {
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
        Ok(existed)
    }

    fn mark_children_orphaned(&mut self, parent_key: &str, agent: Option<&str>) -> Result<u64> {
        self.exec(
            "UPDATE sessions SET orphaned = 1 WHERE parent_session_key = $1 \
             AND ($2::TEXT IS NULL OR agent_id = $2)",
            &[&parent_key, &agent],
        )
    }

    fn put_link(&mut self, l: &LinkRow) -> Result<()> {
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
        Ok(self.exec(
            "DELETE FROM session_upstream_links WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
        )? > 0)
    }

    fn insert_turn(&mut self, key: &str, agent: &str, t: &TurnRow) -> Result<()> {
        self.exec(
            "INSERT INTO turns (session_key, agent_id, idx, id, role, text, at, actor_type, \
             actor_id, provenance_json, channel, run_id, origin, upstream_text, idempotency_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
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
        self.exec(
            "DELETE FROM turns WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
        )
    }

    fn insert_run(&mut self, r: &RunRow) -> Result<()> {
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
        let id = self.map_opt(
            "INSERT INTO session_system_events (session_key, agent_id, text, context_key, \
             enqueued_at) VALUES ($1, $2, $3, $4, $5) RETURNING id",
            &[&key, &agent, &text, &context_key, &now],
            |r| col::<i64>(r, 0),
        )?;
        id.ok_or_else(|| corrupt("INSERT … RETURNING gave no row".into()))
    }

    fn fifo_delete(&mut self, key: &str, agent: &str, ids: &[i64]) -> Result<u64> {
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
        self.exec(
            "DELETE FROM session_system_events WHERE session_key = $1 AND agent_id = $2",
            &[&key, &agent],
        )
    }

    fn prune_age_batch(&mut self, cutoff: i64, limit: u32, now: i64) -> Result<BatchResult> {
        self.stamp_and_delete(
            "SELECT sequence, session_key, agent_id FROM session_state_events \
             WHERE occurred_at < $1 ORDER BY sequence LIMIT $2",
            &[&cutoff, &i64::from(limit)],
            now,
        )
    }

    fn prune_lowest_batch(&mut self, count: u64, now: i64) -> Result<BatchResult> {
        let count = count.min(i64::MAX as u64) as i64;
        self.stamp_and_delete(
            "SELECT sequence, session_key, agent_id FROM session_state_events \
             ORDER BY sequence LIMIT $1",
            &[&count],
            now,
        )
    }

    fn expire_cursors_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult> {
        let n = self.exec(
            "DELETE FROM session_watch_cursors WHERE row_id IN (SELECT row_id \
             FROM session_watch_cursors WHERE muted = 0 AND updated_at < $1 LIMIT $2)",
            &[&cutoff, &i64::from(limit)],
        )?;
        Ok(BatchResult { deleted: n })
    }

    fn expire_fifo_batch(&mut self, cutoff: i64, limit: u32) -> Result<BatchResult> {
        let n = self.exec(
            "DELETE FROM session_system_events WHERE id IN (SELECT id FROM session_system_events \
             WHERE enqueued_at < $1 ORDER BY id LIMIT $2)",
            &[&cutoff, &i64::from(limit)],
        )?;
        Ok(BatchResult { deleted: n })
    }

    fn sweep_batch(
        &mut self,
        after_rowid: i64,
        limit: u32,
        now: i64,
    ) -> Result<(Option<i64>, Vec<String>)> {
        let rows: Vec<(i64, String)> = self.map_vec(
            "SELECT c.row_id, c.watcher_session_key FROM session_watch_cursors c \
             WHERE c.row_id > $1 AND c.muted = 0 AND c.notified_sequence > c.last_seen_sequence \
             AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key) \
             ORDER BY c.row_id LIMIT $2",
            &[&after_rowid, &i64::from(limit)],
            |r| Ok((col(r, 0)?, col(r, 1)?)),
        )?;
        if rows.is_empty() {
            return Ok((None, Vec::new()));
        }
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        self.exec(
            "UPDATE session_watch_cursors SET notified_sequence = material_sequence, \
             updated_at = $2, notice_opened_at = COALESCE(notice_opened_at, $2) \
             WHERE row_id = ANY($1)",
            &[&ids, &now],
        )?;
        let last = ids.last().copied();
        Ok((last, rows.into_iter().map(|(_, w)| w).collect()))
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
