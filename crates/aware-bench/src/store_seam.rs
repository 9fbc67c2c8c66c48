//! The one place where the benches reach the store behind the engine (`Arc<dyn Store>`): its
//! commit metrics, an empty writer op, a row count; and the one place that opens a
//! `SqliteStore` itself, to create the schema of a floor file. A bench that needs more of the
//! store goes through here, so a change of the seam is one file to adapt.

use anyhow::{anyhow, Result};
use aware_engine::Engine;
use aware_store::{Store, StoreExt, StoreMetrics};
use aware_store_sqlite::{Durability, SqliteStore, StoreOptions};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::util::fmt_dur;

/// The writer's counters (ops, commits, group sizes, commit times).
pub(crate) fn store_metrics(engine: &Engine) -> &StoreMetrics {
    engine.store().metrics()
}

/// One empty op through the writer thread (the fixed cost of a writer op).
pub(crate) fn noop_write(engine: &Engine) -> Result<()> {
    engine
        .store()
        .write(|_tx| Ok(()))
        .map_err(|e| anyhow!("{e}"))
}

/// `event_count()` of the store, as the prune loop asks it.
pub(crate) fn event_count(engine: &Engine) -> Result<u64> {
    engine
        .store()
        .read(|r| r.event_count())
        .map_err(|e| anyhow!("{e}"))
}

/// Creates the store's schema in a new file by opening (and closing) a `SqliteStore` on it, so
/// a floor writes the same tables.
pub(crate) fn create_schema(path: &Path, durability: Durability) -> Result<()> {
    let store = SqliteStore::open(StoreOptions::new(path).durability(durability))?;
    store.close();
    Ok(())
}

/// Creates the store's schema in a new PostgreSQL database by opening (and closing) a
/// `PgStore` on it.
pub(crate) fn create_pg_schema(url: &str) -> Result<()> {
    let store = aware_store_pg::PgStore::open(aware_store_pg::PgOptions::new(url))?;
    store.close();
    Ok(())
}

/// The engine on a PostgreSQL store (statements may run for a minute: the scale bench's
/// biggest sweeps and counts are what it measures, not what it refuses).
pub(crate) fn open_pg_engine(url: &str) -> Result<Engine> {
    let mut options = aware_store_pg::PgOptions::new(url);
    options.statement_timeout = Duration::from_secs(60);
    let store: Arc<dyn Store> = Arc::new(aware_store_pg::PgStore::open(options)?);
    Ok(Engine::open(
        store,
        aware_engine::EngineConfig::new(),
        Arc::new(aware_engine::SystemClock),
    )?)
}

/// Records the duration of every commit by polling the writer's `commit_us_sum` (each change is
/// one commit when commits are further apart than the poll interval).
pub(crate) struct CommitWatch {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<u64>>,
}

pub(crate) struct CommitTimes(Vec<u64>);

impl CommitWatch {
    pub(crate) fn start(engine: &Engine) -> Self {
        let store: Arc<dyn Store> = engine.store().clone();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sum = |s: &Arc<dyn Store>| s.metrics().commit_us_sum.load(Ordering::Relaxed);
        // Read before the thread starts: on a loaded machine it may start after the first
        // commits (callers now commit on their own threads, with no hand-off to wait for).
        let mut last = sum(&store);
        let handle = std::thread::spawn(move || {
            let mut seen = Vec::new();
            loop {
                let done = flag.load(Ordering::Relaxed);
                let now = sum(&store);
                if now != last {
                    seen.push(now - last);
                    last = now;
                }
                if done {
                    return seen;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        CommitWatch { stop, handle }
    }

    pub(crate) fn finish(self) -> CommitTimes {
        self.stop.store(true, Ordering::Relaxed);
        CommitTimes(self.handle.join().unwrap_or_default())
    }
}

impl CommitTimes {
    pub(crate) fn max_us(&self) -> u64 {
        self.0.iter().copied().max().unwrap_or(0)
    }

    /// The median commit: the typical batch, which the maximum over more batches hides on a
    /// loaded machine (the maximum of 1,000 samples is further out than that of 10).
    pub(crate) fn median_us(&self) -> u64 {
        let mut v = self.0.clone();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }

    pub(crate) fn describe_max(&self, commits: u64) -> String {
        let max = self.0.iter().copied().max().unwrap_or(0);
        let mut s = fmt_dur(max * 1000);
        // Commits of 0 us do not move the sum; more changes than commits cannot happen.
        if (self.0.len() as u64) < commits {
            s.push_str(&format!(" (seen {}/{commits} commits)", self.0.len()));
        }
        s
    }
}

/// Upper bound of the highest non-empty `commit_us` histogram bucket, in microseconds.
pub(crate) fn hist_max_bound(m: &aware_store::StoreMetrics) -> Option<u64> {
    let bounds = [100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 1_000_000];
    m.commit_us_buckets
        .iter()
        .zip(bounds)
        .rev()
        .find(|(b, _)| b.load(Ordering::Relaxed) > 0)
        .map(|(_, bound)| bound)
}
