//! The gateway server: shared state, start-up (open with retry, restart sweep, first prune),
//! timers, graceful shutdown, and the request dispatcher.

use crate::config::GatewayConfig;
use crate::error::{ApiError, ApiResult};
use crate::{metrics, routes};
use aware_engine::{Clock, Engine, EngineConfig, ManualClock, SystemClock};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;

/// How far start-up has come (01 §12, 03 §5.5).
#[derive(Clone)]
pub(crate) enum Phase {
    /// The store could not be opened (yet); retried every 5 s.
    Unavailable(String),
    /// Restart sweep and first prune are running.
    Starting,
    Ready(Engine),
}

pub struct AppState {
    pub(crate) config: GatewayConfig,
    /// Written by the start-up task only; a std lock, never held across `.await`.
    pub(crate) phase: RwLock<Phase>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The test clock (test mode only).
    pub(crate) test_clock: Option<Arc<ManualClock>>,
    /// Requests by route and status with their durations, and open wake streams.
    pub(crate) http: metrics::HttpMetrics,
    pub(crate) webhook_delivered: AtomicU64,
    pub(crate) webhook_failures: AtomicU64,
    pub(crate) sse_delivered: AtomicU64,
    /// Serialises admin clock moves so due timers run in order before each answer.
    pub(crate) clock_lock: tokio::sync::Mutex<()>,
    /// Catalog providers by host id (`gateway:local`, `node:<id>`).
    pub(crate) providers: BTreeMap<String, Arc<dyn aware_upstream::provider::Provider>>,
    /// The upstream monitor, once the engine is ready (when enabled).
    pub(crate) monitor: RwLock<Option<Arc<aware_upstream::monitor::Monitor>>>,
    /// Single flight of adoptions per source: the in-flight continue's slot, where it leaves its
    /// answer for the continues that waited on it. A std mutex held only to find the slot.
    pub(crate) adopt_locks:
        Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<Option<serde_json::Value>>>>>,
    /// Per-agent webhook lanes (in-flight cap, waiting wakes).
    pub(crate) webhooks: crate::wakes::WebhookLanes,
    /// `sessions_send` calls waiting for a reply now (`[limits] max_reply_waiters`).
    pub(crate) reply_waiters: std::sync::atomic::AtomicUsize,
    /// Single-flight writer and reader probes of `/health`.
    pub(crate) health: crate::health::HealthProbes,
}

pub type Shared = Arc<AppState>;

impl AppState {
    pub(crate) fn engine(&self) -> ApiResult<Engine> {
        match self.phase.read().map(|p| p.clone()) {
            Ok(Phase::Ready(e)) => Ok(e),
            Ok(Phase::Starting) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting",
                "start-up (restart sweep, first prune) has not finished",
            )),
            Ok(Phase::Unavailable(msg)) => Err(ApiError::unavailable(format!(
                "the store cannot be opened: {msg}"
            ))),
            Err(_) => Err(ApiError::internal("state lock poisoned")),
        }
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    fn set_phase(&self, phase: Phase) {
        if let Ok(mut p) = self.phase.write() {
            *p = phase;
        }
    }
}

/// Runs a blocking engine call off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("worker task failed: {e}")))?
}

fn engine_config(c: &GatewayConfig) -> EngineConfig {
    let mut e = EngineConfig::new(c.db_path());
    e.durability = c.durability;
    e.default_agent = c.default_agent.clone();
    e.main_key = c.main_key.clone();
    e.notify_on_create = c.notify_on_create;
    e.retention = c.retention;
    e.coalesce_secs = c.coalesce_secs;
    e
}

/// Checks that must pass before binding (03 §5.2). Returns the message `serve` prints.
pub fn check_bind_policy(config: &GatewayConfig) -> Result<(), String> {
    if !config.bind_is_loopback() && config.token.is_none() {
        return Err(format!(
            "refusing to listen on {} without a bearer token (set --token or AWARE_TOKEN)",
            config.bind
        ));
    }
    Ok(())
}

