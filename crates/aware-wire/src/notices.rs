//! What a session is told: the drain and peek answer (docs/api.md §2.9, §2.10), the explicit
//! acknowledgement (§2.11), and the wake object of the SSE stream and the webhooks (§4.2).
//! Field order is the order on the wire.

use serde::{Deserialize, Serialize};

/// One FIFO entry of a drain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SystemEventItem {
    pub id: i64,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_key: Option<String>,
    pub enqueued_at: i64,
}

/// One pending notice: the watcher's coalesced, byte-stable line about one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NoticeItem {
    pub target_session_key: String,
    pub target_agent_id: String,
    pub last_seen: i64,
    pub context_key: String,
    pub opened_at: i64,
    pub text: String,
    /// The reconcile preview of a drain that asked for one (`previewBytes`): the delta the
    /// notice points at, one line per event, within the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

/// `POST /v1/sessions/{key}/drain` and `GET …/pending`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainAnswer {
    pub session_key: String,
    pub agent_id: String,
    pub system_events: Vec<SystemEventItem>,
    pub notices: Vec<NoticeItem>,
    /// Follow-ups this drain opened (a peek: the notices listed).
    pub pending_after: i64,
    /// One `System: [time] text` line per item, `""` when there is nothing.
    pub prompt: String,
    /// Present (true) only when a limit left items pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
}

impl DrainAnswer {
    /// The `prompt` of a drain answer, read leniently: only that field, `""` when absent. A
    /// drain has already acknowledged what it returned, so a host that shows the prompt (the
    /// hook, the MCP server) must not lose it to a field it does not need having changed in a
    /// newer gateway; the strict type is for everything else.
    pub fn prompt_of(answer: &serde_json::Value) -> &str {
        answer["prompt"].as_str().unwrap_or("")
    }
}

/// One notice entry of an acknowledgement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AckNotice {
    pub context_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<i64>,
}

/// `POST /v1/sessions/{key}/ack`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AckArgs {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<AckNotice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_event_ids: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AckAnswer {
    pub acked: i64,
    pub follow_ups: i64,
    /// Context keys that acknowledged nothing (undecodable, or a stale `lastSeen`), in request
    /// order.
    pub ignored: Vec<String>,
    pub removed_system_events: i64,
}

/// Why a session should run a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WakeReason {
    #[serde(rename = "session-state")]
    SessionState,
    #[serde(rename = "message")]
    Message,
    #[serde(rename = "spawn")]
    Spawn,
}

/// A pending target of a `session-state` wake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WakeTarget {
    pub session_key: String,
    pub agent_id: String,
}

/// The SSE `data` of a wake and the webhook body (§4.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Wake {
    /// Increases within one process; restarts at 1.
    pub id: i64,
    pub session_key: String,
    pub agent_id: String,
    pub reason: WakeReason,
    /// `session-state` only: every pending target of the watcher when it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<WakeTarget>>,
    /// `message` and `spawn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// `message` and `spawn`: the sender or the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub at: i64,
}

/// The wake as its JSON text: the SSE `data` line and the webhook body.
impl std::fmt::Display for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&text)
    }
}
