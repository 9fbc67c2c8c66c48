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
//!
//! A burst that names each watcher once (the restart sweep, up to every watcher of the store)
//! records the watchers it delivers to at once as 16-byte marks (a hash of the watcher and the
//! time) in sorted runs instead of map entries (decision D55): a watcher woken by the sweep
//! still coalesces its next request for a window, at a fraction of an entry's memory.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

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
    /// Deliveries of bursts ([`Coalescer::request_burst`]), read where `watchers` has no entry.
    marks: Marks,
}

/// Deliveries remembered as `(hash of the watcher, time)`, in runs sorted by hash; the runs
/// merge as they grow (each at most half its left neighbour), so a lookup is O(log² n) and a
/// mark costs O(log n) amortised. A watcher's mark is its last delivery as long as it has no
/// map entry (an entry, made by any later request, takes over). Two watchers share a mark only
/// if their 64-bit hashes (keys random per process) collide; the other then waits at most one
/// window for a wake it would have had at once, and loses none.
#[derive(Debug, Default)]
struct Marks {
    hasher: RandomState,
    /// Each run with the newest time in it (a run is dropped whole once that is old).
    runs: Vec<(Vec<(u64, i64)>, i64)>,
}

/// The time of a forgotten mark.
const GONE: i64 = i64::MIN;

impl Marks {
    fn hash<W: Hash>(&self, watcher: &W) -> u64 {
        self.hasher.hash_one(watcher)
    }

    fn len(&self) -> usize {
        self.runs.iter().map(|(r, _)| r.len()).sum()
    }

    /// The newest delivery marked for this hash.
    fn find(&self, hash: u64) -> Option<i64> {
        let mut best = None;
        for (run, _) in &self.runs {
            let from = run.partition_point(|(h, _)| *h < hash);
            for (_, at) in run[from..].iter().take_while(|(h, _)| *h == hash) {
                if *at != GONE {
                    best = best.max(Some(*at));
                }
            }
        }
        best
    }

    fn add(&mut self, mut run: Vec<(u64, i64)>) {
        let Some(newest) = run.iter().map(|(_, at)| *at).max() else {
            return;
        };
        run.sort_unstable();
        self.runs.push((run, newest));
        // Append, then a stable sort, which finds the two sorted runs and merges them in linear
        // time with a buffer of the smaller half, so a merge needs no second copy of both.
        while self.runs.len() >= 2 {
            let n = self.runs.len();
            if self.runs[n - 2].0.len() > 2 * self.runs[n - 1].0.len() {
                break;
            }
            let Some((last, last_newest)) = self.runs.pop() else {
                break;
            };
            let (left, left_newest) = &mut self.runs[n - 2];
            left.extend(last);
            left.sort();
            *left_newest = (*left_newest).max(last_newest);
        }
    }

    /// Drops the runs whose every mark is older than `cutoff`.
    fn expire(&mut self, cutoff: i64) {
        self.runs.retain(|(_, newest)| *newest >= cutoff);
        if self.runs.is_empty() {
            self.runs = Vec::new();
        }
    }

