//! The cluster hooks: how several gateways on one shared store see each other's wakes and agree
//! on who runs the singletons.
//!
//! Two small traits, set once on an [`Engine`] before it starts:
//!
//! - [`WakeBus`]: every wake this process delivers (after its commit, after coalescing) is
//!   published; the bus's listener hands wakes published by other processes to
//!   [`Engine::deliver_remote_wake`], which emits them to this process's subscribers only (SSE),
//!   never to webhooks, so a webhook fires once per wake across the cluster (on the gateway that
//!   produced it). Wakes stay hints: the cursor table is the truth, a lost notification is
//!   repaired by the SSE catch-up on reconnect and by [`Engine::repair_wakes`].
//! - [`Leadership`]: retention passes, the restart sweep and run timeouts run only while
//!   `is_leader()` is true (the gateway also gates the upstream monitor on it). Per-process
//!   timers (coalesced wake delivery) run everywhere.
//!
//! Without hooks (one process on SQLite) the bus is a no-op and the process always leads.

use crate::wakes::{Leadership, Wake, WakeBus, WakeReason};
use crate::{wake_eligible, Engine, EngineMetrics};
use std::collections::HashMap;
use std::sync::Arc;

/// A wake published by another process, as the bus carries it. `session-state` wakes carry no
/// targets: the receiver reads the watcher's pending targets from the store (the truth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteWake {
    pub session_key: String,
    pub agent_id: String,
    pub reason: WakeReason,
    pub run_id: Option<String>,
    pub from: Option<String>,
    pub at: i64,
}

impl RemoteWake {
    pub fn of(wake: &Wake) -> Self {
        RemoteWake {
            session_key: wake.session_key.clone(),
            agent_id: wake.agent_id.clone(),
            reason: wake.reason,
            run_id: wake.run_id.clone(),
            from: wake.from.clone(),
            at: wake.at,
        }
    }
}

impl WakeReason {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "session-state" => Some(WakeReason::SessionState),
            "message" => Some(WakeReason::Message),
            "spawn" => Some(WakeReason::Spawn),
            _ => None,
        }
    }
}

impl Engine {
    /// Sets the wake bus (once, before [`Engine::start`]); a later call replaces it.
    pub fn set_wake_bus(&self, bus: Arc<dyn WakeBus>) {
        if let Ok(mut b) = self.inner.wakes.cluster.bus.lock() {
            *b = Some(bus);
        }
    }

    /// Sets the leadership (before [`Engine::start`]); without one the process always leads.
    pub fn set_leadership(&self, leadership: Arc<dyn Leadership>) {
        if let Ok(mut l) = self.inner.wakes.cluster.leadership.lock() {
            *l = Some(leadership);
        }
    }

    /// Whether this process runs the singletons (retention, sweep, run timeouts, monitor) now.
    pub fn is_leader(&self) -> bool {
        self.inner.wakes.cluster.is_leader()
    }

    /// Delivers a wake another process published to this process's subscribers. `session-state`
    /// wakes pass this process's coalescer (02 §10, per watcher) and list the watcher's pending
    /// targets as read now; `message` and `spawn` wakes go out at once. None of them reaches a
    /// webhook here or is published again.
    pub fn deliver_remote_wake(&self, wake: RemoteWake) {
        let inner = &self.inner;
        EngineMetrics::inc(&inner.metrics.wakes_remote_received, 1);
        match wake.reason {
            WakeReason::SessionState => {
                if !wake_eligible(&wake.session_key) {
                    return;
                }
                // The receiver's clock, not the sender's: coalescing runs on this engine's time.
                let now = self.now();
                match inner.wakes.decide(&wake.session_key, now) {
                    aware_core::wake::WakeDecision::DeliverNow => {
                        crate::deliver_state_wake_from(inner, &wake.session_key, now, false, true);
                    }
                    _ => {
                        inner.wakes.cluster.merged(&wake.session_key, false);
                        EngineMetrics::inc(&inner.metrics.wakes_coalesced, 1);
                    }
                }
            }
            WakeReason::Message | WakeReason::Spawn => {
                inner.wakes.emit(Wake {
                    id: 0,
                    session_key: wake.session_key,
                    agent_id: wake.agent_id,
                    reason: wake.reason,
                    targets: Vec::new(),
                    run_id: wake.run_id,
                    from: wake.from,
                    at: wake.at,
                    remote: true,
                });
            }
        }
    }

    /// Signals this process's `sessions_send` waiter for `run_id`, if any: another process
    /// committed its reply ([`crate::WakeBus::publish_reply`]). The waiter then reads the store
    /// (the truth); a signal for a run nobody waits on here is dropped.
    pub fn signal_remote_reply(&self, run_id: &str) {
        if let Ok(m) = self.inner.reply_waiters.lock() {
            if let Some(n) = m.get(run_id) {
                EngineMetrics::inc(&self.inner.metrics.replies_remote_signalled, 1);
                n.notify_one();
            }
        }
    }

    /// Another process committed a change ([`crate::WakeBus::publish_change`]): the console's
    /// change stream hints here as for a local commit (its pages re-read the store).
    pub fn signal_remote_change(&self) {
        self.inner.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// The periodic check that repairs lost notifications: a watcher whose pending notices grew
    /// since the previous check (a higher `notified`, or newly pending) and that got no
    /// `session-state` wake here in between is woken now, for this process's subscribers only.
    /// The first call only records the state (a subscriber that connects gets the catch-up).
    /// Returns the number of watchers woken.
    pub fn repair_wakes(&self) -> crate::Result<u64> {
        let inner = &self.inner;
        // From now on woken watchers are recorded for the next check; before the first check
        // nothing was (this check would only drop them).
        inner
            .wakes
            .cluster
            .checking
            .store(true, std::sync::atomic::Ordering::Release);
        let pending = inner.store.pending_cursors_by_watcher()?;
        let now_state: HashMap<String, i64> = pending
            .iter()
            .filter(|(w, _)| wake_eligible(w))
            .map(|(w, rows)| {
                let max = rows.iter().map(|c| c.state.notified).max().unwrap_or(0);
                (w.clone(), max)
            })
            .collect();
        let woken = inner
            .wakes
            .cluster
            .woken
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        let previous = inner
            .wakes
            .cluster
            .last_check
            .lock()
            .map(|mut l| l.replace(now_state.clone()))
            .unwrap_or_default();
        let Some(previous) = previous else {
            return Ok(0);
        };
        let now = self.now();
        let mut n = 0;
        for (watcher, max) in &now_state {
            let grew = previous.get(watcher).is_none_or(|p| max > p);
            if grew && !woken.contains(watcher) {
                n += 1;
                EngineMetrics::inc(&inner.metrics.wakes_repaired, 1);
                match inner.wakes.decide(watcher, now) {
                    aware_core::wake::WakeDecision::DeliverNow => {
                        crate::deliver_state_wake_from(inner, watcher, now, false, true);
                    }
                    _ => inner.wakes.cluster.merged(watcher, false),
                }
            }
        }
        Ok(n)
    }
}
