//! The answers of the agent tools (03 §6), with `statusText`.

use super::{goal, StateChangesJson};
use aware_engine::views::TurnRow;
use aware_engine::{Session, SpawnResult, StateChanges};
use serde_json::{json, Value};

/// The text of `session_status`: the session's head and, with `changesSince`, its changes as
/// pretty JSON (the same keys in the same order as the answer's own).
pub fn status_text(s: &Session, state_version: i64, changes: Option<&StateChanges>) -> String {
    use std::fmt::Write as _;
    let r = &s.row;
    // One buffer of about the final size: the pretty page is written into it, not built as a
    // string of its own and copied in.
    let mut t = String::with_capacity(changes.map_or(256, |c| 512 + 240 * c.events.len()));
    // Writing to a String cannot fail.
    let _ = write!(
        t,
        "Session {} (agent {}, kind {})\nStatus: {}\n",
        r.key,
        r.agent_id,
        r.kind,
        s.status()
    );
    if let Some(p) = &r.parent_key {
        let _ = writeln!(t, "Parent: {p}");
    }
    if let Some(g) = &r.goal {
        let _ = writeln!(t, "Goal: {} [{}]", g.text, g.status);
    }
    let _ = write!(t, "State version: {state_version}");
    if let Some(c) = changes {
        // The same keys in the same order as the answer's `stateVersion` and `stateChanges`,
        // serialised from the page itself rather than from a copy of its JSON value.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Block<'a> {
            state_version: i64,
            state_changes: StateChangesJson<'a>,
        }
        let block = Block {
            state_version,
            state_changes: StateChangesJson(c),
        };
        t.push_str("\n\nSession state changes:\n```json\n");
        let mut bytes = t.into_bytes();
        // serde_json writes UTF-8 only, so the buffer stays a valid string; checked anyway.
        let _ = serde_json::to_writer_pretty(&mut bytes, &block);
        bytes.extend_from_slice(b"\n```");
        t = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    }
    t
}

/// The `session_status` answer: the session's fields, then the page and the text, written
/// straight from the session row and the engine's page (no intermediate `Value`).
pub struct StatusAnswer<'a> {
    session: &'a Session,
    state_changes: Option<&'a StateChanges>,
    status_text: String,
}

impl serde::Serialize for StatusAnswer<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let session = self.session;
        let r = &session.row;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("ok", &true)?;
        m.serialize_entry("sessionKey", &r.key)?;
        m.serialize_entry("agentId", &r.agent_id)?;
        m.serialize_entry("sessionId", &r.session_id)?;
        m.serialize_entry("kind", &r.kind)?;
        m.serialize_entry("status", session.status())?;
        if let Some(l) = &r.label {
            m.serialize_entry("label", l)?;
        }
        if let Some(p) = &r.parent_key {
            m.serialize_entry("parentSessionKey", p)?;
        }
        if let Some(g) = &r.goal {
            m.serialize_entry("goal", &goal(g))?;
        }
        // The session row's head, read with the row.
        m.serialize_entry("stateVersion", &session.state_version)?;
        if let Some(c) = self.state_changes {
            m.serialize_entry("stateChanges", &StateChangesJson(c))?;
        }
        m.serialize_entry("statusText", &self.status_text)?;
        m.end()
    }
}

impl StatusAnswer<'_> {
    /// About the size of the serialised answer: the text twice (escaped in the answer) plus
    /// the page once more.
    pub fn size_hint(&self) -> usize {
        self.status_text.len() * 2 + 1024
    }
}

pub fn status<'a>(session: &'a Session, changes: Option<&'a StateChanges>) -> StatusAnswer<'a> {
    StatusAnswer {
        session,
        state_changes: changes,
        status_text: status_text(session, session.state_version, changes),
    }
}

/// A `sessions_list` answer; `next_offset` when more follow.
pub fn session_list(rows: &[Session], more: bool, next_offset: i64) -> Value {
    let sessions: Vec<Value> = rows
        .iter()
        .map(|s| {
            let r = &s.row;
            let mut m = json!({"key": r.key, "sessionId": r.session_id, "agentId": r.agent_id, "kind": r.kind});
            if let Some(l) = &r.label {
                m["label"] = l.clone().into();
            }
            if let Some(p) = &r.parent_key {
                m["parentSessionKey"] = p.clone().into();
            }
            m["status"] = s.status().into();
            m["updatedAt"] = r.updated_at.into();
            if s.state_version > 0 {
                m["stateVersion"] = s.state_version.into();
            }
            m
        })
        .collect();
    let mut out = json!({"count": sessions.len(), "hasMore": more, "sessions": sessions});
    if more {
        out["nextOffset"] = next_offset.into();
    }
    out
}

/// One `sessions_history` message, its text cut at `max_chars` characters.
pub fn history_message(x: &TurnRow, max_chars: usize) -> Value {
    let text = if x.text.chars().count() > max_chars {
        format!(
            "{}…[truncated]",
            x.text.chars().take(max_chars).collect::<String>()
        )
    } else {
        x.text.clone()
    };
    let mut m = json!({"index": x.index, "role": x.role, "text": text, "at": x.at, "actorType": x.actor_type.as_str()});
    if let Some(a) = &x.actor_id {
        m["actorId"] = a.clone().into();
    }
    if let Some(r) = &x.run_id {
        m["runId"] = r.clone().into();
    }
    // Where a human's turn came from (slack, claude-code): who acted and through what.
    if let Some(c) = &x.channel {
        m["channel"] = c.clone().into();
    }
    if let Some(o) = &x.origin {
        m["origin"] = o.clone().into();
    }
    m
}

/// A `sessions_history` answer from its (already byte-capped) messages.
pub fn history(
    key: &str,
    agent: &str,
    messages: Vec<Value>,
    truncated: bool,
    has_more: bool,
    next_offset: Option<i64>,
    total: i64,
) -> Value {
    let mut out = json!({"sessionKey": key, "agentId": agent, "messages": messages, "truncated": truncated, "hasMore": has_more});
    if let Some(next) = next_offset.filter(|_| has_more) {
        out["nextOffset"] = next.into();
    }
    out["totalMessages"] = total.into();
    out
}

pub fn spawned(r: &SpawnResult) -> Value {
    json!({"status": "accepted", "runId": r.run_id, "childSessionKey": r.child_key})
}

pub fn unwatched(key: &str, agent: &str, done: bool) -> Value {
    json!({"status": "ok", "sessionKey": key, "agentId": agent, "unwatched": done})
}

/// How a `sessions_send` that waited for a reply ended.
pub enum SendEnd {
    /// Sent without waiting (`timeoutSeconds` 0).
    Sent,
    Reply(String),
    /// The target run ended without a reply, with this outcome.
    RunEnded(&'static str),
    /// No reply within this many seconds.
    Timeout(i64),
}

pub fn sent(run_id: &str, key: &str, end: SendEnd, watched: Option<bool>) -> Value {
    let mut out = json!({"runId": run_id, "status": "accepted", "sessionKey": key});
    match end {
        SendEnd::Sent => {}
        SendEnd::Reply(reply) => {
            out["status"] = "ok".into();
            out["reply"] = reply.into();
        }
        SendEnd::RunEnded(outcome) => {
            out["status"] = "error".into();
            out["error"] = format!("target run ended with outcome {outcome}").into();
            out["sentBeforeError"] = true.into();
        }
        SendEnd::Timeout(secs) => {
            out["status"] = "timeout".into();
            out["error"] = format!("no reply within {secs} s").into();
            out["sentBeforeError"] = true.into();
        }
    }
    if let Some(w) = watched {
        out["watched"] = w.into();
    }
    out
}
