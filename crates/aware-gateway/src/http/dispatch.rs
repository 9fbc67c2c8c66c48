//! The dispatcher: one fallback handler runs the edge checks, parses the route once, reads the
//! body, then hands the request to the resource's handler by an exhaustive match on [`Route`].
//! The order of checks is the same for every route: Host → origin → token → route and method →
//! body → caller → key syntax → existence → visibility → the handler's own fields.

use crate::http::access::{
    caller, caller_unchecked, operator_only, path_session, path_session_unchecked,
};
use crate::http::body::Query;
use crate::http::conn::Peer;
use crate::http::edge::{self, Identity, Origin, Site};
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{decode_segment, must_exist, Req};
use crate::http::routes::{self, Route, SessionRoute};
use crate::state::Shared;
use crate::{
    api::catalog, api::console, api::notices, api::sessions, api::tools, api::turns, api::wakes,
    ops::admin, ops::health_route, ops::metrics,
};
use crate::{api::watches, wire};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::time::Duration;

pub(crate) async fn dispatch(
    State(state): State<Shared>,
    peer: Option<axum::Extension<Peer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = std::time::Instant::now();
    let peer = peer.map(|axum::Extension(p)| p.0);
    let raw_path = uri.path().to_string();
    let segments = routes::segments(&raw_path);
    let parsed = routes::parse(&method, &segments, state.test_clock.is_some());
    let label = parsed.pattern.unwrap_or("unmatched");
    let response =
        match edge_then_route(&state, peer, method, &uri, headers, body, &segments, parsed).await {
            Ok(r) => r,
            Err(e) => e.into_response(),
        };
    state
        .http
        .count(label, response.status().as_u16(), started.elapsed());
    response
}

/// The order of checks: Host → origin (and a CORS preflight) → token → route and method → body
/// size and media type → the handler. Host and origin come first so a page in a browser learns
/// nothing, not even whether a token is needed.
#[allow(clippy::too_many_arguments)] // the parts of one request, as axum hands them over
async fn edge_then_route(
    state: &Shared,
    peer: Option<IpAddr>,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Body,
    segments: &[&str],
    parsed: routes::Parsed,
) -> ApiResult<Response> {
    let origin = match edge::check_site(
        state.config.bind,
        &state.config.http,
        state.port,
        &method,
        uri,
        &headers,
    )? {
        Site::Preflight(r) => return Ok(r),
        Site::Pass(origin) => origin,
    };
    let mut response = route_checked(state, peer, method, uri, headers, body, segments, parsed)
        .await
        .unwrap_or_else(|e| e.into_response());
    if let Origin::Allowed(o) = &origin {
        edge::add_cors(&mut response, o);
    }
    Ok(response)
}

#[allow(clippy::too_many_arguments)] // the parts of one request, as axum hands them over
async fn route_checked(
    state: &Shared,
    peer: Option<IpAddr>,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Body,
    segments: &[&str],
    parsed: routes::Parsed,
) -> ApiResult<Response> {
    // The console's page and scripts hold no data: they load without the token and then ask for
    // it when the API answers 401. Host and Origin checks above still apply to them.
    let identity = if parsed.public {
        Identity::Operator
    } else {
        // A peer that spent its wrong tokens waits before any token of its is compared.
        let limited = peer.filter(|_| edge::tokens_configured(&state.config));
        if let Some(p) = limited {
            state.failed_tokens.check(p, state.now())?;
        }
        edge::identify(&state.config, &headers).ok_or_else(|| {
            // Only a token that was given and is wrong counts: a missing one guesses nothing
            // (the console's first reads before the user types the token send none).
            if let Some(p) = limited.filter(|_| !edge::bearer(&headers).is_empty()) {
                state.failed_tokens.failed(p, state.now());
            }
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token",
            )
        })?
    };
    let Some(pattern) = parsed.pattern else {
        return Err(ApiError::not_found(
            "not_found",
            format!("no route for {}", uri.path()),
        ));
    };
    let Some(route) = parsed.route else {
        let list = parsed
            .allowed
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let mut r = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} is not allowed for {pattern}; use {list}"),
        )
        .into_response();
        if let Ok(v) = list.parse() {
            r.headers_mut().insert(axum::http::header::ALLOW, v);
        }
        return Ok(r);
    };
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "body must be at most 1 MiB",
        )
    };
    let limit = Duration::from_secs(state.config.http.body_timeout_secs);
    let bytes = match tokio::time::timeout(
        limit,
        axum::body::to_bytes(body, crate::http::body::MAX_BODY_BYTES + 1),
    )
    .await
    {
        Err(_) => {
            let mut r = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request body did not arrive within {} s",
                    limit.as_secs()
                ),
            )
            .into_response();
            r.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return Ok(r);
        }
        Ok(Err(_)) => return Err(too_large()),
        Ok(Ok(b)) if b.len() > crate::http::body::MAX_BODY_BYTES => return Err(too_large()),
        Ok(Ok(b)) => b,
    };
    edge::check_media_type(&headers, bytes.len())?;
    let req = Req {
        state: state.clone(),
        method,
        query: uri.query().map(str::to_string),
        headers,
        body: bytes.to_vec(),
        identity,
    };
    handle(req, segments, pattern, route).await
}

