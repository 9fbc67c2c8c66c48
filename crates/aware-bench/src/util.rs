//! Small utilities shared by the engine, HTTP and stall benchmarks.

use anyhow::{anyhow, Result};
use aware_core::{AgentId, SessionKey, SessionRef};
use aware_engine::{Engine, EngineConfig, SystemClock};
use aware_store_sqlite::{Durability, SqliteStore, StoreOptions};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(crate) use aware_client::out;

/// The agent of every bench session.
pub(crate) const AGENT: &str = "main";

/// An engine on `path` with the wall clock; `max_rows` overrides the retention cap.
pub(crate) fn open_engine(
    path: &Path,
    durability: Durability,
    max_rows: Option<u64>,
    notify_on_create: bool,
) -> Result<Engine> {
    let mut config = EngineConfig::new();
    config.notify_on_create = notify_on_create;
    if let Some(max_rows) = max_rows {
        config.retention.max_rows = max_rows;
    }
    let store = SqliteStore::open(StoreOptions::new(path).durability(durability))?;
    Ok(Engine::open(
        Arc::new(store),
        config,
        Arc::new(SystemClock),
    )?)
}

/// `key` of agent [`AGENT`].
pub(crate) fn session_ref(key: &str) -> Result<SessionRef> {
    Ok(SessionRef {
        key: SessionKey::parse(key)?,
        agent: AgentId::parse(AGENT)?,
    })
}

/// A thread that raises `stop` once `cap` has passed (checking every `poll`), unless it was
/// raised before: the time cap of a measured phase.
pub(crate) fn stop_after(stop: &Arc<AtomicBool>, cap: Duration, poll: Duration) -> JoinHandle<()> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        let until = Instant::now() + cap;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(poll);
        }
        stop.store(true, Ordering::Relaxed);
    })
}

/// A thread returning its samples.
pub(crate) type Worker<T> = JoinHandle<Result<Vec<T>>>;

/// Thread `t`'s share of `n` items over `threads` threads.
pub(crate) fn share(n: u64, threads: usize, t: usize) -> u64 {
    let threads = threads as u64;
    n / threads + u64::from((t as u64) < n % threads)
}

pub(crate) fn join_all<T>(handles: Vec<Worker<T>>) -> Result<Vec<T>> {
    let mut all = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(v)) => all.extend(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(anyhow!("a bench thread panicked"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(all),
    }
}

/// p50 and p99 of nanosecond samples (sorts in place).
pub(crate) fn percentiles(v: &mut [u64]) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    v.sort_unstable();
    let at = |p: f64| v[(((v.len() - 1) as f64) * p).round() as usize];
    (at(0.50), at(0.99))
}

pub(crate) fn fmt_dur(ns: u64) -> String {
    if ns < 10_000 {
        format!("{:.1} us", ns as f64 / 1e3)
    } else if ns < 1_000_000 {
        format!("{} us", ns / 1000)
    } else if ns < 10_000_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

pub(crate) fn fmt_int(n: u64) -> String {
    let s = n.to_string();
    let head = match s.len() % 3 {
        0 => 3.min(s.len()),
        r => r,
    };
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    out.push_str(&s[..head]);
    for chunk in s.as_bytes()[head..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
    }
    out
}

/// A tiny deterministic generator for picking streams.
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// The `aware` binary the benchmarks run as a real process (`serve`, `hook`): `AWARE_BIN`, else
/// the `aware` beside this binary (cargo builds both into the same directory).
pub(crate) fn aware_exe() -> Result<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("AWARE_BIN") {
        return Ok(p.into());
    }
    let me = std::env::current_exe().map_err(|e| anyhow!("the path of this binary: {e}"))?;
    let exe = me.with_file_name(format!("aware{}", std::env::consts::EXE_SUFFIX));
    if exe.is_file() {
        Ok(exe)
    } else {
        Err(anyhow!(
            "no `aware` binary at {} (build it with `cargo build -p aware`, with the same \
             profile as this one, or name one with AWARE_BIN)",
            exe.display()
        ))
    }
}
