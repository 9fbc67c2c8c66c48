//! A session's inbox (02 §8–§9, 03 §5.4): drain and peek its notices and system events, ack
//! them, and enqueue system events.

use crate::http::access::may_see;
use crate::http::body::{Obj, Query};
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{parse_agent, Req};
use crate::state::engine_call;
use crate::wire::{self, answers};
use aware_core::SessionRef;
use aware_engine::AckNotice;
use axum::response::Response;
use serde_json::Value;

/// Items per drain or peek unless `limit` says otherwise, and the largest `limit`.
const DEFAULT_DRAIN_LIMIT: i64 = 1000;
const MAX_DRAIN_LIMIT: i64 = 10_000;
const DRAIN_LIMIT_MSG: &str = "limit must be an integer between 1 and 10000";

fn drain_limit_query(q: &mut Query) -> ApiResult<Option<i64>> {
    q.int("limit", 1..=MAX_DRAIN_LIMIT, DRAIN_LIMIT_MSG)
}

pub(crate) async fn drain(req: &Req, t: SessionRef, mut q: Query) -> ApiResult<Response> {
    let in_query = drain_limit_query(&mut q)?;
    q.finish()?;
    let mut b = Obj::parse(&req.body, true)?;
    let in_body = b.opt_int("limit", 1..=MAX_DRAIN_LIMIT, DRAIN_LIMIT_MSG)?;
    let preview_bytes = b
        .opt_int(
            "previewBytes",
            0..=MAX_PREVIEW_BYTES,
            "previewBytes must be an integer between 0 and 16384",
        )?
        .unwrap_or(0) as usize;
    let tool_prefix = b.opt_str("toolPrefix")?.unwrap_or_default();
    if tool_prefix.len() > 32
        || !tool_prefix
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
    {
        return Err(ApiError::invalid(
            "toolPrefix must be at most 32 characters of [a-z0-9_], e.g. mcp__aware__",
        ));
    }
    b.finish()?;
    if in_query.is_some() && in_body.is_some() {
        return Err(ApiError::invalid(
            "give limit in the query or in the body, not both",
        ));
    }
    let limit = in_query.or(in_body).unwrap_or(DEFAULT_DRAIN_LIMIT) as u32;
    let viewer = t.clone();
    let d = engine_call(&req.state, move |e| e.drain_up_to(&t, Some(limit))).await?;
    if preview_bytes == 0 || d.notices.is_empty() {
        return wire::ok(wire::drain(&d));
    }
    // The targets this session may read, as for `sessions_history`; the others get no preview.
    let visible: Vec<bool> = d
        .notices
        .iter()
        .map(|n| may_see(req, Some(&viewer), &n.target_agent))
        .collect();
    let previews = engine_call(&req.state, move |e| {
        Ok(crate::wire::previews(
            &e,
            &d,
            &visible,
            preview_bytes,
            &tool_prefix,
        ))
    })
    .await?;
    wire::ok(previews)
}

/// The largest reconcile preview a drain may ask for, per notice.
const MAX_PREVIEW_BYTES: i64 = 16 * 1024;

pub(crate) async fn pending(req: &Req, t: SessionRef, mut q: Query) -> ApiResult<Response> {
    let limit = drain_limit_query(&mut q)?.unwrap_or(DEFAULT_DRAIN_LIMIT) as u32;
    q.finish()?;
    let d = engine_call(&req.state, move |e| e.peek_up_to(&t, Some(limit))).await?;
    wire::ok(wire::drain(&d))
}

pub(crate) async fn ack(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let (notices, ids) = parse_ack(&req.body)?;
    let r = engine_call(&req.state, move |e| e.ack(&t, notices, ids)).await?;
    wire::ok(answers::ack(&r))
}

pub(crate) async fn system_event(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let mut b = Obj::parse(&req.body, false)?;
    let text = b.req_str("text")?;
    let ctx = b.opt_str("contextKey")?;
    b.finish()?;
    let id = engine_call(&req.state, move |e| {
        e.enqueue_system_event(&t, &text, ctx.as_deref())
    })
    .await?;
    let body = answers::system_event_enqueued(id);
    if id.is_some() {
        wire::created(body)
    } else {
        wire::ok(body)
    }
}

pub fn parse_ack(body: &[u8]) -> ApiResult<(Vec<AckNotice>, Vec<i64>)> {
    let mut b = Obj::parse(body, true)?;
    let mut notices = Vec::new();
    for v in b.opt_array("notices")?.unwrap_or_default() {
        let Value::Object(map) = v else {
            return Err(ApiError::invalid("notices must be an array of objects"));
        };
        let mut n = Obj::from_map(map);
        let context_key = n
            .req_str("contextKey")
            .map_err(|_| ApiError::invalid("notices[].contextKey is required (a string)"))?;
        let target_agent = n
            .opt_str("targetAgentId")?
            .map(|a| parse_agent("notices[].targetAgentId", &a).map(|a| a.as_str().to_string()))
            .transpose()?;
        let last_seen = n.opt_int(
            "lastSeen",
            0..=i64::MAX,
            "notices[].lastSeen must be a non-negative integer",
        )?;
        n.finish()
            .map_err(|e| ApiError::invalid(format!("notices[]: {}", e.message)))?;
        notices.push(AckNotice {
            context_key,
            target_agent,
            last_seen,
        });
    }
    let mut ids = Vec::new();
    for v in b.opt_array("systemEventIds")?.unwrap_or_default() {
        ids.push(
            v.as_i64()
                .ok_or_else(|| ApiError::invalid("systemEventIds must be an array of integers"))?,
        );
    }
    b.finish()?;
    Ok((notices, ids))
}