    fn forget(&mut self, hash: u64) {
        for (run, _) in &mut self.runs {
            let from = run.partition_point(|(h, _)| *h < hash);
            for mark in run[from..].iter_mut().take_while(|(h, _)| *h == hash) {
                mark.1 = GONE;
            }
        }
    }
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
            marks: Marks::default(),
        }
    }

    /// Watchers remembered now by an entry (recently delivered or scheduled, plus those not
    /// swept yet); the marks of bursts are counted by [`Coalescer::marks`].
    pub fn len(&self) -> usize {
        self.watchers.len()
    }

    /// Deliveries of bursts remembered now as marks (16 bytes each), until two windows after
    /// the newest of their run.
    pub fn marks(&self) -> usize {
        self.marks.len()
    }

    fn expire_marks(&mut self, now: i64) {
        if !self.marks.runs.is_empty() {
            self.marks
                .expire(now.saturating_sub(self.window_ms.saturating_mul(2)));
        }
    }

    /// [`Coalescer::request`] for a burst of requests that names each watcher once (the
    /// restart sweep), with the same answers; a watcher without an entry or a mark is delivered
    /// at once and remembered by a mark, not an entry, so a burst of a million watchers costs
    /// 16 MB for two windows rather than an entry each.
    pub fn request_burst<'w>(
        &mut self,
        watchers: impl IntoIterator<Item = &'w W>,
        now: i64,
    ) -> Vec<WakeDecision>
    where
        W: 'w,
    {
        self.expire_marks(now);
        let mut run = Vec::new();
        let mut in_burst = HashSet::new();
        let mut out = Vec::new();
        for w in watchers {
            let hash = self.marks.hash(w);
            let known = self.watchers.contains_key(w) || self.marks.find(hash).is_some();
            if known || self.window_ms == 0 {
                out.push(self.request(w, now));
            } else if !in_burst.insert(hash) {
                // Named twice in one burst: the second is a request inside the first's window.
                self.watchers.insert(
                    w.clone(),
                    WatcherState {
                        last_delivered: Some(now),
                        scheduled_at: None,
                    },
                );
                out.push(self.request(w, now));
            } else {
                run.push((hash, now));
                out.push(WakeDecision::DeliverNow);
            }
        }
        self.marks.add(run);
        out
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
        self.expire_marks(now);
        let window = self.window_ms;
        if !self.marks.runs.is_empty() && !self.watchers.contains_key(watcher) {
            let marked = self.marks.find(self.marks.hash(watcher));
            self.watchers.insert(
                watcher.clone(),
                WatcherState {
                    last_delivered: marked,
                    scheduled_at: None,
                },
            );
        }
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
        self.expire_marks(now);
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
        if !self.marks.runs.is_empty() {
            let hash = self.marks.hash(watcher);
            self.marks.forget(hash);
        }
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

    /// A burst's deliveries are marks, not entries, and coalesce as entries would (S059 after a
    /// restart sweep): a request inside the window is scheduled at the mark's time plus a
    /// window; a watcher the burst did not name is delivered at once.
    #[test]
    fn a_burst_is_remembered_by_marks() {
        let mut c = Coalescer::new(20_000);
        let burst: Vec<i64> = (0..5_000).collect();
        let first = c.request_burst(&burst[..2_000], T0);
        let second = c.request_burst(&burst[2_000..], T0 + 1_000);
        assert!(first
            .iter()
            .chain(&second)
            .all(|d| *d == WakeDecision::DeliverNow));
        assert_eq!((c.len(), c.marks()), (0, 5_000));
        // Runs merge: a handful, not one per burst.
        assert!(c.marks.runs.len() <= 2, "{} runs", c.marks.runs.len());
        assert_eq!(
            c.request(&7, T0 + 5_000),
            WakeDecision::Scheduled(T0 + 20_000)
        );
        assert_eq!(
            c.request(&4_000, T0 + 5_000),
            WakeDecision::Scheduled(T0 + 21_000)
        );
        assert_eq!(c.request(&-3, T0 + 5_000), WakeDecision::DeliverNow);
        assert_eq!(c.request(&8, T0 + 20_000), WakeDecision::DeliverNow);
        // A second burst inside the window coalesces with the first.
        assert_eq!(
            c.request_burst(&[9, 9], T0 + 6_000),
            vec![WakeDecision::Scheduled(T0 + 20_000), WakeDecision::Merged]
        );
        assert_eq!(
            c.request_burst(&[-10, -10], T0 + 6_000),
            vec![
                WakeDecision::DeliverNow,
                WakeDecision::Scheduled(T0 + 26_000)
            ]
        );
        // Two windows after the newest mark, the marks are gone.
        c.take_due(T0 + 6_000 + 40_000);
        assert!(c.marks() > 0);
        c.take_due(T0 + 6_000 + 40_001);
        assert_eq!(c.marks(), 0);
        assert_eq!(c.request(&100, T0 + 46_002), WakeDecision::DeliverNow);
    }

    #[test]
    fn forget_drops_a_mark() {
        let mut c = Coalescer::new(20_000);
        c.request_burst(&[1, 2, 3], T0);
        c.forget(&2);
        assert_eq!(c.request(&2, T0 + 1), WakeDecision::DeliverNow);
        assert_eq!(c.request(&3, T0 + 1), WakeDecision::Scheduled(T0 + 20_000));
    }

    /// 200,000 watchers in bursts of a thousand (the restart sweep's batches): no entry, and
    /// the runs stay few.
    #[test]
    fn many_marks_in_few_runs() {
        let mut c = Coalescer::new(20_000);
        let ids: Vec<i64> = (0..200_000).collect();
        for (i, chunk) in ids.chunks(1_000).enumerate() {
            c.request_burst(chunk, T0 + i as i64);
        }
        assert_eq!((c.len(), c.marks()), (0, 200_000));
        assert!(c.marks.runs.len() <= 18, "{} runs", c.marks.runs.len());
        assert_eq!(
            c.request(&199_999, T0 + 2_000),
            WakeDecision::Scheduled(T0 + 199 + 20_000)
        );
    }
}