pub fn new_state(config: GatewayConfig) -> Shared {
    let test_clock = config
        .test_clock_start
        .map(|t| Arc::new(ManualClock::new(t)));
    let clock: Arc<dyn Clock> = match &test_clock {
        Some(c) => c.clone(),
        None => Arc::new(SystemClock),
    };
    let mut providers: BTreeMap<String, Arc<dyn aware_upstream::provider::Provider>> =
        BTreeMap::new();
    if let Some(root) = &config.claude_root {
        providers.insert(
            "gateway:local".into(),
            Arc::new(aware_upstream::local::LocalClaude::new(root.clone())),
        );
    }
    for n in &config.nodes {
        let client = aware_upstream::node::NodeClient::new(&n.id, &n.url, n.token.as_deref());
        providers.insert(format!("node:{}", n.id), Arc::new(client));
    }
    Arc::new(AppState {
        providers,
        monitor: RwLock::new(None),
        adopt_locks: Mutex::new(BTreeMap::new()),
        config,
        phase: RwLock::new(Phase::Unavailable("opening".into())),
        clock,
        test_clock,
        http: Default::default(),
        webhook_delivered: AtomicU64::new(0),
        webhook_failures: AtomicU64::new(0),
        sse_delivered: AtomicU64::new(0),
        clock_lock: tokio::sync::Mutex::new(()),
        webhooks: Default::default(),
        reply_waiters: Default::default(),
        health: Default::default(),
    })
}

