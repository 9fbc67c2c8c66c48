//! Wake delivery (02 §10): the SSE stream `GET /v1/wakes` and per-agent webhooks.

use crate::access::{check_agent, visible_filter};
use crate::body::Query;
use crate::config::Webhook;
use crate::error::ApiResult;
use crate::request::{parse_agent, parse_key, Req};
use crate::state::{blocking, Shared};
use crate::wire;
use aware_core::SessionRef;
use aware_engine::Wake;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
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
    let filter = std::sync::Arc::new(Filter {
        agents,
        sessions,
        visible,
    });
    let engine = state.engine()?;
    // Capped per identity and in total (streams.rs); held as long as the stream.
    let slot = crate::streams::claim(&state.streams, &state.config.http, &req.identity)?;
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
            // Another gateway produced it and delivers its webhook: once per wake per cluster.
            if wake.remote {
                continue;
            }
            let Some(hook) = state
                .config
                .agents
                .get(&wake.agent_id)
                .and_then(|a| a.webhook.clone())
            else {
                continue;
            };
            if let Some(first) = state.webhooks.offer(&hook, wake) {
                let st = state.clone();
                tokio::spawn(async move {
                    let agent = first.agent_id.clone();
                    let mut wake = first;
                    loop {
                        deliver(&st, &hook, &wake).await;
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

/// Why one attempt failed: a status to judge, or a transport error (retried).
enum AttemptError {
    Status(u16),
    Transport(String),
}

/// One POST of `body` to the webhook, within the connect deadline (TCP connect and, for
/// `https://`, the TLS handshake) and the attempt's deadline. `tls` verifies `https://`
/// receivers (the system's roots plus `[wakes] ca_file`; SNI and the name checked are the URL's
/// host).
async fn attempt(
    hook: &Webhook,
    tls: Option<&crate::config::WebhookTls>,
    body: &str,
) -> Result<(), AttemptError> {
    use axum::http::{header, Request};
    let t = |m: String| AttemptError::Transport(m);
    let uri: axum::http::Uri = hook
        .url
        .parse()
        .map_err(|e| t(format!("bad webhook URL: {e}")))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(t(
                "only http:// and https:// webhook URLs can be delivered".into()
            ))
        }
    };
    let host = uri
        .host()
        .ok_or_else(|| t("webhook URL has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    let path = uri
        .path_and_query()
        .map_or("/".to_string(), |p| p.as_str().to_string());
    let mut req = Request::post(path)
        .header(header::HOST, authority)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(secret) = &hook.secret {
        req = req.header(header::AUTHORIZATION, format!("Bearer {secret}"));
    }
    let req = req
        .body(http_body_util::Full::new(axum::body::Bytes::from(
            body.to_string(),
        )))
        .map_err(|e| t(format!("request: {e}")))?;
    let connect_deadline =
        tokio::time::Instant::now() + Duration::from_millis(hook.connect_timeout_ms);
    let exchange = async {
        let stream = match tokio::time::timeout_at(
            connect_deadline,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(t(format!("connect: {e}"))),
            Err(_) => return Err(t("connect timed out".into())),
        };
        if !https {
            return post(stream, req).await;
        }
        let tls = tls.ok_or_else(|| t("no TLS client configured for https:// webhooks".into()))?;
        let name = aware_tls::server_name(&host).map_err(t)?;
        match tokio::time::timeout_at(connect_deadline, tls.connector.connect(name, stream)).await {
            Ok(Ok(s)) => post(s, req).await,
            Ok(Err(e)) => Err(t(format!("TLS handshake with {host}: {e}"))),
            Err(_) => Err(t("TLS handshake timed out".into())),
        }
    };
    match tokio::time::timeout(Duration::from_millis(hook.timeout_ms), exchange).await {
        Ok(r) => r,
        Err(_) => Err(t(format!("no answer within {} ms", hook.timeout_ms))),
    }
}

/// Sends `req` on a connected socket (plain or TLS) and judges the answer's status.
async fn post<S>(
    stream: S,
    req: axum::http::Request<http_body_util::Full<axum::body::Bytes>>,
) -> Result<(), AttemptError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let t = |m: String| AttemptError::Transport(m);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| t(format!("handshake: {e}")))?;
    // The connection future drives the socket. A receiver that answers and closes
    // (`Connection: close`) may end it before the response is taken: the response (or the
    // error) is then already waiting in `send`. Dropping both closes the socket.
    let mut conn = std::pin::pin!(conn);
    let mut send = std::pin::pin!(sender.send_request(req));
    let response = tokio::select! {
        biased;
        r = &mut send => r,
        _ = &mut conn => send.await,
    };
    let status = response.map_err(|e| t(format!("request: {e}")))?.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(AttemptError::Status(status.as_u16()))
    }
}

async fn deliver(state: &Shared, hook: &Webhook, wake: &Wake) {
    let body = wire::wake(wake).to_string();
    let backoff = [1u64, 2, 4, 8];
    for attempt_no in 0..hook.max_attempts {
        match attempt(hook, state.config.webhook_tls.as_ref(), &body).await {
            Ok(()) => {
                state.webhook_delivered.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(AttemptError::Status(code)) if code != 429 && code < 500 => {
                tracing::warn!(event = "wake_webhook_failed", status = code, session = %wake.session_key, "webhook refused the wake");
                state.webhook_failures.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                if attempt_no + 1 < hook.max_attempts {
                    let wait = backoff.get(attempt_no as usize).copied().unwrap_or(8);
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                } else {
                    let (status, error) = match e {
                        AttemptError::Status(c) => (Some(c), String::new()),
                        AttemptError::Transport(m) => (None, m),
                    };
                    tracing::warn!(event = "wake_webhook_failed", status = ?status, error = %error, attempts = hook.max_attempts, session = %wake.session_key,
                        "webhook delivery failed; the notice stays pending");
                    state.webhook_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}
