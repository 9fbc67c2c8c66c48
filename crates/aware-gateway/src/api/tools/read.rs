//! The tools that read: `session_status`, `sessions_list`, `sessions_history`.

use super::args::{b_finish, target, target_unchecked};
use crate::http::access::{check_agent, visible_agents};
use crate::http::body::Obj;
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{parse_agent, parse_key, session_not_found, Req};
use crate::state::{blocking, short_read};
use crate::wire::{self, tools as answers};
use aware_core::SessionRef;
use aware_engine::views::SessionFilter;
use aware_engine::Engine;
use axum::response::Response;
use serde_json::Value;

const MAX_HISTORY_TEXT: usize = 4000;
const MAX_HISTORY_PAGE_BYTES: usize = 80 * 1024;

pub(super) async fn session_status(
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
    let (e, c) = (engine.clone(), caller.clone());
    let (session, changes) = short_read(engine, move || {
        // The caller's existence check comes first (the dispatcher left it to this call, so
        // that the whole tool is one blocking hop); when the caller is the target, the
        // target's row is that check.
        let same = c == t;
        if !same && !e.session_exists(&c)? {
            return Err(session_not_found("caller session", &c.key));
        }
        // The session row is the existence check (one read fewer than `session_exists`).
        let s = match e.get_session(&t) {
            Err(aware_engine::EngineError::SessionNotFound(_)) => {
                let what = if same { "caller session" } else { "session" };
                return Err(session_not_found(what, &t.key));
            }
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
    let answer = answers::status(&session, changes.as_ref());
    Ok(wire::json_response(
        axum::http::StatusCode::OK,
        &answer,
        answer.size_hint(),
    ))
}

pub(super) async fn sessions_list(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Value> {
    let mut filter = SessionFilter::default();
    if let Some(a) = b.opt_str("agentId")? {
        let a = parse_agent("agentId", &a)?;
        check_agent(req, Some(caller), &a)?;
        filter.agents = vec![a.as_str().into()];
    } else {
        filter.agents = visible_agents(req, caller);
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
    Ok(answers::session_list(
        &rows,
        more,
        offset.saturating_add(limit),
    ))
}

pub(super) async fn sessions_history(
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
    let t = target(req, caller, b).await?;
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
    let mut page: Vec<aware_wire::tools::HistoryMessage> = rows
        .iter()
        .map(|x| answers::history_message(x, MAX_HISTORY_TEXT))
        .collect();
    let mut truncated = false;
    while !page.is_empty()
        && serde_json::to_vec(&page).map_or(0, |v| v.len()) > MAX_HISTORY_PAGE_BYTES
    {
        page.remove(0);
        truncated = true;
    }
    Ok(answers::history(
        t.key.as_str(),
        t.agent.as_str(),
        page,
        truncated,
        has_more,
        next_offset,
        total,
    ))
}
