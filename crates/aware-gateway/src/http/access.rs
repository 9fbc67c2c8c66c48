//! Authorization and visibility (03 §5.3): who a request acts as and what it may see. Every
//! visibility decision goes through [`viewer`] and [`may_see`], over `GatewayConfig::visible`;
//! tokens are compared in `edge`. The lower layer: no handler here.

use crate::http::body::Query;
use crate::http::edge::Identity;
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{decode_segment, must_exist, parse_agent, parse_key, resolve_ref, Req};
use aware_core::{AgentId, SessionRef};
use axum::http::{Method, StatusCode};

/// The agent whose view a request has: the calling session's agent, else the agent of the
/// token (an agent token with no `X-Aware-Session`), else `None` for the operator, who sees
/// everything.
pub(crate) fn viewer(req: &Req, caller: Option<&SessionRef>) -> Option<String> {
    match (caller, &req.identity) {
        (Some(c), _) => Some(c.agent.as_str().to_string()),
        (None, Identity::Agent(a)) => Some(a.clone()),
        (None, Identity::Operator) => None,
    }
}

/// May this request see sessions of `agent`?
pub(crate) fn may_see(req: &Req, caller: Option<&SessionRef>, agent: &str) -> bool {
    viewer(req, caller).is_none_or(|v| req.state.config.visible(&v, agent))
}

/// The agents this request may see, for a listing filter: `None` when it sees every agent (the
/// operator, or a viewer with `visible_agents = ["*"]`).
pub(crate) fn visible_filter(req: &Req, caller: Option<&SessionRef>) -> Option<Vec<String>> {
    viewer(req, caller).and_then(|v| req.state.config.visible_set(&v))
}

/// The agents a calling session may list (empty = all): [`visible_filter`] for a caller.
pub(crate) fn visible_agents(req: &Req, caller: &SessionRef) -> Vec<String> {
    visible_filter(req, Some(caller)).unwrap_or_default()
}

/// 403 unless the caller may access session `key` of `agent`. Operators see everything.
pub(crate) fn check_visible(
    req: &Req,
    caller: Option<&SessionRef>,
    key: &str,
    agent: &str,
) -> ApiResult<()> {
    if may_see(req, caller, agent) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "session \"{key}\" belongs to agent \"{agent}\", which agent \"{}\" may not access",
        viewer(req, caller).unwrap_or_default()
    )))
}

/// 403 unless the request may see sessions of `agent` (a filter or a target agent).
pub(crate) fn check_agent(
    req: &Req,
    caller: Option<&SessionRef>,
    agent: &AgentId,
) -> ApiResult<()> {
    if may_see(req, caller, agent.as_str()) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "agent \"{}\" may not access agent \"{agent}\"",
        viewer(req, caller).unwrap_or_default()
    )))
}

/// A request with an agent's token acts only as that agent's sessions: as the caller, as the
/// session a write route changes, as the session it creates.
pub(crate) fn acts_as_own(req: &Req, key: &str, agent: &str) -> ApiResult<()> {
    match &req.identity {
        Identity::Agent(a) if a != agent => Err(ApiError::forbidden(format!(
            "this token belongs to agent \"{a}\" and may act only as its sessions, not as \"{key}\" of agent \"{agent}\""
        ))),
        _ => Ok(()),
    }
}

/// Who an agent's token may say wrote a turn. `inter_session` provenance names the sending
/// session, and only `sessions_send`/`sessions_spawn` mint it across agents (the engine writes
/// it from the checked caller); a token posting a turn may name a sender of its own agent only,
/// or it could make a watcher believe another agent spoke. `humanId` says which human wrote it,
/// an assertion only the operator's token may make. `t` is the session the turn goes to.
pub(crate) fn check_turn_provenance(
    req: &Req,
    t: &SessionRef,
    provenance: Option<&aware_engine::Provenance>,
) -> ApiResult<()> {
    let (Identity::Agent(a), Some(p)) = (&req.identity, provenance) else {
        return Ok(());
    };
    if let Some(src) = &p.source_session_key {
        let src_agent = src
            .qualified_agent()
            .map_or_else(|| t.agent.as_str().to_string(), |g| g.as_str().to_string());
        if &src_agent != a {
            return Err(ApiError::forbidden(format!(
                "this token belongs to agent \"{a}\" and may not record a turn sent by \"{src}\" of agent \"{src_agent}\"; messages between agents are recorded by sessions_send and sessions_spawn"
            )));
        }
    }
    if p.human_id.is_some() {
        return Err(ApiError::forbidden(format!(
            "provenance.humanId names a human, which only the operator token may assert; the token of agent \"{a}\" may record a human turn without it"
        )));
    }
    Ok(())
}

