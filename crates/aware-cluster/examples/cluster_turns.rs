//! 64 clients posting human turns (each on its own parent-watched child, one keep-alive
//! connection each): 1 gateway on SQLite (`full`) against 1, 2 and 3 gateways on one PostgreSQL
//! (`synchronous_commit = on`, a throw-away cluster with fsync on), all in one run. Clients are
//! spread over the gateways round-robin. Figures are printed, never asserted.
//!
//! `cargo run --release -p aware-cluster --example cluster_turns -- [turns per config] [clients]
//! [max PostgreSQL gateways, default 3]`; `AWARE_BENCH_PG_SOCKET=1` for the unix socket,
//! `AWARE_BENCH_PG_BATCH_BEFORE_LOCK=1` for the writer's batching before decision D47.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_store_pg::testing::{ClusterOptions, PgCluster};
use aware_store_pg::PathStats;
use std::sync::Barrier;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Gateway {
    runtime: tokio::runtime::Runtime,
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Gateway {
    fn start(dir: &std::path::Path, pg: Option<&str>) -> Gateway {
        let mut config = aware_gateway::GatewayConfig::for_data_dir(dir);
        config.notify_on_create = false;
        config.test_clock_start = None;
        config.postgres = pg.map(|u| {
            let mut o = aware_store_pg::PgOptions::new(u.to_string());
            // The before/after switch of decision D47, for alternated runs of one build.
            o.batch_after_lock = std::env::var_os("AWARE_BENCH_PG_BATCH_BEFORE_LOCK").is_none();
            // Locks by key (decision D56), for alternated runs of one build.
            o.keyed_locks |= std::env::var_os("AWARE_BENCH_PG_KEYED").is_some_and(|v| v == "1");
            o
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        config.bind = addr;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(aware_gateway::run(listener, config, async {
            let _ = rx.await;
        }));
        let base = format!("http://{addr}");
        let end = Instant::now() + Duration::from_secs(30);
        while ureq::get(&format!("{base}/health")).call().is_err() {
            assert!(Instant::now() < end, "gateway did not become healthy");
            std::thread::sleep(Duration::from_millis(50));
        }
        Gateway {
            runtime,
            base,
            stop: Some(tx),
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        std::thread::sleep(Duration::from_millis(200));
        let _ = &self.runtime;
    }
}

fn seg(s: &str) -> String {
    s.replace(':', "%3A")
}

/// Runs the workload against `bases` (client i talks to `bases[i % n]`): (turns/s, p50, p99),
/// and the PostgreSQL store's counters over the turns (not the set-up).
fn run(bases: &[String], turns: u64, clients: usize) -> ((f64, Duration, Duration), PathStats) {
    for i in 0..clients {
        let base = &bases[i % bases.len()];
        let (p, c) = (
            format!("agent:main:p{i}"),
            format!("agent:main:subagent:c{i}"),
        );
        ureq::post(&format!("{base}/v1/sessions"))
            .send_json(serde_json::json!({"key": p}))
            .expect("create parent");
        ureq::post(&format!("{base}/v1/sessions"))
            .send_json(serde_json::json!({"key": c, "parentSessionKey": p}))
            .expect("create child");
    }
    let per = turns / clients as u64;
    let lat = Arc::new(Mutex::new(Vec::with_capacity(turns as usize)));
    let barrier = Arc::new(Barrier::new(clients + 1));
    let workers: Vec<_> = (0..clients)
        .map(|i| {
            let (base, lat, barrier) = (bases[i % bases.len()].clone(), lat.clone(), barrier.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().build();
                let url = format!("{base}/v1/sessions/{}/turns", seg(&format!("agent:main:subagent:c{i}")));
                let mut mine = Vec::with_capacity(per as usize);
                barrier.wait();
                for _ in 0..per {
                    let t = Instant::now();
                    agent
                        .post(&url)
                        .send_json(serde_json::json!({"role": "user", "text": "hello", "channel": "telegram"}))
                        .expect("post turn");
                    mine.push(t.elapsed());
                }
                lat.lock().expect("lat").extend(mine);
            })
        })
        .collect();
    barrier.wait();
    let before = PathStats::now();
    let cpu0 = cpu_now();
    let t = Instant::now();
    for w in workers {
        w.join().expect("worker");
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu1 = cpu_now();
    let stats = PathStats::now().since(&before);
    let n = lat.lock().expect("lat").len() as f64;
    let per_turn = |a: f64, b: f64| (b - a) / n * 1e6;
    eprintln!(
        "      CPU per turn: machine {:.0} us (busy {:.0}% of {} cores), this process (gateways + clients) {:.0} us, the rest (PostgreSQL, other load) {:.0} us",
        per_turn(cpu0.machine, cpu1.machine),
        (cpu1.machine - cpu0.machine) / (cpu1.wall - cpu0.wall) / cpu0.cores * 100.0,
        cpu0.cores,
        per_turn(cpu0.process, cpu1.process),
        per_turn(cpu0.machine - cpu0.process, cpu1.machine - cpu1.process),
    );
    let mut l = lat.lock().expect("lat").clone();
    l.sort();
    let pct = |p: f64| l[((l.len() as f64 - 1.0) * p).round() as usize];
    ((l.len() as f64 / secs, pct(0.5), pct(0.99)), stats)
}

struct Cpu {
    machine: f64,
    process: f64,
    wall: f64,
    cores: f64,
}

/// Busy CPU seconds of the whole machine (`/proc/stat`) and of this process (`/proc/self/stat`),
/// to tell whether a configuration is bound by the CPU or by waiting. Zeros where unreadable.
fn cpu_now() -> Cpu {
    let tick = 100.0; // USER_HZ on Linux
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    let busy: f64 = fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    let me = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_comm = me.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after_comm
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // Fields after the comm: state is not numeric, so utime/stime are at 11 and 12 here.
    let process = f.get(10).copied().unwrap_or(0.0) + f.get(11).copied().unwrap_or(0.0);
    Cpu {
        machine: busy / tick,
        process: process / tick,
        wall: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
        cores: cores.max(1) as f64,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let turns: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(6_400);
    let clients: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let pg = PgCluster::start_new(ClusterOptions {
        fsync: true,
        ..Default::default()
    })
    .expect("PostgreSQL");
    let mut rows = Vec::new();
    {
        let dir = tempfile::tempdir().expect("dir");
        let gw = Gateway::start(dir.path(), None);
        rows.push((
            "1 gateway, SQLite full",
            run(std::slice::from_ref(&gw.base), turns, clients),
        ));
    }
    let max_gateways: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    for n in 1..=max_gateways {
        let mut url = pg.database().expect("database");
        if std::env::var_os("AWARE_BENCH_PG_SOCKET").is_some() {
            url = pg.socket_url(&url);
        }
        let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().expect("dir")).collect();
        let gws: Vec<Gateway> = dirs
            .iter()
            .map(|d| Gateway::start(d.path(), Some(&url)))
            .collect();
        let bases: Vec<String> = gws.iter().map(|g| g.base.clone()).collect();
        rows.push((
            match n {
                1 => "1 gateway, PostgreSQL",
                2 => "2 gateways, PostgreSQL",
                _ => "3 gateways, PostgreSQL",
            },
            run(&bases, turns, clients),
        ));
    }
    let sqlite = (rows[0].1).0 .0;
    println!("{clients} clients x human turns ({turns} per configuration):");
    for (name, ((rate, p50, p99), stats)) in rows {
        println!(
            "  {name:<24} {rate:>8.0} turns/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({:.0}% of SQLite)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            rate / sqlite * 100.0
        );
        if stats.ops > 0 {
            println!("      {stats}");
        }
    }
}
