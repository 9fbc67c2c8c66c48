//! Plain row types crossing the storage boundary. Keys are canonical strings; the engine
//! validated them before they got here.

use aware_core::{ActorType, CursorState, EventKind};
use serde_json::{Map, Value};

/// An event to insert (01 §4 step 5), already validated, sanitised and clamped.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub dedupe_key: Option<String>,
    pub session_key: String,
    pub session_id: Option<String>,
    pub agent_id: String,
    pub kind: EventKind,
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
    pub run_id: Option<String>,
    pub occurred_at: i64,
    pub summary: String,
    pub payload: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRow {
    pub last_sequence: i64,
    pub pruned_max_sequence: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorRow {
    pub watcher: String,
    pub target_key: String,
    pub target_agent: String,
    pub state: CursorState,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemEventRow {
    pub id: i64,
    pub text: String,
    pub context_key: Option<String>,
    pub enqueued_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalRow {
    pub text: String,
    /// `active` or `complete`.
    pub status: String,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub key: String,
    pub agent_id: String,
    pub session_id: String,
    pub kind: String,
    pub label: Option<String>,
    pub parent_key: Option<String>,
    pub created_via: String,
    pub active_run_id: Option<String>,
    pub goal: Option<GoalRow>,
    pub orphaned: bool,
    pub created_at: i64,
    pub updated_at: i64,
    /// Where an adopted session came from; kept after its link is removed.
    pub upstream: Option<UpstreamSource>,
}

/// The catalog source of an adopted session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSource {
    pub catalog_id: String,
    pub host_id: String,
    pub thread_id: String,
}

/// A row of `session_upstream_links` (01 §2.5). `updated_at` is the optimistic-lock token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRow {
    pub session_key: String,
    pub agent_id: String,
    pub catalog_id: String,
    pub host_id: String,
    pub thread_id: String,
    pub upstream_kind: String,
    /// Canonical JSON (compact, keys sorted) of the physical source.
    pub upstream_ref_json: String,
    pub last_marker_json: Option<String>,
    pub last_scanned_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRow {
    pub id: String,
    pub index: i64,
    pub role: String,
    pub text: String,
    pub at: i64,
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
    /// JSON object `{kind, sourceSessionKey?, sourceTool?, humanId?}`.
    pub provenance_json: String,
    pub channel: Option<String>,
    pub run_id: Option<String>,
    pub origin: Option<String>,
    pub upstream_text: Option<String>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub run_id: String,
    pub session_key: String,
    pub agent_id: String,
    pub session_id: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub outcome: Option<String>,
    pub deadline_at: Option<i64>,
    /// Sequence of the terminal event, so an idempotent repeat answers the same event.
    pub event_sequence: Option<i64>,
}

/// Filter of a session list, ordered by `updated_at` descending, then key, then agent.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only these agents (empty: all).
    pub agents: Vec<String>,
    pub kinds: Vec<String>,
    pub parent_key: Option<String>,
    pub label: Option<String>,
    pub updated_since: Option<i64>,
    /// Leave out sessions of this kind (the engine passes `subagent` for `excludeSubagents`).
    pub kind_not: Option<String>,
    pub limit: u32,
    pub offset: u64,
}

/// What one prune batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchResult {
    pub deleted: u64,
}

/// What one restart-sweep batch did (02 §12).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepBatch {
    /// The highest row id re-frozen (where the next batch starts); `None` when nothing was left.
    pub last: Option<i64>,
    /// Cursors re-frozen by this batch.
    pub cursors: u64,
    /// The watchers this batch finished: each watcher whose highest-numbered pending cursor
    /// (non-muted) is in this batch, once, in row order. All of its pending cursors are
    /// re-frozen once this batch commits, so its wake may go out then (02 §12 step 3). Over a
    /// whole sweep that pages forward with no other writes between batches, every swept
    /// watcher is listed exactly once, so the caller keeps no set of the watchers seen.
    pub finished_watchers: Vec<String>,
}

/// The sort column of a console session page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConsoleSort {
    #[default]
    Updated,
    Key,
    Agent,
    Kind,
    LastEvent,
    StateVersion,
    PendingAsWatcher,
    PendingAsTarget,
}

/// A console session page: filters, sort and window (all filters are ANDed).
#[derive(Debug, Clone, Default)]
pub struct ConsoleFilter {
    /// Only these agents; empty means every agent.
    pub agents: Vec<String>,
    pub kind: Option<String>,
    /// Case-insensitive substring of the key or the label.
    pub text: Option<String>,
    /// Only these (key, agent) pairs; empty means no restriction.
    pub keys: Vec<(String, String)>,
    pub sort: ConsoleSort,
    pub descending: bool,
    pub limit: u32,
    pub offset: u64,
}

/// One row of the console's session table: the session and what the table shows about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleRow {
    pub session: SessionRow,
    pub state_version: i64,
    pub last_event_at: Option<i64>,
    pub last_event_kind: Option<String>,
    /// Pending notices this session holds as a watcher.
    pub pending_as_watcher: u64,
    /// Pending notices other sessions hold on this one.
    pub pending_as_target: u64,
    /// The newest event with a human actor still in the log.
    pub last_human_at: Option<i64>,
    pub link_last_scanned_at: Option<i64>,
}

/// Row counts behind the gauges of `GET /metrics`, read in one snapshot at scrape time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreGauges {
    /// Rows of `sessions`.
    pub sessions: u64,
    /// Distinct watcher sessions that hold at least one cursor (muted or not).
    pub watchers: u64,
    /// Pending notices: non-muted cursors with `notified > last_seen` (as `count_pending`).
    pub pending: u64,
}

/// One `listSince` page read by [`crate::SqliteStore::state_page`]: up to `limit` compact
/// events, the stream's head (`updated_at` left 0) and its earliest retained sequence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatePage {
    pub events: Vec<aware_core::CompactEvent>,
    pub head: Option<HeadRow>,
    pub earliest: Option<i64>,
}
