//! Counters the writer keeps; exported by the gateway as Prometheus metrics (03 §12).

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the `aware_group_commit_ops` histogram buckets.
pub const GROUP_BUCKETS: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 256];
/// Upper bounds of the `aware_commit_seconds` histogram buckets, in microseconds.
pub const COMMIT_BUCKETS_US: [u64; 8] =
    [100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 1_000_000];

#[derive(Debug, Default)]
pub struct StoreMetrics {
    pub commits: AtomicU64,
    pub commit_failures: AtomicU64,
    pub ops: AtomicU64,
    pub group_buckets: [AtomicU64; 8],
    pub commit_us_buckets: [AtomicU64; 8],
    pub commit_us_sum: AtomicU64,
    /// Largest number of ops seen in one commit.
    pub max_group: AtomicU64,
}

impl StoreMetrics {
    /// Called by a backend's writer after each commit.
    pub fn record_commit(&self, ops: u64, micros: u64) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(ops, Ordering::Relaxed);
        self.max_group.fetch_max(ops, Ordering::Relaxed);
        if let Some(i) = GROUP_BUCKETS.iter().position(|b| ops <= *b) {
            self.group_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(i) = COMMIT_BUCKETS_US.iter().position(|b| micros <= *b) {
            self.commit_us_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.commit_us_sum.fetch_add(micros, Ordering::Relaxed);
    }

    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }
    pub fn max_group(&self) -> u64 {
        self.max_group.load(Ordering::Relaxed)
    }
}
