//! The answers of the HTTP routes (03 §5.4, 04 §2–§3, 03 §9), built from the resources of
//! `wire`.

use super::{cursor, event, goal, run, session, turn, EventJson, TurnJson};
use aware_core::StoredEvent;
use aware_engine::views::{CursorRow, RunRow, TurnRow};
use aware_engine::{
    AckResult, AdoptResult, CompactionOutcome, GoalChange, PruneReport, RunEnd, Session,
    TurnOutcome,
};
use serde_json::{json, Value};

pub fn deleted() -> Value {
    json!({"deleted": true})
}

pub fn reset(s: &Session, previous_session_id: &str) -> Value {
    json!({"session": session(s), "previousSessionId": previous_session_id})
}

pub fn created_session(created: bool, s: &Session) -> Value {
    json!({"created": created, "session": session(s)})
}

/// A page of `GET /v1/sessions`; `next_offset` when more follow.
pub fn session_page(rows: &[Session], more: bool, next_offset: i64) -> Value {
    let mut body =
        json!({"sessions": rows.iter().map(session).collect::<Vec<_>>(), "hasMore": more});
    if more {
        body["nextOffset"] = next_offset.into();
    }
    body
}

pub fn turn_page(turns: &[TurnRow], more: bool, truncated: bool) -> Value {
    json!({"turns": turns.iter().map(turn).collect::<Vec<_>>(), "hasMore": more, "truncated": truncated})
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

pub fn ack(r: &AckResult) -> Value {
    json!({"acked": r.acked, "followUps": r.follow_ups, "ignored": r.ignored, "removedSystemEvents": r.removed_system_events})
}

/// `POST …/system-events`: the new id, or `deduped` when an equal event was already queued.
pub fn system_event_enqueued(id: Option<i64>) -> Value {
    match id {
        Some(id) => json!({"id": id}),
        None => json!({"deduped": true}),
    }
}

pub fn goal_change(g: &GoalChange) -> Value {
    let mut body = json!({"changed": g.changed});
    if let Some(x) = &g.goal {
        body["goal"] = goal(x);
    }
    if let Some(ev) = &g.event {
        body["event"] = event(ev);
    }
    body
}

pub fn run_started(r: &RunRow) -> Value {
    json!({"run": run(r)})
}

pub fn run_ended(r: &RunEnd) -> Value {
    let mut body = json!({"run": run(&r.run)});
    if let Some(ev) = &r.event {
        body["event"] = event(ev);
    }
    body
}

pub fn compaction(out: &CompactionOutcome) -> Value {
    let mut body = json!({});
    if let Some(ev) = &out.event {
        body["event"] = event(ev);
    }
    if out.duplicate {
        body["duplicate"] = true.into();
    }
    body
}

/// A page of fan-out rows under `field`; `nextOffset` when more follow.
fn cursor_page(field: &str, rows: &[CursorRow], more: bool, next: usize) -> Value {
    let mut v = json!({"hasMore": more});
    v[field] = Value::Array(rows.iter().map(cursor).collect());
    if more {
        v["nextOffset"] = next.into();
    }
    v
}

pub fn watches(rows: &[CursorRow], more: bool, next: usize) -> Value {
    cursor_page("watches", rows, more, next)
}

pub fn watchers(rows: &[CursorRow], more: bool, next: usize) -> Value {
    cursor_page("watchers", rows, more, next)
}

pub fn watched(row: &CursorRow) -> Value {
    json!({"watched": true, "cursor": cursor(row)})
}

pub fn unwatched(done: bool) -> Value {
    json!({"unwatched": done})
}

/// One item of `GET /v1/catalog`; `adopted` is the key of the session that adopted it.
pub fn catalog_item(
    catalog_id: &str,
    host_id: &str,
    item: &aware_upstream::provider::CatalogItem,
    adopted: Option<&str>,
) -> Value {
    let mut v = json!({"catalogId": catalog_id, "hostId": host_id, "threadId": item.thread_id, "updatedAt": item.updated_at});
    if let Some(n) = item.size_bytes {
        v["sizeBytes"] = n.into();
    }
    if let Some(c) = &item.cwd {
        v["cwd"] = c.clone().into();
    }
    if let Some(t) = &item.title {
        v["title"] = t.clone().into();
    }
    if let Some(k) = adopted {
        v["adoptedSessionKey"] = k.into();
    }
    v
}

pub fn catalog_page(items: Vec<Value>, next_cursor: Option<String>) -> Value {
    let mut body = json!({"items": items});
    if let Some(n) = next_cursor {
        body["nextCursor"] = n.into();
    }
    body
}

pub fn adopted(r: &AdoptResult) -> Value {
    json!({"sessionKey": r.session_key, "agentId": r.agent_id, "created": r.created, "linked": r.linked})
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
    json!({"event": event(e), "deduped": deduped})
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