/// Routes only the operator (the main token) may use; `route` is the route's pattern.
pub(crate) fn operator_only(req: &Req, route: &str) -> ApiResult<()> {
    match &req.identity {
        Identity::Agent(a) => Err(ApiError::forbidden(format!(
            "{route} needs the operator token; the token of agent \"{a}\" may not use it"
        ))),
        Identity::Operator => Ok(()),
    }
}

/// The calling session from `X-Aware-Session` (+ `X-Aware-Agent`), checked to be the token's
/// own and to exist.
pub(crate) async fn caller(req: &Req) -> ApiResult<Option<SessionRef>> {
    let r = caller_unchecked(req)?;
    if let Some(r) = &r {
        must_exist(req, "caller session", r).await?;
    }
    Ok(r)
}

/// [`caller`] without its existence check (a blocking hop of its own), for a route that makes
/// that check itself: before any other blocking call, or in the same one, and whenever the
/// route fails (so a missing caller's 404 stays ahead of every later error).
pub(crate) fn caller_unchecked(req: &Req) -> ApiResult<Option<SessionRef>> {
    let Some(raw) = req.headers.get("x-aware-session") else {
        return Ok(None);
    };
    let raw = raw.to_str().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_session_key",
            "X-Aware-Session must be ASCII (percent-encode other characters)",
        )
    })?;
    let key = parse_key(&decode_segment(raw)?)?;
    let agent = match req.headers.get("x-aware-agent") {
        Some(a) => Some(parse_agent("X-Aware-Agent", a.to_str().unwrap_or(""))?),
        None => None,
    };
    let engine = req.state.engine()?;
    let r = engine.resolve(&key, agent.as_ref())?;
    acts_as_own(req, r.key.as_str(), r.agent.as_str())?;
    Ok(Some(r))
}

/// The `{key}` of a session route (with `agentId` from the query): syntax, existence, then
/// visibility; a write route also needs the token's own session.
pub(crate) async fn path_session(
    req: &Req,
    seg: &str,
    caller: Option<&SessionRef>,
    q: &mut Query,
) -> ApiResult<SessionRef> {
    let r = path_session_unchecked(req, seg, caller, q)?;
    must_exist(req, "session", &r).await?;
    path_session_access(req, caller, &r)?;
    Ok(r)
}

/// [`path_session`] up to the existence check: the key's syntax and `agentId`. For a route
/// that folds the existence check into its own blocking call (see
/// [`crate::http::request::existence_wins`]); the checks after it are [`path_session_access`].
pub(crate) fn path_session_unchecked(
    req: &Req,
    seg: &str,
    caller: Option<&SessionRef>,
    q: &mut Query,
) -> ApiResult<SessionRef> {
    let key = parse_key(&decode_segment(seg)?)?;
    let agent = match q.take("agentId")? {
        Some(a) => Some(parse_agent("agentId", &a)?),
        None => None,
    };
    resolve_ref(req, &key, agent.as_ref(), caller)
}

/// The checks of [`path_session`] after existence: visibility, and for a write route the
/// token's own session.
pub(crate) fn path_session_access(
    req: &Req,
    caller: Option<&SessionRef>,
    r: &SessionRef,
) -> ApiResult<()> {
    check_visible(req, caller, r.key.as_str(), r.agent.as_str())?;
    if req.method != Method::GET {
        acts_as_own(req, r.key.as_str(), r.agent.as_str())?;
    }
    Ok(())
}
