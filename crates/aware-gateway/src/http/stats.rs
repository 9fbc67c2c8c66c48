//! Request counters the dispatcher keeps for `/metrics`: requests by route pattern and status
//! with their durations, and the wake streams open now.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of `aware_http_request_duration_seconds`. Most routes answer in well
/// under a millisecond to a few ms (one SQLite op); the long tail is long polls such as
/// `sessions_send` waiting for a reply, hence the buckets up to a minute. The time is until the
/// response head is ready: an SSE stream counts only its set-up.
pub(crate) const DURATION_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// One (route pattern, status) series: the request count and the duration histogram.
#[derive(Default)]
pub(crate) struct RouteSeries {
    pub(crate) count: u64,
    /// Non-cumulative counts per bucket of [`DURATION_BUCKETS`]; the rest fell above the last.
    pub(crate) buckets: [u64; DURATION_BUCKETS.len()],
    pub(crate) sum_secs: f64,
}

/// HTTP-side metrics kept by the gateway: requests by route and status with their durations,
/// and the SSE streams open now.
#[derive(Default)]
pub(crate) struct HttpMetrics {
    /// A std mutex held for one update or one render, never across an await.
    pub(crate) series: Mutex<BTreeMap<(&'static str, u16), RouteSeries>>,
    /// `GET /v1/wakes` streams open now (a [`StreamSubscriber`] lives as long as each).
    pub(crate) stream_subscribers: AtomicU64,
}

impl HttpMetrics {
    /// Counts one answered request and records how long it took.
    pub(crate) fn count(&self, route: &'static str, status: u16, took: Duration) {
        let secs = took.as_secs_f64();
        if let Ok(mut m) = self.series.lock() {
            let s = m.entry((route, status)).or_default();
            s.count += 1;
            s.sum_secs += secs;
            if let Some(i) = DURATION_BUCKETS.iter().position(|b| secs <= *b) {
                s.buckets[i] += 1;
            }
        }
    }
}
