//! Wake requests and delivery to subscribers (02 §10). Wakes are hints: the pending state they
//! point to is durable, so a lost wake loses nothing.

use aware_core::wake::{Coalescer, WakeDecision};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeReason {
    SessionState,
    Message,
    Spawn,
}

impl WakeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WakeReason::SessionState => "session-state",
            WakeReason::Message => "message",
            WakeReason::Spawn => "spawn",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    /// Increases per process.
    pub id: u64,
    pub session_key: String,
    pub agent_id: String,
    pub reason: WakeReason,
    /// Pending targets `(key, agent)` for `session-state` wakes.
    pub targets: Vec<(String, String)>,
    pub run_id: Option<String>,
    pub from: Option<String>,
    pub at: i64,
    /// Published by another process of the cluster: delivered to this process's SSE
    /// subscribers only, never to webhooks (the producing process delivers those).
    pub remote: bool,
}

/// Coalescing state and the broadcast of delivered wakes.
pub(crate) struct WakeHub {
    /// Held briefly to ask the pure state machine; never across I/O or `.await`.
    coalescer: Mutex<Coalescer<String>>,
    next_id: AtomicU64,
    sender: broadcast::Sender<Wake>,
    pub(crate) cluster: ClusterHooks,
}

impl WakeHub {
    pub(crate) fn new(window_ms: i64, buffer: usize) -> Self {
        // A ring of 0 is refused by tokio (a panic); one slot is the least that works.
        let (sender, _) = broadcast::channel(buffer.max(1));
        WakeHub {
            coalescer: Mutex::new(Coalescer::new(window_ms)),
            next_id: AtomicU64::new(1),
            sender,
            cluster: Default::default(),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.sender.subscribe()
    }

    pub(crate) fn decide(&self, watcher: &str, now: i64) -> WakeDecision {
        match self.coalescer.lock() {
            Ok(mut c) => c.request(&watcher.to_string(), now),
            Err(_) => WakeDecision::DeliverNow,
        }
    }

    pub(crate) fn take_due(&self, now: i64) -> Vec<(String, i64)> {
        self.coalescer
            .lock()
            .map(|mut c| c.take_due(now))
            .unwrap_or_default()
    }

    pub(crate) fn mark_delivered(&self, watcher: &str, at: i64) {
        if let Ok(mut c) = self.coalescer.lock() {
            c.delivered(&watcher.to_string(), at);
        }
    }

    pub(crate) fn next_due(&self) -> Option<i64> {
        self.coalescer.lock().ok().and_then(|c| c.next_due())
    }

    /// A deleted watcher: nothing of it is kept (its scheduled delivery, its merge origin, its
    /// mark for the repair check).
    pub(crate) fn forget(&self, watcher: &str) {
        if let Ok(mut c) = self.coalescer.lock() {
            c.forget(&watcher.to_string());
        }
        if let Ok(mut m) = self.cluster.merged_local.lock() {
            m.remove(watcher);
        }
        if let Ok(mut w) = self.cluster.woken.lock() {
            w.remove(watcher);
        }
    }

    /// How many watchers the wake bookkeeping holds now (for memory checks).
    pub(crate) fn bookkeeping(&self) -> WakeBookkeeping {
        WakeBookkeeping {
            coalescer: self.coalescer.lock().map(|c| c.len()).unwrap_or(0),
            swept: self.coalescer.lock().map(|c| c.marks()).unwrap_or(0),
            merged: self
                .cluster
                .merged_local
                .lock()
                .map(|m| m.len())
                .unwrap_or(0),
            woken: self.cluster.woken.lock().map(|w| w.len()).unwrap_or(0),
        }
    }

    /// Gives a wake the next id without sending it (catch-up wakes go to one subscriber only).
    pub(crate) fn number(&self, mut wake: Wake) -> Wake {
        wake.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        wake
    }

    pub(crate) fn has_subscribers(&self) -> bool {
        self.sender.receiver_count() > 0 || self.cluster.has_bus()
    }

    /// [`WakeHub::decide`] for a batch of the restart sweep, which names each watcher once,
    /// under one lock: the watchers woken at once are remembered as marks, not entries (D55).
    pub(crate) fn decide_burst<'w>(
        &self,
        watchers: impl Iterator<Item = &'w String>,
        now: i64,
    ) -> Vec<WakeDecision> {
        match self.coalescer.lock() {
            Ok(mut c) => c.request_burst(watchers, now),
            Err(_) => watchers.map(|_| WakeDecision::DeliverNow).collect(),
        }
    }

    /// Sends a wake to every subscriber and, when it is this process's own, to the cluster's
    /// bus. With no subscriber (a server at start-up, the benches), the wake only takes its id:
    /// the broadcast would clone it into a ring nobody reads.
    pub(crate) fn emit(&self, mut wake: Wake) {
        wake.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.cluster.publish(&wake);
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(wake);
        }
    }
}

