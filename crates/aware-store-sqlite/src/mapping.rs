//! Rows to and from SQLite: column lists and row mappers.

use aware_core::event::compact_payload;
use aware_core::{ActorType, CompactEvent, CursorState, EventKind, Origin, StoredEvent};
use aware_store::rows::*;
use rusqlite::types::Type;
use rusqlite::Row;

pub(super) fn conversion_error(col: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, Type::Text, what.into())
}

pub(super) const EVENT_COLS: &str =
    "sequence, dedupe_key, session_key, session_id, agent_id, kind, actor_type, \
     actor_id, run_id, occurred_at, summary, payload_json";

pub(super) fn event_from_row(row: &Row<'_>) -> rusqlite::Result<StoredEvent> {
    let kind: String = row.get(5)?;
    let actor: String = row.get(6)?;
    let payload: Option<String> = row.get(11)?;
    let payload = match payload {
        None => None,
        Some(text) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            _ => {
                return Err(conversion_error(
                    11,
                    format!("payload_json is not an object: {text}"),
                ))
            }
        },
    };
    Ok(StoredEvent {
        sequence: row.get(0)?,
        dedupe_key: row.get(1)?,
        session_key: row.get(2)?,
        session_id: row.get(3)?,
        agent_id: row.get(4)?,
        kind: EventKind::parse(&kind)
            .ok_or_else(|| conversion_error(5, format!("unknown kind {kind:?}")))?,
        actor_type: ActorType::parse(&actor)
            .ok_or_else(|| conversion_error(6, format!("unknown actor type {actor:?}")))?,
        actor_id: row.get(7)?,
        run_id: row.get(8)?,
        occurred_at: row.get(9)?,
        summary: row.get(10)?,
        payload,
    })
}

/// A page row of [`SqliteStore::state_page`] as the compact view (01 §10): the columns the
/// view drops are never read, and the payload is filtered to the read-side whitelist.
pub(super) fn compact_from_row(row: &Row<'_>) -> rusqlite::Result<CompactEvent> {
    let kind = row.get_ref(2)?.as_str()?;
    let actor = row.get_ref(3)?.as_str()?;
    let payload = match row.get_ref(8)?.as_str_or_null()? {
        None => None,
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => compact_payload(Some(&map)),
            _ => {
                return Err(conversion_error(
                    8,
                    format!("payload_json is not an object: {text}"),
                ))
            }
        },
    };
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Ok(CompactEvent {
        sequence: row.get(1)?,
        kind: EventKind::parse(kind)
            .ok_or_else(|| conversion_error(2, format!("unknown kind {kind:?}")))?,
        actor_type: ActorType::parse(actor)
            .ok_or_else(|| conversion_error(3, format!("unknown actor type {actor:?}")))?,
        actor_id: non_empty(row.get(4)?),
        run_id: non_empty(row.get(5)?),
        occurred_at: row.get(6)?,
        summary: row.get(7)?,
        payload,
    })
}

pub(super) const CURSOR_COLS: &str = "watcher_session_key, target_session_key, target_agent_id, \
     last_seen_sequence, notified_sequence, material_sequence, muted, origin, notice_opened_at, \
     created_at, updated_at";

/// `CURSOR_COLS` qualified with the alias `c`, for joins.
pub(super) const CURSOR_COLS_C: &str = "c.watcher_session_key, c.target_session_key, \
     c.target_agent_id, c.last_seen_sequence, c.notified_sequence, c.material_sequence, c.muted, \
     c.origin, c.notice_opened_at, c.created_at, c.updated_at";

pub(super) fn cursor_from_row(row: &Row<'_>) -> rusqlite::Result<CursorRow> {
    let origin: String = row.get(7)?;
    Ok(CursorRow {
        watcher: row.get(0)?,
        target_key: row.get(1)?,
        target_agent: row.get(2)?,
        state: CursorState {
            last_seen: row.get(3)?,
            notified: row.get(4)?,
            material: row.get(5)?,
            muted: row.get::<_, i64>(6)? != 0,
            origin: Origin::parse(&origin)
                .ok_or_else(|| conversion_error(7, format!("unknown origin {origin:?}")))?,
            notice_opened_at: row.get(8)?,
            updated_at: row.get(10)?,
        },
        created_at: row.get(9)?,
    })
}

pub(super) const SESSION_COLS: &str =
    "session_key, agent_id, session_id, kind, label, parent_session_key, \
     created_via, active_run_id, goal_text, goal_status, goal_updated_at, orphaned, created_at, \
     updated_at, upstream_catalog, upstream_host, upstream_thread";

