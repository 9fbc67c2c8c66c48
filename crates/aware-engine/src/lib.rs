//! The aware engine: one handle that applies every operation of the spec to a store.
//!
//! Each public method is one request; mutations run as one writer op (a savepoint inside a
//! group-commit transaction) and their after-commit effects (wakes, metrics) run only after the
//! commit. Reads run on a snapshot. Time comes from an injectable [`Clock`]; timers (run
//! timeouts, coalesced wakes, the prune interval) fire when the host calls
//! [`Engine::run_timers`].
//!
//! Architecture invariant: the engine knows nothing about HTTP, MCP or JSON field names of the
//! wire protocol; the gateway converts.

mod append;
mod clock;
mod cluster;
mod console;
mod effects;
mod error;
mod fifo;
mod links;
mod lookup;
mod messages;
mod metrics;
mod preview;
mod reads;
mod retention;
mod sessions;
mod spawn;
mod turns;
mod types;
mod wakes;
mod watch;

pub use append::{Admission, AppendOutcome, AppendRequest, NotRecorded};
pub use clock::{Clock, ClockBackwards, ManualClock, SystemClock};
pub use cluster::RemoteWake;
pub use console::{ConsoleSession, EdgeKind, Graph, GraphEdge, GraphNode};
use effects::{apply_effects_through, with_effects, EffectsQueue};
pub(crate) use effects::{deliver_state_wake_from, request_state_wakes, wake_eligible, Ctx};
pub use error::{EngineError, ErrorKind, Result};
pub use links::{
    adopted_key, canonical_json, source_key16, AdoptRequest, AdoptResult, ImportTurn, LinkDelete,
    LinkInput, Settlement,
};
pub use metrics::EngineMetrics;
pub use preview::{Preview, PreviewEvent};
pub use types::*;
/// The records the engine's answers carry and the filters its lists take. Callers above the
/// engine (the gateway, the upstream monitor) name them from here and do not depend on
/// aware-store: the dependency graph keeps the storage seam.
pub mod views {
    pub use aware_store::{
        ConsoleFilter, ConsoleRow, ConsoleSort, CursorRow, GoalRow, LinkRow, RunRow, SessionFilter,
        SessionRow, SystemEventRow, TurnRow, UpstreamSource,
    };
}

/// What callers above the engine may know of the store itself: durability, its errors (inside
/// [`EngineError::Store`]), its gauges and histogram buckets, and the private data directory.
pub mod storage {
    pub use aware_store::{
        create_private_dir, Capabilities, FaultPlan, StoreError, StoreGauges, StoreInfo,
        StoreMetrics, COMMIT_BUCKETS_US, GROUP_BUCKETS,
    };
}

pub use wakes::{Leadership, Wake, WakeBookkeeping, WakeBus, WakeReason};

use aware_core::{AgentId, RetentionPolicy};
use aware_store::{Store, StoreExt, WriteTx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use wakes::WakeHub;

/// Engine configuration (the engine-relevant part of 03 §11). Where and how the data is kept is
/// the store's own configuration: the engine takes an opened store.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub default_agent: AgentId,
    pub main_key: String,
    pub notify_on_create: bool,
    pub retention: RetentionPolicy,
    pub coalesce_secs: u64,
    /// Wakes kept for subscribers that have not read them yet (the broadcast ring, at least
    /// 1): a subscriber further behind misses the oldest and is told how many.
    pub wake_buffer: usize,
}

impl EngineConfig {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            default_agent: AgentId::parse("main").unwrap_or_else(|_| unreachable!()),
            main_key: "main".into(),
            notify_on_create: true,
            retention: RetentionPolicy::default(),
            coalesce_secs: 20,
            wake_buffer: 4096,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: EngineConfig,
    pub(crate) metrics: EngineMetrics,
    pub(crate) wakes: WakeHub,
    /// Single-flight for prune passes; a pass that finds it taken is skipped.
    pub(crate) prune_lock: Mutex<()>,
    /// Engine time of the last prune pass, for the interval timer.
    pub(crate) last_prune_at: Mutex<Option<i64>>,
    /// Reply waiters by run id (`sessions_send` with a timeout), signalled after the commit that
    /// recorded their reply or their run's end, so waiters never poll the database.
    pub(crate) reply_waiters: Mutex<HashMap<String, Arc<Notify>>>,
    /// Bumped after every committed op (the console's change hint).
    pub(crate) changes: tokio::sync::watch::Sender<u64>,
    /// Effects of committed ops waiting to be applied (see [`Engine::write`]).
    pub(crate) effects: EffectsQueue,
}

/// A cheap, cloneable handle to the engine.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

