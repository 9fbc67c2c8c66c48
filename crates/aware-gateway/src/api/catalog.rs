//! Catalog routes (04 §2–§3): `GET /v1/catalog` and `POST /v1/catalog/continue` (adoption).

use crate::http::access::check_visible;
use crate::http::body::{Obj, Query};
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{parse_agent, Req};
use crate::state::blocking;
use crate::wire::{self, answers};
use aware_core::SessionRef;
use aware_engine::views::UpstreamSource;
use aware_engine::{adopted_key, AdoptRequest, Caller, LinkInput};
use aware_upstream::exec::ExecError;
use aware_upstream::provider::{Provider, ProviderError};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;

fn provider_for(req: &Req, catalog_id: &str, host_id: &str) -> ApiResult<Arc<dyn Provider>> {
    let providers = &req.state.providers;
    // `claude` is always a catalog (its hosts may all be off); others exist when configured.
    if catalog_id != "claude" && !providers.keys().any(|(c, _)| c == catalog_id) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "unknown_catalog",
            format!("unknown session catalog: {catalog_id}"),
        ));
    }
    providers
        .get(&(catalog_id.to_string(), host_id.to_string()))
        .cloned()
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "invalid_host", "hostId is invalid"))
}

/// Runs a provider call on the provider executor (decision D5), bounded by the node timeout plus
/// a margin: a paired node's requests end by then, a local read never blocks.
async fn provider_call<T: Send + 'static>(
    req: &Req,
    host_id: &str,
    f: impl FnOnce() -> Result<T, ProviderError> + Send + 'static,
) -> ApiResult<T> {
    let deadline = aware_upstream::node::NODE_TIMEOUT + std::time::Duration::from_secs(5);
    match req.state.provider_exec.run(host_id, deadline, f).await {
        Ok(r) => r.map_err(provider_error),
        Err(ExecError::Timeout(_)) if host_id.starts_with("node:") => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "node_unavailable",
            format!("{host_id} did not answer in time"),
        )),
        Err(e) => Err(ApiError::unavailable(e.to_string())),
    }
}

fn provider_error(e: ProviderError) -> ApiError {
    match e {
        ProviderError::ThreadNotFound => {
            ApiError::not_found("thread_not_found", "transcript unavailable")
        }
        ProviderError::Unavailable(m) => {
            ApiError::new(StatusCode::BAD_GATEWAY, "node_unavailable", m)
        }
        // The client's mistake, not the gateway's: a 400, and nothing logged as an error.
        ProviderError::InvalidCursor => {
            ApiError::invalid("cursor is invalid: pass the nextCursor of the previous page")
        }
        other => ApiError::internal(other.to_string()),
    }
}

/// `transcript unavailable` with where it was looked for, so the user can tell a wrong id from a
/// wrong root: the local roots of this catalog, or the node that answered.
fn searched(req: &Req, catalog_id: &str, host_id: &str, thread_id: &str, e: ApiError) -> ApiError {
    if e.code != "thread_not_found" {
        return e;
    }
    let config = &req.state.config;
    let root = match (catalog_id, host_id) {
        ("claude", "gateway:local") => config
            .claude_root
            .as_ref()
            .map(|r| format!("under the Claude root {} ([claude] root)", r.display())),
        ("codex", "gateway:local") => config.codex_home.as_ref().map(|h| {
            format!(
                "under the Codex sessions {} ([codex] home)",
                h.join("sessions").display()
            )
        }),
        (_, node) => Some(format!("on {node}")),
    };
    let place = root.unwrap_or_else(|| "(the local provider is off)".into());
    ApiError::not_found(
        "thread_not_found",
        format!(
            "transcript unavailable: no {catalog_id} thread {thread_id:?} {place}; `aware catalog` lists the threads there"
        ),
    )
}

pub(crate) async fn list(
    req: &Req,
    caller: Option<&SessionRef>,
    mut q: Query,
) -> ApiResult<Response> {
    let catalog_id = q.take("catalogId")?.unwrap_or_else(|| "claude".into());
    let host_id = q.take("hostId")?.unwrap_or_else(|| "gateway:local".into());
    let limit = q
        .int(
            "limit",
            1..=200,
            "limit must be an integer between 1 and 200",
        )?
        .unwrap_or(50) as usize;
    let cursor = q.take("cursor")?;
    q.finish()?;
    let provider = provider_for(req, &catalog_id, &host_id)?;
    let (items, next) = provider_call(req, &host_id, move || {
        provider.list(limit, cursor.as_deref())
    })
    .await?;
    let engine = req.state.engine()?;
    let agent = caller
        .map(|c| c.agent.clone())
        .unwrap_or_else(|| req.state.config.default_agent.clone());
    let mut out = Vec::new();
    for item in items {
        let key = adopted_key(&agent, &host_id, &item.thread_id)?;
        let sref = SessionRef {
            key,
            agent: agent.clone(),
        };
        let (e, s2) = (engine.clone(), sref.clone());
        let source = UpstreamSource {
            catalog_id: catalog_id.clone(),
            host_id: host_id.clone(),
            thread_id: item.thread_id.clone(),
        };
        let adopted = blocking(move || {
            Ok(e.get_session(&s2)
                .ok()
                .is_some_and(|s| s.row.upstream.as_ref() == Some(&source)))
        })
        .await?;
        let adopted = adopted.then_some(sref.key.as_str());
        out.push(answers::catalog_item(&catalog_id, &host_id, &item, adopted));
    }
    wire::ok(answers::catalog_page(out, next))
}

