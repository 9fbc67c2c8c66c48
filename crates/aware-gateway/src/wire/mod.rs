//! All response JSON of the gateway, written by hand (camelCase; optional fields omitted, never
//! null): here the resources of 03 §5.4 (sessions, events, turns, runs, cursors, notices,
//! drains, wakes); `answers` the route answers built from them, `tools` the agent tools'
//! answers. Handlers build no JSON of their own (the console's read models excepted).

pub mod answers;
pub mod tools;

use aware_core::{CompactEvent, StoredEvent};
use aware_engine::views::{CursorRow, RunRow, SystemEventRow, TurnRow};
use aware_engine::{Drain, Notice, Session, StateChanges, Wake};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Map, Value};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// A 200 answer with a JSON body.
pub(crate) fn ok(v: impl Serialize) -> crate::http::error::ApiResult<Response> {
    Ok(json_response(StatusCode::OK, &v, 512))
}

/// A 201 answer with a JSON body.
pub(crate) fn created(v: impl Serialize) -> crate::http::error::ApiResult<Response> {
    Ok(json_response(StatusCode::CREATED, &v, 512))
}

/// A JSON answer serialised into one buffer of about the expected size: `axum::Json` starts at
/// 128 bytes and grows (an 18 KB `session_status` answer was copied about eight times on the way).
pub(crate) fn json_response(status: StatusCode, v: &impl Serialize, size_hint: usize) -> Response {
    let mut buf = Vec::with_capacity(size_hint);
    match serde_json::to_writer(&mut buf, v) {
        Ok(()) => (
            status,
            [(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            )],
            buf,
        )
            .into_response(),
        // Only a Serialize impl that fails can get here (ours do not); answer as axum did.
        Err(e) => crate::http::error::ApiError::internal(format!("serialising the answer: {e}"))
            .into_response(),
    }
}

/// The goal object of a session or a goal change.
pub fn goal(g: &aware_engine::views::GoalRow) -> Value {
    json!({"text": g.text, "status": g.status, "updatedAt": g.updated_at})
}

fn put<T: Into<Value>>(m: &mut Map<String, Value>, k: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(k.into(), v.into());
    }
}

pub fn session(s: &Session) -> Value {
    let r = &s.row;
    let mut m = Map::new();
    m.insert("key".into(), r.key.clone().into());
    m.insert("agentId".into(), r.agent_id.clone().into());
    m.insert("sessionId".into(), r.session_id.clone().into());
    m.insert("kind".into(), r.kind.clone().into());
    put(&mut m, "label", r.label.clone());
    put(&mut m, "parentSessionKey", r.parent_key.clone());
    if r.orphaned {
        m.insert("orphaned".into(), true.into());
    }
    m.insert("createdVia".into(), r.created_via.clone().into());
    m.insert("status".into(), s.status().into());
    put(&mut m, "activeRunId", r.active_run_id.clone());
    if let Some(g) = &r.goal {
        m.insert("goal".into(), goal(g));
    }
    if let Some(u) = &r.upstream {
        let mut up = json!({"catalogId": u.catalog_id, "hostId": u.host_id, "threadId": u.thread_id, "linked": s.link.is_some()});
        if let Some(l) = &s.link {
            if let Some(marker) = l
                .last_marker_json
                .as_deref()
                .and_then(|j| serde_json::from_str::<Value>(j).ok())
            {
                up["marker"] = marker;
            }
            if let Some(t) = l.last_scanned_at {
                up["lastScannedAt"] = t.into();
            }
        }
        m.insert("upstream".into(), up);
    }
    m.insert("stateVersion".into(), s.state_version.into());
    m.insert("createdAt".into(), r.created_at.into());
    m.insert("updatedAt".into(), r.updated_at.into());
    Value::Object(m)
}

/// A turn serialised straight from the row (the same fields in the same order as [`turn`]),
/// for the hot `POST …/turns` answer.
pub struct TurnJson<'a>(pub &'a TurnRow);

