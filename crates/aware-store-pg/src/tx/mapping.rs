//! PostgreSQL rows to and from the store's row types, and statement arguments built from filters.

use crate::conn::{col, Param};
use aware_core::event::compact_payload;
use aware_core::{ActorType, CompactEvent, CursorState, EventKind, Origin, StoredEvent};
use aware_store::{
    CursorRow, GoalRow, LinkRow, Result, RunRow, SessionRow, StoreError, SystemEventRow, TurnRow,
    UpstreamSource,
};
use postgres::Row;

pub(super) fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

pub(super) fn parse_payload(
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

pub(super) fn kind(s: &str) -> Result<EventKind> {
    EventKind::parse(s).ok_or_else(|| corrupt(format!("unknown kind {s:?}")))
}

pub(super) fn actor(s: &str) -> Result<ActorType> {
    ActorType::parse(s).ok_or_else(|| corrupt(format!("unknown actor type {s:?}")))
}

pub(super) const EVENT_COLS: &str =
    "sequence, dedupe_key, session_key, session_id, agent_id, kind, \
     actor_type, actor_id, run_id, occurred_at, summary, payload_json";

pub(super) fn event_from_row(row: &Row) -> Result<StoredEvent> {
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

pub(super) const SESSION_COLS: &str =
    "session_key, agent_id, session_id, kind, label, parent_session_key, \
     created_via, active_run_id, goal_text, goal_status, goal_updated_at, orphaned, created_at, \
     updated_at, upstream_catalog, upstream_host, upstream_thread";

/// The same columns qualified by the table name, for statements that join.
pub(super) const SESSION_COLS_Q: &str =
    "sessions.session_key, sessions.agent_id, sessions.session_id, \
     sessions.kind, sessions.label, sessions.parent_session_key, sessions.created_via, \
     sessions.active_run_id, sessions.goal_text, sessions.goal_status, sessions.goal_updated_at, \
     sessions.orphaned, sessions.created_at, sessions.updated_at, sessions.upstream_catalog, \
     sessions.upstream_host, sessions.upstream_thread";

pub(super) fn session_from_row(row: &Row) -> Result<SessionRow> {
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

pub(super) const LINK_COLS: &str =
    "session_key, agent_id, catalog_id, host_id, thread_id, upstream_kind, \
     upstream_ref_json, last_marker_json, last_scanned_at, created_at, updated_at";

pub(super) fn link_from_row(row: &Row) -> Result<LinkRow> {
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

pub(super) const TURN_COLS: &str =
    "id, idx, role, text, at, actor_type, actor_id, provenance_json, channel, \
     run_id, origin, upstream_text, idempotency_key";

pub(super) fn turn_from_row(row: &Row) -> Result<TurnRow> {
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

pub(super) const RUN_COLS: &str =
    "run_id, session_key, agent_id, session_id, started_at, ended_at, outcome, \
     deadline_at, event_sequence";

pub(super) fn run_from_row(row: &Row) -> Result<RunRow> {
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

pub(super) fn system_event_from_row(r: &Row) -> Result<SystemEventRow> {
    Ok(SystemEventRow {
        id: col(r, 0)?,
        text: col(r, 1)?,
        context_key: col(r, 2)?,
        enqueued_at: col(r, 3)?,
    })
}

/// Owned parameter values of statements built from a filter.
pub(super) enum Arg {
    Text(String),
    Int(i64),
}

impl Arg {
    pub(super) fn param(&self) -> Param<'_> {
        match self {
            Arg::Text(s) => s,
            Arg::Int(i) => i,
        }
    }
}

pub(super) fn push(args: &mut Vec<Arg>, a: Arg) -> String {
    args.push(a);
    format!("${}", args.len())
}

pub(super) fn in_list(sql: &mut String, column: &str, values: &[String], args: &mut Vec<Arg>) {
    if values.is_empty() {
        return;
    }
    let marks: Vec<String> = values
        .iter()
        .map(|v| push(args, Arg::Text(v.clone())))
        .collect();
    sql.push_str(&format!(" AND {column} IN ({})", marks.join(",")));
}