pub(crate) async fn continue_(req: &Req, caller: Option<&SessionRef>) -> ApiResult<Response> {
    let mut b = Obj::parse(&req.body, false)?;
    let catalog_id = b.req_str("catalogId")?;
    let host_id = b.req_str("hostId")?;
    let thread_id = b.req_str("threadId")?;
    let agent = b
        .opt_str("agentId")?
        .map(|a| parse_agent("agentId", &a))
        .transpose()?;
    b.finish()?;
    let provider = provider_for(req, &catalog_id, &host_id)?;
    let n = thread_id.chars().count();
    if n == 0 || n > 256 || thread_id.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "threadId must be 1..=256 characters without control characters",
        ));
    }
    let agent = agent
        .or_else(|| caller.map(|c| c.agent.clone()))
        .unwrap_or_else(|| req.state.config.default_agent.clone());
    let key = adopted_key(&agent, &host_id, &thread_id)?;
    check_visible(req, caller, key.as_str(), agent.as_str())?;
    let session = SessionRef {
        key,
        agent: agent.clone(),
    };
    // Single flight per source: a second continue waits for the first.
    let source_id = format!("{agent}\0{catalog_id}\0{host_id}\0{thread_id}");
    let slot = {
        let mut locks = req
            .state
            .adopt_locks
            .lock()
            .map_err(|_| ApiError::internal("adoption lock poisoned"))?;
        locks.entry(source_id.clone()).or_default().clone()
    };
    let mut guard = slot.lock().await;
    if let Some(answer) = guard.as_ref() {
        // It was in flight when we arrived: its answer is ours (04 §3 step 3).
        return wire::ok(answer);
    }
    let answer = adopt_source(
        req,
        caller,
        provider,
        &catalog_id,
        &host_id,
        &thread_id,
        session,
    )
    .await;
    if let Ok(body) = &answer {
        *guard = Some(body.clone());
    }
    // The next continue for this source starts afresh.
    if let Ok(mut locks) = req.state.adopt_locks.lock() {
        if locks.get(&source_id).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
            locks.remove(&source_id);
        }
    }
    wire::ok(answer?)
}

async fn adopt_source(
    req: &Req,
    caller: Option<&SessionRef>,
    provider: Arc<dyn Provider>,
    catalog_id: &str,
    host_id: &str,
    thread_id: &str,
    session: SessionRef,
) -> ApiResult<Value> {
    let (catalog_id, host_id, thread_id) = (
        catalog_id.to_string(),
        host_id.to_string(),
        thread_id.to_string(),
    );
    let engine = req.state.engine()?;
    let (e, s2) = (engine.clone(), session.clone());
    let exists = blocking(move || Ok(e.session_exists(&s2)?)).await?;
    let (p, t) = (provider.clone(), thread_id.clone());
    let info = provider_call(req, &host_id, move || p.open_thread(&t, !exists)).await;
    let info = match info {
        Ok(i) => Some(i),
        Err(e) if !exists => return Err(searched(req, &catalog_id, &host_id, &thread_id, e)),
        // A thread with no transcript cannot be adopted, whatever the session: adopting would
        // turn the session `adopted` with nothing to watch (and `aware adopt` said "adopted"
        // while nothing typed there could ever be noticed). Nothing is changed.
        Err(e) if e.code == "thread_not_found" => {
            return Err(searched(req, &catalog_id, &host_id, &thread_id, e))
        }
        Err(_) => None,
    };
    let source = UpstreamSource {
        catalog_id: catalog_id.clone(),
        host_id: host_id.clone(),
        thread_id: thread_id.clone(),
    };
    let link = info.as_ref().and_then(|i| {
        i.baseline.clone().map(|marker| LinkInput {
            catalog_id: catalog_id.clone(),
            host_id: host_id.clone(),
            thread_id: thread_id.clone(),
            upstream_kind: i.upstream_kind.clone(),
            upstream_ref: i.upstream_ref.clone(),
            marker,
        })
    });
    let adopt = AdoptRequest {
        session: session.clone(),
        source,
        caller: caller.cloned().map_or(Caller::Operator, Caller::Session),
        history: info.map(|i| i.history).unwrap_or_default(),
        link,
    };
    let r = blocking(move || Ok(engine.adopt(adopt)?)).await?;
    Ok(answers::adopted(&r))
}
