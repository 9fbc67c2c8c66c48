//! The objects of the session routes (docs/api.md §1.9) and the answers made of them: sessions,
//! turns, events, runs, watch cursors. Field order is the order on the wire; `Option` fields are
//! left out when they have no value.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A session's goal.
pub use crate::tools::SessionGoal as Goal;

/// What an adopted session follows upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Upstream {
    pub catalog_id: String,
    pub host_id: String,
    pub thread_id: String,
    pub linked: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scanned_at: Option<i64>,
}

/// The session object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub key: String,
    pub agent_id: String,
    pub session_id: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_key: Option<String>,
    /// Present (true) once the parent was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned: Option<bool>,
    pub created_via: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
    pub state_version: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// `POST /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedSession {
    pub created: bool,
    pub session: Session,
}

/// `GET /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionPage {
    pub sessions: Vec<Session>,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<i64>,
}

/// Where a turn came from. Kept as the stored object (its fields depend on `kind`).
pub type Provenance = Map<String, Value>;

/// The turn object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    pub id: String,
    pub index: i64,
    pub role: String,
    pub text: String,
    pub at: i64,
    pub actor_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    pub provenance: Provenance,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_text: Option<String>,
}

/// `GET /v1/sessions/{key}/turns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnPage {
    pub turns: Vec<Turn>,
    pub has_more: bool,
    pub truncated: bool,
}

/// An event of the signal log, in full form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub sequence: i64,
    pub session_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub agent_id: String,
    pub kind: String,
    pub actor_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub occurred_at: i64,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Map<String, Value>>,
}

/// `POST /v1/sessions/{key}/turns`: the stored turn, and the event it recorded (a human turn)
/// or `duplicate: true` (a repeated idempotency key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostedTurn {
    pub turn: Turn,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
}

/// `PUT` and `DELETE /v1/sessions/{key}/goal`: whether anything changed, the goal now (a `PUT`),
/// and the `goal_changed` event recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalChange {
    pub changed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
}

/// The run object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub run_id: String,
    pub session_key: String,
    pub agent_id: String,
    pub session_id: String,
    pub started_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// A watch cursor: one watcher's view of one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cursor {
    pub watcher_session_key: String,
    pub target_session_key: String,
    pub target_agent_id: String,
    pub last_seen: i64,
    pub notified: i64,
    pub material: i64,
    pub pending: bool,
    pub muted: bool,
    pub origin: String,
    pub updated_at: i64,
}

/// `POST /v1/sessions/{key}/reset`: the session with its new id, and the id it had.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetSession {
    pub session: Session,
    pub previous_session_id: String,
}

/// `DELETE /v1/sessions/{key}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: bool,
}

/// `POST …/runs` (the run) and `POST …/runs/{id}/end` (the run, and the event its end recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunAnswer {
    pub run: Run,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
}

/// `POST …/compaction`: the event recorded, or `duplicate: true` for a repeated key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
}

/// `POST …/replies`: the run ids of the messages the text answered (oldest first; empty when
/// none was open).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replied {
    pub replied: Vec<String>,
}

/// `POST …/system-events`: the new entry's id, or `deduped: true` when an equal entry was
/// already queued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SystemEventEnqueued {
    Queued { id: i64 },
    Deduped { deduped: bool },
}

/// `GET …/watches`: the cursors this session holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchesPage {
    pub has_more: bool,
    pub watches: Vec<Cursor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<i64>,
}

/// `GET …/watchers`: the cursors held on this session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchersPage {
    pub has_more: bool,
    pub watchers: Vec<Cursor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<i64>,
}

/// `POST …/watches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Watched {
    pub watched: bool,
    pub cursor: Cursor,
}

/// `DELETE …/watches/{target}`: whether a cursor was removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unwatched {
    pub unwatched: bool,
}

/// The body of `POST /v1/sessions` (the gateway answers [`CreatedSession`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionArgs {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// The body of `POST /v1/sessions/{key}/turns` (the gateway answers [`PostedTurn`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostTurnArgs {
    /// `user`, `assistant` or `tool`.
    pub role: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// The body of `POST /v1/sessions/{key}/watches` (the gateway answers [`Watched`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchArgs {
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent_id: Option<String>,
}
