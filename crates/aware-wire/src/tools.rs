//! The six agent tools (docs/api.md §3): names, descriptions, hints, argument and answer types,
//! and the JSON schemas generated from those types.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// An agent tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    SessionsSend,
    SessionStatus,
    SessionsList,
    SessionsHistory,
    SessionsSpawn,
    SessionsUnwatch,
}

/// What an MCP client may assume of a tool (none reaches outside the hub, so `openWorldHint` is
/// false for all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolHints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
}

impl Tool {
    /// In the order `GET /v1/tools` lists them.
    pub const ALL: [Tool; 6] = [
        Tool::SessionsSend,
        Tool::SessionStatus,
        Tool::SessionsList,
        Tool::SessionsHistory,
        Tool::SessionsSpawn,
        Tool::SessionsUnwatch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tool::SessionsSend => "sessions_send",
            Tool::SessionStatus => "session_status",
            Tool::SessionsList => "sessions_list",
            Tool::SessionsHistory => "sessions_history",
            Tool::SessionsSpawn => "sessions_spawn",
            Tool::SessionsUnwatch => "sessions_unwatch",
        }
    }

    pub fn parse(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The names, comma-separated, for messages that list them.
    pub fn names() -> String {
        Tool::ALL.map(Tool::name).join(", ")
    }

    /// What the model reads to decide whether to call the tool.
    pub fn description(self) -> &'static str {
        match self {
            Tool::SessionsSend => "Send a message to another session; optionally wait for its reply and watch it for changes by other actors.",
            Tool::SessionStatus => "Status of a session; with changesSince, the exact state changes after that version (reconcile before acting on a notice).",
            Tool::SessionsList => "List visible sessions, newest first.",
            Tool::SessionsHistory => "Messages of a session's current transcript.",
            Tool::SessionsSpawn => "Spawn a subagent session with a task; you are told when another actor changes it.",
            Tool::SessionsUnwatch => "Stop watching a session (also a spawned child).",
        }
    }

    /// The MCP `title`.
    pub fn title(self) -> &'static str {
        match self {
            Tool::SessionsSend => "Send to a session",
            Tool::SessionStatus => "Session status",
            Tool::SessionsList => "List sessions",
            Tool::SessionsHistory => "Session history",
            Tool::SessionsSpawn => "Spawn a sub-agent session",
            Tool::SessionsUnwatch => "Stop watching a session",
        }
    }

    pub fn hints(self) -> ToolHints {
        let (read_only, destructive, idempotent) = match self {
            Tool::SessionStatus | Tool::SessionsList | Tool::SessionsHistory => (true, false, true),
            Tool::SessionsSend | Tool::SessionsSpawn => (false, false, false),
            // Unwatching twice leaves the same state; it removes a watch, so it is destructive.
            Tool::SessionsUnwatch => (false, true, true),
        };
        ToolHints {
            read_only,
            destructive,
            idempotent,
        }
    }

    /// The JSON schema of the arguments, as `GET /v1/tools` and MCP `tools/list` publish it.
    pub fn input_schema(self) -> Value {
        match self {
            Tool::SessionsSend => schema::<SessionsSendArgs>(),
            Tool::SessionStatus => schema::<SessionStatusArgs>(),
            Tool::SessionsList => schema::<SessionsListArgs>(),
            Tool::SessionsHistory => schema::<SessionsHistoryArgs>(),
            Tool::SessionsSpawn => schema::<SessionsSpawnArgs>(),
            Tool::SessionsUnwatch => schema::<SessionsUnwatchArgs>(),
        }
    }

    /// The JSON schema of the answer (MCP `outputSchema`). Answers are open: a client must
    /// accept fields added later, and the MCP server adds `awareNotices`.
    pub fn output_schema(self) -> Value {
        match self {
            Tool::SessionsSend => schema::<SessionsSendResult>(),
            Tool::SessionStatus => schema::<SessionStatusResult>(),
            Tool::SessionsList => schema::<SessionsListResult>(),
            Tool::SessionsHistory => schema::<SessionsHistoryResult>(),
            Tool::SessionsSpawn => schema::<SessionsSpawnResult>(),
            Tool::SessionsUnwatch => schema::<SessionsUnwatchResult>(),
        }
    }

    /// `GET /v1/tools`: `{"tools": [{name, description, inputSchema}]}`.
    pub fn list() -> Value {
        let tools: Vec<Value> = Tool::ALL
            .iter()
            .map(|t| {
                json!({"name": t.name(), "description": t.description(), "inputSchema": t.input_schema()})
            })
            .collect();
        json!({ "tools": tools })
    }
}

/// The schema of `T` with everything inlined and without the generator's own annotations
/// (`$schema`, `title`, integer `format`s, `default: null` of optional fields) or the types' doc
/// comments (written for Rust readers; an enum's values describe it), so it reads like the
/// API's tables.
fn schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut v: Value = generator.into_root_schema_for::<T>().into();
    if let Value::Object(m) = &mut v {
        m.remove("description");
    }
    tidy(&mut v);
    v
}

