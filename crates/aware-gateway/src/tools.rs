//! The six agent tools (03 §6): `POST /v1/tools/{name}` and their JSON input schemas.

use crate::body::Obj;
use crate::error::{ApiError, ApiResult};
use crate::routes::{check_visible, parse_agent, parse_key, resolve_ref};
use crate::server::{blocking, Req};
use crate::wire;
use aware_core::SessionRef;
use aware_engine::{Engine, Session, StateChanges};
use aware_store::SessionFilter;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One of the `[limits] max_reply_waiters` slots of `sessions_send` waiters; freed on drop
/// (also when the caller goes away mid-wait).
struct WaiterSlot(crate::server::Shared);

impl WaiterSlot {
    fn take(req: &Req) -> ApiResult<Self> {
        let max = req.state.config.limits.max_reply_waiters;
        req.state
            .reply_waiters
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| {
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_waiters",
                    format!(
                        "{max} sessions_send calls are already waiting for replies (the limit, \
                         [limits] max_reply_waiters); nothing was sent: retry later, or send \
                         with timeoutSeconds 0 and read the reply with sessions_history"
                    ),
                )
            })?;
        Ok(WaiterSlot(req.state.clone()))
    }
}

impl Drop for WaiterSlot {
    fn drop(&mut self) {
        self.0.reply_waiters.fetch_sub(1, Ordering::SeqCst);
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

const MAX_HISTORY_TEXT: usize = 4000;
const MAX_HISTORY_PAGE_BYTES: usize = 80 * 1024;

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

fn ok(v: Value) -> ApiResult<Response> {
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

pub(crate) async fn call(
    req: &Req,
    name: &str,
    caller: Option<&SessionRef>,
) -> ApiResult<Response> {
    if !TOOL_NAMES.contains(&name) {
        return Err(ApiError::not_found(
            "unknown_tool",
            format!("unknown tool {name:?}; tools are {}", TOOL_NAMES.join(", ")),
        ));
    }
    let caller = caller.cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_caller",
            "tool calls need the X-Aware-Session header naming the calling session",
        )
    })?;
    let mut b = Obj::parse(&req.body, true)?;
    let engine = req.state.engine()?;
    match name {
        "session_status" => session_status(req, &engine, &caller, &mut b).await,
        "sessions_list" => ok(sessions_list(req, &engine, &caller, &mut b).await?),
        "sessions_history" => ok(sessions_history(req, &engine, &caller, &mut b).await?),
        "sessions_spawn" => ok(sessions_spawn(req, &engine, &caller, &mut b).await?),
        "sessions_unwatch" => ok(sessions_unwatch(req, &engine, &caller, &mut b).await?),
        _ => ok(sessions_send(req, &engine, &caller, &mut b).await?),
    }
}

/// Resolves `sessionKey` + `agentId` of a tool call (the caller when absent) and checks
/// visibility; existence is left to the caller's blocking read.
fn target_unchecked(req: &Req, caller: &SessionRef, b: &mut Obj) -> ApiResult<SessionRef> {
    let key = b
        .opt_str("sessionKey")?
        .map(|k| parse_key(&k))
        .transpose()?;
    let agent = b
        .opt_str("agentId")?
        .map(|a| parse_agent("agentId", &a))
        .transpose()?;
    let r = match key {
        Some(k) => resolve_ref(req, &k, agent.as_ref(), Some(caller))?,
        None => caller.clone(),
    };
    check_visible(req, Some(caller), r.key.as_str(), r.agent.as_str())?;
    Ok(r)
}

fn not_found(r: &SessionRef) -> ApiError {
    ApiError::not_found(
        "session_not_found",
        format!("session \"{}\" does not exist", r.key),
    )
}

/// Resolves `sessionKey` + `agentId` of a tool call, checks visibility and existence.
async fn target(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
    required: bool,
) -> ApiResult<SessionRef> {
    let key = match b.opt_str("sessionKey")? {
        Some(k) => Some(parse_key(&k)?),
        None if required => return Err(ApiError::invalid("sessionKey is required (a string)")),
        None => None,
    };
    let agent = b
        .opt_str("agentId")?
        .map(|a| parse_agent("agentId", &a))
        .transpose()?;
    let r = match key {
        Some(k) => resolve_ref(req, &k, agent.as_ref(), Some(caller))?,
        None => caller.clone(),
    };
    check_visible(req, Some(caller), r.key.as_str(), r.agent.as_str())?;
    let (e, r2) = (engine.clone(), r.clone());
    if !blocking(move || Ok(e.session_exists(&r2)?)).await? {
        return Err(ApiError::not_found(
            "session_not_found",
            format!("session \"{}\" does not exist", r.key),
        ));
    }
    Ok(r)
}

