//! All response JSON of the gateway: here the resources of 03 §5.4 (sessions, events, turns,
//! runs, cursors, notices, drains, wakes) as the types of `aware-wire`, which the clients read
//! too; `answers` the route answers built from them, `tools` the agent tools' answers. Handlers
//! build no JSON of their own (the console's read models excepted). The hot answers (a posted
//! turn, the `session_status` page) are serialised straight from the engine's types by hand;
//! tests bind them to the same `aware-wire` types, field order included.

pub mod answers;
pub mod tools;

use aware_core::{CompactEvent, StoredEvent};
use aware_engine::views::{CursorRow, RunRow, SystemEventRow, TurnRow};
use aware_engine::{Drain, Notice, Session, StateChanges, Wake};
use aware_wire::sessions as w;
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

/// A count or id as the wire's integer (the clients read JSON integers as i64).
pub(crate) fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A wire object as a `Value`, for the read models that add fields to it (the console).
/// Serialising these types cannot fail: every key is a string and every number finite.
pub fn value(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The goal object of a session or a goal change.
pub fn goal(g: &aware_engine::views::GoalRow) -> w::Goal {
    w::Goal {
        text: g.text.clone(),
        status: g.status.clone(),
        updated_at: g.updated_at,
    }
}

pub fn session(s: &Session) -> w::Session {
    let r = &s.row;
    w::Session {
        key: r.key.clone(),
        agent_id: r.agent_id.clone(),
        session_id: r.session_id.clone(),
        kind: r.kind.clone(),
        label: r.label.clone(),
        parent_session_key: r.parent_key.clone(),
        orphaned: r.orphaned.then_some(true),
        created_via: r.created_via.clone(),
        status: s.status().to_string(),
        active_run_id: r.active_run_id.clone(),
        goal: r.goal.as_ref().map(goal),
        upstream: r.upstream.as_ref().map(|u| w::Upstream {
            catalog_id: u.catalog_id.clone(),
            host_id: u.host_id.clone(),
            thread_id: u.thread_id.clone(),
            linked: s.link.is_some(),
            marker: s.link.as_ref().and_then(|l| {
                l.last_marker_json
                    .as_deref()
                    .and_then(|j| serde_json::from_str::<Value>(j).ok())
            }),
            last_scanned_at: s.link.as_ref().and_then(|l| l.last_scanned_at),
        }),
        state_version: s.state_version,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
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

pub fn event(e: &StoredEvent) -> w::Event {
    w::Event {
        sequence: e.sequence,
        session_key: e.session_key.clone(),
        session_id: e.session_id.clone(),
        agent_id: e.agent_id.clone(),
        kind: e.kind.as_str().to_string(),
        actor_type: e.actor_type.as_str().to_string(),
        actor_id: e.actor_id.clone(),
        run_id: e.run_id.clone(),
        occurred_at: e.occurred_at,
        summary: e.summary.clone(),
        payload: e.payload.clone(),
    }
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

pub fn turn(t: &TurnRow) -> w::Turn {
    w::Turn {
        id: t.id.clone(),
        index: t.index,
        role: t.role.clone(),
        text: t.text.clone(),
        at: t.at,
        actor_type: t.actor_type.as_str().to_string(),
        actor_id: t.actor_id.clone(),
        provenance: provenance(&t.provenance_json),
        channel: t.channel.clone(),
        run_id: t.run_id.clone(),
        origin: t.origin.clone(),
        upstream_text: t.upstream_text.clone(),
    }
}

/// A turn's stored provenance object; a row that does not hold one reads as a human's.
fn provenance(stored: &str) -> w::Provenance {
    serde_json::from_str(stored).unwrap_or_else(|_| {
        let mut m = Map::new();
        m.insert("kind".into(), "human".into());
        m
    })
}

pub fn run(r: &RunRow) -> w::Run {
    w::Run {
        run_id: r.run_id.clone(),
        session_key: r.session_key.clone(),
        agent_id: r.agent_id.clone(),
        session_id: r.session_id.clone(),
        started_at: r.started_at,
        ended_at: r.ended_at,
        outcome: r.outcome.clone(),
    }
}

pub fn cursor(c: &CursorRow) -> w::Cursor {
    let s = &c.state;
    w::Cursor {
        watcher_session_key: c.watcher.clone(),
        target_session_key: c.target_key.clone(),
        target_agent_id: c.target_agent.clone(),
        last_seen: s.last_seen,
        notified: s.notified,
        material: s.material,
        pending: s.is_pending(),
        muted: s.muted,
        origin: s.origin.as_str().to_string(),
        updated_at: s.updated_at,
    }
}

pub fn notice(n: &Notice) -> aware_wire::NoticeItem {
    aware_wire::NoticeItem {
        target_session_key: n.target_key.clone(),
        target_agent_id: n.target_agent.clone(),
        last_seen: n.last_seen,
        context_key: n.context_key.clone(),
        opened_at: n.opened_at,
        text: n.text.clone(),
        preview: None,
    }
}

pub fn system_event(e: &SystemEventRow) -> aware_wire::SystemEventItem {
    aware_wire::SystemEventItem {
        id: e.id,
        text: e.text.clone(),
        context_key: e.context_key.clone(),
        enqueued_at: e.enqueued_at,
    }
}

pub fn drain(d: &Drain) -> aware_wire::DrainAnswer {
    aware_wire::DrainAnswer {
        session_key: d.session_key.clone(),
        agent_id: d.agent_id.clone(),
        system_events: d.system_events.iter().map(system_event).collect(),
        notices: d.notices.iter().map(notice).collect(),
        pending_after: count(d.pending_after),
        prompt: d.prompt.clone(),
        // Only when a limit left items out, so answers without one keep their shape.
        has_more: d.has_more.then_some(true),
    }
}

/// A drain answer with the reconcile preview of each notice whose target the session may see
/// (`visible`, in notice order): the preview in the notice's `preview`, and after the notice's
/// line in `prompt` (the notice line itself unchanged). A failed read leaves that notice
/// without a preview: the notice was handed over all the same.
pub fn previews(
    e: &aware_engine::Engine,
    d: &Drain,
    visible: &[bool],
    budget: usize,
    tool_prefix: &str,
) -> aware_wire::DrainAnswer {
    let status_tool = format!("{tool_prefix}session_status");
    let mut answer = drain(d);
    let mut items: Vec<(i64, String)> = d
        .system_events
        .iter()
        .map(|s| (s.enqueued_at, s.text.clone()))
        .collect();
    for (i, n) in d.notices.iter().enumerate() {
        let target = aware_core::SessionKey::parse(&n.target_key)
            .ok()
            .zip(aware_core::AgentId::parse(&n.target_agent).ok())
            .map(|(key, agent)| aware_core::SessionRef { key, agent });
        let preview = match target {
            Some(t) if visible.get(i).copied().unwrap_or(false) => e
                .preview(&t, n.last_seen)
                .map(|p| p.render(&n.target_key, n.last_seen, budget, &status_tool))
                .unwrap_or_default(),
            _ => String::new(),
        };
        if preview.is_empty() {
            items.push((n.opened_at, n.text.clone()));
        } else {
            items.push((n.opened_at, format!("{}\n{preview}", n.text)));
            if let Some(item) = answer.notices.get_mut(i) {
                item.preview = Some(preview);
            }
        }
    }
    let mut prompt =
        aware_core::notice::render_prompt(items.iter().map(|(at, t)| (*at, t.as_str())));
    // The tools the notices name, as the model's CLI names them, once after them: the notice
    // lines keep the spec's `session_status`.
    if !tool_prefix.is_empty() {
        prompt.push_str(&format!(
            "\nSystem: (In this session the tools are {status_tool} for the exact delta and \
             {tool_prefix}sessions_history for the words.)"
        ));
    }
    answer.prompt = prompt;
    answer
}

pub fn wake(wake: &Wake) -> aware_wire::Wake {
    use aware_engine::WakeReason as R;
    let reason = match wake.reason {
        R::SessionState => aware_wire::WakeReason::SessionState,
        R::Message => aware_wire::WakeReason::Message,
        R::Spawn => aware_wire::WakeReason::Spawn,
    };
    aware_wire::Wake {
        // Ids count wakes of one process from 1: far below i64::MAX.
        id: count(wake.id),
        session_key: wake.session_key.clone(),
        agent_id: wake.agent_id.clone(),
        reason,
        targets: (wake.reason == R::SessionState).then(|| {
            wake.targets
                .iter()
                .map(|(k, a)| aware_wire::WakeTarget {
                    session_key: k.clone(),
                    agent_id: a.clone(),
                })
                .collect()
        }),
        run_id: wake.run_id.clone(),
        from: wake.from.clone(),
        at: wake.at,
    }
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
