//! The arguments tools share: the target session of a call, and the end of a body.

use crate::http::access::check_visible;
use crate::http::body::Obj;
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{must_exist, parse_agent, parse_key, resolve_ref, Req};
use aware_core::SessionRef;

/// Resolves `sessionKey` + `agentId` of a tool call (the caller when absent) and checks
/// visibility; existence is left to the caller's blocking read.
pub(super) fn target_unchecked(
    req: &Req,
    caller: &SessionRef,
    b: &mut Obj,
) -> ApiResult<SessionRef> {
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

/// Resolves the required `sessionKey` (+ `agentId`) of a tool call, checks visibility and
/// existence.
pub(super) async fn target(req: &Req, caller: &SessionRef, b: &mut Obj) -> ApiResult<SessionRef> {
    let key = match b.opt_str("sessionKey")? {
        Some(k) => parse_key(&k)?,
        None => return Err(ApiError::invalid("sessionKey is required (a string)")),
    };
    let agent = b
        .opt_str("agentId")?
        .map(|a| parse_agent("agentId", &a))
        .transpose()?;
    let r = resolve_ref(req, &key, agent.as_ref(), Some(caller))?;
    check_visible(req, Some(caller), r.key.as_str(), r.agent.as_str())?;
    must_exist(req, "session", &r).await?;
    Ok(r)
}

pub(super) fn b_finish(b: &mut Obj) -> ApiResult<()> {
    std::mem::replace(b, Obj::from_map(Default::default())).finish()
}
