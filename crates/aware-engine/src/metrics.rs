//! Engine counters (03 §12). Plain atomics; the gateway renders them.

use aware_core::EventKind;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct EngineMetrics {
    appended: [AtomicU64; 9],
    pub append_failures: AtomicU64,
    pub dedupe_hits: AtomicU64,
    pub read_failures: AtomicU64,
    pub notices_opened: AtomicU64,
    pub notice_followups: AtomicU64,
    pub notices_acked: AtomicU64,
    pub wakes_requested_session_state: AtomicU64,
    pub wakes_requested_message: AtomicU64,
    pub wakes_requested_spawn: AtomicU64,
    pub wakes_coalesced: AtomicU64,
    pub wakes_delivered: AtomicU64,
    pub prune_batches: AtomicU64,
    pub prune_failures: AtomicU64,
    pub prune_deleted_age: AtomicU64,
    pub prune_deleted_cap: AtomicU64,
    pub cursors_expired: AtomicU64,
    /// Wakes other gateways published and this one delivered to its own subscribers.
    pub wakes_remote_received: AtomicU64,
    /// Watchers woken by the periodic repair check (a lost cross-gateway notification).
    pub wakes_repaired: AtomicU64,
    /// `sessions_send` waiters here woken by a reply another gateway committed.
    pub replies_remote_signalled: AtomicU64,
}

fn kind_index(kind: EventKind) -> usize {
    EventKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

impl EngineMetrics {
    pub(crate) fn appended(&self, kind: EventKind) {
        self.appended[kind_index(kind)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn appended_total(&self, kind: EventKind) -> u64 {
        self.appended[kind_index(kind)].load(Ordering::Relaxed)
    }

    pub(crate) fn inc(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
