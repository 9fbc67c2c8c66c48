//! The `session-state` wake coalescing state machine (spec 02 §10), fed "now" explicitly.
//!
//! Per watcher it remembers the time of the last delivered wake and at most one scheduled merged
//! delivery. The engine asks it what to do with each request and, when its clock moves, which
//! scheduled deliveries fell due; whether a due delivery is sent depends on the watcher still
//! having a pending notice, which the engine checks.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// What to do with one wake request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeDecision {
    /// Deliver now (the state already records it as delivered at `now`).
    DeliverNow,
    /// A merged delivery was scheduled at this time.
    Scheduled(i64),
    /// Merged into an already scheduled delivery.
    Merged,
}

#[derive(Debug, Clone, Copy, Default)]
struct WatcherState {
    last_delivered: Option<i64>,
    scheduled_at: Option<i64>,
}

/// Coalescer over watcher identities `W`.
#[derive(Debug)]
pub struct Coalescer<W> {
    window_ms: i64,
    watchers: HashMap<W, WatcherState>,
    /// Scheduled deliveries by due time, so firing is in due order.
    schedule: BTreeMap<(i64, u64), W>,
    tie: u64,
}

impl<W: Clone + Eq + Hash> Coalescer<W> {
    pub fn new(window_ms: i64) -> Self {
        Coalescer {
            window_ms: window_ms.max(0),
            watchers: HashMap::new(),
            schedule: BTreeMap::new(),
            tie: 0,
        }
    }

    pub fn request(&mut self, watcher: &W, now: i64) -> WakeDecision {
        let window = self.window_ms;
        let state = self.watchers.entry(watcher.clone()).or_default();
        let quiet = match state.last_delivered {
            None => true,
            Some(last) => window == 0 || now - last >= window,
        };
        if quiet && state.scheduled_at.is_none() {
            state.last_delivered = Some(now);
            return WakeDecision::DeliverNow;
        }
        if state.scheduled_at.is_some() {
            return WakeDecision::Merged;
        }
        let at = state.last_delivered.unwrap_or(now) + window;
        state.scheduled_at = Some(at);
        self.tie += 1;
        self.schedule.insert((at, self.tie), watcher.clone());
        WakeDecision::Scheduled(at)
    }

    /// Removes and returns the scheduled deliveries due at `now`, in due order. For each, the
    /// caller delivers when the watcher still has a pending notice and then calls
    /// [`Coalescer::delivered`]; otherwise the delivery is simply dropped.
    pub fn take_due(&mut self, now: i64) -> Vec<(W, i64)> {
        let mut due = Vec::new();
        while let Some(entry) = self.schedule.first_entry() {
            let (at, _) = *entry.key();
            if at > now {
                break;
            }
            let watcher = entry.remove();
            if let Some(state) = self.watchers.get_mut(&watcher) {
                state.scheduled_at = None;
            }
            due.push((watcher, at));
        }
        due
    }

    pub fn delivered(&mut self, watcher: &W, at: i64) {
        self.watchers
            .entry(watcher.clone())
            .or_default()
            .last_delivered = Some(at);
    }

    /// The earliest scheduled delivery, for timers.
    pub fn next_due(&self) -> Option<i64> {
        self.schedule.keys().next().map(|(at, _)| *at)
    }

    /// Drops all state of a deleted watcher.
    pub fn forget(&mut self, watcher: &W) {
        if let Some(state) = self.watchers.remove(watcher) {
            if state.scheduled_at.is_some() {
                self.schedule.retain(|_, w| w != watcher);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_767_225_600_000;

    #[test]
    fn s059_coalescing_window() {
        let mut c = Coalescer::new(20_000);
        assert_eq!(c.request(&"w", T0), WakeDecision::DeliverNow);
        assert_eq!(
            c.request(&"w", T0 + 5_000),
            WakeDecision::Scheduled(T0 + 20_000)
        );
        assert!(c.take_due(T0 + 19_000).is_empty());
        assert_eq!(c.take_due(T0 + 20_000), vec![("w", T0 + 20_000)]);
        c.delivered(&"w", T0 + 20_000);
        assert_eq!(c.request(&"w", T0 + 45_000), WakeDecision::DeliverNow);
    }

    #[test]
    fn s060_quiet_period_and_zero_window() {
        let mut c = Coalescer::new(20_000);
        c.request(&"w", T0);
        assert_eq!(c.request(&"w", T0 + 25_000), WakeDecision::DeliverNow);
        let mut z = Coalescer::new(0);
        assert_eq!(z.request(&"w", T0), WakeDecision::DeliverNow);
        assert_eq!(z.request(&"w", T0), WakeDecision::DeliverNow);
    }

    #[test]
    fn merged_requests_and_forget() {
        let mut c = Coalescer::new(20_000);
        c.request(&"a", T0);
        c.request(&"a", T0 + 1);
        assert_eq!(c.request(&"a", T0 + 2), WakeDecision::Merged);
        assert_eq!(c.next_due(), Some(T0 + 20_000));
        c.forget(&"a");
        assert_eq!(c.next_due(), None);
        assert_eq!(c.request(&"a", T0 + 3), WakeDecision::DeliverNow);
    }
}
