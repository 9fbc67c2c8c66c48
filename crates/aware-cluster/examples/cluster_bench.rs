//! Cluster figures on a real PostgreSQL (printed, never asserted):
//!
//! - cross-process wake latency: engine A records a human turn that opens a notice; the time
//!   until engine B's subscriber holds the wake (commit → NOTIFY → LISTEN → B's coalescer →
//!   broadcast), p50/p99 over `--wakes` rounds;
//! - failover: a child process leads (holds the advisory lock), is killed with SIGKILL, and the
//!   time until this process leads is measured, over `--failovers` rounds.
//!
//! `cargo run --release -p aware-cluster --example cluster_bench -- postgres://… [wakes] [failovers]`
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_cluster::{Cluster, ClusterOptions};
use aware_core::{SessionKey, SessionRef};
use aware_engine::*;
use aware_store::Store;
use aware_store_sqlite::{SqliteStore, StoreOptions};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn sref(s: &str) -> SessionRef {
    let key = SessionKey::parse(s).expect("valid key");
    let agent = key.qualified_agent().expect("agent-qualified");
    SessionRef { key, agent }
}

fn engine(store: Arc<dyn Store>) -> Engine {
    let mut config = EngineConfig::new();
    config.notify_on_create = false;
    // No coalescing: every round is measured, not merged.
    config.coalesce_secs = 0;
    Engine::open(store, config, Arc::new(SystemClock)).expect("engine")
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(1).cloned().unwrap_or_else(|| {
        eprintln!("usage: cluster_bench postgres://… [wakes] [failovers]");
        std::process::exit(2)
    });
    let config: postgres::Config = url.parse().expect("a PostgreSQL URL");
    if args.get(2).map(String::as_str) == Some("--child-leader") {
        return child_leader(config);
    }
    let wakes: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    let failovers: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);

    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).expect("store"));
    let (a, b) = (engine(store.clone()), engine(store));
    let ca = Cluster::start(&a, ClusterOptions::from_config(config.clone())).expect("cluster");
    let cb = Cluster::start(&b, ClusterOptions::from_config(config.clone())).expect("cluster");
    while !(ca.status().is_listening() && cb.status().is_listening()) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (w, c) = ("agent:main:main", "agent:main:subagent:c1");
    a.create_session(CreateSession::new(SessionKey::parse(w).unwrap()))
        .unwrap();
    a.create_session(
        CreateSession::new(SessionKey::parse(c).unwrap()).parent(SessionKey::parse(w).unwrap()),
    )
    .unwrap();
    let mut rx = b.subscribe_wakes();
    let mut lat = Vec::with_capacity(wakes);
    for _ in 0..wakes {
        // Drain first so the next turn opens a fresh notice (and so a fresh wake).
        a.drain(&sref(w)).unwrap();
        while rx.try_recv().is_ok() {}
        let t = Instant::now();
        a.post_turn(&sref(c), NewTurn::user("hello").channel("telegram"))
            .unwrap();
        loop {
            match rx.try_recv() {
                Ok(wk) if wk.session_key == w && wk.remote => break,
                Ok(_) => {}
                Err(_) => {
                    if t.elapsed() > Duration::from_secs(10) {
                        eprintln!("a wake did not arrive within 10 s");
                        break;
                    }
                    std::thread::yield_now();
                }
            }
        }
        lat.push(t.elapsed());
    }
    lat.sort();
    println!(
        "cross-process wake (turn on A -> wake on B's subscriber), {wakes} rounds: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(&lat, 0.5).as_secs_f64() * 1e3,
        pct(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    ca.shutdown();
    cb.shutdown();

    // Failover: a child leads, SIGKILL, time until we lead.
    let mut times = Vec::new();
    for _ in 0..failovers {
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .args([url.as_str(), "--child-leader"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        BufReader::new(out).read_line(&mut line).expect("child");
        assert_eq!(line.trim(), "leader", "the child did not lead");
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).expect("store"),
        );
        let e = engine(store);
        let cl = Cluster::start(&e, ClusterOptions::from_config(config.clone())).expect("cl");
        assert!(!e.is_leader(), "two leaders");
        let t = Instant::now();
        // kill(1): SIGKILL, so the child's sockets close without a goodbye.
        let _ = Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status();
        let _ = child.wait();
        while !e.is_leader() {
            std::thread::sleep(Duration::from_millis(5));
        }
        times.push(t.elapsed());
        cl.shutdown();
    }
    times.sort();
    if !times.is_empty() {
        println!(
            "failover after kill -9 of the leader, {failovers} rounds: median {:.0} ms, max {:.0} ms (retry interval 1 s)",
            pct(&times, 0.5).as_secs_f64() * 1e3,
            times.last().copied().unwrap_or_default().as_secs_f64() * 1e3
        );
    }
}

fn child_leader(config: postgres::Config) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).expect("store"));
    let e = engine(store);
    let _cl = Cluster::start(&e, ClusterOptions::from_config(config)).expect("cluster");
    while !e.is_leader() {
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("leader");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}
