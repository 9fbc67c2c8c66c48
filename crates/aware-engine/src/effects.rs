//! After-commit effects: what a committed op wants done (wakes, metrics, reply waiters), queued
//! by the store's after-commit hook in commit order and applied by the callers themselves, so
//! the writer never waits for wake reads and a watcher sees its wakes in commit order (01 §11).

use crate::metrics::EngineMetrics;
use crate::wakes::{Wake, WakeReason};
use crate::{Inner, Result};
use aware_core::EventKind;
use aware_store::{StoreExt, WriteTx};
use std::sync::{Arc, Mutex};

/// Committed ops' effects, applied in commit order by the callers themselves rather than by
/// the writer: the after-commit hook only queues them (so the writer, and every other op of
/// its batch, does not wait for wake reads), and each caller applies the queue up to its own
/// op before it returns. A caller's effects are therefore applied when its call returns, and
/// never lost (engine writes are blocking calls that run to the end even when the HTTP client
/// behind them went away); whoever applies takes every earlier entry first, in commit order,
/// so a watcher sees its wakes in commit order.
#[derive(Default)]
pub(crate) struct EffectsQueue {
    /// `(ticket, effects, now)`, tickets increasing; pushed by the after-commit hooks, which
    /// the store runs one at a time in commit order.
    pending: Mutex<std::collections::VecDeque<(u64, Effects, i64)>>,
    next_ticket: std::sync::atomic::AtomicU64,
    /// The last ticket applied; held while applying, which serialises appliers.
    applied: Mutex<u64>,
}

/// What an op wants done after its commit.
#[derive(Default)]
pub(crate) struct Effects {
    pub appended: Vec<EventKind>,
    pub dedupe_hits: u64,
    pub append_failures: u64,
    pub notices_opened: u64,
    pub follow_ups: u64,
    pub acked: u64,
    /// Watchers whose notice opened or re-froze: `session-state` wake requests.
    pub state_wakes: Vec<String>,
    /// Requests that bypass coalescing (`message`, `spawn`).
    pub direct_wakes: Vec<Wake>,
    /// Watchers whose in-memory wake state must be dropped (deleted sessions).
    pub forget: Vec<String>,
    /// Run ids that got an assistant turn or ended: their reply waiters are signalled.
    pub replies: Vec<String>,
}

/// Context of one writer op: its "now" and its effects.
pub(crate) struct Ctx {
    pub now: i64,
    pub effects: Effects,
    pub inner: Arc<Inner>,
}

impl EffectsQueue {
    /// Queues one committed op's effects; returns its ticket (≥ 1).
    fn push(&self, effects: Effects, now: i64) -> u64 {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        // Taken under the lock so tickets enter the queue in increasing order.
        let ticket = self
            .next_ticket
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        pending.push_back((ticket, effects, now));
        ticket
    }
}

/// Wraps an engine op into a store op: it runs with a fresh [`Ctx`], and its after-commit hook
/// queues the op's effects and sets the returned ticket (0 while none: the op or its commit
/// failed), which the caller then applies through.
pub(crate) fn with_effects<R>(
    inner: &Arc<Inner>,
    mut op: impl FnMut(&mut dyn WriteTx, &mut Ctx) -> Result<R> + Send + 'static,
) -> (
    Arc<std::sync::atomic::AtomicU64>,
    impl FnMut(&mut dyn WriteTx) -> Result<R> + Send + 'static,
) {
    let ticket = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let hook_ticket = ticket.clone();
    let inner = inner.clone();
    let store_op = move |tx: &mut dyn WriteTx| {
        let mut ctx = Ctx {
            now: inner.clock.now_ms(),
            effects: Effects::default(),
            inner: inner.clone(),
        };
        let r = op(tx, &mut ctx)?;
        let effects = std::mem::take(&mut ctx.effects);
        let now = ctx.now;
        // Per run: a backend may run the op again (`aware_store::WriteOp`); only the hook of
        // the run that commits runs.
        let (hook_ticket, inner) = (hook_ticket.clone(), inner.clone());
        tx.after_commit(Box::new(move || {
            hook_ticket.store(
                inner.effects.push(effects, now),
                std::sync::atomic::Ordering::Release,
            );
        }));
        Ok(r)
    };
    (ticket, store_op)
}

