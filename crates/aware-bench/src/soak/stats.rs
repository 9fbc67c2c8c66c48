//! What the soak measures as it goes: per-route latencies of the current window, status
//! counts, and the first errors; the sampler turns each window into a [`Row`].

use crate::util::percentiles;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Shared by the load threads and the sampler.
#[derive(Default)]
pub(crate) struct Stats {
    window: Mutex<BTreeMap<&'static str, Vec<u64>>>,
    /// The disk floor's syncs of the current window (probe.rs), kept apart from the requests.
    floor: Mutex<Vec<u64>>,
    pub(crate) requests: AtomicU64,
    pub(crate) status_5xx: AtomicU64,
    pub(crate) wake_connects: AtomicU64,
    pub(crate) wake_events: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// Errors kept for the report (the first ones say what went wrong; the rest are counted).
const KEEP_ERRORS: usize = 20;

impl Stats {
    /// One answered request of `route` that took `ns`.
    pub(crate) fn record(&self, route: &'static str, ns: u64, status: u16) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if status >= 500 {
            self.status_5xx.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut w) = self.window.lock() {
            w.entry(route).or_default().push(ns);
        }
    }

    /// One sync of the disk floor that took `ns`.
    pub(crate) fn record_floor(&self, ns: u64) {
        if let Ok(mut f) = self.floor.lock() {
            f.push(ns);
        }
    }

    /// p50 and p99 (µs) of the floor's syncs of the window that just ended.
    pub(crate) fn take_floor(&self) -> (f64, f64) {
        let mut v = self
            .floor
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default();
        let (a, b) = percentiles(&mut v);
        (a as f64 / 1e3, b as f64 / 1e3)
    }

    pub(crate) fn error(&self, e: String) {
        if let Ok(mut v) = self.errors.lock() {
            if v.len() < KEEP_ERRORS {
                v.push(e);
            }
        }
    }

    pub(crate) fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The latencies of the window that just ended; a new one starts.
    pub(crate) fn take_window(&self) -> BTreeMap<&'static str, Vec<u64>> {
        self.window
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }
}

/// Per-route figures of one window.
#[derive(Clone)]
pub(crate) struct RouteFig {
    pub(crate) route: &'static str,
    pub(crate) n: u64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
}

/// One sample window.
#[derive(Clone)]
pub(crate) struct Row {
    /// Seconds since the load started (end of the window).
    pub(crate) t: f64,
    /// Requests answered so far (all windows).
    pub(crate) ops: u64,
    pub(crate) req_per_s: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) routes: Vec<RouteFig>,
    pub(crate) rss_mib: f64,
    pub(crate) fds: u64,
    pub(crate) threads: u64,
    /// Gateway CPU over the window, in cores (1.0 = one core busy).
    pub(crate) gw_cpu: f64,
    /// The load clients' CPU (this process) over the window, in cores.
    pub(crate) load_cpu: f64,
    /// Busy share of the whole machine over the window.
    pub(crate) host_busy: f64,
    pub(crate) store_bytes: u64,
    pub(crate) wal_bytes: u64,
    /// SQLite: checkpoints that restarted the WAL during the window (see
    /// `StoreSizer::wal_checkpoint_seq`).
    pub(crate) wal_resets: u64,
    /// The disk floor's p50 and p99 (µs) over the window.
    pub(crate) floor_p50_us: f64,
    pub(crate) floor_p99_us: f64,
}

/// p50/p99 (µs) of each route and of all of them together.
pub(crate) fn window_figures(
    mut w: BTreeMap<&'static str, Vec<u64>>,
) -> (Vec<RouteFig>, f64, f64, u64) {
    let mut all: Vec<u64> = w.values().flatten().copied().collect();
    let n = all.len() as u64;
    let (p50, p99) = percentiles(&mut all);
    let routes = w
        .iter_mut()
        .map(|(route, v)| {
            let n = v.len() as u64;
            let (a, b) = percentiles(v);
            RouteFig {
                route,
                n,
                p50_us: a as f64 / 1e3,
                p99_us: b as f64 / 1e3,
            }
        })
        .collect();
    (routes, p50 as f64 / 1e3, p99 as f64 / 1e3, n)
}

/// Least-squares slope of `y` over `x` (0 with fewer than two distinct points).
pub(crate) fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// Median of `v` (0 when empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