impl Serialize for TurnJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &t.id)?;
        m.serialize_entry("index", &t.index)?;
        m.serialize_entry("role", &t.role)?;
        m.serialize_entry("text", &t.text)?;
        m.serialize_entry("at", &t.at)?;
        m.serialize_entry("actorType", t.actor_type.as_str())?;
        if let Some(a) = &t.actor_id {
            m.serialize_entry("actorId", a)?;
        }
        // Parsed, not copied raw, so the text is the same as `turn`'s (escapes, number forms).
        let prov: Value =
            serde_json::from_str(&t.provenance_json).unwrap_or_else(|_| json!({"kind": "human"}));
        m.serialize_entry("provenance", &prov)?;
        for (k, v) in [
            ("channel", &t.channel),
            ("runId", &t.run_id),
            ("origin", &t.origin),
            ("upstreamText", &t.upstream_text),
        ] {
            if let Some(v) = v {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// An event serialised straight from the stored event (the same fields in the same order as
/// [`event`]).
pub struct EventJson<'a>(pub &'a StoredEvent);

impl Serialize for EventJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("sequence", &e.sequence)?;
        m.serialize_entry("sessionKey", &e.session_key)?;
        if let Some(v) = &e.session_id {
            m.serialize_entry("sessionId", v)?;
        }
        m.serialize_entry("agentId", &e.agent_id)?;
        m.serialize_entry("kind", e.kind.as_str())?;
        m.serialize_entry("actorType", e.actor_type.as_str())?;
        if let Some(v) = &e.actor_id {
            m.serialize_entry("actorId", v)?;
        }
        if let Some(v) = &e.run_id {
            m.serialize_entry("runId", v)?;
        }
        m.serialize_entry("occurredAt", &e.occurred_at)?;
        m.serialize_entry("summary", &e.summary)?;
        if let Some(p) = &e.payload {
            m.serialize_entry("payload", p)?;
        }
        m.end()
    }
}

pub fn event(e: &StoredEvent) -> Value {
    let mut m = Map::new();
    m.insert("sequence".into(), e.sequence.into());
    m.insert("sessionKey".into(), e.session_key.clone().into());
    put(&mut m, "sessionId", e.session_id.clone());
    m.insert("agentId".into(), e.agent_id.clone().into());
    m.insert("kind".into(), e.kind.as_str().into());
    m.insert("actorType".into(), e.actor_type.as_str().into());
    put(&mut m, "actorId", e.actor_id.clone());
    put(&mut m, "runId", e.run_id.clone());
    m.insert("occurredAt".into(), e.occurred_at.into());
    m.insert("summary".into(), e.summary.clone().into());
    put(&mut m, "payload", e.payload.clone().map(Value::Object));
    Value::Object(m)
}

/// A compact event serialised straight from the engine's type: the hot `session_status` page
/// is written without building a `Value` per event first (decision D21's profile).
pub struct CompactEventJson<'a>(pub &'a CompactEvent);

impl Serialize for CompactEventJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("sequence", &e.sequence)?;
        m.serialize_entry("kind", e.kind.as_str())?;
        m.serialize_entry("actorType", e.actor_type.as_str())?;
        if let Some(a) = &e.actor_id {
            m.serialize_entry("actorId", a)?;
        }
        if let Some(r) = &e.run_id {
            m.serialize_entry("runId", r)?;
        }
        m.serialize_entry("occurredAt", &e.occurred_at)?;
        m.serialize_entry("summary", &e.summary)?;
        if let Some(p) = &e.payload {
            m.serialize_entry("payload", p)?;
        }
        m.end()
    }
}

/// A compact event as a `Value`, for answers built as values (the console). Serialising into a
/// `Value` cannot fail here: every key is a string and payload numbers are already JSON numbers.
pub fn compact_event(e: &CompactEvent) -> Value {
    serde_json::to_value(CompactEventJson(e)).unwrap_or(Value::Null)
}

/// The `stateChanges` object of 03 §6.2, serialised straight from the page.
pub struct StateChangesJson<'a>(pub &'a StateChanges);

impl Serialize for StateChangesJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("events", &Events(&c.events))?;
        m.serialize_entry("truncated", &c.truncated)?;
        m.serialize_entry("earliestAvailableSequence", &c.earliest_available_sequence)?;
        m.serialize_entry("historyGap", &c.history_gap)?;
        m.end()
    }
}

struct Events<'a>(&'a [CompactEvent]);

impl Serialize for Events<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(CompactEventJson))
    }
}