/// Opens the store (retrying every 5 s), starts webhook delivery, runs the restart sweep and the
/// first prune, then marks the gateway ready.
async fn start_up(state: Shared) {
    let config = engine_config(&state.config);
    let engine = loop {
        let (c, clock) = (config.clone(), state.clock.clone());
        let opened = tokio::task::spawn_blocking(move || {
            if let Some(dir) = c.db_path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            Engine::open(c, clock)
        })
        .await;
        match opened {
            Ok(Ok(engine)) => break engine,
            Ok(Err(e)) => {
                tracing::error!(event = "store_open_failed", error = %e, "cannot open the store; retrying in 5 s");
                state.set_phase(Phase::Unavailable(e.to_string()));
            }
            Err(e) => state.set_phase(Phase::Unavailable(e.to_string())),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    state.set_phase(Phase::Starting);
    crate::wakes::spawn_webhooks(state.clone(), engine.subscribe_wakes());
    let e2 = engine.clone();
    match tokio::task::spawn_blocking(move || e2.start()).await {
        Ok(Ok((sweep, Some(p)))) => tracing::info!(
            event = "started",
            swept_cursors = sweep.cursors,
            pruned_by_age = p.deleted_by_age,
            pruned_by_cap = p.deleted_by_cap,
            expired_cursors = p.expired_cursors,
            expired_system_events = p.expired_system_events,
            prune_batches = p.batches,
            "start-up done: restart sweep re-froze {} pending cursors; first prune deleted {} events \
             ({} by age, {} by row cap) and expired {} cursors and {} system events",
            sweep.cursors,
            p.deleted_by_age + p.deleted_by_cap,
            p.deleted_by_age,
            p.deleted_by_cap,
            p.expired_cursors,
            p.expired_system_events
        ),
        // `None`: another prune pass held the single-flight lock (it reports its own work).
        Ok(Ok((sweep, None))) => tracing::info!(
            event = "started",
            swept_cursors = sweep.cursors,
            "start-up done: restart sweep re-froze {} pending cursors; first prune skipped (a pass was \
             already running)",
            sweep.cursors
        ),
        Ok(Err(e)) => tracing::warn!(event = "startup_failed", error = %e, "restart sweep failed"),
        Err(e) => tracing::warn!(event = "startup_failed", error = %e, "start-up task failed"),
    }
    if state.config.monitor.enabled && !state.providers.is_empty() {
        let m = &state.config.monitor;
        let config = aware_upstream::monitor::MonitorConfig {
            first_tick_ms: (m.first_tick_secs as i64).saturating_mul(1000),
            interval_ms: (m.interval_secs as i64).saturating_mul(1000),
            provider_timeout: Duration::from_secs(m.provider_timeout_secs),
            missing_threshold: m.missing_threshold,
        };
        let monitor = aware_upstream::monitor::Monitor::new(
            engine.clone(),
            state.providers.values().cloned().collect(),
            config,
            state.now(),
        );
        if let Ok(mut slot) = state.monitor.write() {
            *slot = Some(Arc::new(monitor));
        }
    }
    state.set_phase(Phase::Ready(engine.clone()));
    if state.test_clock.is_none() {
        // Engine-clock timers on the wall clock. In test mode they run when the clock moves.
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let e = engine.clone();
            let _ = tokio::task::spawn_blocking(move || e.run_timers()).await;
            run_monitor(&state).await;
        }
    }
}

pub(crate) fn monitor(state: &AppState) -> Option<Arc<aware_upstream::monitor::Monitor>> {
    state.monitor.read().ok().and_then(|m| m.clone())
}

/// Runs the monitor's tick when it fell due on the engine clock.
pub(crate) async fn run_monitor(state: &AppState) {
    if let Some(m) = monitor(state) {
        m.run_due(state.now()).await;
    }
}

/// Serves on an already-bound listener until `shutdown` resolves, then finishes in-flight
/// requests and the writer's queue.
pub async fn run(
    listener: TcpListener,
    config: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = new_state(config);
    let startup = tokio::spawn(start_up(state.clone()));
    let app = axum::Router::new()
        .fallback(dispatch)
        .with_state(state.clone());
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    startup.abort();
    let ready = match state.phase.read().map(|p| p.clone()) {
        Ok(Phase::Ready(engine)) => Some(engine),
        _ => None,
    };
    if let Some(engine) = ready {
        let _ = tokio::task::spawn_blocking(move || engine.close()).await;
    }
    result
}

/// Everything a handler needs from the request.
pub(crate) struct Req {
    pub state: Shared,
    pub method: Method,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(token) = &state.config.token else {
        return true;
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    constant_time_eq(given.as_bytes(), token.as_bytes())
}

async fn dispatch(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = std::time::Instant::now();
    let raw_path = uri.path().to_string();
    let segments: Vec<&str> = raw_path.trim_start_matches('/').split('/').collect();
    let (mut route, allowed) = routes::route_of(&segments);
    if route == "/v1/admin" && state.test_clock.is_none() {
        // Outside test mode the admin routes do not exist at all (03 §9), whatever the method.
        route = "";
    }
    let is_health = route == "/health";
    let response = if !is_health && !authorized(&state, &headers) {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        )
        .into_response()
    } else if route.is_empty() {
        ApiError::not_found("not_found", format!("no route for {raw_path}")).into_response()
    } else if !allowed.contains(&method) {
        let mut r = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!(
                "{method} is not allowed for {route}; use {}",
                allowed
                    .iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .into_response();
        if let Ok(v) = allowed
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
            .parse()
        {
            r.headers_mut().insert(axum::http::header::ALLOW, v);
        }
        r
    } else {
        match axum::body::to_bytes(body, crate::body::MAX_BODY_BYTES + 1).await {
            Err(_) => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "body must be at most 1 MiB",
            )
            .into_response(),
            Ok(bytes) if bytes.len() > crate::body::MAX_BODY_BYTES => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "body must be at most 1 MiB",
            )
            .into_response(),
            Ok(bytes) => {
                let req = Req {
                    state: state.clone(),
                    method,
                    query: uri.query().map(str::to_string),
                    headers,
                    body: bytes.to_vec(),
                };
                match routes::handle(req, &segments, route).await {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                }
            }
        }
    };
    metrics::count_request(
        &state,
        if route.is_empty() { "unmatched" } else { route },
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}
