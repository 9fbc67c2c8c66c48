//! Turns and runs of a session (03 §5.4): the transcript page and new turns, runs started and
//! ended, and compaction.

use crate::http::access::{check_turn_provenance, path_session_access};
use crate::http::body::{Obj, Query};
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{decode_segment, existence_wins, parse_key, Req};
use crate::state::{blocking, engine_call};
use crate::wire::{self, answers};
use aware_core::SessionRef;
use aware_engine::{NewTurn, Provenance, ProvenanceKind, Role, RunOutcome};
use axum::response::Response;

/// Turn texts per `GET …/turns` page: a page stops before passing it (decision D7: a long
/// transcript must not become one huge answer); `truncated` then says so.
const MAX_TURNS_PAGE_BYTES: usize = 4 << 20;

pub(crate) async fn list(req: &Req, t: SessionRef, mut q: Query) -> ApiResult<Response> {
    let after = q.int(
        "after",
        0..=i64::MAX,
        "after must be a non-negative integer",
    )?;
    let limit = q
        .int(
            "limit",
            1..=500,
            "limit must be an integer between 1 and 500",
        )?
        .unwrap_or(100) as u32;
    q.finish()?;
    let (turns, more, truncated) = engine_call(&req.state, move |e| {
        e.list_turns_capped(&t, after, limit, MAX_TURNS_PAGE_BYTES)
    })
    .await?;
    wire::ok(answers::turn_page(&turns, more, truncated))
}

/// `POST …/turns`, the hottest write route: one blocking call for the existence check and the
/// write (it was two). `t` is resolved but not yet known to exist; the checks that follow
/// existence in the documented order (visibility, own session, query, body) run first as pure
/// checks, and [`existence_wins`] keeps a missing session's 404 ahead of their errors.
pub(crate) async fn post(
    req: &Req,
    c: Option<&SessionRef>,
    t: SessionRef,
    q: Query,
) -> ApiResult<Response> {
    let ready = path_session_access(req, c, &t)
        .and_then(|()| q.finish())
        .and_then(|()| parse_turn(&req.body))
        .and_then(|turn| check_turn_provenance(req, &t, turn.provenance.as_ref()).map(|()| turn));
    let engine = req.state.engine()?;
    // The write awaits the writer directly (no blocking-pool hop: its two thread wake-ups were
    // the largest item of this route's profile); only a failure needs the existence read.
    let posted = match ready {
        Ok(turn) => engine
            .post_turn_async(&t, turn)
            .await
            .map_err(ApiError::from),
        Err(e) => Err(e),
    };
    let out = match posted {
        Ok(out) => out,
        Err(e) => blocking(move || existence_wins(&engine, "session", &t, Err(e))).await?,
    };
    let body = answers::posted_turn(&out);
    if out.duplicate {
        wire::ok(body)
    } else {
        wire::created(body)
    }
}

pub(crate) async fn start_run(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let mut b = Obj::parse(&req.body, true)?;
    let run_id = b.opt_str("runId")?;
    let timeout = b.opt_int(
        "timeoutSeconds",
        1..=86_400,
        "timeoutSeconds must be an integer between 1 and 86400",
    )?;
    b.finish()?;
    let r = engine_call(&req.state, move |e| {
        e.start_run(&t, run_id, timeout.map(|v| v as u32))
    })
    .await?;
    wire::created(answers::run_started(&r))
}

pub(crate) async fn end_run(
    req: &Req,
    t: SessionRef,
    q: Query,
    raw_run_id: &str,
) -> ApiResult<Response> {
    q.finish()?;
    let run_id = decode_segment(raw_run_id)?;
    let mut b = Obj::parse(&req.body, false)?;
    let outcome = b.req_str("outcome")?;
    let outcome = RunOutcome::parse(&outcome)
        .ok_or_else(|| ApiError::invalid("outcome must be one of ok, error, timeout, cancelled"))?;
    b.finish()?;
    let r = engine_call(&req.state, move |e| e.end_run(&t, &run_id, outcome)).await?;
    wire::ok(answers::run_ended(&r))
}

pub(crate) async fn compaction(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let mut b = Obj::parse(&req.body, false)?;
    let op = b.req_str("operationId")?;
    let summary = b.opt_str("summary")?;
    b.finish()?;
    let out = engine_call(&req.state, move |e| {
        e.compaction(&t, &op, summary.as_deref())
    })
    .await?;
    let body = answers::compaction(&out);
    if out.duplicate {
        wire::ok(body)
    } else {
        wire::created(body)
    }
}

/// `POST …/replies` (the hook at a stop): the agent's last text answers every message handed
/// over to it and not yet answered (`aware_engine::messages`).
pub(crate) async fn replies(req: &Req, t: SessionRef, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let mut b = Obj::parse(&req.body, false)?;
    let text = b.req_str("text")?;
    b.finish()?;
    let replied = engine_call(&req.state, move |e| e.reply_handed_over(&t, &text)).await?;
    wire::ok(aware_wire::sessions::Replied { replied })
}

pub fn parse_turn(body: &[u8]) -> ApiResult<NewTurn> {
    let mut b = Obj::parse(body, false)?;
    let role = b.req_str("role")?;
    let role = match Role::parse(&role) {
        Some(r) if r != Role::Compaction => r,
        _ => {
            return Err(ApiError::invalid(
                "role must be one of user, assistant, tool",
            ))
        }
    };
    let text = b.req_str("text")?;
    let provenance = match b.opt_obj("provenance")? {
        None => None,
        Some(mut p) => {
            let kind = match p.req_str("kind")?.as_str() {
                "human" => ProvenanceKind::Human,
                "inter_session" => ProvenanceKind::InterSession,
                "internal_system" => ProvenanceKind::InternalSystem,
                _ => {
                    return Err(ApiError::invalid(
                        "provenance.kind must be one of human, inter_session, internal_system",
                    ))
                }
            };
            let human_id = p.opt_str("humanId")?;
            let source = match p.opt_str("sourceSessionKey")? {
                Some(k) => Some(parse_key(&k)?),
                None => None,
            };
            let tool = p.opt_str("sourceTool")?;
            p.finish()
                .map_err(|e| ApiError::invalid(format!("provenance: {}", e.message)))?;
            if kind == ProvenanceKind::InterSession && source.is_none() {
                return Err(ApiError::invalid(
                    "provenance.sourceSessionKey is required when provenance.kind is inter_session",
                ));
            }
            Some(Provenance {
                kind,
                human_id,
                source_session_key: source,
                source_tool: tool,
            })
        }
    };
    let channel = b.opt_str("channel")?;
    if let Some(ch) = &channel {
        aware_core::event::validate_channel(ch).map_err(|e| ApiError::invalid(e.to_string()))?;
    }
    let run_id = b.opt_str("runId")?;
    let occurred_at = b.opt_int(
        "occurredAt",
        0..=i64::MAX,
        "occurredAt must be a non-negative integer (epoch milliseconds)",
    )?;
    let idempotency_key = b.opt_str("idempotencyKey")?;
    let upstream_text = b.opt_str("upstreamText")?;
    let origin = b.opt_str("origin")?;
    if let Some(o) = &origin {
        if o != "import" && o != "hook" {
            return Err(ApiError::invalid("origin must be \"import\" or \"hook\""));
        }
    }
    b.finish()?;
    Ok(NewTurn {
        role,
        text,
        provenance,
        channel,
        run_id,
        occurred_at,
        idempotency_key,
        upstream_text,
        origin,
    })
}