pub fn status_text(s: &Session, state_version: i64, changes: Option<&StateChanges>) -> String {
    let r = &s.row;
    let mut t = format!(
        "Session {} (agent {}, kind {})\nStatus: {}\n",
        r.key,
        r.agent_id,
        r.kind,
        s.status()
    );
    if let Some(p) = &r.parent_key {
        t.push_str(&format!("Parent: {p}\n"));
    }
    if let Some(g) = &r.goal {
        t.push_str(&format!("Goal: {} [{}]\n", g.text, g.status));
    }
    t.push_str(&format!("State version: {state_version}"));
    if let Some(c) = changes {
        // The same keys in the same order as the answer's `stateVersion` and `stateChanges`,
        // serialised from the page itself rather than from a copy of its JSON value.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Block<'a> {
            state_version: i64,
            state_changes: wire::StateChangesJson<'a>,
        }
        let block = Block {
            state_version,
            state_changes: wire::StateChangesJson(c),
        };
        let pretty = serde_json::to_string_pretty(&block).unwrap_or_default();
        t.push_str(&format!(
            "\n\nSession state changes:\n```json\n{pretty}\n```"
        ));
    }
    t
}

/// The `session_status` answer: the session's fields, then the page and the text, written
/// straight from the engine's page (no intermediate `Value` for the events).
#[derive(serde::Serialize)]
struct StatusAnswer<'a> {
    #[serde(flatten)]
    head: Value,
    #[serde(rename = "stateChanges", skip_serializing_if = "Option::is_none")]
    state_changes: Option<wire::StateChangesJson<'a>>,
    #[serde(rename = "statusText")]
    status_text: String,
}

