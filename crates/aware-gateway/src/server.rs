//! The gateway server: shared state, start-up (open with retry, restart sweep, first prune),
//! timers, graceful shutdown, and the request dispatcher.

use crate::config::GatewayConfig;
use crate::edge::{self, Identity, Origin};
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
    /// The port the listener is bound to (the `Host` check compares with it).
    pub(crate) port: u16,
    /// Set when shutdown begins: SSE streams send a final event and end.
    pub(crate) stopping: tokio::sync::watch::Sender<bool>,
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
    /// Catalog providers by (catalog id, host id): (`claude`, `gateway:local`), (`codex`,
    /// `gateway:local`), (`claude`, `node:<id>`).
    pub(crate) providers: BTreeMap<(String, String), Arc<dyn aware_upstream::provider::Provider>>,
    /// The upstream monitor, once the engine is ready (when enabled).
    pub(crate) monitor: RwLock<Option<Arc<aware_upstream::monitor::Monitor>>>,
    /// Where provider and paired-node calls run (bounded per provider, off the blocking pool).
    pub(crate) provider_exec: Arc<aware_upstream::exec::ProviderExec>,
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
    config.check_tokens().map_err(|e| e.to_string())?;
    if !config.bind_is_loopback() {
        // Off loopback the token is all that stands between the network and the hub: a short
        // or blank one is guessable.
        let tokens = config
            .token
            .iter()
            .map(|t| ("the bearer token".to_string(), t))
            .chain(config.agents.iter().filter_map(|(id, a)| {
                a.token
                    .as_ref()
                    .map(|t| (format!("agents.{id}.token_file"), t))
            }));
        for (what, t) in tokens {
            if t.trim().is_empty() || t.len() < 16 {
                return Err(format!(
                    "refusing to listen on {} with a weak token: {what} must be at least 16 bytes and not blank",
                    config.bind
                ));
            }
        }
    }
    Ok(())
}

