//! Wake delivery (02 §10): the SSE stream `GET /v1/wakes`, and the per-agent webhook lanes
//! (the sender is `webhook.rs`).

use crate::api::webhook::{deliver, Sender};
use crate::http::access::{check_agent, visible_filter};
use crate::http::body::Query;
use crate::http::error::ApiResult;
use crate::http::request::{parse_agent, parse_key, Req};
use crate::state::{blocking, Shared};
use crate::wire;
use aware_core::SessionRef;
use aware_engine::Wake;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
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

/// `GET /v1/wakes`: the wakes the request may see (`access::visible_filter`), narrowed by
/// `agent` and `session`.
pub(crate) async fn sse(
    req: &Req,
    caller: Option<&SessionRef>,
    mut q: Query,
) -> ApiResult<Response> {
    let state = req.state.clone();
    let mut agents = Vec::new();
    for a in q.take_all("agent") {
        let a = parse_agent("agent", &a)?;
        check_agent(req, caller, &a)?;
        agents.push(a.as_str().to_string());
    }
    let sessions = q
        .take_all("session")
        .iter()
        .map(|s| parse_key(s).map(|k| k.as_str().to_string()))
        .collect::<ApiResult<Vec<_>>>()?;
    q.finish()?;
    let visible = visible_filter(req, caller);
    let filter = Arc::new(Filter {
        agents,
        sessions,
        visible,
    });
    let engine = state.engine()?;
    // Capped per identity and in total (streams.rs); held as long as the stream.
    let slot = crate::http::streams::claim(&state.streams, &state.config.http, &req.identity)?;
    // Subscribe before the catch-up read so nothing falls between them.
    let rx = engine.subscribe_wakes();
    let e = engine.clone();
    // With `session=`, only the listed watchers are read: the cost of a connect follows its
    // filter, not the pending watchers of the whole store.
    let listed = filter.sessions.clone();
    let catch_up: Vec<Wake> = blocking(move || {
        Ok(if listed.is_empty() {
            e.catch_up_wakes()?
        } else {
            e.catch_up_wakes_of(&listed)?
        })
    })
    .await?
    .into_iter()
    .filter(|w| filter.matches(w))
    .collect();
    let sent = state.clone();
    let f2 = filter.clone();
    // Lives inside the stream, so the gauge falls when the client disconnects and axum drops it.
    let subscriber = StreamSubscriber::open(&state);
    let live = BroadcastStream::new(rx).filter_map(move |item| {
        let _counted = (&subscriber, &slot);
        let out = match item {
            Ok(w) if f2.matches(&w) => {
                sent.sse_delivered.fetch_add(1, Ordering::Relaxed);
                Some(Ok::<Event, Infallible>(event_of(&w)))
            }
            Ok(_) => None,
            // The stream fell more than `[wakes] stream_buffer` wakes behind and the oldest are
            // gone: said out loud, so the client resynchronises (reconnect for the catch-up, or
            // read its sessions' pending notices) instead of waiting on a wake it will not get.
            Err(BroadcastStreamRecvError::Lagged(missed)) => {
                tracing::warn!(
                    event = "wake_stream_lagged",
                    missed,
                    "a wake stream fell behind; it was sent `event: lagged`"
                );
                Some(Ok(Event::default()
                    .event("lagged")
                    .data(wire::stream_lagged(missed).to_string())))
            }
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
                .data(wire::stream_shutdown().to_string()),
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

/// Counts one open wake stream while it lives; dropped when the client goes away.
pub(crate) struct StreamSubscriber(Shared);

impl StreamSubscriber {
    pub(crate) fn open(state: &Shared) -> Self {
        state
            .http
            .stream_subscribers
            .fetch_add(1, Ordering::Relaxed);
        StreamSubscriber(state.clone())
    }
}

impl Drop for StreamSubscriber {
    fn drop(&mut self) {
        self.0
            .http
            .stream_subscribers
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Delivers every wake of an agent with a configured webhook, with the retry policy of 02 §10,
/// through the agent's lane. Deliveries are async (no blocking thread is held while a receiver
/// hangs) and every attempt has a connect and a total deadline.
pub(crate) fn spawn_webhooks(state: Shared, mut rx: broadcast::Receiver<Wake>) {
    // One pooled client per agent with a webhook, built once: its connections outlive a wake.
    let mut senders = std::collections::HashMap::new();
    for (agent, a) in &state.config.agents {
        let Some(hook) = &a.webhook else { continue };
        match Sender::new(hook, state.config.webhook_tls.as_ref()) {
            Ok(s) => {
                senders.insert(agent.clone(), (hook.clone(), Arc::new(s)));
            }
            Err(error) => tracing::warn!(
                event = "wake_webhook_failed",
                agent = %agent,
                error = %error,
                "no webhook client could be built; this agent's wakes go out by SSE only"
            ),
        }
    }
    if senders.is_empty() {
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
            // Another gateway produced it and delivers its webhook: once per wake per cluster.
            if wake.remote {
                continue;
            }
            let Some((hook, sender)) = senders.get(&wake.agent_id).cloned() else {
                continue;
            };
            if let Some(first) = state.webhooks.offer(&hook, wake) {
                let st = state.clone();
                tokio::spawn(async move {
                    let agent = first.agent_id.clone();
                    let mut wake = first;
                    loop {
                        deliver(&st, &sender, &hook, &wake).await;
                        match st.webhooks.next(&agent) {
                            Some(w) => wake = w,
                            None => break,
                        }
                    }
                });
            }
        }
    });
}
