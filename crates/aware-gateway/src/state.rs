//! Shared state of a running gateway: configuration, the start-up phase and its engine, the
//! clocks, providers and monitor, and the counters other modules keep. The lower layer: it
//! imports no route handler.

use crate::api::webhook_lanes::WebhookLanes;
use crate::config::GatewayConfig;
use crate::http::error::{ApiError, ApiResult};
use crate::http::stats::HttpMetrics;
use crate::ops::health_probes::HealthProbes;
use aware_engine::{Clock, Engine, ManualClock, SystemClock};
use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

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
    pub(crate) http: HttpMetrics,
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
    pub(crate) webhooks: WebhookLanes,
    /// Single-flight writer and reader probes of `/health`.
    pub(crate) health: HealthProbes,
    /// The cluster threads (wakes across gateways, leadership) on a PostgreSQL store.
    pub(crate) cluster: std::sync::OnceLock<aware_cluster::Cluster>,
    /// Open long-held requests (streams, waiting sends), capped in total, per agent token and
    /// per calling agent (`streams.rs`).
    pub(crate) streams: Arc<crate::http::streams::StreamSlots>,
    /// Wrong bearer tokens per peer address (`auth_limit.rs`).
    pub(crate) failed_tokens: crate::http::auth_limit::FailedTokens,
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

    pub(crate) fn set_phase(&self, phase: Phase) {
        if let Ok(mut p) = self.phase.write() {
            *p = phase;
        }
    }
}

/// Runs a short engine read: on SQLite on the calling runtime thread, on other stores off the
/// runtime ([`blocking`]).
///
/// Why inline on SQLite: a `spawn_blocking` hop is two thread wake-ups (the pool thread, then
/// the runtime thread again), and on the 2-core machine (decision D21) the scheduler's share of
/// those (`finish_task_switch`, `_raw_spin_unlock_irqrestore`) was ~20 % of the gateway's CPU in
/// the `session_status` workload, more than the page read itself (~40 µs). A SQLite read is
/// local, bounded (a few indexed statements on a pooled reader connection whose pages sit in the
/// OS cache) and never waits on anything held across an `.await`: readers are held only for
/// the length of one synchronous call, so a runtime thread waiting for a busy reader waits for
/// a read to finish, never for another task. Writes never run inline (they wait on the writer
/// and its fsync), nor reads on PostgreSQL (network round trips, and its client must not be
/// driven from inside the runtime).
pub(crate) async fn short_read<T: Send + 'static>(
    engine: &Engine,
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    if engine.store_info().capabilities.inline_reads {
        f()
    } else {
        blocking(f).await
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

pub(crate) fn new_state(config: GatewayConfig, port: u16) -> Shared {
    let test_clock = config
        .test_clock_start
        .map(|t| Arc::new(ManualClock::new(t)));
    let clock: Arc<dyn Clock> = match &test_clock {
        Some(c) => c.clone(),
        None => Arc::new(SystemClock),
    };
    let mut list: Vec<Arc<dyn aware_upstream::provider::Provider>> = Vec::new();
    if let Some(root) = &config.claude_root {
        list.push(Arc::new(aware_upstream::claude::local::LocalClaude::new(
            root.clone(),
        )));
    }
    if let Some(home) = &config.codex_home {
        list.push(Arc::new(aware_upstream::codex::LocalCodex::new(
            home.clone(),
        )));
    }
    // One client per catalog a node can serve (decision D26): Claude and Codex threads of the node
    // are listed, adopted and checked apart, as the local providers are.
    for n in &config.nodes {
        for catalog in aware_upstream::node::NodeCatalog::ALL {
            let client = aware_upstream::node::NodeClient::new(&n.id, &n.url, n.token.as_deref())
                .for_catalog(catalog)
                .with_deadline(Duration::from_secs(config.monitor.provider_timeout_secs))
                .with_tls(n.tls.as_ref().map(|t| t.config.clone()));
            list.push(Arc::new(client));
        }
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
        health: Default::default(),
        cluster: std::sync::OnceLock::new(),
        streams: Arc::default(),
        failed_tokens: Default::default(),
    })
}

pub(crate) fn monitor(state: &AppState) -> Option<Arc<aware_upstream::monitor::Monitor>> {
    state.monitor.read().ok().and_then(|m| m.clone())
}

/// Runs the monitor's tick when it fell due on the engine clock.
pub(crate) async fn run_monitor(state: &AppState) {
    // A cluster singleton: only the leader ticks (always true on SQLite).
    if state.engine().is_ok_and(|e| !e.is_leader()) {
        return;
    }
    if let Some(m) = monitor(state) {
        m.run_due(state.now()).await;
    }
}

/// Runs one engine call on the blocking pool (the engine must be ready).
pub(crate) async fn engine_call<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(Engine) -> aware_engine::Result<T> + Send + 'static,
) -> ApiResult<T> {
    let e = state.engine()?;
    blocking(move || Ok(f(e)?)).await
}
