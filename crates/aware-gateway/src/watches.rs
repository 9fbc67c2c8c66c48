//! Watches (02 §5, 03 §5.4): what a session watches, who watches it, watch and unwatch.

use crate::access::check_visible;
use crate::body::{Obj, Query};
use crate::error::{ApiError, ApiResult};
use crate::request::{decode_segment, must_exist, parse_agent, parse_key, resolve_ref, Req};
use crate::state::engine_call;
use crate::wire::{self, answers};
use aware_core::SessionRef;
use axum::response::Response;

pub(crate) async fn list(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let rows = engine_call(&req.state, move |e| e.watches(&t)).await?;
    wire::ok(answers::watches(&rows))
}

pub(crate) async fn watchers(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let rows = engine_call(&req.state, move |e| e.watchers(&t)).await?;
    wire::ok(answers::watchers(&rows))
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
    must_exist(req, "session", &target_ref).await?;
    let (key, agent) = (target_ref.key.as_str(), target_ref.agent.as_str());
    check_visible(req, Some(&t), key, agent)?;
    check_visible(req, c, key, agent)?;
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