async fn session_status(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Response> {
    let since = b.opt_int(
        "changesSince",
        0..=i64::MAX,
        "changesSince must be a non-negative integer",
    )?;
    let limit = b.opt_int(
        "limit",
        1..=200,
        "limit must be an integer between 1 and 200",
    )?;
    // One blocking hop for the whole read (it was three: target exists, then the session,
    // its version and the page). Errors keep their order: a missing target first, then the
    // body's own errors, both before anything else is read.
    let t = target_unchecked(req, caller, b)?;
    let valid = b_finish(b).and_then(|()| {
        if limit.is_some() && since.is_none() {
            Err(ApiError::invalid("limit requires changesSince"))
        } else {
            Ok(())
        }
    });
    let e = engine.clone();
    let (session, changes) = blocking(move || {
        // The session row is the existence check (one read fewer than `session_exists`).
        let s = match e.get_session(&t) {
            Err(aware_engine::EngineError::SessionNotFound(_)) => return Err(not_found(&t)),
            other => other?,
        };
        valid?;
        let c = match since {
            Some(after) => Some(e.list_since(&t, after, limit.unwrap_or(200) as u32)?),
            None => None,
        };
        Ok((s, c))
    })
    .await?;
    // The session row's head, read with the row (`version` read it again before).
    let version = session.state_version;
    let r = &session.row;
    let mut out = json!({"ok": true, "sessionKey": r.key, "agentId": r.agent_id, "sessionId": r.session_id, "kind": r.kind, "status": session.status()});
    if let Some(l) = &r.label {
        out["label"] = l.clone().into();
    }
    if let Some(p) = &r.parent_key {
        out["parentSessionKey"] = p.clone().into();
    }
    if let Some(g) = &r.goal {
        out["goal"] = json!({"text": g.text, "status": g.status, "updatedAt": g.updated_at});
    }
    out["stateVersion"] = version.into();
    let answer = StatusAnswer {
        head: out,
        state_changes: changes.as_ref().map(wire::StateChangesJson),
        status_text: status_text(&session, version, changes.as_ref()),
    };
    Ok((StatusCode::OK, axum::Json(answer)).into_response())
}

fn b_finish(b: &mut Obj) -> ApiResult<()> {
    std::mem::replace(b, Obj::from_map(Default::default())).finish()
}

async fn sessions_list(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Value> {
    let mut filter = SessionFilter::default();
    if let Some(a) = b.opt_str("agentId")? {
        let a = parse_agent("agentId", &a)?;
        if !req.state.config.visible(caller.agent.as_str(), a.as_str()) {
            return Err(ApiError::forbidden(format!(
                "agent \"{}\" may not access agent \"{}\"",
                caller.agent, a
            )));
        }
        filter.agents = vec![a.as_str().into()];
    } else {
        filter.agents = crate::routes::visible_agents(req, caller);
    }
    for k in b.opt_array("kinds")?.unwrap_or_default() {
        match k.as_str() {
            Some(s) if aware_engine::SessionKind::parse(s).is_some() => filter.kinds.push(s.into()),
            _ => {
                return Err(ApiError::invalid(
                    "kinds must be an array of main, subagent, adopted, group, cron, other",
                ))
            }
        }
    }
    filter.label = b.opt_str("label")?;
    filter.parent_key = b
        .opt_str("parentSessionKey")?
        .map(|p| parse_key(&p).map(|k| k.as_str().to_string()))
        .transpose()?;
    if b.opt_bool("excludeSubagents")?.unwrap_or(false) {
        filter.kind_not = Some("subagent".into());
    }
    let active = b.opt_int(
        "activeMinutes",
        1..=i64::MAX / 60_000,
        "activeMinutes must be an integer of at least 1",
    )?;
    let limit = b
        .opt_int(
            "limit",
            1..=200,
            "limit must be an integer between 1 and 200",
        )?
        .unwrap_or(50);
    let offset = b
        .opt_int(
            "offset",
            0..=i64::MAX,
            "offset must be a non-negative integer",
        )?
        .unwrap_or(0);
    b_finish(b)?;
    if let Some(m) = active {
        filter.updated_since = Some(req.state.now() - m * 60_000);
    }
    filter.limit = limit as u32 + 1;
    filter.offset = offset as u64;
    let e = engine.clone();
    let mut rows = blocking(move || Ok(e.list_sessions(&filter)?)).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
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
        out["nextOffset"] = (offset + limit).into();
    }
    Ok(out)
}

async fn sessions_history(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Value> {
    let limit = b
        .opt_int(
            "limit",
            1..=200,
            "limit must be an integer between 1 and 200",
        )?
        .unwrap_or(50) as usize;
    let offset = b.opt_int(
        "offset",
        0..=i64::MAX,
        "offset must be a non-negative integer",
    )?;
    let include_tools = b.opt_bool("includeTools")?.unwrap_or(false);
    let t = target(req, engine, caller, b, true).await?;
    b_finish(b)?;
    let e = engine.clone();
    let t2 = t.clone();
    // Paged in SQL with texts cut there: a long transcript is never loaded whole. From an
    // offset, one row past the page says whether more follow.
    let fetch = (if offset.is_some() { limit + 1 } else { limit }) as u32;
    let (mut rows, total) = blocking(move || {
        Ok(e.history_page(&t2, offset, include_tools, fetch, MAX_HISTORY_TEXT as u32)?)
    })
    .await?;
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    let next_offset = rows.last().map(|x| x.index + 1);
    let mut page: Vec<Value> = rows
        .iter()
        .map(|x| {
            let text = if x.text.chars().count() > MAX_HISTORY_TEXT {
                format!("{}…[truncated]", x.text.chars().take(MAX_HISTORY_TEXT).collect::<String>())
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
            if let Some(o) = &x.origin {
                m["origin"] = o.clone().into();
            }
            m
        })
        .collect();
    let mut truncated = false;
    while !page.is_empty()
        && serde_json::to_vec(&page).map_or(0, |v| v.len()) > MAX_HISTORY_PAGE_BYTES
    {
        page.remove(0);
        truncated = true;
    }
    let mut out = json!({"sessionKey": t.key.as_str(), "agentId": t.agent.as_str(), "messages": page, "truncated": truncated, "hasMore": has_more});
    if let Some(next) = next_offset.filter(|_| has_more) {
        out["nextOffset"] = next.into();
    }
    out["totalMessages"] = total.into();
    Ok(out)
}

async fn sessions_spawn(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Value> {
    let task = b.req_str("task")?;
    let label = b.opt_str("label")?;
    let agent = b
        .opt_str("agentId")?
        .map(|a| parse_agent("agentId", &a))
        .transpose()?;
    let timeout = b.opt_int(
        "runTimeoutSeconds",
        1..=86_400,
        "runTimeoutSeconds must be an integer between 1 and 86400",
    )?;
    b_finish(b)?;
    if let Some(a) = &agent {
        if !req.state.config.visible(caller.agent.as_str(), a.as_str()) {
            return Err(ApiError::forbidden(format!(
                "agent \"{}\" may not access agent \"{}\"",
                caller.agent, a
            )));
        }
    }
    let (e, c) = (engine.clone(), caller.clone());
    let r =
        blocking(move || Ok(e.spawn(&c, &task, label, agent, timeout.map(|t| t as u32))?)).await?;
    Ok(json!({"status": "accepted", "runId": r.run_id, "childSessionKey": r.child_key}))
}

async fn sessions_unwatch(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Value> {
    let t = target(req, engine, caller, b, true).await?;
    b_finish(b)?;
    let (e, c, t2) = (engine.clone(), caller.clone(), t.clone());
    let done = blocking(move || Ok(e.unwatch(&c, &t2)?)).await?;
    Ok(
        json!({"status": "ok", "sessionKey": t.key.as_str(), "agentId": t.agent.as_str(), "unwatched": done}),
    )
}

async fn sessions_send(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Value> {
    let message = b.req_str("message")?;
    let timeout = b
        .opt_int(
            "timeoutSeconds",
            0..=600,
            "timeoutSeconds must be an integer between 0 and 600",
        )?
        .unwrap_or(30);
    let watch = b.opt_bool("watch")?;
    let target_ref = match (b.has("sessionKey"), b.has("label")) {
        (true, true) | (false, false) => {
            return Err(ApiError::invalid(
                "give exactly one of sessionKey and label",
            ))
        }
        (true, false) => target(req, engine, caller, b, true).await?,
        (false, true) => {
            let label = b.req_str("label")?;
            let agent = b
                .opt_str("agentId")?
                .map(|a| parse_agent("agentId", &a))
                .transpose()?
                .unwrap_or_else(|| caller.agent.clone());
            check_visible(req, Some(caller), &label, agent.as_str())?;
            let e = engine.clone();
            let filter = SessionFilter {
                agents: vec![agent.as_str().into()],
                label: Some(label.clone()),
                limit: 1,
                ..Default::default()
            };
            let rows = blocking(move || Ok(e.list_sessions(&filter)?)).await?;
            let s = rows.first().ok_or_else(|| {
                ApiError::not_found(
                    "session_not_found",
                    format!("no session labelled {label:?} for agent \"{agent}\""),
                )
            })?;
            resolve_ref(req, &parse_key(s.key())?, Some(&agent), Some(caller))?
        }
    };
    b_finish(b)?;
    // Take a waiter slot before sending, so a refused call has sent nothing.
    let _slot = if timeout > 0 {
        Some(WaiterSlot::take(req)?)
    } else {
        None
    };
    let (e, c, t, m) = (engine.clone(), caller.clone(), target_ref.clone(), message);
    let sent = blocking(move || Ok(e.send_dispatch(&c, &t, &m, watch == Some(true))?)).await?;
    let mut out =
        json!({"runId": sent.run_id, "status": "accepted", "sessionKey": target_ref.key.as_str()});
    if timeout > 0 {
        // Registered before the first read: the writer signals this run id after the commit
        // that records its reply or its run's end, so the waiter reads only when something
        // may have changed, plus once at the deadline.
        let signal = engine.watch_reply(&sent.run_id);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout as u64);
        let mut last_read = false;
        loop {
            let (e, t, r) = (engine.clone(), target_ref.clone(), sent.run_id.clone());
            match blocking(move || Ok(e.reply_state(&t, &r)?)).await? {
                Some(Ok(reply)) => {
                    out["status"] = "ok".into();
                    out["reply"] = reply.into();
                    break;
                }
                Some(Err(outcome)) => {
                    out["status"] = "error".into();
                    out["error"] =
                        format!("target run ended with outcome {}", outcome.as_str()).into();
                    out["sentBeforeError"] = true.into();
                    break;
                }
                None if last_read => {
                    out["status"] = "timeout".into();
                    out["error"] = format!("no reply within {timeout} s").into();
                    out["sentBeforeError"] = true.into();
                    break;
                }
                None => {
                    if tokio::time::timeout_at(deadline, signal.signalled())
                        .await
                        .is_err()
                    {
                        last_read = true;
                    }
                }
            }
        }
    }
    if let Some(w) = sent.watched {
        out["watched"] = w.into();
    }
    Ok(out)
}
