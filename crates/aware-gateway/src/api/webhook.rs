//! The sender of wake webhooks (02 §10): one pooled HTTP/1.1 client per agent (hyper-util's
//! `Client` over hyper-rustls), so the deliveries of a busy agent reuse their connections
//! instead of paying a TCP connect and a TLS handshake per wake. Async, so a hanging receiver
//! holds no thread (decision D4); why not ureq, the other outgoing stack: decision D52.

use crate::config::{Webhook, WebhookTls};
use crate::state::Shared;
use crate::wire;
use aware_engine::Wake;
use axum::body::Bytes;
use axum::http::{header, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

type BoxError = Box<dyn StdError + Send + Sync>;

/// Why a connect failed, told apart so the log says whether TLS refused the receiver.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("connect: {0}")]
    Tcp(BoxError),
    #[error("TLS handshake with {host}: {source}")]
    Tls { host: String, source: BoxError },
    #[error("connect timed out after {0} ms (TCP connect and any TLS handshake)")]
    TimedOut(u64),
}

/// The TCP leg's failure, marked so the TLS connector's errors can be told from it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TcpFailed(BoxError);

type TcpError = <HttpConnector as tower::Service<Uri>>::Error;
type Tcp = tower::util::MapErr<HttpConnector, fn(TcpError) -> TcpFailed>;

fn tcp_failed(e: TcpError) -> TcpFailed {
    TcpFailed(e.into())
}

/// hyper-rustls's connector under one deadline for the TCP connect and the TLS handshake
/// together (`connect_timeout_ms`), which hyper-util's own connect timeout (TCP only) cannot
/// give.
#[derive(Clone)]
struct Connector {
    inner: HttpsConnector<Tcp>,
    timeout: Duration,
}

type Connecting = Pin<
    Box<
        dyn Future<
                Output = Result<
                    <HttpsConnector<Tcp> as tower::Service<Uri>>::Response,
                    ConnectError,
                >,
            > + Send,
    >,
>;

impl tower::Service<Uri> for Connector {
    type Response = <HttpsConnector<Tcp> as tower::Service<Uri>>::Response;
    type Error = ConnectError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ConnectError::Tcp)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let host = dst.host().unwrap_or_default().to_string();
        let timeout = self.timeout;
        let connecting = self.inner.call(dst);
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(Ok(s)) => Ok(s),
                Ok(Err(e)) => Err(match e.downcast::<TcpFailed>() {
                    Ok(tcp) => ConnectError::Tcp(tcp.0),
                    Err(source) => ConnectError::Tls { host, source },
                }),
                Err(_) => Err(ConnectError::TimedOut(timeout.as_millis() as u64)),
            }
        })
    }
}

/// The pooled client of one agent's webhook.
pub(crate) struct Sender {
    client: Client<Connector, Full<Bytes>>,
    /// `https://` can be delivered: the gateway loaded a TLS client (`[wakes] ca_file`).
    tls: bool,
}

/// Answers larger than this are not read to the end; their connection is then not reused.
const DRAIN_LIMIT: usize = 64 * 1024;

