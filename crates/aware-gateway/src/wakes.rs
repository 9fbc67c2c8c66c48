//! Wake delivery (02 §10): the SSE stream `GET /v1/wakes` and per-agent webhooks.

use crate::body::Query;
use crate::error::{ApiError, ApiResult};
use crate::routes::{parse_agent, parse_key};
use crate::server::{blocking, Shared};
use crate::wire;
use aware_engine::Wake;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;

struct Filter {
    agents: Vec<String>,
    sessions: Vec<String>,
    /// Agents the caller may see; `None` for operators or `*`.
    visible: Option<Vec<String>>,
}

impl Filter {
    fn matches(&self, w: &Wake) -> bool {
        (self.agents.is_empty() || self.agents.contains(&w.agent_id))
            && (self.sessions.is_empty() || self.sessions.contains(&w.session_key))
            && self
                .visible
                .as_ref()
                .is_none_or(|v| v.contains(&w.agent_id))
    }
}

fn event_of(w: &Wake) -> Event {
    Event::default()
        .event("wake")
        .id(w.id.to_string())
        .data(wire::wake(w).to_string())
}

/// `viewer` is the agent whose view the stream has (`routes::viewer`); `None` for the operator.
pub(crate) async fn sse(
    state: Shared,
    viewer: Option<String>,
    mut q: Query,
) -> ApiResult<Response> {
    let mut agents = Vec::new();
    for a in q.take_all("agent") {
        let a = parse_agent("agent", &a)?;
        if let Some(v) = &viewer {
            if !state.config.visible(v, a.as_str()) {
                return Err(ApiError::forbidden(format!(
                    "agent \"{v}\" may not access agent \"{a}\""
                )));
            }
        }
        agents.push(a.as_str().to_string());
    }
    let sessions = q
        .take_all("session")
        .iter()
        .map(|s| parse_key(s).map(|k| k.as_str().to_string()))
        .collect::<ApiResult<Vec<_>>>()?;
    q.finish()?;
    let visible = viewer.and_then(|v| state.config.visible_set(&v));
    let filter = std::sync::Arc::new(Filter {
        agents,
        sessions,
        visible,
    });
    let engine = state.engine()?;
    // Subscribe before the catch-up read so nothing falls between them.
    let rx = engine.subscribe_wakes();
    let e = engine.clone();
    let catch_up: Vec<Wake> = blocking(move || Ok(e.catch_up_wakes()?))
        .await?
        .into_iter()
        .filter(|w| filter.matches(w))
        .collect();
    let sent = state.clone();
    let f2 = filter.clone();
    let live = BroadcastStream::new(rx).filter_map(move |item| {
        let out = match item {
            Ok(w) if f2.matches(&w) => {
                sent.sse_delivered.fetch_add(1, Ordering::Relaxed);
                Some(Ok::<Event, Infallible>(event_of(&w)))
            }
            _ => None,
        };
        std::future::ready(out)
    });
    let first = futures_util::stream::iter(
        catch_up
            .into_iter()
            .map(|w| Ok::<Event, Infallible>(event_of(&w))),
    );
    // On shutdown the stream ends with a final event, so clients (and `aware drain --follow`)
    // know to reconnect instead of waiting on a socket that will never speak again.
    let mut stop = state.stopping.subscribe();
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let last = futures_util::stream::once(async {
        Ok::<Event, Infallible>(
            Event::default()
                .event("shutdown")
                .data(r#"{"reason":"the gateway is shutting down"}"#),
        )
    });
    let stream = first.chain(live).take_until(stopped).chain(last);
    Ok(Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("keep-alive"),
        )
        .into_response())
}

/// Delivers every wake of an agent with a configured webhook, with the retry policy of 02 §10.
pub(crate) fn spawn_webhooks(state: Shared, mut rx: broadcast::Receiver<Wake>) {
    if state.config.agents.values().all(|a| a.webhook.is_none()) {
        return;
    }
    tokio::spawn(async move {
        loop {
            let wake = match rx.recv().await {
                Ok(w) => w,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        event = "wake_webhook_failed",
                        lagged = n,
                        "webhook delivery fell behind; wakes skipped (notices stay pending)"
                    );
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => break,
            };
            let Some(hook) = state
                .config
                .agents
                .get(&wake.agent_id)
                .and_then(|a| a.webhook.clone())
            else {
                continue;
            };
            let st = state.clone();
            tokio::spawn(async move { deliver(st, hook, wake).await });
        }
    });
}

async fn deliver(state: Shared, hook: crate::config::Webhook, wake: Wake) {
    let body = wire::wake(&wake).to_string();
    let backoff = [1u64, 2, 4, 8];
    for attempt in 0..hook.max_attempts {
        let (url, secret, timeout, b) = (
            hook.url.clone(),
            hook.secret.clone(),
            hook.timeout_ms,
            body.clone(),
        );
        let outcome = tokio::task::spawn_blocking(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_millis(timeout))
                .build();
            let mut r = agent.post(&url).set("Content-Type", "application/json");
            if let Some(s) = &secret {
                r = r.set("Authorization", &format!("Bearer {s}"));
            }
            match r.send_string(&b) {
                Ok(_) => Ok(()),
                Err(ureq::Error::Status(code, _)) => Err(Some(code)),
                Err(_) => Err(None),
            }
        })
        .await
        .unwrap_or(Err(None));
        match outcome {
            Ok(()) => {
                state.webhook_delivered.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(Some(code)) if code != 429 && code < 500 => {
                tracing::warn!(event = "wake_webhook_failed", status = code, session = %wake.session_key, "webhook refused the wake");
                state.webhook_failures.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(code) => {
                if attempt + 1 < hook.max_attempts {
                    let wait = backoff.get(attempt as usize).copied().unwrap_or(8);
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                } else {
                    tracing::warn!(event = "wake_webhook_failed", status = ?code, attempts = hook.max_attempts, session = %wake.session_key,
                        "webhook delivery failed; the notice stays pending");
                    state.webhook_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}
