//! The gateway's life: the bind policy, start-up (open with retry, restart sweep, first prune,
//! the monitor), the engine-clock timer task, and serving until graceful shutdown. Requests go
//! to `dispatch`.

use crate::config::GatewayConfig;
use crate::state::{new_state, run_monitor, Phase, Shared};
use aware_engine::{Engine, EngineConfig};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

fn engine_config(c: &GatewayConfig) -> EngineConfig {
    let mut e = EngineConfig::new();
    e.default_agent = c.default_agent.clone();
    e.main_key = c.main_key.clone();
    e.notify_on_create = c.notify_on_create;
    e.retention = c.retention;
    e.coalesce_secs = c.coalesce_secs;
    e.wake_buffer = c.stream_buffer;
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
    // Off loopback the token is all that stands between the network and the hub.
    let tokens = config
        .token
        .iter()
        .map(|t| ("the bearer token".to_string(), t.as_str()))
        .chain(config.agents.iter().filter_map(|(id, a)| {
            a.token
                .as_deref()
                .map(|t| (format!("agents.{id}.token_file"), t))
        }));
    crate::http::edge::check_token_strength(config.bind, tokens)?;
    // A token an agent holds is a token too: any of them in clear is a credential on the wire.
    let has_token = config.token.is_some() || config.agents.values().any(|a| a.token.is_some());
    crate::http::edge::check_plaintext_tokens(
        config.bind,
        has_token,
        config.http.tls.is_some(),
        config.http.allow_plaintext_tokens,
        (
            "[http] tls_cert and tls_key, or --tls-cert and --tls-key",
            "[http] allow_plaintext_tokens = true (or --allow-plaintext-tokens)",
        ),
    )?;
    Ok(())
}

/// Opens the store (retrying every 5 s), starts webhook delivery, runs the restart sweep and the
/// first prune, then marks the gateway ready. A store that no retry can fix (its schema is newer
/// than this binary) is reported on `fatal` and start-up ends.
#[expect(
    clippy::too_many_lines,
    reason = "the start-up steps in their required order (store, webhooks, sweep, listeners)"
)]
async fn start_up(state: Shared, fatal: tokio::sync::oneshot::Sender<String>) {
    let config = engine_config(&state.config);
    let (engine, pg) = loop {
        let (c, clock) = (config.clone(), state.clock.clone());
        let postgres = state.config.postgres.clone();
        let (db, durability) = (state.config.db_path(), state.config.durability);
        // The one place the backend is chosen: the engine takes whichever store is opened here.
        let opened = tokio::task::spawn_blocking(move || match postgres {
            // A PostgreSQL server named in `[store] url` instead of the embedded file.
            Some(options) => {
                let pg = aware_store_pg::PgStore::open(options)?;
                let engine = Engine::open(Arc::new(pg.clone()), c, clock)?;
                Ok::<_, aware_engine::EngineError>((engine, Some(pg)))
            }
            None => {
                if let Some(dir) = db.parent() {
                    let _ = create_private_dir(dir);
                }
                let options = aware_store_sqlite::StoreOptions::new(db).durability(durability);
                let store = aware_store_sqlite::SqliteStore::open(options)?;
                Ok((Engine::open(Arc::new(store), c, clock)?, None))
            }
        })
        .await;
        match opened {
            Ok(Ok(opened)) => break opened,
            Ok(Err(
                e @ aware_engine::EngineError::Store(
                    aware_engine::storage::StoreError::SchemaTooNew { .. }
                    | aware_engine::storage::StoreError::Refused(_),
                ),
            )) => {
                // Waiting cannot help: only another binary can read this database (01 §2), or
                // the database named does not exist or refuses the credentials: the operator
                // must act (exit status 2 with the fix).
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
    // Before the sweep: on PostgreSQL only the gateway that leads at start-up sweeps.
    {
        let (st, e) = (state.clone(), engine.clone());
        let _ = tokio::task::spawn_blocking(move || crate::ops::cluster::attach(&st, &e, pg)).await;
    }
    crate::api::wakes::spawn_webhooks(state.clone(), engine.subscribe_wakes());
    let e2 = engine.clone();
    match tokio::task::spawn_blocking(move || e2.start()).await {
        Ok(Ok((sweep, Some(p)))) => tracing::info!(
            event = "started",
            swept_cursors = sweep.cursors,
            swept_watchers = sweep.watchers,
            sweep_wakes = sweep.woken,
            pruned_by_age = p.deleted_by_age,
            pruned_by_cap = p.deleted_by_cap,
            expired_cursors = p.expired_cursors,
            expired_system_events = p.expired_system_events,
            prune_batches = p.batches,
            "start-up done: restart sweep re-froze {} pending cursors of {} watchers and woke {}; \
             first prune deleted {} events ({} by age, {} by row cap) and expired {} cursors and {} \
             system events",
            sweep.cursors,
            sweep.watchers,
            sweep.woken,
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
            swept_watchers = sweep.watchers,
            sweep_wakes = sweep.woken,
            "start-up done: restart sweep re-froze {} pending cursors of {} watchers and woke {}; \
             first prune skipped (a pass was already running)",
            sweep.cursors,
            sweep.watchers,
            sweep.woken
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
            // The tick is a task of its own: a provider slow to answer (up to its timeout) must
            // not hold back run timeouts, merged wakes and pruning, and a tick that falls due
            // while the previous one still runs is then skipped and counted (04 §7).
            let s = state.clone();
            tokio::spawn(async move { run_monitor(&s).await });
        }
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
    aware_engine::storage::create_private_dir(dir)
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
        .fallback(crate::http::dispatch::dispatch)
        .with_state(state.clone());
    let fatal = crate::http::conn::serve(
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
    // Leadership is released at once, so another gateway takes the singletons over.
    {
        let st = state.clone();
        let _ = tokio::task::spawn_blocking(move || crate::ops::cluster::shutdown(&st)).await;
    }
    if let Some(engine) = ready {
        let _ = tokio::task::spawn_blocking(move || engine.close()).await;
    }
    // The last handles on the engine go on a blocking thread: a PostgreSQL store's connections
    // block while they close, which panics on an async worker (seen aborting the process at
    // shutdown). The start-up task (timer loop) holds one: wait until it is gone first.
    let _ = startup.await;
    {
        let st = state.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let phase = st
                .phase
                .write()
                .ok()
                .map(|mut p| std::mem::replace(&mut *p, Phase::Unavailable("stopped".into())));
            let monitor = st.monitor.write().ok().and_then(|mut m| m.take());
            drop((phase, monitor));
        })
        .await;
    }
    match fatal {
        Some(msg) => Err(RunError::Fatal(msg)),
        None => Ok(()),
    }
}