impl Sender {
    pub(crate) fn new(hook: &Webhook, tls: Option<&WebhookTls>) -> Result<Sender, String> {
        let mut tcp = HttpConnector::new();
        // The URL's scheme is checked per attempt; the TLS connector takes `https://`.
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let tcp: Tcp = tower::ServiceExt::map_err(tcp, tcp_failed as fn(TcpError) -> TcpFailed);
        // Without a TLS client no `https://` URL reaches the connector (see `attempt`); the
        // connector still wants a configuration, one that trusts nobody.
        let config = match tls {
            Some(t) => t.client_config.clone(),
            None => Arc::new(aware_tls::client_config(
                aware_tls::rustls::RootCertStore::empty(),
            )?),
        };
        let connector = Connector {
            inner: HttpsConnector::from((tcp, config)),
            timeout: Duration::from_millis(hook.connect_timeout_ms),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(hook.max_in_flight)
            .build(connector);
        Ok(Sender {
            client,
            tls: tls.is_some(),
        })
    }
}

/// Why one attempt failed: a status to judge, or a transport error (retried).
enum AttemptError {
    Status(u16),
    Transport(String),
}

/// The full cause of a client error, with the connect leg's own message when there is one.
fn describe(e: &hyper_util::client::legacy::Error) -> String {
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            return c.to_string();
        }
        source = s.source();
    }
    let mut out = format!("request: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// One POST of `body` to the webhook within the attempt's deadline (`timeout_ms`, connect
/// included). Redirects are not followed: a 3xx is an answer like any other non-2xx.
async fn attempt(sender: &Sender, hook: &Webhook, body: &str) -> Result<(), AttemptError> {
    let t = AttemptError::Transport;
    let uri: Uri = hook
        .url
        .parse()
        .map_err(|e| t(format!("bad webhook URL: {e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") if sender.tls => {}
        Some("https") => return Err(t("no TLS client configured for https:// webhooks".into())),
        _ => {
            return Err(t(
                "only http:// and https:// webhook URLs can be delivered".into()
            ))
        }
    }
    let mut req = Request::post(uri).header(header::CONTENT_TYPE, "application/json");
    if let Some(secret) = &hook.secret {
        req = req.header(header::AUTHORIZATION, format!("Bearer {secret}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| t(format!("request: {e}")))?;
    let exchange = async {
        let response = sender
            .client
            .request(req)
            .await
            .map_err(|e| t(describe(&e)))?;
        let status = response.status();
        // Read to the end so the connection goes back to the pool; what it says is not used.
        let _ = Limited::new(response.into_body(), DRAIN_LIMIT)
            .collect()
            .await;
        if status.is_success() {
            Ok(())
        } else {
            Err(AttemptError::Status(status.as_u16()))
        }
    };
    match tokio::time::timeout(Duration::from_millis(hook.timeout_ms), exchange).await {
        Ok(r) => r,
        Err(_) => Err(t(format!("no answer within {} ms", hook.timeout_ms))),
    }
}

/// The wait before retry `n + 1` (n = 0 for the first retry): doubling from 1 s, capped at 8 s.
fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.min(3))
}

/// Delivers `wake` with the retry policy of api.md §4.4: network errors, timeouts, 429 and
/// 5xx are retried after `backoff`; any other non-2xx ends delivery at once.
pub(crate) async fn deliver(state: &Shared, sender: &Sender, hook: &Webhook, wake: &Wake) {
    let body = wire::wake(wake).to_string();
    for attempt_no in 0..hook.max_attempts {
        match attempt(sender, hook, &body).await {
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
                    tokio::time::sleep(backoff(attempt_no)).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    use axum::http::{Response, StatusCode};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// A receiver on a loopback port that answers every request with `status`, counting the
    /// connections it accepts and recording each request's headers.
    struct Receiver {
        url: String,
        connections: Arc<AtomicUsize>,
        seen: Arc<Mutex<Vec<axum::http::HeaderMap>>>,
    }

    async fn receiver(status: StatusCode) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (c, s) = (connections.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        s.lock().unwrap().push(req.headers().clone());
                        async move {
                            let mut r = Response::new(Full::new(Bytes::from_static(b"ok")));
                            *r.status_mut() = status;
                            if status.is_redirection() {
                                r.headers_mut()
                                    .insert(header::LOCATION, "/elsewhere".parse().unwrap());
                            }
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Receiver {
            url: format!("http://127.0.0.1:{port}/hook"),
            connections,
            seen,
        }
    }

    fn hook(url: &str) -> Webhook {
        Webhook {
            url: url.to_string(),
            secret: Some("s3cret".into()),
            timeout_ms: 5000,
            max_attempts: 1,
            connect_timeout_ms: 2000,
            max_in_flight: 4,
            max_queued: 10,
        }
    }

    #[tokio::test]
    async fn deliveries_of_an_agent_share_one_connection() {
        let r = receiver(StatusCode::OK).await;
        let h = hook(&r.url);
        let sender = Sender::new(&h, None).unwrap();
        for _ in 0..3 {
            assert!(attempt(&sender, &h, "{}").await.is_ok());
        }
        assert_eq!(r.connections.load(Ordering::SeqCst), 1);
        let seen = r.seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0][header::AUTHORIZATION], "Bearer s3cret");
        assert_eq!(seen[0][header::CONTENT_TYPE], "application/json");
    }

    #[tokio::test]
    async fn a_redirect_is_an_answer_and_is_not_followed() {
        let r = receiver(StatusCode::TEMPORARY_REDIRECT).await;
        let h = hook(&r.url);
        let sender = Sender::new(&h, None).unwrap();
        let got = attempt(&sender, &h, "{}").await;
        assert!(matches!(got, Err(AttemptError::Status(307))));
        assert_eq!(r.seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn https_without_a_tls_client_and_a_refused_connect_say_why() {
        let h = hook("https://127.0.0.1:1/hook");
        let sender = Sender::new(&h, None).unwrap();
        match attempt(&sender, &h, "{}").await {
            Err(AttemptError::Transport(m)) => assert!(m.contains("no TLS client"), "{m}"),
            _ => panic!("https:// went out without a TLS client"),
        }
        // Port 1 on loopback: nothing listens, the connect is refused.
        let h = hook("http://127.0.0.1:1/hook");
        let sender = Sender::new(&h, None).unwrap();
        match attempt(&sender, &h, "{}").await {
            Err(AttemptError::Transport(m)) => assert!(m.starts_with("connect: "), "{m}"),
            _ => panic!("a refused connect was not a transport error"),
        }
    }

    #[test]
    fn backoff_doubles_from_one_second_up_to_eight() {
        let waits: Vec<u64> = (0..6).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 8, 8]);
    }
}