pub fn new_state(config: GatewayConfig, port: u16) -> Shared {
    let test_clock = config
        .test_clock_start
        .map(|t| Arc::new(ManualClock::new(t)));
    let clock: Arc<dyn Clock> = match &test_clock {
        Some(c) => c.clone(),
        None => Arc::new(SystemClock),
    };
    let mut list: Vec<Arc<dyn aware_upstream::provider::Provider>> = Vec::new();
    if let Some(root) = &config.claude_root {
        list.push(Arc::new(aware_upstream::local::LocalClaude::new(
            root.clone(),
        )));
    }
    if let Some(home) = &config.codex_home {
        list.push(Arc::new(aware_upstream::codex::LocalCodex::new(
            home.clone(),
        )));
    }
    for n in &config.nodes {
        let client = aware_upstream::node::NodeClient::new(&n.id, &n.url, n.token.as_deref())
            .with_deadline(Duration::from_secs(config.monitor.provider_timeout_secs));
        list.push(Arc::new(client));
    }
    let providers = list
        .into_iter()
        .map(|p| ((p.catalog_id().to_string(), p.host_id()), p))
        .collect();
    Arc::new(AppState {
        providers,
        monitor: RwLock::new(None),
        provider_exec: Arc::new(aware_upstream::exec::ProviderExec::default()),
        adopt_locks: Mutex::new(BTreeMap::new()),
        config,
        port,
        stopping: tokio::sync::watch::Sender::new(false),
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
/// first prune, then marks the gateway ready. A store that no retry can fix (its schema is newer
/// than this binary) is reported on `fatal` and start-up ends.
async fn start_up(state: Shared, fatal: tokio::sync::oneshot::Sender<String>) {
    let config = engine_config(&state.config);
    let engine = loop {
        let (c, clock) = (config.clone(), state.clock.clone());
        let postgres = state.config.postgres.clone();
        let opened = tokio::task::spawn_blocking(move || match postgres {
            // A PostgreSQL server named in `[store] url` instead of the embedded file.
            Some(options) => aware_store_pg::PgStore::open(options)
                .map_err(aware_engine::EngineError::Store)
                .and_then(|store| Engine::open_with_store(std::sync::Arc::new(store), c, clock)),
            None => {
                if let Some(dir) = c.db_path.parent() {
                    let _ = create_private_dir(dir);
                }
                Engine::open(c, clock)
            }
        })
        .await;
        match opened {
            Ok(Ok(engine)) => break engine,
            Ok(Err(
                e @ aware_engine::EngineError::Store(aware_store::StoreError::SchemaTooNew {
                    ..
                }),
            )) => {
                // Waiting cannot help: only another binary can read this database (01 §2).
                tracing::error!(event = "store_open_failed", error = %e, "cannot open the store");
                state.set_phase(Phase::Unavailable(e.to_string()));
                let _ = fatal.send(e.to_string());
                return;
            }
            Ok(Err(e)) => {
                // Locked, unreadable or missing files may be fixed while we wait.
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
        )
        .with_exec(state.provider_exec.clone());
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

/// Why [`run`] ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Start-up cannot succeed (a database newer than this binary): `serve` exits with 2.
    #[error("{0}")]
    Fatal(String),
}

/// Creates a directory (and its parents) readable by its owner only: the data dir holds the
/// hub's state and must not be readable by other local users whatever the umask.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Serves on an already-bound listener until `shutdown` resolves, then finishes in-flight
/// requests (for at most `[http] shutdown_grace_secs`) and the writer's queue.
pub async fn run(
    listener: TcpListener,
    config: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let port = listener.local_addr()?.port();
    let state = new_state(config, port);
    let (fatal_tx, fatal_rx) = tokio::sync::oneshot::channel();
    let startup = tokio::spawn(start_up(state.clone(), fatal_tx));
    let app = axum::Router::new()
        .fallback(dispatch)
        .with_state(state.clone());
    let fatal = crate::conn::serve(
        listener,
        app,
        state.config.http.clone(),
        state.stopping.clone(),
        shutdown,
        async move { fatal_rx.await.ok() },
    )
    .await;
    startup.abort();
    let ready = match state.phase.read().map(|p| p.clone()) {
        Ok(Phase::Ready(engine)) => Some(engine),
        _ => None,
    };
    if let Some(engine) = ready {
        let _ = tokio::task::spawn_blocking(move || engine.close()).await;
    }
    match fatal {
        Some(msg) => Err(RunError::Fatal(msg)),
        None => Ok(()),
    }
}

/// Everything a handler needs from the request.
pub(crate) struct Req {
    pub state: Shared,
    pub method: Method,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub identity: Identity,
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
    let response = match edge_then_route(
        &state, method, &uri, headers, body, &segments, route, allowed,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    metrics::count_request(
        &state,
        if route.is_empty() { "unmatched" } else { route },
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// The order of checks: Host → origin (and a CORS preflight) → token → route and method → body
/// size and media type → the handler. Host and origin come first so a page in a browser learns
/// nothing, not even whether a token is needed.
#[allow(clippy::too_many_arguments)]
async fn edge_then_route(
    state: &Shared,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Body,
    segments: &[&str],
    route: &'static str,
    allowed: &'static [Method],
) -> ApiResult<Response> {
    let host = uri.authority().map(|a| a.as_str().to_string()).or_else(|| {
        headers
            .get(axum::http::header::HOST)
            .map(|h| h.to_str().unwrap_or("?").to_string())
    });
    edge::check_host(&state.config, state.port, host.as_deref())?;
    let origin = edge::check_origin(&state.config, &headers, host.as_deref().unwrap_or(""))?;
    if let Some(r) = edge::preflight(&method, &headers, &origin) {
        return Ok(r);
    }
    let mut response = route_checked(state, method, uri, headers, body, segments, route, allowed)
        .await
        .unwrap_or_else(|e| e.into_response());
    if let Origin::Allowed(o) = &origin {
        edge::add_cors(&mut response, o);
    }
    Ok(response)
}

#[allow(clippy::too_many_arguments)]
async fn route_checked(
    state: &Shared,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Body,
    segments: &[&str],
    route: &'static str,
    allowed: &'static [Method],
) -> ApiResult<Response> {
    // The console's page and scripts hold no data: they load without the token and then ask for
    // it when the API answers 401. Host and Origin checks above still apply to them.
    let is_public = route == "/health" || route == "/ui";
    let identity = if is_public {
        Identity::Operator
    } else {
        edge::identify(&state.config, &headers).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token",
            )
        })?
    };
    if route.is_empty() {
        return Err(ApiError::not_found(
            "not_found",
            format!("no route for {}", uri.path()),
        ));
    }
    if !allowed.contains(&method) {
        let list = allowed
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let mut r = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} is not allowed for {route}; use {list}"),
        )
        .into_response();
        if let Ok(v) = list.parse() {
            r.headers_mut().insert(axum::http::header::ALLOW, v);
        }
        return Ok(r);
    }
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
        axum::body::to_bytes(body, crate::body::MAX_BODY_BYTES + 1),
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
        Ok(Ok(b)) if b.len() > crate::body::MAX_BODY_BYTES => return Err(too_large()),
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
    routes::handle(req, segments, route).await
}