/// Applies every queued effect up to and including `ticket`, in ticket (commit) order. Returns
/// at once when another caller already applied it.
pub(crate) fn apply_effects_through(inner: &Arc<Inner>, ticket: u64) {
    let q = &inner.effects;
    let mut applied = q.applied.lock().unwrap_or_else(|e| e.into_inner());
    while *applied < ticket {
        let next = q
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        let Some((t, effects, now)) = next else {
            break;
        };
        *applied = t;
        apply_effects(inner, effects, now);
    }
}

fn apply_effects(inner: &Arc<Inner>, effects: Effects, now: i64) {
    inner.changes.send_modify(|g| *g = g.wrapping_add(1));
    inner.wakes.cluster.publish_change();
    let m = &inner.metrics;
    for kind in &effects.appended {
        m.appended(*kind);
    }
    EngineMetrics::inc(&m.dedupe_hits, effects.dedupe_hits);
    EngineMetrics::inc(&m.append_failures, effects.append_failures);
    EngineMetrics::inc(&m.notices_opened, effects.notices_opened);
    EngineMetrics::inc(&m.notice_followups, effects.follow_ups);
    EngineMetrics::inc(&m.notices_acked, effects.acked);
    for watcher in &effects.forget {
        inner.wakes.forget(watcher);
    }
    if !effects.replies.is_empty() {
        if let Ok(m) = inner.reply_waiters.lock() {
            for run_id in &effects.replies {
                if let Some(n) = m.get(run_id) {
                    n.notify_one();
                }
            }
        }
        // The waiter may be on another gateway of a shared store.
        for run_id in &effects.replies {
            inner.wakes.cluster.publish_reply(run_id);
        }
    }
    for watcher in effects.state_wakes {
        request_state_wake(inner, &watcher, now);
    }
    for wake in effects.direct_wakes {
        match wake.reason {
            WakeReason::Message => EngineMetrics::inc(&m.wakes_requested_message, 1),
            _ => EngineMetrics::inc(&m.wakes_requested_spawn, 1),
        }
        inner.wakes.emit(wake);
        EngineMetrics::inc(&m.wakes_delivered, 1);
    }
}

/// A watcher is woken only when it is agent-qualified and not a subagent (02 §10).
pub(crate) fn wake_eligible(watcher: &str) -> bool {
    aware_core::SessionKey::parse(watcher)
        .map(|k| k.is_agent_qualified() && !k.is_subagent())
        .unwrap_or(false)
}

pub(crate) fn request_state_wake(inner: &Arc<Inner>, watcher: &str, now: i64) {
    if !wake_eligible(watcher) {
        return;
    }
    EngineMetrics::inc(&inner.metrics.wakes_requested_session_state, 1);
    match inner.wakes.decide(watcher, now) {
        aware_core::wake::WakeDecision::DeliverNow => {
            deliver_state_wake(inner, watcher, now, false);
        }
        _ => {
            inner.wakes.cluster.merged(watcher, true);
            EngineMetrics::inc(&inner.metrics.wakes_coalesced, 1)
        }
    }
}

