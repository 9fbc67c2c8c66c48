//! The `session-state` wake coalescing state machine (spec 02 §10), fed "now" explicitly.
//!
//! Per watcher it remembers the time of the last delivered wake and at most one scheduled merged
//! delivery. The engine asks it what to do with each request and, when its clock moves, which
//! scheduled deliveries fell due; whether a due delivery is sent depends on the watcher still
//! having a pending notice, which the engine checks.
//!
//! A watcher whose last delivery is long past and that has nothing scheduled behaves exactly as
//! one never seen, so such entries are swept out: the memory follows the watchers woken
//! recently, not every watcher ever woken (sessions come and go for good).

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
    /// The entry count at which the next sweep runs: twice what the last sweep kept (at least
    /// [`SWEEP_MIN`]), so sweeping costs O(1) per request amortised.
    sweep_at: usize,
}

/// Entries below which no sweep runs.
const SWEEP_MIN: usize = 1024;

impl<W: Clone + Eq + Hash> Coalescer<W> {
    pub fn new(window_ms: i64) -> Self {
        Coalescer {
            window_ms: window_ms.max(0),
            watchers: HashMap::new(),
            schedule: BTreeMap::new(),
            tie: 0,
            sweep_at: SWEEP_MIN,
        }
    }

    /// Watchers remembered now (recently delivered or scheduled, plus those not swept yet).
    pub fn len(&self) -> usize {
        self.watchers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// Drops the watchers that would be answered as if never seen: nothing scheduled and no
    /// delivery within two windows of `now`. Two windows rather than one, so a request that
    /// reaches here with a slightly older `now` (another thread's) still finds the entry its
    /// window needs.
    fn sweep(&mut self, now: i64) {
        let window = self.window_ms;
        self.watchers.retain(|_, s| {
            s.scheduled_at.is_some()
                || s.last_delivered
                    .is_some_and(|last| now.saturating_sub(last) < window.saturating_mul(2))
        });
        self.sweep_at = self.watchers.len().saturating_mul(2).max(SWEEP_MIN);
    }

    pub fn request(&mut self, watcher: &W, now: i64) -> WakeDecision {
        if self.watchers.len() >= self.sweep_at {
            self.sweep(now);
        }
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

    /// A million watchers, each woken once, a millisecond apart: the coalescer keeps the ones
    /// inside two windows (and a sweep's slack), never all, and answers as before.
    #[test]
    fn watchers_woken_long_ago_are_forgotten() {
        let window = 1_000;
        let mut c = Coalescer::new(window);
        let mut most = 0;
        for i in 0..1_000_000i64 {
            assert_eq!(c.request(&i, T0 + i), WakeDecision::DeliverNow);
            most = most.max(c.len());
        }
        // Two windows of watchers, doubled by the sweep's slack.
        assert!(
            most <= 4 * window as usize + SWEEP_MIN,
            "{most} watchers kept"
        );
        // A recent watcher is still inside its window; an old one is as new.
        let last = 999_999;
        assert_eq!(
            c.request(&last, T0 + last + 1),
            WakeDecision::Scheduled(T0 + last + window)
        );
        assert_eq!(c.request(&0, T0 + last + 2), WakeDecision::DeliverNow);
    }

    #[test]
    fn a_sweep_keeps_scheduled_deliveries() {
        let mut c = Coalescer::new(1_000);
        c.request(&-1, T0);
        assert_eq!(c.request(&-1, T0 + 1), WakeDecision::Scheduled(T0 + 1_000));
        // Far past the window, many other watchers: sweeps run, the schedule stays.
        for i in 0..10_000i64 {
            c.request(&i, T0 + 100_000 + i);
        }
        assert_eq!(c.take_due(T0 + 200_000), vec![(-1, T0 + 1_000)]);
        assert!(c.len() < 10_000);
    }
}
