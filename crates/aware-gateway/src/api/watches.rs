//! Watches (02 §5, 03 §5.4): what a session watches, who watches it, watch and unwatch.

use crate::http::access::{check_visible, may_see};
use crate::http::body::{Obj, Query};
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{decode_segment, must_exist, parse_agent, parse_key, resolve_ref, Req};
use crate::state::engine_call;
use crate::wire::{self, answers};
use aware_core::SessionRef;
use axum::response::Response;

/// `limit` (1..=500, default 100) and `offset` of a fan-out list: a session may have thousands
/// of watchers, and an unpaged answer grows with them (decision D7).
fn page_of(q: &mut Query) -> ApiResult<(usize, usize)> {
    let (limit, offset) = q.page()?;
    Ok((
        limit as usize,
        usize::try_from(offset).unwrap_or(usize::MAX),
    ))
}

/// The rows the request may see (the watcher's agent and the target's, 03 §5.3: a hidden
/// agent's session is not listed), then one page of them.
fn visible_page(
    req: &Req,
    c: Option<&SessionRef>,
    rows: Vec<aware_engine::views::CursorRow>,
    (limit, offset): (usize, usize),
) -> (Vec<aware_engine::views::CursorRow>, bool, usize) {
    let agent_of = |key: &str| {
        aware_core::SessionKey::parse(key)
            .ok()
            .and_then(|k| k.qualified_agent())
            .map(|a| a.as_str().to_string())
    };
    let mut rows: Vec<_> = rows
        .into_iter()
        .filter(|r| {
            let watcher_ok = agent_of(&r.watcher).is_none_or(|a| may_see(req, c, &a));
            watcher_ok && may_see(req, c, &r.target_agent)
        })
        .skip(offset)
        .take(limit.saturating_add(1))
        .collect();
    let more = rows.len() > limit;
    rows.truncate(limit);
    (rows, more, offset.saturating_add(limit))
}

pub(crate) async fn list(
    req: &Req,
    c: Option<&SessionRef>,
    t: SessionRef,
    mut q: Query,
) -> ApiResult<Response> {
    let page = page_of(&mut q)?;
    q.finish()?;
    let rows = engine_call(&req.state, move |e| e.watches(&t)).await?;
    let (rows, more, next) = visible_page(req, c, rows, page);
    wire::ok(answers::watches(&rows, more, next))
}

pub(crate) async fn watchers(
    req: &Req,
    c: Option<&SessionRef>,
    t: SessionRef,
    mut q: Query,
) -> ApiResult<Response> {
    let page = page_of(&mut q)?;
    q.finish()?;
    let rows = engine_call(&req.state, move |e| e.watchers(&t)).await?;
    let (rows, more, next) = visible_page(req, c, rows, page);
    wire::ok(answers::watchers(&rows, more, next))
}

/// `POST …/watches`: `t` (the watcher) starts watching `target`. Both the watcher and the
/// request must be allowed to see the target.
pub(crate) async fn watch(
    req: &Req,
    c: Option<&SessionRef>,
    t: SessionRef,
    q: Query,
) -> ApiResult<Response> {
    q.finish()?;
    let mut b = Obj::parse(&req.body, false)?;
    let tkey = parse_key(&b.req_str("target")?)?;
    let tagent = match b.opt_str("targetAgentId")? {
        Some(a) => Some(parse_agent("targetAgentId", &a)?),
        None => None,
    };
    b.finish()?;
    if !t.key.is_agent_qualified() {
        return Err(ApiError::invalid(
            "watcher must be an agent-qualified session key",
        ));
    }
    let target_ref = resolve_ref(req, &tkey, tagent.as_ref(), Some(&t))?;
    // Visibility before existence: a target of a hidden agent is 403 whether or not it exists
    // (03 §5.3), so the answer does not tell which of its sessions exist.
    let (key, agent) = (target_ref.key.as_str(), target_ref.agent.as_str());
    check_visible(req, Some(&t), key, agent)?;
    check_visible(req, c, key, agent)?;
    must_exist(req, "session", &target_ref).await?;
    // Decided here, before the write, as the engine would decide it inside: a refusal made
    // inside the writer op shares its batch's commit, and a failed commit would answer it 503.
    if t == target_ref {
        return Err(ApiError::invalid("a session cannot watch itself"));
    }
    let row = engine_call(&req.state, move |e| e.register_watch(&t, &target_ref)).await?;
    wire::ok(answers::watched(&row))
}

pub(crate) async fn unwatch(
    req: &Req,
    c: Option<&SessionRef>,
    t: SessionRef,
    mut q: Query,
    raw_target: &str,
) -> ApiResult<Response> {
    let tagent = match q.take("targetAgentId")? {
        Some(a) => Some(parse_agent("targetAgentId", &a)?),
        None => None,
    };
    q.finish()?;
    let tkey = parse_key(&decode_segment(raw_target)?)?;
    let target_ref = resolve_ref(req, &tkey, tagent.as_ref(), Some(&t))?;
    check_visible(req, c, target_ref.key.as_str(), target_ref.agent.as_str())?;
    let done = engine_call(&req.state, move |e| e.unwatch(&t, &target_ref)).await?;
    wire::ok(answers::unwatched(done))
}