pub fn turn(t: &TurnRow) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), t.id.clone().into());
    m.insert("index".into(), t.index.into());
    m.insert("role".into(), t.role.clone().into());
    m.insert("text".into(), t.text.clone().into());
    m.insert("at".into(), t.at.into());
    m.insert("actorType".into(), t.actor_type.as_str().into());
    put(&mut m, "actorId", t.actor_id.clone());
    let prov: Value =
        serde_json::from_str(&t.provenance_json).unwrap_or_else(|_| json!({"kind": "human"}));
    m.insert("provenance".into(), prov);
    put(&mut m, "channel", t.channel.clone());
    put(&mut m, "runId", t.run_id.clone());
    put(&mut m, "origin", t.origin.clone());
    put(&mut m, "upstreamText", t.upstream_text.clone());
    Value::Object(m)
}

pub fn run(r: &RunRow) -> Value {
    let mut m = Map::new();
    m.insert("runId".into(), r.run_id.clone().into());
    m.insert("sessionKey".into(), r.session_key.clone().into());
    m.insert("agentId".into(), r.agent_id.clone().into());
    m.insert("sessionId".into(), r.session_id.clone().into());
    m.insert("startedAt".into(), r.started_at.into());
    put(&mut m, "endedAt", r.ended_at);
    put(&mut m, "outcome", r.outcome.clone());
    Value::Object(m)
}

pub fn cursor(c: &CursorRow) -> Value {
    let s = &c.state;
    json!({
        "watcherSessionKey": c.watcher, "targetSessionKey": c.target_key, "targetAgentId": c.target_agent,
        "lastSeen": s.last_seen, "notified": s.notified, "material": s.material,
        "pending": s.is_pending(), "muted": s.muted, "origin": s.origin.as_str(), "updatedAt": s.updated_at,
    })
}

pub fn notice(n: &Notice) -> Value {
    json!({
        "targetSessionKey": n.target_key, "targetAgentId": n.target_agent, "lastSeen": n.last_seen,
        "contextKey": n.context_key, "openedAt": n.opened_at, "text": n.text,
    })
}

pub fn system_event(e: &SystemEventRow) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), e.id.into());
    m.insert("text".into(), e.text.clone().into());
    put(&mut m, "contextKey", e.context_key.clone());
    m.insert("enqueuedAt".into(), e.enqueued_at.into());
    Value::Object(m)
}

pub fn drain(d: &Drain) -> Value {
    let mut v = json!({
        "sessionKey": d.session_key, "agentId": d.agent_id,
        "systemEvents": d.system_events.iter().map(system_event).collect::<Vec<_>>(),
        "notices": d.notices.iter().map(notice).collect::<Vec<_>>(),
        "pendingAfter": d.pending_after, "prompt": d.prompt,
    });
    // Only when a limit left items out, so answers without one keep their shape.
    if d.has_more {
        v["hasMore"] = true.into();
    }
    v
}

pub fn wake(w: &Wake) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), w.id.into());
    m.insert("sessionKey".into(), w.session_key.clone().into());
    m.insert("agentId".into(), w.agent_id.clone().into());
    m.insert("reason".into(), w.reason.as_str().into());
    if w.reason == aware_engine::WakeReason::SessionState {
        m.insert(
            "targets".into(),
            w.targets
                .iter()
                .map(|(k, a)| json!({"sessionKey": k, "agentId": a}))
                .collect::<Vec<_>>()
                .into(),
        );
    }
    put(&mut m, "runId", w.run_id.clone());
    put(&mut m, "from", w.from.clone());
    m.insert("at".into(), w.at.into());
    Value::Object(m)
}

/// The data of the last event of a wake stream when the gateway shuts down.
pub fn stream_shutdown() -> Value {
    json!({"reason": "the gateway is shutting down"})
}

/// The data of a wake stream's `lagged` event: `missed` wakes (of any session, before the
/// stream's filter) went by while the stream could not send.
pub fn stream_lagged(missed: u64) -> Value {
    json!({
        "missed": missed,
        "reason": "this stream fell behind and skipped wakes; reconnect for a catch-up or read your sessions' pending notices"
    })
}

/// Keeps the first `max` entries of each array field in `lists` of `body`; a longer one adds
/// `<field>Total` with its whole length (the console's session page, decision D7).
pub(crate) fn cap_lists(body: &mut Value, lists: &[&str], max: usize) {
    for list in lists {
        let Some(a) = body[*list].as_array_mut() else {
            continue;
        };
        let total = a.len();
        if total > max {
            a.truncate(max);
            body[format!("{list}Total")] = total.into();
        }
    }
}
