//! Webhook delivery lanes (02 §10 with decision D4's bounds): the per-agent slots and waiting wakes
//! that `wakes` delivers through and `/metrics` reports.

use crate::config::Webhook;
use aware_engine::Wake;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Webhook delivery lanes, one per agent: at most `max_in_flight` deliveries run at once; further
/// wakes wait, one per session (the newest replaces an older one still waiting: a wake only says
/// "run a turn", so the latest keeps its meaning), and beyond `max_queued` sessions they are
/// dropped. Either way the notices stay pending, so nothing is lost.
#[derive(Default)]
pub(crate) struct WebhookLanes {
    /// A std mutex held only to pick the next wake, never across an await.
    lanes: Mutex<HashMap<String, Lane>>,
    pub(crate) in_flight: AtomicU64,
    pub(crate) queued: AtomicU64,
    pub(crate) coalesced: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

#[derive(Default)]
struct Lane {
    running: usize,
    order: VecDeque<String>,
    waiting: HashMap<String, Wake>,
}

impl WebhookLanes {
    /// Starts the wake now when the agent has a free slot, else queues it.
    pub(crate) fn offer(&self, hook: &Webhook, wake: Wake) -> Option<Wake> {
        let Ok(mut lanes) = self.lanes.lock() else {
            return None;
        };
        let lane = lanes.entry(wake.agent_id.clone()).or_default();
        if lane.running < hook.max_in_flight {
            lane.running += 1;
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            return Some(wake);
        }
        let (agent, session) = (wake.agent_id.clone(), wake.session_key.clone());
        if lane.waiting.contains_key(&session) {
            lane.waiting.insert(session.clone(), wake);
            self.coalesced.fetch_add(1, Ordering::Relaxed);
            tracing::info!(event = "wake_webhook_coalesced", agent = %agent, session = %session,
                "webhook busy: the waiting wake for this session was replaced by a newer one");
        } else if lane.waiting.len() >= hook.max_queued {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(event = "wake_webhook_dropped", agent = %agent, session = %session,
                queued = lane.waiting.len(), "webhook queue full: wake dropped (the notice stays pending)");
        } else {
            lane.order.push_back(session.clone());
            lane.waiting.insert(session, wake);
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// The next waiting wake of the agent, or frees the slot when none waits.
    pub(crate) fn next(&self, agent: &str) -> Option<Wake> {
        let Ok(mut lanes) = self.lanes.lock() else {
            return None;
        };
        let lane = lanes.get_mut(agent)?;
        while let Some(session) = lane.order.pop_front() {
            if let Some(w) = lane.waiting.remove(&session) {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                return Some(w);
            }
        }
        lane.running = lane.running.saturating_sub(1);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        None
    }
}
