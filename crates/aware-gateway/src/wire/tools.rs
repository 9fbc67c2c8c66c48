//! The answers of the agent tools (03 §6), with `statusText`.

use super::{goal, StateChangesJson};
use aware_engine::views::TurnRow;
use aware_engine::{Session, SpawnResult, StateChanges};
use aware_wire::tools as t;
use serde_json::Value;

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
    let sessions: Vec<t::SessionRow> = rows
        .iter()
        .map(|s| {
            let r = &s.row;
            t::SessionRow {
                key: r.key.clone(),
                session_id: r.session_id.clone(),
                agent_id: r.agent_id.clone(),
                // Stored kinds are checked on the way in (01 §2); a name from a newer version
                // reads as `other` rather than failing the whole list.
                kind: t::SessionKind::parse(&r.kind).unwrap_or(t::SessionKind::Other),
                label: r.label.clone(),
                parent_session_key: r.parent_key.clone(),
                status: s.status().to_string(),
                updated_at: r.updated_at,
                state_version: (s.state_version > 0).then_some(s.state_version),
            }
        })
        .collect();
    super::value(t::SessionsListResult {
        count: sessions.len() as u64,
        has_more: more,
        sessions,
        next_offset: more.then_some(next_offset),
    })
}

/// One `sessions_history` message, its text cut at `max_chars` characters.
pub fn history_message(x: &TurnRow, max_chars: usize) -> t::HistoryMessage {
    let text = if x.text.chars().count() > max_chars {
        format!(
            "{}…[truncated]",
            x.text.chars().take(max_chars).collect::<String>()
        )
    } else {
        x.text.clone()
    };
    t::HistoryMessage {
        index: x.index,
        role: x.role.clone(),
        text,
        at: x.at,
        actor_type: x.actor_type.as_str().to_string(),
        actor_id: x.actor_id.clone(),
        run_id: x.run_id.clone(),
        // Where a human's turn came from (slack, claude-code): who acted and through what.
        channel: x.channel.clone(),
        origin: x.origin.clone(),
    }
}

/// A `sessions_history` answer from its (already byte-capped) messages.
pub fn history(
    key: &str,
    agent: &str,
    messages: Vec<t::HistoryMessage>,
    truncated: bool,
    has_more: bool,
    next_offset: Option<i64>,
    total: i64,
) -> Value {
    super::value(t::SessionsHistoryResult {
        session_key: key.to_string(),
        agent_id: agent.to_string(),
        messages,
        truncated,
        has_more,
        next_offset: next_offset.filter(|_| has_more),
        total_messages: total,
    })
}

pub fn spawned(r: &SpawnResult) -> Value {
    super::value(t::SessionsSpawnResult {
        status: "accepted".to_string(),
        run_id: r.run_id.clone(),
        child_session_key: r.child_key.clone(),
    })
}

pub fn unwatched(key: &str, agent: &str, done: bool) -> Value {
    super::value(t::SessionsUnwatchResult {
        status: "ok".to_string(),
        session_key: key.to_string(),
        agent_id: agent.to_string(),
        unwatched: done,
    })
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
    let (status, reply, error) = match end {
        SendEnd::Sent => (t::SendStatus::Accepted, None, None),
        SendEnd::Reply(reply) => (t::SendStatus::Ok, Some(reply), None),
        SendEnd::RunEnded(outcome) => (
            t::SendStatus::Error,
            None,
            Some(format!("target run ended with outcome {outcome}")),
        ),
        SendEnd::Timeout(secs) => (
            t::SendStatus::Timeout,
            None,
            Some(format!("no reply within {secs} s")),
        ),
    };
    super::value(t::SessionsSendResult {
        run_id: run_id.to_string(),
        status,
        session_key: key.to_string(),
        reply,
        sent_before_error: error.is_some().then_some(true),
        error,
        watched,
    })
}
