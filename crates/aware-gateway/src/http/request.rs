//! Request extraction: what a handler gets from the dispatcher ([`Req`]) and the strict parsers
//! of the path segments, keys and agent ids it carries. The lower layer: no handler here.

use crate::http::edge::Identity;
use crate::http::error::{ApiError, ApiResult};
use crate::state::Shared;
use aware_core::{AgentId, SessionKey, SessionRef};
use axum::http::{HeaderMap, Method, StatusCode};

/// Everything a handler needs from the request.
pub(crate) struct Req {
    pub state: Shared,
    pub method: Method,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub identity: Identity,
}

/// Strict percent-decoding of a path segment or header value: every `%` must start a two-digit
/// hex escape (a literal `%` is sent as `%25`, 03 §5.3) and the result must be UTF-8.
pub fn decode_segment(seg: &str) -> ApiResult<String> {
    let bytes = seg.as_bytes();
    let broken = bytes.iter().enumerate().any(|(i, b)| {
        *b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if broken {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_session_key",
            "malformed percent-encoding: every % must be followed by two hex digits (send % as %25)",
        ));
    }
    percent_encoding::percent_decode_str(seg)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_session_key",
                "path segment is not valid UTF-8 after percent-decoding",
            )
        })
}

pub(crate) fn parse_key(raw: &str) -> ApiResult<SessionKey> {
    SessionKey::parse(raw).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_session_key",
            e.to_string(),
        )
    })
}

pub(crate) fn parse_agent(field: &str, raw: &str) -> ApiResult<AgentId> {
    AgentId::parse(raw)
        .map_err(|_| ApiError::invalid(format!("{field} must match [a-z0-9][a-z0-9_-]{{0,63}}")))
}

/// Resolves a reference from a key and optional agent, with the caller's agent as the default.
pub(crate) fn resolve_ref(
    req: &Req,
    key: &SessionKey,
    agent: Option<&AgentId>,
    caller: Option<&SessionRef>,
) -> ApiResult<SessionRef> {
    // The caller's agent is only a default for bare keys: an agent-qualified key names its
    // own agent, whoever calls.
    let engine = req.state.engine()?;
    let default = caller
        .map(|c| &c.agent)
        .filter(|_| !key.is_agent_qualified());
    Ok(engine.resolve(key, agent.or(default))?)
}

/// 404 `session_not_found` for a session that does not exist; `what` is "session",
/// "caller session" or "parent session".
pub(crate) fn session_not_found(what: &str, key: &SessionKey) -> ApiError {
    ApiError::not_found(
        "session_not_found",
        format!("{what} \"{key}\" does not exist"),
    )
}

/// Error precedence for a route that skips its separate existence check (a blocking hop of
/// its own) and runs its operation straight away, inside one blocking call: the operation
/// fails on a missing session anyway, and when it fails for any reason, the existence check
/// that came first in the documented order of checks (docs/api.md) is made now, so a missing
/// session still answers 404 before any later check's error. Call it on the blocking side.
pub(crate) fn existence_wins<T>(
    engine: &aware_engine::Engine,
    what: &str,
    r: &SessionRef,
    outcome: ApiResult<T>,
) -> ApiResult<T> {
    match outcome {
        Ok(v) => Ok(v),
        Err(e) => match engine.session_exists(r) {
            Ok(true) => Err(e),
            Ok(false) => Err(session_not_found(what, &r.key)),
            Err(read) => Err(read.into()),
        },
    }
}

/// 404 unless the session exists (one blocking read).
pub(crate) async fn must_exist(req: &Req, what: &str, r: &SessionRef) -> ApiResult<()> {
    let engine = req.state.engine()?;
    let r2 = r.clone();
    if crate::state::blocking(move || Ok(engine.session_exists(&r2)?)).await? {
        Ok(())
    } else {
        Err(session_not_found(what, &r.key))
    }
}
