//! 64 clients posting human turns (each on its own parent-watched child, one keep-alive
//! connection each): 1 gateway on SQLite (`full`) against 1, 2 and 3 gateways on one PostgreSQL
//! (`synchronous_commit = on`, a throw-away cluster with fsync on), all in one run. Clients are
//! spread over the gateways round-robin. Figures are printed, never asserted.
//!
//! `cargo run --release -p aware-cluster --example cluster_turns -- [turns per config] [clients]`

use aware_store_pg::testing::{ClusterOptions, PgCluster};
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
        config.postgres = pg.map(|u| aware_store_pg::PgOptions::new(u.to_string()));
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

/// Runs the workload against `bases` (client i talks to `bases[i % n]`): (turns/s, p50, p99).
fn run(bases: &[String], turns: u64, clients: usize) -> (f64, Duration, Duration) {
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
    let t = Instant::now();
    for w in workers {
        w.join().expect("worker");
    }
    let secs = t.elapsed().as_secs_f64();
    let mut l = lat.lock().expect("lat").clone();
    l.sort();
    let pct = |p: f64| l[((l.len() as f64 - 1.0) * p).round() as usize];
    (l.len() as f64 / secs, pct(0.5), pct(0.99))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let turns: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(6_400);
    let clients: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let pg = PgCluster::start_new(ClusterOptions { fsync: true }).expect("PostgreSQL");
    let mut rows = Vec::new();
    {
        let dir = tempfile::tempdir().expect("dir");
        let gw = Gateway::start(dir.path(), None);
        rows.push((
            "1 gateway, SQLite full",
            run(std::slice::from_ref(&gw.base), turns, clients),
        ));
    }
    for n in 1..=3 {
        let url = pg.database().expect("database");
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
    let sqlite = rows[0].1 .0;
    println!("{clients} clients x human turns ({turns} per configuration):");
    for (name, (rate, p50, p99)) in rows {
        println!(
            "  {name:<24} {rate:>8.0} turns/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({:.0}% of SQLite)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            rate / sqlite * 100.0
        );
    }
}
