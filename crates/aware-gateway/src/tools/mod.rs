//! The six agent tools (03 §6): `POST /v1/tools/{name}`, their JSON input schemas (the same for
//! HTTP and MCP), and the dispatch of a call to its tool by an exhaustive match on [`Tool`].

mod act;
mod args;
mod read;

use crate::body::Obj;
use crate::error::{ApiError, ApiResult};
use crate::request::{must_exist, Req};
use crate::wire;
use aware_core::SessionRef;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

/// A tool by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    SessionsSend,
    SessionStatus,
    SessionsList,
    SessionsHistory,
    SessionsSpawn,
    SessionsUnwatch,
}

impl Tool {
    const ALL: [Tool; 6] = [
        Tool::SessionsSend,
        Tool::SessionStatus,
        Tool::SessionsList,
        Tool::SessionsHistory,
        Tool::SessionsSpawn,
        Tool::SessionsUnwatch,
    ];

    fn name(self) -> &'static str {
        match self {
            Tool::SessionsSend => "sessions_send",
            Tool::SessionStatus => "session_status",
            Tool::SessionsList => "sessions_list",
            Tool::SessionsHistory => "sessions_history",
            Tool::SessionsSpawn => "sessions_spawn",
            Tool::SessionsUnwatch => "sessions_unwatch",
        }
    }

    fn parse(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }
}

pub const TOOL_NAMES: [&str; 6] = [
    "sessions_send",
    "session_status",
    "sessions_list",
    "sessions_history",
    "sessions_spawn",
    "sessions_unwatch",
];

/// Names, descriptions and JSON input schemas (the same for HTTP and MCP).
pub fn list() -> Value {
    let key = json!({"type": "string", "description": "Session key, e.g. agent:main:subagent:c1"});
    let agent = json!({"type": "string", "description": "Agent of a bare session key"});
    json!({"tools": [
        {"name": "sessions_send", "description": "Send a message to another session; optionally wait for its reply and watch it for changes by other actors.",
         "inputSchema": {"type": "object", "additionalProperties": false, "required": ["message"], "properties": {
            "sessionKey": key, "label": {"type": "string", "description": "Target by label instead of key"}, "agentId": agent,
            "message": {"type": "string", "minLength": 1}, "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": 600, "default": 30},
            "watch": {"type": "boolean", "description": "Watch the receiving session: you get one notice when another actor changes it"}}}},
        {"name": "session_status", "description": "Status of a session; with changesSince, the exact state changes after that version (reconcile before acting on a notice).",
         "inputSchema": {"type": "object", "additionalProperties": false, "properties": {
            "sessionKey": key, "agentId": agent, "changesSince": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 200}}}},
        {"name": "sessions_list", "description": "List visible sessions, newest first.",
         "inputSchema": {"type": "object", "additionalProperties": false, "properties": {
            "agentId": agent, "kinds": {"type": "array", "items": {"type": "string", "enum": ["main", "subagent", "adopted", "group", "cron", "other"]}},
            "label": {"type": "string"}, "parentSessionKey": key, "excludeSubagents": {"type": "boolean"},
            "activeMinutes": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
            "offset": {"type": "integer", "minimum": 0}}}},
        {"name": "sessions_history", "description": "Messages of a session's current transcript.",
         "inputSchema": {"type": "object", "additionalProperties": false, "required": ["sessionKey"], "properties": {
            "sessionKey": key, "agentId": agent, "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
            "offset": {"type": "integer", "minimum": 0}, "includeTools": {"type": "boolean", "default": false}}}},
        {"name": "sessions_spawn", "description": "Spawn a subagent session with a task; you are told when another actor changes it.",
         "inputSchema": {"type": "object", "additionalProperties": false, "required": ["task"], "properties": {
            "task": {"type": "string", "minLength": 1}, "label": {"type": "string"}, "agentId": agent,
            "runTimeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 86400}}}},
        {"name": "sessions_unwatch", "description": "Stop watching a session (also a spawned child).",
         "inputSchema": {"type": "object", "additionalProperties": false, "required": ["sessionKey"], "properties": {
            "sessionKey": key, "agentId": agent}}}
    ]})
}

/// A tool call. The caller's existence is not checked yet: `session_status` checks it in its
/// one blocking call, every other tool before its own work; the dispatcher checks it again when
/// the call fails.
pub(crate) async fn call(
    req: &Req,
    name: &str,
    caller: Option<&SessionRef>,
) -> ApiResult<Response> {
    let Some(tool) = Tool::parse(name) else {
        return Err(ApiError::not_found(
            "unknown_tool",
            format!("unknown tool {name:?}; tools are {}", TOOL_NAMES.join(", ")),
        ));
    };
    let caller = caller.cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_caller",
            "tool calls need the X-Aware-Session header naming the calling session",
        )
    })?;
    let mut b = Obj::parse(&req.body, true)?;
    let engine = req.state.engine()?;
    if tool != Tool::SessionStatus {
        must_exist(req, "caller session", &caller).await?;
    }
    let (e, c, b) = (&engine, &caller, &mut b);
    match tool {
        Tool::SessionStatus => read::session_status(req, e, c, b).await,
        Tool::SessionsList => wire::ok(read::sessions_list(req, e, c, b).await?),
        Tool::SessionsHistory => wire::ok(read::sessions_history(req, e, c, b).await?),
        Tool::SessionsSpawn => wire::ok(act::sessions_spawn(req, e, c, b).await?),
        Tool::SessionsUnwatch => wire::ok(act::sessions_unwatch(req, e, c, b).await?),
        Tool::SessionsSend => wire::ok(act::sessions_send(req, e, c, b).await?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_schemas_and_enum_agree() {
        let names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, TOOL_NAMES);
        let listed: Vec<String> = list()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(listed, TOOL_NAMES);
        assert_eq!(Tool::parse("sessions_send"), Some(Tool::SessionsSend));
        assert_eq!(Tool::parse("nope"), None);
    }
}