pub(super) fn session_from_row(row: &Row<'_>) -> rusqlite::Result<SessionRow> {
    let goal_text: Option<String> = row.get(8)?;
    let goal = match goal_text {
        Some(text) => Some(GoalRow {
            text,
            status: row
                .get::<_, Option<String>>(9)?
                .unwrap_or_else(|| "active".into()),
            updated_at: row.get::<_, Option<i64>>(10)?.unwrap_or(0),
        }),
        None => None,
    };
    Ok(SessionRow {
        key: row.get(0)?,
        agent_id: row.get(1)?,
        session_id: row.get(2)?,
        kind: row.get(3)?,
        label: row.get(4)?,
        parent_key: row.get(5)?,
        created_via: row.get(6)?,
        active_run_id: row.get(7)?,
        goal,
        orphaned: row.get::<_, i64>(11)? != 0,
        created_at: row.get(12)?,
        updated_at: row.get(13)?,
        upstream: match (
            row.get::<_, Option<String>>(14)?,
            row.get::<_, Option<String>>(15)?,
            row.get::<_, Option<String>>(16)?,
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

pub(super) fn link_from_row(row: &Row<'_>) -> rusqlite::Result<LinkRow> {
    Ok(LinkRow {
        session_key: row.get(0)?,
        agent_id: row.get(1)?,
        catalog_id: row.get(2)?,
        host_id: row.get(3)?,
        thread_id: row.get(4)?,
        upstream_kind: row.get(5)?,
        upstream_ref_json: row.get(6)?,
        last_marker_json: row.get(7)?,
        last_scanned_at: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
    })
}

/// The 17 values of a session row, in `SESSION_COLS` order (insert and update bind the same list).
pub(super) fn session_values(s: &SessionRow) -> Vec<rusqlite::types::Value> {
    use rusqlite::types::Value as V;
    let text = |t: Option<&str>| t.map_or(V::Null, |t| V::Text(t.to_string()));
    let goal = s.goal.as_ref();
    let up = s.upstream.as_ref();
    vec![
        V::Text(s.key.clone()),
        V::Text(s.agent_id.clone()),
        V::Text(s.session_id.clone()),
        V::Text(s.kind.clone()),
        text(s.label.as_deref()),
        text(s.parent_key.as_deref()),
        V::Text(s.created_via.clone()),
        text(s.active_run_id.as_deref()),
        text(goal.map(|g| g.text.as_str())),
        text(goal.map(|g| g.status.as_str())),
        goal.map_or(V::Null, |g| V::Integer(g.updated_at)),
        V::Integer(i64::from(s.orphaned)),
        V::Integer(s.created_at),
        V::Integer(s.updated_at),
        text(up.map(|u| u.catalog_id.as_str())),
        text(up.map(|u| u.host_id.as_str())),
        text(up.map(|u| u.thread_id.as_str())),
    ]
}

pub(super) const TURN_COLS: &str =
    "id, idx, role, text, at, actor_type, actor_id, provenance_json, channel, \
     run_id, origin, upstream_text, idempotency_key";

pub(super) fn turn_from_row(row: &Row<'_>) -> rusqlite::Result<TurnRow> {
    let actor: String = row.get(5)?;
    Ok(TurnRow {
        id: row.get(0)?,
        index: row.get(1)?,
        role: row.get(2)?,
        text: row.get(3)?,
        at: row.get(4)?,
        actor_type: ActorType::parse(&actor)
            .ok_or_else(|| conversion_error(5, format!("unknown actor type {actor:?}")))?,
        actor_id: row.get(6)?,
        provenance_json: row.get(7)?,
        channel: row.get(8)?,
        run_id: row.get(9)?,
        origin: row.get(10)?,
        upstream_text: row.get(11)?,
        idempotency_key: row.get(12)?,
    })
}

pub(super) const RUN_COLS: &str =
    "run_id, session_key, agent_id, session_id, started_at, ended_at, outcome, deadline_at, event_sequence";

pub(super) fn run_from_row(row: &Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        run_id: row.get(0)?,
        session_key: row.get(1)?,
        agent_id: row.get(2)?,
        session_id: row.get(3)?,
        started_at: row.get(4)?,
        ended_at: row.get(5)?,
        outcome: row.get(6)?,
        deadline_at: row.get(7)?,
        event_sequence: row.get(8)?,
    })
}

pub(super) fn payload_text(event: &NewEvent) -> Option<String> {
    event
        .payload
        .as_ref()
        .map(|p| serde_json::Value::Object(p.clone()).to_string())
}
