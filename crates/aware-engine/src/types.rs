//! Engine-level types: sessions, turns, runs, notices, drains, reconciliation pages.

use aware_core::{
    ActorType, AgentId, CompactEvent, CursorState, SessionKey, SessionRef, StoredEvent,
};
use aware_store::{CursorRow, GoalRow, RunRow, SessionRow, SystemEventRow, TurnRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    Main,
    Subagent,
    Adopted,
    Group,
    Cron,
    Other,
}

impl SessionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Main => "main",
            SessionKind::Subagent => "subagent",
            SessionKind::Adopted => "adopted",
            SessionKind::Group => "group",
            SessionKind::Cron => "cron",
            SessionKind::Other => "other",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        [
            SessionKind::Main,
            SessionKind::Subagent,
            SessionKind::Adopted,
            SessionKind::Group,
            SessionKind::Cron,
            SessionKind::Other,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreatedVia {
    Api,
    Spawn,
    Adoption,
    Hook,
}

impl CreatedVia {
    pub fn as_str(self) -> &'static str {
        match self {
            CreatedVia::Api => "api",
            CreatedVia::Spawn => "spawn",
            CreatedVia::Adoption => "adoption",
            CreatedVia::Hook => "hook",
        }
    }
}

/// A session as callers see it (03 §2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub row: SessionRow,
    pub state_version: i64,
    /// The upstream link, for adopted sessions that still have one.
    pub link: Option<aware_store::LinkRow>,
}

impl Session {
    pub fn key(&self) -> &str {
        &self.row.key
    }
    pub fn agent_id(&self) -> &str {
        &self.row.agent_id
    }
    pub fn status(&self) -> &'static str {
        if self.row.active_run_id.is_some() {
            "running"
        } else {
            "idle"
        }
    }
    pub fn goal(&self) -> Option<&GoalRow> {
        self.row.goal.as_ref()
    }
}

/// Who is calling: an operator (no session) or a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Operator,
    Session(SessionRef),
}

impl Caller {
    pub fn session(&self) -> Option<&SessionRef> {
        match self {
            Caller::Operator => None,
            Caller::Session(s) => Some(s),
        }
    }
}

/// Who made a change, for events that are not turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub actor_type: ActorType,
    pub actor_id: Option<String>,
}