/// [`request_state_wake`] for the watchers one restart-sweep batch finished (each named once
/// in the whole sweep): one coalescer lock for the batch, and their pending targets read in one
/// snapshot rather than one read (BEGIN, SELECT, COMMIT) per watcher, which was most of the
/// sweep's time outside its transactions (profile of W6). Returns the wakes requested (the
/// eligible watchers).
pub(crate) fn request_state_wakes(inner: &Arc<Inner>, watchers: &[String], now: i64) -> u64 {
    let eligible: Vec<&String> = watchers.iter().filter(|w| wake_eligible(w)).collect();
    let requested = eligible.len() as u64;
    EngineMetrics::inc(&inner.metrics.wakes_requested_session_state, requested);
    let decisions = inner.wakes.decide_burst(eligible.iter().copied(), now);
    let mut due: Vec<&String> = Vec::with_capacity(eligible.len());
    for (w, decision) in eligible.into_iter().zip(decisions) {
        match decision {
            aware_core::wake::WakeDecision::DeliverNow => due.push(w),
            _ => {
                inner.wakes.cluster.merged(w, true);
                EngineMetrics::inc(&inner.metrics.wakes_coalesced, 1)
            }
        }
    }
    if due.is_empty() {
        return requested;
    }
    // A failed read sends the wakes without targets, as `deliver_state_wake` does. With no
    // subscriber (the sweep at start-up runs before anyone can subscribe) the targets would
    // go nowhere, so they are not read: a subscriber that connects later gets catch-up wakes
    // with its targets read then (02 §10).
    let mut pending: std::collections::HashMap<String, Vec<aware_store::CursorRow>> =
        std::collections::HashMap::new();
    if inner.wakes.has_subscribers() {
        let keys: Vec<String> = due.iter().map(|w| (*w).clone()).collect();
        for c in inner
            .store
            .read_as(|r| r.pending_by_watchers(&keys))
            .unwrap_or_default()
        {
            pending.entry(c.watcher.clone()).or_default().push(c);
        }
    }
    for watcher in due {
        let agent = aware_core::SessionKey::parse(watcher)
            .ok()
            .and_then(|k| k.qualified_agent())
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let targets = pending.remove(watcher.as_str()).unwrap_or_default();
        inner
            .wakes
            .emit(state_wake(watcher.clone(), agent, targets, now, false));
        EngineMetrics::inc(&inner.metrics.wakes_delivered, 1);
    }
    requested
}

/// Sends one `session-state` wake listing the watcher's pending targets. A scheduled (merged)
/// delivery is dropped when nothing is pending any more.
pub(crate) fn deliver_state_wake(inner: &Arc<Inner>, watcher: &str, now: i64, scheduled: bool) {
    deliver_state_wake_from(inner, watcher, now, scheduled, false)
}

/// [`deliver_state_wake`]; `remote` marks a delivery only other processes asked for (it reaches
/// this process's SSE subscribers and neither the bus nor webhooks).
pub(crate) fn deliver_state_wake_from(
    inner: &Arc<Inner>,
    watcher: &str,
    now: i64,
    scheduled: bool,
    remote: bool,
) {
    let pending = inner
        .store
        .read_as(|r| r.pending_by_watcher(watcher))
        .unwrap_or_default();
    // A remote wake that finds nothing pending was drained meanwhile (on any gateway).
    if pending.is_empty() && (scheduled || remote) {
        return;
    }
    if scheduled {
        inner.wakes.mark_delivered(watcher, now);
    }
    let agent = aware_core::SessionKey::parse(watcher)
        .ok()
        .and_then(|k| k.qualified_agent())
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    inner
        .wakes
        .emit(state_wake(watcher.to_string(), agent, pending, now, remote));
    EngineMetrics::inc(&inner.metrics.wakes_delivered, 1);
}

/// The `session-state` wake of `watcher`, listing the targets of its pending cursors (not yet
/// numbered: the hub numbers a wake when it emits it).
pub(crate) fn state_wake(
    watcher: String,
    agent: String,
    pending: Vec<aware_store::CursorRow>,
    at: i64,
    remote: bool,
) -> Wake {
    Wake {
        id: 0,
        session_key: watcher,
        agent_id: agent,
        reason: WakeReason::SessionState,
        targets: pending
            .into_iter()
            .map(|c| (c.target_key, c.target_agent))
            .collect(),
        run_id: None,
        from: None,
        at,
        remote,
    }
}
