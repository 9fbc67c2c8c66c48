//! Churns distinct watcher keys through the engine's wake path and prints the process's RSS and
//! the wake bookkeeping as it goes (decision D40: nothing may grow with the watchers ever
//! woken). Each round creates a target and 1,000 new watchers of it on a SQLite store
//! (durability `normal`), posts one human turn on the target (1,000 notices open, 1,000
//! `session-state` wakes to a subscriber), then moves the clock a minute on. The watchers are
//! never deleted (a session per task, left behind).
//!
//! `cargo run --release -p aware-engine --example wake_churn -- [KEYS]` (KEYS defaults to
//! 1,000,000). The repair check of a gateway on PostgreSQL is left out: it reads every watcher
//! with pending notices, which here grow by 1,000 a round and are never read, so its cost
//! follows the store; what it records between checks is bounded by the `cluster` test
//! `wake_bookkeeping_follows_recent_watchers_not_every_watcher_ever_woken`.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_engine::WakeBookkeeping;
use aware_store_sqlite::Durability;
use aware_testkit::engine::{World, T0};
use std::error::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const ROUND: usize = 1_000;
const WRITERS: usize = 4;

/// `VmRSS` of this process in KiB (Linux).
fn rss_kib() -> Result<u64, Box<dyn Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .ok_or("no VmRSS line in /proc/self/status")?;
    let kib = line.trim().trim_end_matches("kB").trim().parse()?;
    Ok(kib)
}

fn main() -> Result<(), Box<dyn Error>> {
    let keys: usize = match std::env::args().nth(1) {
        Some(n) => n.parse().map_err(|e| format!("KEYS {n:?}: {e}"))?,
        None => 1_000_000,
    };
    let world = World::with_durability(Durability::Normal, |_| {});
    let mut wakes = world.engine.subscribe_wakes();
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    // A subscriber that keeps up, as the soak's wake streams did (a wake with no subscriber
    // is not even built).
    std::thread::spawn(move || loop {
        match wakes.blocking_recv() {
            Ok(_) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
        }
    });
    let rounds = keys.div_ceil(ROUND);
    let mut most = WakeBookkeeping::default();
    println!("keys\trss_kib\tcoalescer\tmerged\twoken\twakes_received");
    for round in 0..rounds {
        let target = format!("agent:churn:t{round}");
        world.create(&target);
        std::thread::scope(|s| {
            for part in 0..WRITERS {
                let (world, target) = (&world, &target);
                s.spawn(move || {
                    for i in (part..ROUND).step_by(WRITERS) {
                        let watcher = format!("agent:churn:w{round}-{i}");
                        world.create(&watcher);
                        world.watch(&watcher, target);
                    }
                });
            }
        });
        world.hdm(&target);
        world.set_time(T0 + (round as i64 + 1) * 60_000);
        let b = world.engine.wake_bookkeeping();
        most.coalescer = most.coalescer.max(b.coalescer);
        most.merged = most.merged.max(b.merged);
        most.woken = most.woken.max(b.woken);
        if (round + 1) % 100 == 0 || round + 1 == rounds {
            println!(
                "{}\t{}\t{}\t{}\t{}\t{}",
                (round + 1) * ROUND,
                rss_kib()?,
                b.coalescer,
                b.merged,
                b.woken,
                received.load(Ordering::Relaxed)
            );
        }
    }
    println!(
        "most at once: coalescer {}, merged {}, woken {}",
        most.coalescer, most.merged, most.woken
    );
    Ok(())
}