impl Engine {
    /// Builds the engine on an opened store (any backend; whoever wires the process chooses it).
    /// Call [`Engine::start`] before serving.
    pub fn open(
        store: Arc<dyn Store>,
        config: EngineConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        config
            .retention
            .validate()
            .map_err(|e| EngineError::invalid(e.to_string()))?;
        let window_ms = (config.coalesce_secs as i64).saturating_mul(1000);
        Ok(Engine {
            inner: Arc::new(Inner {
                store,
                clock,
                metrics: EngineMetrics::default(),
                wakes: WakeHub::new(window_ms, config.wake_buffer),
                prune_lock: Mutex::new(()),
                last_prune_at: Mutex::new(None),
                reply_waiters: Mutex::new(HashMap::new()),
                changes: tokio::sync::watch::channel(0).0,
                effects: EffectsQueue::default(),
                config,
            }),
        })
    }

    /// Start-up work (02 §12): the restart sweep, then a prune pass. In a cluster only the
    /// leader does it: a gateway joining a running cluster is no restart of the store.
    pub fn start(&self) -> Result<(SweepReport, Option<PruneReport>)> {
        if !self.is_leader() {
            return Ok((SweepReport::default(), None));
        }
        let sweep = self.restart_sweep()?;
        let prune = self.prune_pass();
        Ok((sweep, prune))
    }

