//! `GET /health` (03 §5.5, issue 9): the start-up phase and, once ready, the writer and reader
//! probes of `health`.

use crate::error::ApiResult;
use crate::request::Req;
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
            if stalled.is_empty() {
                let durability = req.state.config.durability.as_str();
                return wire::ok(answers::health_ok(durability, req.state.now()));
            }
            tracing::warn!(event = "health_stalled", stalled = ?stalled, "a health probe did not answer in time");
            answers::health_stalled(&stalled)
        }
        Some(Phase::Starting) => answers::health_status("starting"),
        _ => answers::health_status("unavailable"),
    };
    Ok((StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response())
}
