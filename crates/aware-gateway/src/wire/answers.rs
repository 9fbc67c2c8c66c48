//! The answers of the HTTP routes (03 §5.4, 04 §2–§3, 03 §9), built from the resources of
//! `wire`.

use super::{count, cursor, event, goal, run, session, turn, EventJson, TurnJson};
use aware_core::StoredEvent;
use aware_engine::views::{CursorRow, RunRow, TurnRow};
use aware_engine::{
    AckResult, AdoptResult, CompactionOutcome, GoalChange, PruneReport, RunEnd, Session,
    TurnOutcome,
};
use aware_wire::sessions as w;
use serde_json::{json, Value};

pub fn deleted() -> w::Deleted {
    w::Deleted { deleted: true }
}

pub fn reset(s: &Session, previous_session_id: &str) -> w::ResetSession {
    w::ResetSession {
        session: session(s),
        previous_session_id: previous_session_id.to_string(),
    }
}

pub fn created_session(created: bool, s: &Session) -> w::CreatedSession {
    w::CreatedSession {
        created,
        session: session(s),
    }
}

/// A page of `GET /v1/sessions`; `next_offset` when more follow.
pub fn session_page(rows: &[Session], more: bool, next_offset: i64) -> w::SessionPage {
    w::SessionPage {
        sessions: rows.iter().map(session).collect(),
        has_more: more,
        next_offset: more.then_some(next_offset),
    }
}

pub fn turn_page(turns: &[TurnRow], more: bool, truncated: bool) -> w::TurnPage {
    w::TurnPage {
        turns: turns.iter().map(turn).collect(),
        has_more: more,
        truncated,
    }
}

/// The `POST …/turns` answer, written straight from the outcome: `{"turn", "event"?}`, or
/// `{"turn", "duplicate": true}` for a repeated idempotency key.
pub fn posted_turn(out: &TurnOutcome) -> PostedTurn<'_> {
    PostedTurn(out)
}

pub struct PostedTurn<'a>(&'a TurnOutcome);

impl serde::Serialize for PostedTurn<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let out = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("turn", &TurnJson(&out.turn))?;
        if out.duplicate {
            m.serialize_entry("duplicate", &true)?;
        } else if let Some(ev) = &out.event {
            m.serialize_entry("event", &EventJson(ev))?;
        }
        m.end()
    }
}

pub fn ack(r: &AckResult) -> aware_wire::AckAnswer {
    aware_wire::AckAnswer {
        acked: count(r.acked),
        follow_ups: count(r.follow_ups),
        ignored: r.ignored.clone(),
        removed_system_events: count(r.removed_system_events),
    }
}

/// `POST …/system-events`: the new id, or `deduped` when an equal event was already queued.
pub fn system_event_enqueued(id: Option<i64>) -> w::SystemEventEnqueued {
    match id {
        Some(id) => w::SystemEventEnqueued::Queued { id },
        None => w::SystemEventEnqueued::Deduped { deduped: true },
    }
}

pub fn goal_change(g: &GoalChange) -> w::GoalChange {
    w::GoalChange {
        changed: g.changed,
        goal: g.goal.as_ref().map(goal),
        event: g.event.as_ref().map(event),
    }
}

pub fn run_started(r: &RunRow) -> w::RunAnswer {
    w::RunAnswer {
        run: run(r),
        event: None,
    }
}

pub fn run_ended(r: &RunEnd) -> w::RunAnswer {
    w::RunAnswer {
        run: run(&r.run),
        event: r.event.as_ref().map(event),
    }
}

pub fn compaction(out: &CompactionOutcome) -> w::Compaction {
    w::Compaction {
        event: out.event.as_ref().map(event),
        duplicate: out.duplicate.then_some(true),
    }
}

/// Where the next page starts, when more follow.
fn next_offset(more: bool, next: usize) -> Option<i64> {
    more.then(|| super::count(next as u64))
}

pub fn watches(rows: &[CursorRow], more: bool, next: usize) -> w::WatchesPage {
    w::WatchesPage {
        has_more: more,
        watches: rows.iter().map(cursor).collect(),
        next_offset: next_offset(more, next),
    }
}

pub fn watchers(rows: &[CursorRow], more: bool, next: usize) -> w::WatchersPage {
    w::WatchersPage {
        has_more: more,
        watchers: rows.iter().map(cursor).collect(),
        next_offset: next_offset(more, next),
    }
}

pub fn watched(row: &CursorRow) -> w::Watched {
    w::Watched {
        watched: true,
        cursor: cursor(row),
    }
}

pub fn unwatched(done: bool) -> w::Unwatched {
    w::Unwatched { unwatched: done }
}

/// One item of `GET /v1/catalog`; `adopted` is the key of the session that adopted it.
pub fn catalog_item(
    catalog_id: &str,
    host_id: &str,
    item: &aware_upstream::provider::CatalogItem,
    adopted: Option<&str>,
) -> aware_wire::catalog::CatalogItem {
    aware_wire::catalog::CatalogItem {
        catalog_id: catalog_id.to_string(),
        host_id: host_id.to_string(),
        thread_id: item.thread_id.clone(),
        updated_at: item.updated_at,
        size_bytes: item.size_bytes,
        cwd: item.cwd.clone(),
        title: item.title.clone(),
        adopted_session_key: adopted.map(str::to_string),
    }
}

pub fn catalog_page(
    items: Vec<aware_wire::catalog::CatalogItem>,
    next_cursor: Option<String>,
) -> aware_wire::catalog::CatalogPage {
    aware_wire::catalog::CatalogPage { items, next_cursor }
}

pub fn adopted(r: &AdoptResult) -> Value {
    super::value(aware_wire::catalog::Adopted {
        session_key: r.session_key.clone(),
        agent_id: r.agent_id.clone(),
        created: r.created,
        linked: r.linked,
    })
}

pub fn clock(now: i64) -> Value {
    json!({"now": now})
}

pub fn pruned(r: &PruneReport) -> Value {
    json!({"deletedByAge": r.deleted_by_age, "deletedByCap": r.deleted_by_cap, "expiredCursors": r.expired_cursors,
        "expiredSystemEvents": r.expired_system_events, "batches": r.batches})
}

pub fn empty() -> Value {
    json!({})
}

/// `POST /v1/admin/events`: the event and whether an existing one answered.
pub fn appended(e: &StoredEvent, deduped: bool) -> Value {
    json!({"event": EventJson(e), "deduped": deduped})
}

pub fn not_recorded() -> Value {
    json!({"recorded": false})
}

pub fn health_ok(durability: &str, now: i64) -> Value {
    json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "durability": durability, "now": now})
}

/// `/health` when the store answers the probes with errors (a database outage).
pub fn health_degraded(failing: &[&str]) -> Value {
    json!({"status": "degraded", "failing": failing})
}

pub fn health_stalled(stalled: &[&str]) -> Value {
    json!({"status": "stalled", "stalled": stalled})
}

/// `/health` before the engine is ready: `starting` or `unavailable`.
pub fn health_status(status: &str) -> Value {
    json!({"status": status})
}