/// Watchers held by the wake bookkeeping ([`crate::Engine::wake_bookkeeping`]): each follows
/// the watchers woken recently, never every watcher ever woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WakeBookkeeping {
    /// The coalescer's watchers: delivered within two windows, or with a delivery scheduled.
    pub coalescer: usize,
    /// Watchers the restart sweep woke within two windows, held as 16-byte marks.
    pub swept: usize,
    /// Scheduled deliveries with the origin of their requests.
    pub merged: usize,
    /// Watchers woken since the last repair check (none without repair checks).
    pub woken: usize,
}

/// Watchers remembered between two repair checks at most. Beyond it a woken watcher is not
/// remembered, and a check may wake it once more: a spare wake is harmless (wakes are hints),
/// memory without a bound is not (repair checks stop while a gateway's listener is down).
pub(crate) const WOKEN_CAP: usize = 65_536;

// The cluster hooks live here, beside the hub that calls them (cluster.rs builds on both).

/// Publishes this process's wakes to the other processes of a cluster.
pub trait WakeBus: Send + Sync + 'static {
    /// Called once per wake this process delivered (never for remote or catch-up wakes). Must
    /// not block: a bus queues and sends on its own thread.
    fn publish(&self, wake: &Wake);
    /// Called once per reply this process committed (an assistant turn carrying `run_id`, or
    /// the end of run `run_id`), so a `sessions_send` caller waiting on another process reads
    /// again at once ([`crate::Engine::signal_remote_reply`] there). A hint like wakes: the
    /// waiter also re-reads on its own. Must not block. The default sends nothing.
    fn publish_reply(&self, _run_id: &str) {}
    /// Called after every commit of this process that changed something, so the console's
    /// change stream on other processes hints too ([`crate::Engine::signal_remote_change`]
    /// there). A bus may coalesce a burst into one hint. Must not block. The default sends
    /// nothing.
    fn publish_change(&self) {}
}

/// Tells whether this process runs the cluster's singletons now.
pub trait Leadership: Send + Sync + 'static {
    fn is_leader(&self) -> bool;
}

/// The cluster state an engine keeps: its hooks and the bookkeeping of the repair check.
#[derive(Default)]
pub(crate) struct ClusterHooks {
    pub(crate) bus: Mutex<Option<Arc<dyn WakeBus>>>,
    pub(crate) leadership: Mutex<Option<Arc<dyn Leadership>>>,
    /// Watchers with a merged `session-state` delivery scheduled, and whether a local request
    /// merged into it (then its delivery is published and goes to webhooks; a delivery only
    /// remote requests asked for stays local to this process's SSE subscribers).
    pub(crate) merged_local: Mutex<HashMap<String, bool>>,
    /// Watchers that got a `session-state` wake here since the last repair check, recorded
    /// only once repair checks run (a single process never runs one: it would only grow), at
    /// most [`WOKEN_CAP`].
    pub(crate) woken: Mutex<HashSet<String>>,
    /// Set by the first repair check.
    pub(crate) checking: AtomicBool,
    /// Per watcher with pending notices at the last repair check: its highest `notified`.
    /// `None` before the first check.
    pub(crate) last_check: Mutex<Option<HashMap<String, i64>>>,
}

impl ClusterHooks {
    pub(crate) fn publish(&self, wake: &Wake) {
        if wake.reason == WakeReason::SessionState && self.checking.load(Ordering::Acquire) {
            if let Ok(mut w) = self.woken.lock() {
                if w.len() < WOKEN_CAP {
                    w.insert(wake.session_key.clone());
                }
            }
        }
        if wake.remote {
            return;
        }
        let bus = self.bus.lock().ok().and_then(|b| b.clone());
        if let Some(bus) = bus {
            bus.publish(wake);
        }
    }

    /// Tells the other processes that `run_id` got its reply here.
    pub(crate) fn publish_reply(&self, run_id: &str) {
        let bus = self.bus.lock().ok().and_then(|b| b.clone());
        if let Some(bus) = bus {
            bus.publish_reply(run_id);
        }
    }

    /// Tells the other processes that a commit here changed something.
    pub(crate) fn publish_change(&self) {
        let bus = self.bus.lock().ok().and_then(|b| b.clone());
        if let Some(bus) = bus {
            bus.publish_change();
        }
    }

    /// Whether a bus carries this process's wakes to other processes (then a wake is worth
    /// building even without a local subscriber).
    pub(crate) fn has_bus(&self) -> bool {
        self.bus.lock().is_ok_and(|b| b.is_some())
    }

    pub(crate) fn is_leader(&self) -> bool {
        let l = self.leadership.lock().ok().and_then(|l| l.clone());
        l.is_none_or(|l| l.is_leader())
    }

    /// Records that a request of this origin merged into the watcher's scheduled delivery.
    pub(crate) fn merged(&self, watcher: &str, local: bool) {
        if let Ok(mut m) = self.merged_local.lock() {
            let e = m.entry(watcher.to_string()).or_insert(false);
            *e |= local;
        }
    }

    /// Whether the scheduled delivery now firing for `watcher` was asked for by remote requests
    /// only (then it is not published again and goes to no webhook).
    pub(crate) fn take_merged_remote_only(&self, watcher: &str) -> bool {
        self.merged_local
            .lock()
            .ok()
            .and_then(|mut m| m.remove(watcher))
            .is_some_and(|local| !local)
    }
}