fn tidy(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("$schema");
            m.remove("title");
            m.remove("format");
            if m.get("default").is_some_and(Value::is_null) {
                m.remove("default");
            }
            if m.contains_key("enum") {
                m.remove("description");
            }
            // `properties` holds field names, not schema keywords: only its values are tidied.
            for (k, x) in m.iter_mut() {
                if k == "properties" {
                    if let Value::Object(props) = x {
                        props.values_mut().for_each(tidy);
                    }
                } else {
                    tidy(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(tidy),
        _ => {}
    }
}

// ---- Arguments -------------------------------------------------------------------------------
//
// `Option` fields are optional and left out when `None`; `#[schemars(with = ...)]` keeps a
// `null` out of their schema, since the gateway refuses `null` for a typed parameter. Integers
// are `i64` as on the wire: the gateway checks the ranges and says what it accepts, so a client
// passes on what its user gave.

/// `sessions_send` (§3.1). Exactly one of `session_key` and `label`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsSendArgs {
    /// Session key, e.g. agent:main:subagent:c1
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub session_key: Option<String>,
    /// Target by label instead of key
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub label: Option<String>,
    /// Agent of a bare session key
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub agent_id: Option<String>,
    #[schemars(length(min = 1))]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 0, max = 600), extend("default" = 30))]
    pub timeout_seconds: Option<i64>,
    /// Watch the receiving session: you get one notice when another actor changes it
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub watch: Option<bool>,
}

/// `session_status` (§3.2). Without `session_key`, the caller's own session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionStatusArgs {
    /// Session key, e.g. agent:main:subagent:c1
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub session_key: Option<String>,
    /// Agent of a bare session key
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 0))]
    pub changes_since: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 1, max = 200), extend("default" = 200))]
    pub limit: Option<i64>,
}

/// A session's kind (§1.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    Main,
    Subagent,
    Adopted,
    Group,
    Cron,
    Other,
}

impl SessionKind {
    /// The kind a stored session names; `None` for a name this version does not know.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "main" => Self::Main,
            "subagent" => Self::Subagent,
            "adopted" => Self::Adopted,
            "group" => Self::Group,
            "cron" => Self::Cron,
            "other" => Self::Other,
            _ => return None,
        })
    }

    /// The kind's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Main => "main",
            Self::Subagent => "subagent",
            Self::Adopted => "adopted",
            Self::Group => "group",
            Self::Cron => "cron",
            Self::Other => "other",
        }
    }
}

/// `sessions_list` (§3.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsListArgs {
    /// Agent of a bare session key
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Strings rather than `SessionKind`s, so a CLI passes what its user typed and the gateway
    // says what is accepted; the schema lists the kinds.
    #[schemars(with = "Vec<SessionKind>")]
    pub kinds: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub label: Option<String>,
    /// Session key, e.g. agent:main:subagent:c1
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub parent_session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub exclude_subagents: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 1))]
    pub active_minutes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 1, max = 200), extend("default" = 50))]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 0))]
    pub offset: Option<i64>,
}

/// `sessions_history` (§3.4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsHistoryArgs {
    /// Session key, e.g. agent:main:subagent:c1
    pub session_key: String,
    /// Agent of a bare session key
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 1, max = 200), extend("default" = 50))]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 0))]
    pub offset: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool", extend("default" = false))]
    pub include_tools: Option<bool>,
}

/// `sessions_spawn` (§3.5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsSpawnArgs {
    #[schemars(length(min = 1))]
    pub task: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub label: Option<String>,
    /// Agent of a bare session key
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64", range(min = 1, max = 86400))]
    pub run_timeout_seconds: Option<i64>,
}

/// `sessions_unwatch` (§3.6).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsUnwatchArgs {
    /// Session key, e.g. agent:main:subagent:c1
    pub session_key: String,
    /// Agent of a bare session key
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub agent_id: Option<String>,
}

// ---- Answers ---------------------------------------------------------------------------------
//
// Field order is the order on the wire (§1.9), so an answer read into these types and written
// back is the same JSON text. Unknown fields are kept out of the types but not refused: a newer
// gateway may add one.

/// How a `sessions_send` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SendStatus {
    // Plain comments, not doc comments: documented variants would turn the schema's `enum`
    // into a `oneOf` of constants.
    // Sent; the call did not wait (`timeoutSeconds` 0).
    Accepted,
    // The target replied: `reply`.
    Ok,
    // No reply within `timeoutSeconds`.
    Timeout,
    // The target's run ended without a reply.
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsSendResult {
    pub run_id: String,
    pub status: SendStatus,
    pub session_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub reply: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub error: Option<String>,
    /// The message was stored before the wait failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub sent_before_error: Option<bool>,
    /// Present exactly when `watch: true` was passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub watched: Option<bool>,
}

