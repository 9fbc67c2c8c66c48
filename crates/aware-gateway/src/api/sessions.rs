//! The session resource (03 §5.4): list, create, get, delete, reset, and the goal.

use crate::http::access::{acts_as_own, check_agent, check_visible, visible_filter};
use crate::http::body::{Obj, Query};
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{must_exist, parse_agent, parse_key, resolve_ref, Req};
use crate::state::engine_call;
use crate::wire::{self, answers};
use aware_core::{ActorType, SessionRef};
use aware_engine::views::SessionFilter;
use aware_engine::{Actor, Caller, CreateSession, CreatedVia, GoalStatus, SessionKind};
use axum::response::Response;

pub(crate) async fn list(
    req: &Req,
    caller: Option<&SessionRef>,
    mut q: Query,
) -> ApiResult<Response> {
    let mut filter = SessionFilter {
        limit: 100,
        ..Default::default()
    };
    if let Some(a) = q.take("agentId")? {
        let a = parse_agent("agentId", &a)?;
        check_agent(req, caller, &a)?;
        filter.agents = vec![a.as_str().into()];
    } else {
        filter.agents = visible_filter(req, caller).unwrap_or_default();
    }
    if let Some(k) = q.take("kind")? {
        if SessionKind::parse(&k).is_none() {
            return Err(ApiError::invalid(
                "kind must be one of main, subagent, adopted, group, cron, other",
            ));
        }
        filter.kinds = vec![k];
    }
    filter.parent_key = q
        .take("parentSessionKey")?
        .map(|p| parse_key(&p).map(|k| k.as_str().to_string()))
        .transpose()?;
    filter.label = q.take("label")?;
    let (limit, offset) = q.page()?;
    q.finish()?;
    filter.limit = limit as u32 + 1;
    filter.offset = offset as u64;
    let mut rows = engine_call(&req.state, move |e| e.list_sessions(&filter)).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    wire::ok(answers::session_page(
        &rows,
        more,
        offset.saturating_add(limit),
    ))
}

pub(crate) async fn create(req: &Req, caller: Option<&SessionRef>) -> ApiResult<Response> {
    let mut b = Obj::parse(&req.body, false)?;
    let key = parse_key(&b.req_str("key")?)?;
    let agent = match b.opt_str("agentId")? {
        Some(a) => Some(parse_agent("agentId", &a)?),
        None => None,
    };
    let kind = match b.opt_str("kind")?.as_deref() {
        None => None,
        Some("group") => Some(SessionKind::Group),
        Some("cron") => Some(SessionKind::Cron),
        Some("other") => Some(SessionKind::Other),
        Some(_) => return Err(ApiError::invalid("kind must be one of group, cron, other")),
    };
    let label = b.opt_str("label")?;
    let parent = match b.opt_str("parentSessionKey")? {
        Some(p) => Some(parse_key(&p)?),
        None => None,
    };
    // Only the Claude Code hook (03 §8) sets this; every other create is `api`.
    let created_via = match b.opt_str("createdVia")?.as_deref() {
        None => CreatedVia::Api,
        Some("hook") => CreatedVia::Hook,
        Some(_) => return Err(ApiError::invalid("createdVia must be hook")),
    };
    b.finish()?;
    let target = resolve_ref(req, &key, agent.as_ref(), caller)?;
    if let Some(p) = &parent {
        if SessionRef::with_default(p.clone(), &target.agent) == target {
            return Err(ApiError::invalid(
                "parentSessionKey must name a session other than the new one",
            ));
        }
    }
    check_visible(req, caller, target.key.as_str(), target.agent.as_str())?;
    acts_as_own(req, target.key.as_str(), target.agent.as_str())?;
    // An existing session is answered as it is (idempotent create, 03 §3.4), even when the
    // parent named in the repeat has since been deleted.
    let t2 = target.clone();
    let already = engine_call(&req.state, move |e| e.session_exists(&t2)).await?;
    if let Some(p) = parent.as_ref().filter(|_| !already) {
        let pref = SessionRef::with_default(p.clone(), &target.agent);
        must_exist(req, "parent session", &pref).await?;
        check_visible(req, caller, pref.key.as_str(), pref.agent.as_str())?;
    }
    let create = CreateSession {
        key,
        agent: Some(target.agent.clone()),
        kind,
        label,
        parent,
        caller: caller.cloned().map_or(Caller::Operator, Caller::Session),
        created_via,
    };
    let (was_created, s) = engine_call(&req.state, move |e| e.create_session(create)).await?;
    let body = answers::created_session(was_created, &s);
    if was_created {
        wire::created(body)
    } else {
        wire::ok(body)
    }
}

pub(crate) async fn get(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let s = engine_call(&req.state, move |e| e.get_session(&t)).await?;
    wire::ok(wire::session(&s))
}

pub(crate) async fn delete(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    engine_call(&req.state, move |e| e.delete_session(&t)).await?;
    wire::ok(answers::deleted())
}

pub(crate) async fn reset(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    Obj::parse(&req.body, true)?.finish()?;
    let (s, prev) = engine_call(&req.state, move |e| e.reset_session(&t)).await?;
    wire::ok(answers::reset(&s, &prev))
}

pub(crate) async fn set_goal(
    req: &Req,
    c: Option<&SessionRef>,
    t: SessionRef,
    q: Query,
) -> ApiResult<Response> {
    q.finish()?;
    let mut b = Obj::parse(&req.body, false)?;
    let text = b.req_str("text")?;
    if text.trim().is_empty() {
        return Err(ApiError::invalid(
            "text must not be blank (clear a goal with DELETE)",
        ));
    }
    let status = match b.opt_str("status")?.as_deref() {
        None | Some("active") => GoalStatus::Active,
        Some("complete") => GoalStatus::Complete,
        Some(_) => {
            return Err(ApiError::invalid(
                "status must be \"active\" or \"complete\"",
            ))
        }
    };
    let actor = goal_actor(&mut b, c)?;
    b.finish()?;
    let g = engine_call(&req.state, move |e| e.set_goal(&t, &text, status, actor)).await?;
    wire::ok(answers::goal_change(&g))
}

pub(crate) async fn clear_goal(
    req: &Req,
    c: Option<&SessionRef>,
    t: SessionRef,
    q: Query,
) -> ApiResult<Response> {
    q.finish()?;
    let mut b = Obj::parse(&req.body, true)?;
    let actor = goal_actor(&mut b, c)?;
    b.finish()?;
    let g = engine_call(&req.state, move |e| e.clear_goal(&t, actor)).await?;
    wire::ok(answers::goal_change(&g))
}

/// The caller session when identified, else the body's `actor`, else `system` (03 §4.4).
fn goal_actor(b: &mut Obj, caller: Option<&SessionRef>) -> ApiResult<Actor> {
    let given = match b.opt_obj("actor")? {
        None => None,
        Some(mut a) => {
            let t = match a.req_str("type")?.as_str() {
                "human" => ActorType::Human,
                "system" => ActorType::System,
                _ => {
                    return Err(ApiError::invalid(
                        "actor.type must be \"human\" or \"system\"",
                    ))
                }
            };
            let id = a.opt_str("id")?;
            a.finish()
                .map_err(|e| ApiError::invalid(format!("actor: {}", e.message)))?;
            Some(Actor {
                actor_type: t,
                actor_id: id,
            })
        }
    };
    Ok(match caller {
        Some(c) => Actor::agent(&c.key),
        None => given.unwrap_or_else(Actor::system),
    })
}