    pub fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }
    pub fn metrics(&self) -> &EngineMetrics {
        &self.inner.metrics
    }
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }
    /// What the store is (backend, location, durability) and what callers may rely on.
    pub fn store_info(&self) -> aware_store::StoreInfo {
        self.inner.store.info()
    }
    /// The store's own counters and histograms (commit times, batch sizes) for `/metrics`.
    pub fn store_metrics(&self) -> &aware_store::StoreMetrics {
        self.inner.store.metrics()
    }
    /// The store's fault plan: the test seam of `POST /v1/admin/faults` (`--test-clock` only).
    pub fn store_faults(&self) -> &aware_store::FaultPlan {
        self.inner.store.faults()
    }
    /// Whether the writer takes and commits an empty op (the `/health` writer probe).
    pub async fn probe_writer(&self) -> bool {
        self.inner.store.write_async(|_| Ok(())).await.is_ok()
    }
    /// Whether a reader answers an empty read (the `/health` reader probe). Blocking.
    pub fn probe_reader(&self) -> bool {
        self.inner.store.read(|_| Ok(())).is_ok()
    }
    /// How many watchers the wake bookkeeping holds now: it follows the watchers woken
    /// recently, so a gateway that sees sessions come and go keeps a flat footprint.
    pub fn wake_bookkeeping(&self) -> WakeBookkeeping {
        self.inner.wakes.bookkeeping()
    }

    /// Subscribes to delivered wakes.
    pub fn subscribe_wakes(&self) -> tokio::sync::broadcast::Receiver<Wake> {
        self.inner.wakes.subscribe()
    }

    /// One `session-state` wake per eligible watcher with pending notices, for a subscriber that
    /// just connected (02 §10 catch-up). These do not take part in coalescing.
    pub fn catch_up_wakes(&self) -> Result<Vec<Wake>> {
        let watchers = self.inner.store.read_as(|r| r.watchers_with_pending())?;
        self.catch_up_of(watchers)
    }

    /// [`Engine::catch_up_wakes`] for the listed watchers only (a wake stream's `session=`
    /// filter): one snapshot read per listed session, so the cost follows the filter, not the
    /// pending watchers of the whole store. Keys that repeat are read once; the wakes come in
    /// key order, as the whole catch-up's do.
    pub fn catch_up_wakes_of(&self, watchers: &[String]) -> Result<Vec<Wake>> {
        let mut watchers = watchers.to_vec();
        watchers.sort();
        watchers.dedup();
        self.catch_up_of(watchers)
    }

    fn catch_up_of(&self, watchers: Vec<String>) -> Result<Vec<Wake>> {
        let now = self.now();
        let mut out = Vec::new();
        for w in watchers.into_iter().filter(|w| wake_eligible(w)) {
            let Some((key, agent)) = aware_core::SessionKey::parse(&w)
                .ok()
                .and_then(|k| k.qualified_agent().map(|a| (k, a)))
            else {
                continue;
            };
            // Rows of watchers that no longer exist are left to expire (02 §12), never woken.
            // Existence and the pending rows come from one snapshot.
            let pending = self.inner.store.read_as(|r| {
                if r.session_exists(key.as_str(), agent.as_str())? {
                    r.pending_by_watcher(&w)
                } else {
                    Ok(Vec::new())
                }
            })?;
            if pending.is_empty() {
                continue;
            }
            out.push(self.inner.wakes.number(effects::state_wake(
                w,
                agent.as_str().to_string(),
                pending,
                now,
                false,
            )));
        }
        Ok(out)
    }

    /// Number of pending notices in the store (the `aware_pending_notices` gauge).
    pub fn pending_count(&self) -> Result<u64> {
        Ok(self.inner.store.read_as(|r| r.count_pending())?)
    }

    /// Sessions, distinct watchers and pending notices, counted now in one read snapshot (the
    /// gauges of `GET /metrics`). Counted at scrape time rather than kept on every write: a
    /// scrape is rare, and a count cannot drift from the rows.
    pub fn gauges(&self) -> Result<aware_store::StoreGauges> {
        Ok(self.inner.store.read_as(|r| r.gauges())?)
    }

    /// Registers a waiter for the reply to `run_id` (an assistant turn carrying it, or the end of
    /// that run). Register before the first read: a reply committed in between leaves a permit,
    /// so [`ReplyWatch::signalled`] returns at once and nothing is missed.
    pub fn watch_reply(&self, run_id: &str) -> ReplyWatch {
        let notify = Arc::new(Notify::new());
        if let Ok(mut m) = self.inner.reply_waiters.lock() {
            m.insert(run_id.to_string(), notify.clone());
        }
        ReplyWatch {
            inner: self.inner.clone(),
            run_id: run_id.to_string(),
            notify,
        }
    }

    /// Stops the writer after its queue drained.
    pub fn close(&self) {
        self.inner.store.close();
    }

    /// Runs `op` as one writer op and applies its effects after the commit, before returning
    /// (on this thread, in commit order; see [`EffectsQueue`]).
    pub(crate) fn write<R: Send + 'static>(
        &self,
        op: impl FnMut(&mut dyn WriteTx, &mut Ctx) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let (ticket, op) = with_effects(&self.inner, op);
        let result = self.inner.store.write_as(op);
        let mine = ticket.load(std::sync::atomic::Ordering::Acquire);
        if mine != 0 {
            apply_effects_through(&self.inner, mine);
        }
        result
    }

    /// [`Engine::write`] for async callers: the op goes to the writer without a blocking-pool
    /// thread in between, and the caller's task awaits its commit. The op and its effects run
    /// in a task of their own, so a caller that goes away (a client that disconnects) cancels
    /// neither: effects are applied, in commit order, before the task ends, as with `write`.
    /// Effects are applied on the runtime only on SQLite, where the reads a wake may need are
    /// local and short; on other stores they go to the blocking pool. Needs a tokio runtime.
    pub(crate) async fn write_async<R: Send + 'static>(
        &self,
        op: impl FnMut(&mut dyn WriteTx, &mut Ctx) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let inner = self.inner.clone();
        let task = tokio::spawn(async move {
            let (ticket, op) = with_effects(&inner, op);
            let result = inner.store.write_async_as(op).await;
            let mine = ticket.load(std::sync::atomic::Ordering::Acquire);
            if mine != 0 {
                if inner.store.info().capabilities.inline_reads {
                    apply_effects_through(&inner, mine);
                } else {
                    let effects_inner = inner.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        apply_effects_through(&effects_inner, mine)
                    })
                    .await;
                }
            }
            result
        });
        task.await.map_err(|e| {
            EngineError::Store(aware_store::StoreError::Panicked(format!(
                "write task: {e}"
            )))
        })?
    }

    /// Fires every engine-clock timer that is due: run timeouts, coalesced wakes, the prune
    /// interval. Hosts call it on a timer, and test mode after moving the clock.
    pub fn run_timers(&self) -> Result<()> {
        let now = self.now();
        // Run timeouts and retention are cluster singletons; coalesced wakes are per process.
        let leader = self.is_leader();
        if leader {
            self.expire_runs(now)?;
        }
        for (watcher, _due) in self.inner.wakes.take_due(now) {
            let remote = self.inner.wakes.cluster.take_merged_remote_only(&watcher);
            deliver_state_wake_from(&self.inner, &watcher, now, true, remote);
        }
        if !leader {
            return Ok(());
        }
        let interval_ms =
            (self.inner.config.retention.prune_interval_secs as i64).saturating_mul(1000);
        let due = match self.inner.last_prune_at.lock() {
            Ok(last) => last.is_none_or(|t| now - t >= interval_ms),
            Err(_) => false,
        };
        if due {
            self.prune_pass();
        }
        Ok(())
    }

    /// The earliest engine time at which [`Engine::run_timers`] has something to do.
    pub fn next_timer_due(&self) -> Option<i64> {
        let interval_ms =
            (self.inner.config.retention.prune_interval_secs as i64).saturating_mul(1000);
        let prune = self
            .inner
            .last_prune_at
            .lock()
            .ok()
            .and_then(|l| l.map(|t| t + interval_ms));
        let runs = self
            .inner
            .store
            .read_as(|r| r.next_run_deadline())
            .ok()
            .flatten();
        [prune, runs, self.inner.wakes.next_due()]
            .into_iter()
            .flatten()
            .min()
    }
}

/// A registered reply waiter; dropping it unregisters it.
pub struct ReplyWatch {
    inner: Arc<Inner>,
    run_id: String,
    notify: Arc<Notify>,
}

impl ReplyWatch {
    /// Resolves after a commit that may have recorded the reply (read the state again then).
    pub async fn signalled(&self) {
        self.notify.notified().await
    }
}

impl Drop for ReplyWatch {
    fn drop(&mut self) {
        if let Ok(mut m) = self.inner.reply_waiters.lock() {
            // Only our own registration: run ids are fresh per send, but stay exact anyway.
            if m.get(&self.run_id)
                .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
            {
                m.remove(&self.run_id);
            }
        }
    }
}