/// A session's goal (§1.9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionGoal {
    pub text: String,
    /// `active` or `complete`.
    pub status: String,
    pub updated_at: i64,
}

/// One event of a `stateChanges` page, in compact form (§1.9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateChangeEvent {
    pub sequence: i64,
    pub kind: String,
    pub actor_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub actor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub run_id: Option<String>,
    pub occurred_at: i64,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Map<String, Value>")]
    pub payload: Option<Map<String, Value>>,
}

/// The exact changes after a version (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateChanges {
    pub events: Vec<StateChangeEvent>,
    /// More events follow.
    pub truncated: bool,
    pub earliest_available_sequence: i64,
    /// The requested version predates retained history: refresh fully.
    pub history_gap: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatusResult {
    pub ok: bool,
    pub session_key: String,
    pub agent_id: String,
    pub session_id: String,
    pub kind: SessionKind,
    /// `idle` or `running`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub parent_session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "SessionGoal")]
    pub goal: Option<SessionGoal>,
    pub state_version: i64,
    /// Only with `changesSince`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "StateChanges")]
    pub state_changes: Option<StateChanges>,
    /// The text shown to the model.
    pub status_text: String,
}

/// One row of `sessions_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRow {
    pub key: String,
    pub session_id: String,
    pub agent_id: String,
    pub kind: SessionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub parent_session_key: Option<String>,
    pub status: String,
    pub updated_at: i64,
    /// Present only when greater than 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64")]
    pub state_version: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsListResult {
    /// Rows on this page.
    pub count: u64,
    pub has_more: bool,
    pub sessions: Vec<SessionRow>,
    /// Present when `hasMore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64")]
    pub next_offset: Option<i64>,
}

/// One message of `sessions_history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryMessage {
    pub index: i64,
    pub role: String,
    pub text: String,
    pub at: i64,
    pub actor_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub actor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub origin: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsHistoryResult {
    pub session_key: String,
    pub agent_id: String,
    pub messages: Vec<HistoryMessage>,
    pub truncated: bool,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "i64")]
    pub next_offset: Option<i64>,
    /// Every turn of the incarnation, tool turns included.
    pub total_messages: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsSpawnResult {
    /// `accepted`.
    pub status: String,
    pub run_id: String,
    pub child_session_key: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsUnwatchResult {
    /// `ok`.
    pub status: String,
    pub session_key: String,
    pub agent_id: String,
    /// False when nothing was written.
    pub unwatched: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_kinds_parse_back_and_match_serde() {
        for k in [
            SessionKind::Main,
            SessionKind::Subagent,
            SessionKind::Adopted,
            SessionKind::Group,
            SessionKind::Cron,
            SessionKind::Other,
        ] {
            assert_eq!(SessionKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }

    #[test]
    fn names_parse_back_and_are_unique() {
        for t in Tool::ALL {
            assert_eq!(Tool::parse(t.name()), Some(t));
        }
        assert_eq!(Tool::parse("session-status"), None);
        let mut names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
        names.dedup();
        assert_eq!(names.len(), 6);
    }

    #[test]
    fn input_schemas_are_closed_objects_without_nulls() {
        for t in Tool::ALL {
            let s = t.input_schema();
            assert_eq!(s["type"], "object", "{}", t.name());
            assert_eq!(s["additionalProperties"], false, "{}", t.name());
            let text = s.to_string();
            assert!(!text.contains("null"), "{}: {text}", t.name());
            assert!(!text.contains("\"title\""), "{}: {text}", t.name());
            assert!(!text.contains("$ref"), "{}: {text}", t.name());
        }
    }

    #[test]
    fn send_schema_reads_like_the_table() {
        let s = Tool::SessionsSend.input_schema();
        assert_eq!(s["required"], json!(["message"]));
        assert_eq!(
            s["properties"]["timeoutSeconds"],
            json!({"type": "integer", "minimum": 0, "maximum": 600, "default": 30})
        );
        assert_eq!(
            s["properties"]["message"],
            json!({"type": "string", "minLength": 1})
        );
        let kinds = &Tool::SessionsList.input_schema()["properties"]["kinds"];
        assert_eq!(kinds["type"], "array");
        assert_eq!(
            kinds["items"]["enum"],
            json!(["main", "subagent", "adopted", "group", "cron", "other"])
        );
    }

    #[test]
    fn typed_arguments_write_only_what_was_set() {
        let a = SessionStatusArgs {
            session_key: Some("agent:main:subagent:c1".into()),
            changes_since: Some(3),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&a).ok(),
            Some(json!({"sessionKey": "agent:main:subagent:c1", "changesSince": 3}))
        );
        let bad: Result<SessionStatusArgs, _> = serde_json::from_value(json!({"since": 1}));
        assert!(bad.is_err());
    }
}