/// The caller and the query of a route that has them (every route but the health probe,
/// metrics, admin, assets and the tool list): the engine must be ready first.
async fn caller_and_query(req: &Req) -> ApiResult<(Option<aware_core::SessionRef>, Query)> {
    req.state.engine()?;
    let c = caller(req).await?;
    let q = Query::parse(req.query.as_deref())?;
    Ok((c, q))
}

async fn handle(
    req: Req,
    segments: &[&str],
    pattern: &'static str,
    route: Route,
) -> ApiResult<Response> {
    match route {
        Route::Health => health_route::health(&req).await,
        Route::Metrics => {
            operator_only(&req, pattern)?;
            req.state.engine()?;
            metrics::render(&req.state).await
        }
        Route::Admin(op) => {
            operator_only(&req, pattern)?;
            admin::handle(req, op).await
        }
        Route::Ui(path) => console::asset(&path),
        Route::ToolList => {
            req.state.engine()?;
            wire::ok(tools::list())
        }
        Route::Wakes => {
            let (c, q) = caller_and_query(&req).await?;
            wakes::sse(&req, c.as_ref(), q).await
        }
        Route::Console(p) => {
            let (c, q) = caller_and_query(&req).await?;
            // The console is an operator's tool: its routes compute visibility from the caller
            // session, so an agent token (no caller, yet not the operator) is refused outright
            // rather than seeing everything.
            operator_only(&req, pattern)?;
            console::handle(&req, segments, p, c.as_ref(), q).await
        }
        Route::Catalog => {
            let (c, q) = caller_and_query(&req).await?;
            operator_only(&req, pattern)?;
            catalog::list(&req, c.as_ref(), q).await
        }
        Route::CatalogContinue => {
            let (c, q) = caller_and_query(&req).await?;
            operator_only(&req, pattern)?;
            q.finish()?;
            catalog::continue_(&req, c.as_ref()).await
        }
        Route::ToolCall(name) => {
            // The caller's existence is checked by the tool (`session_status` in its one
            // blocking call, the others before theirs), and here when the call fails, so that
            // a missing caller still answers 404 ahead of every later error (decision D21: one
            // blocking hop per status call).
            req.state.engine()?;
            let c = caller_unchecked(&req)?;
            let answer = async {
                let q = Query::parse(req.query.as_deref())?;
                q.finish()?;
                tools::call(&req, &decode_segment(&name)?, c.as_ref()).await
            }
            .await;
            match (answer, &c) {
                (Err(e), Some(c)) => {
                    must_exist(&req, "caller session", c).await?;
                    Err(e)
                }
                (answer, _) => answer,
            }
        }
        Route::ListSessions => {
            let (c, q) = caller_and_query(&req).await?;
            sessions::list(&req, c.as_ref(), q).await
        }
        Route::CreateSession => {
            let (c, q) = caller_and_query(&req).await?;
            q.finish()?;
            sessions::create(&req, c.as_ref()).await
        }
        Route::Session(key, op) => {
            let (c, mut q) = caller_and_query(&req).await?;
            if op == SessionRoute::PostTurn {
                // Folds the existence check into the write's blocking call (decision D21).
                let t = path_session_unchecked(&req, &key, c.as_ref(), &mut q)?;
                return turns::post(&req, c.as_ref(), t, q).await;
            }
            let t = path_session(&req, &key, c.as_ref(), &mut q).await?;
            session_route(&req, c.as_ref(), t, q, op).await
        }
    }
}

/// A `/v1/sessions/{key}/…` route, once `{key}` names a session the request may use.
async fn session_route(
    req: &Req,
    c: Option<&aware_core::SessionRef>,
    t: aware_core::SessionRef,
    q: Query,
    op: SessionRoute,
) -> ApiResult<Response> {
    use SessionRoute as S;
    match op {
        S::Get => sessions::get(req, t, q).await,
        S::Delete => sessions::delete(req, t, q).await,
        S::Reset => sessions::reset(req, t, q).await,
        S::SetGoal => sessions::set_goal(req, c, t, q).await,
        S::ClearGoal => sessions::clear_goal(req, c, t, q).await,
        S::ListTurns => turns::list(req, t, q).await,
        S::PostTurn => turns::post(req, c, t, q).await,
        S::StartRun => turns::start_run(req, t, q).await,
        S::EndRun(run) => turns::end_run(req, t, q, &run).await,
        S::Compaction => turns::compaction(req, t, q).await,
        S::Replies => turns::replies(req, t, q).await,
        S::Drain => notices::drain(req, t, q).await,
        S::Pending => notices::pending(req, t, q).await,
        S::Ack => notices::ack(req, t, q).await,
        S::SystemEvent => notices::system_event(req, t, q).await,
        S::ListWatches => watches::list(req, c, t, q).await,
        S::Watchers => watches::watchers(req, c, t, q).await,
        S::Watch => watches::watch(req, c, t, q).await,
        S::Unwatch(target) => watches::unwatch(req, c, t, q, &target).await,
    }
}