impl Actor {
    pub fn system() -> Self {
        Actor {
            actor_type: ActorType::System,
            actor_id: None,
        }
    }
    pub fn agent(key: &SessionKey) -> Self {
        Actor {
            actor_type: ActorType::Agent,
            actor_id: Some(key.as_str().to_string()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CreateSession {
    pub key: SessionKey,
    pub agent: Option<AgentId>,
    pub kind: Option<SessionKind>,
    pub label: Option<String>,
    pub parent: Option<SessionKey>,
    pub caller: Caller,
    pub created_via: CreatedVia,
}

impl CreateSession {
    pub fn new(key: SessionKey) -> Self {
        CreateSession {
            key,
            agent: None,
            kind: None,
            label: None,
            parent: None,
            caller: Caller::Operator,
            created_via: CreatedVia::Api,
        }
    }
    pub fn parent(mut self, parent: SessionKey) -> Self {
        self.parent = Some(parent);
        self
    }
    pub fn agent(mut self, agent: AgentId) -> Self {
        self.agent = Some(agent);
        self
    }
    pub fn caller(mut self, caller: SessionRef) -> Self {
        self.caller = Caller::Session(caller);
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvenanceKind {
    Human,
    InterSession,
    InternalSystem,
}

impl ProvenanceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProvenanceKind::Human => "human",
            ProvenanceKind::InterSession => "inter_session",
            ProvenanceKind::InternalSystem => "internal_system",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub kind: ProvenanceKind,
    pub human_id: Option<String>,
    pub source_session_key: Option<SessionKey>,
    pub source_tool: Option<String>,
}

impl Provenance {
    pub fn human() -> Self {
        Provenance {
            kind: ProvenanceKind::Human,
            human_id: None,
            source_session_key: None,
            source_tool: None,
        }
    }
    pub fn inter_session(source: SessionKey, tool: Option<&str>) -> Self {
        Provenance {
            kind: ProvenanceKind::InterSession,
            human_id: None,
            source_session_key: Some(source),
            source_tool: tool.map(str::to_string),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    Tool,
    Compaction,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Compaction => "compaction",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            "compaction" => Some(Role::Compaction),
            _ => None,
        }
    }
}

/// A turn to post (03 §4.2).
#[derive(Debug, Clone)]
pub struct NewTurn {
    pub role: Role,
    pub text: String,
    /// `None` means human.
    pub provenance: Option<Provenance>,
    pub channel: Option<String>,
    pub run_id: Option<String>,
    pub occurred_at: Option<i64>,
    pub idempotency_key: Option<String>,
    pub upstream_text: Option<String>,
    /// `import` or `hook`.
    pub origin: Option<String>,
}

impl NewTurn {
    pub fn user(text: impl Into<String>) -> Self {
        NewTurn {
            role: Role::User,
            text: text.into(),
            provenance: None,
            channel: None,
            run_id: None,
            occurred_at: None,
            idempotency_key: None,
            upstream_text: None,
            origin: None,
        }
    }
    pub fn channel(mut self, channel: &str) -> Self {
        self.channel = Some(channel.to_string());
        self
    }
    pub fn role(mut self, role: Role) -> Self {
        self.role = role;
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub turn: TurnRow,
    pub event: Option<StoredEvent>,
    pub duplicate: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    Ok,
    Error,
    Timeout,
    Cancelled,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Ok => "ok",
            RunOutcome::Error => "error",
            RunOutcome::Timeout => "timeout",
            RunOutcome::Cancelled => "cancelled",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ok" => Some(RunOutcome::Ok),
            "error" => Some(RunOutcome::Error),
            "timeout" => Some(RunOutcome::Timeout),
            "cancelled" => Some(RunOutcome::Cancelled),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub run: RunRow,
    pub event: Option<StoredEvent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoalStatus {
    Active,
    Complete,
}

impl GoalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GoalStatus::Active => "active",
            GoalStatus::Complete => "complete",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GoalChange {
    pub goal: Option<GoalRow>,
    pub changed: bool,
    pub event: Option<StoredEvent>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompactionOutcome {
    pub event: Option<StoredEvent>,
    pub duplicate: bool,
}

/// A pending notice (02 §8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub target_key: String,
    pub target_agent: String,
    pub last_seen: i64,
    pub context_key: String,
    pub opened_at: i64,
    pub text: String,
}

impl Notice {
    pub fn from_cursor(row: &CursorRow) -> Self {
        Notice {
            target_key: row.target_key.clone(),
            target_agent: row.target_agent.clone(),
            last_seen: row.state.last_seen,
            context_key: aware_core::notice::encode_context_key(&row.target_key),
            opened_at: row.state.notice_opened_at.unwrap_or(row.state.updated_at),
            text: aware_core::notice::notice_text(&row.target_key, row.state.last_seen),
        }
    }
}

/// The answer of drain and peek (02 §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain {
    pub session_key: String,
    pub agent_id: String,
    pub system_events: Vec<SystemEventRow>,
    pub notices: Vec<Notice>,
    pub pending_after: u64,
    pub prompt: String,
    /// A limit left FIFO entries or notices out; they stay pending for the next drain.
    pub has_more: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckNotice {
    pub context_key: String,
    pub target_agent: Option<String>,
    pub last_seen: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AckResult {
    pub acked: u64,
    pub follow_ups: u64,
    pub ignored: Vec<String>,
    pub removed_system_events: u64,
}

/// A page of `listSince` (01 §10).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateChanges {
    pub events: Vec<CompactEvent>,
    pub truncated: bool,
    pub earliest_available_sequence: i64,
    pub history_gap: bool,
}

/// A cursor row as shown by the watches/watchers routes.
pub type Cursor = CursorRow;

/// Convenience for tests and callers: the triple of a cursor.
pub fn triple(state: &CursorState) -> (i64, i64, i64) {
    (state.last_seen, state.notified, state.material)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PruneReport {
    pub deleted_by_age: u64,
    pub deleted_by_cap: u64,
    pub expired_cursors: u64,
    pub expired_system_events: u64,
    pub batches: u64,
}

/// What the restart sweep did (02 §12): counts only, so the report does not grow with the
/// watchers it woke (D55).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepReport {
    /// Pending cursors re-frozen.
    pub cursors: u64,
    /// Distinct watchers of those cursors.
    pub watchers: u64,
    /// `session-state` wakes requested: one per distinct eligible watcher (agent-qualified, not
    /// a subagent).
    pub woken: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnResult {
    pub run_id: String,
    pub child_key: String,
    pub child_agent: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendDispatch {
    pub run_id: String,
    pub target: SessionRef,
    /// `Some` only when `watch` was requested.
    pub watched: Option<bool>,
}
