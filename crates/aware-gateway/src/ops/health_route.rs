//! `GET /health` (03 §5.5, decision D4): the start-up phase and, once ready, the writer and reader
//! probes of `probes`.

use crate::http::error::ApiResult;
use crate::http::request::Req;
use crate::state::Phase;
use crate::wire::{self, answers};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub(crate) async fn health(req: &Req) -> ApiResult<Response> {
    // Cloned out first: the lock guard must not live across the probe's await.
    let phase = req.state.phase.read().map(|p| p.clone()).ok();
    let body = match phase {
        Some(Phase::Ready(engine)) => {
            let deadline =
                std::time::Duration::from_millis(req.state.config.limits.health_deadline_ms);
            let stalled = req.state.health.stalled(&engine, deadline).await;
            let failing = req.state.health.failing();
            if stalled.is_empty() && failing.is_empty() {
                let durability = engine.store_info().durability;
                let mut body = answers::health_ok(&durability, req.state.now());
                if req.state.cluster.get().is_some() {
                    body["cluster"] = crate::ops::cluster::health(&req.state);
                }
                return wire::ok(body);
            }
            if stalled.is_empty() {
                // The store answers, with errors: PostgreSQL restarting or unreachable. Requests
                // get 503 `store_unavailable` meanwhile; the gateway recovers by itself.
                tracing::warn!(event = "health_degraded", failing = ?failing, "the store answers health probes with errors");
                let mut body = answers::health_degraded(&failing);
                if req.state.cluster.get().is_some() {
                    body["cluster"] = crate::ops::cluster::health(&req.state);
                }
                return Ok((StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response());
            }
            tracing::warn!(event = "health_stalled", stalled = ?stalled, "a health probe did not answer in time");
            let mut body = answers::health_stalled(&stalled);
            // Leadership does not depend on the store's probes: say who leads here as well.
            if req.state.cluster.get().is_some() {
                body["cluster"] = crate::ops::cluster::health(&req.state);
            }
            body
        }
        Some(Phase::Starting) => answers::health_status("starting"),
        _ => answers::health_status("unavailable"),
    };
    Ok((StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response())
}
