//! The tools that act: `sessions_send` (with its reply wait), `sessions_spawn`,
//! `sessions_unwatch`.

use super::args::{b_finish, target};
use crate::http::access::{acts_as_own, check_agent, check_visible};
use crate::http::body::Obj;
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{parse_agent, parse_key, resolve_ref, Req};
use crate::state::blocking;
use crate::wire::tools::{self as answers, SendEnd};
use aware_core::SessionRef;
use aware_engine::views::SessionFilter;
use aware_engine::Engine;
use serde_json::Value;
use std::time::Duration;

pub(super) async fn sessions_spawn(
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
        check_agent(req, Some(caller), a)?;
        // Spawning creates a session of `a`: the same scope as `POST /v1/sessions`, so an
        // agent's token cannot create sessions of another agent it may only see.
        acts_as_own(req, &format!("agent:{a}:subagent:…"), a.as_str())?;
    }
    let (e, c) = (engine.clone(), caller.clone());
    let r =
        blocking(move || Ok(e.spawn(&c, &task, label, agent, timeout.map(|t| t as u32))?)).await?;
    Ok(answers::spawned(&r))
}

pub(super) async fn sessions_unwatch(
    req: &Req,
    engine: &Engine,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<Value> {
    let t = target(req, caller, b).await?;
    b_finish(b)?;
    let (e, c, t2) = (engine.clone(), caller.clone(), t.clone());
    let done = blocking(move || Ok(e.unwatch(&c, &t2)?)).await?;
    Ok(answers::unwatched(t.key.as_str(), t.agent.as_str(), done))
}

pub(super) async fn sessions_send(
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
        (true, false) => target(req, caller, b).await?,
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
        Some(crate::http::streams::claim_waiter(
            &req.state.streams,
            &req.state.config.http,
            &req.state.config.limits,
            caller.agent.as_str(),
        )?)
    } else {
        None
    };
    let (e, c, t, m) = (engine.clone(), caller.clone(), target_ref.clone(), message);
    let sent = blocking(move || Ok(e.send_dispatch(&c, &t, &m, watch == Some(true))?)).await?;
    let mut end = SendEnd::Sent;
    if timeout > 0 {
        // Registered before the first read: the writer signals this run id after the commit
        // that records its reply or its run's end, so the waiter reads only when something
        // may have changed, plus once at the deadline.
        let signal = engine.watch_reply(&sent.run_id);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout as u64);
        // On a store several gateways share (PostgreSQL), the reply may commit on another
        // gateway: its signal comes over the cluster bus (`NOTIFY`); a lost one is a hint
        // lost, so read again every 2 s as well.
        let recheck = engine
            .store_info()
            .capabilities
            .shared
            .then_some(Duration::from_secs(2));
        let mut last_read = false;
        end = loop {
            let (e, t, r) = (engine.clone(), target_ref.clone(), sent.run_id.clone());
            match blocking(move || Ok(e.reply_state(&t, &r)?)).await? {
                Some(Ok(reply)) => break SendEnd::Reply(reply),
                Some(Err(outcome)) => break SendEnd::RunEnded(outcome.as_str()),
                None if last_read => break SendEnd::Timeout(timeout),
                None => {
                    let until = recheck
                        .map(|r| deadline.min(tokio::time::Instant::now() + r))
                        .unwrap_or(deadline);
                    if tokio::time::timeout_at(until, signal.signalled())
                        .await
                        .is_err()
                        && until == deadline
                    {
                        last_read = true;
                    }
                }
            }
        };
    }
    Ok(answers::sent(
        &sent.run_id,
        target_ref.key.as_str(),
        end,
        sent.watched,
    ))
}
