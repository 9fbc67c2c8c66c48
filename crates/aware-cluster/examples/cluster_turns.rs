//! 64 clients posting human turns (each on its own parent-watched child, one keep-alive
//! connection each): 1 gateway on SQLite (`full`) against 1, 2 and 3 gateways on one PostgreSQL
//! (`synchronous_commit = on`, a throw-away cluster with fsync on), all in one run. Clients are
//! spread over the gateways round-robin. Figures are printed, never asserted.
//!
//! `cargo run --release -p aware-cluster --example cluster_turns -- [turns per config] [clients]
//! [max PostgreSQL gateways, default 3]`; `AWARE_BENCH_PG_SOCKET=1` for the unix socket,
//! `AWARE_BENCH_PG_BATCH_BEFORE_LOCK=1` for the writer's batching before decision D47,
//! `AWARE_BENCH_PG_STATEMENTS=1` to print the server's busiest statements of each PostgreSQL
//! configuration (`pg_stat_statements`, nested statements included; decision D58).
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

/// The WAL flushed so far, as a position.
fn wal_lsn(admin: &mut postgres::Client) -> String {
    admin
        .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
        .expect("wal position")
        .get(0)
}

/// The WAL written between two positions, per turn: bytes, full-page-image bytes, and records
/// by resource manager. Read from the WAL itself (`pg_walinspect`; none without it):
/// `pg_stat_wal` lags by up to a second per busy backend.
fn wal_between(admin: &mut postgres::Client, from: &str, to: &str, turns: f64) -> Option<String> {
    let rows = admin
        .query(
            "SELECT \"resource_manager/record_type\", count::float8, fpi_size::float8, \
             combined_size::float8 \
             FROM pg_get_wal_stats($1::text::pg_lsn, $2::text::pg_lsn) WHERE count > 0 \
             ORDER BY count DESC",
            &[&from, &to],
        )
        .ok()?;
    let (mut records, mut fpi, mut bytes, mut by) = (0.0, 0.0, 0.0, Vec::new());
    for r in &rows {
        let (name, n, f, b): (String, f64, f64, f64) = (r.get(0), r.get(1), r.get(2), r.get(3));
        records += n;
        fpi += f;
        bytes += b;
        by.push(format!("{name} {:.1}", n / turns));
    }
    Some(format!(
        "{:.1} records ({}), {:.0} bytes of which {:.0} in full-page images",
        records / turns,
        by.join(", "),
        bytes / turns,
        fpi / turns
    ))
}

/// CPU seconds (user + system) of the server's processes, the postmaster's children listed by
/// `pg_stat_activity` (backends and background processes): the server's own share, which the
/// machine-wide figure mixes with other load.
fn server_cpu(admin: &mut postgres::Client) -> (Vec<i32>, f64) {
    let pids: Vec<i32> = admin
        .query("SELECT pid FROM pg_stat_activity", &[])
        .expect("pg_stat_activity")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let cpu = cpu_of(&pids);
    (pids, cpu)
}

/// CPU seconds of the processes `pids` (those gone count 0).
fn cpu_of(pids: &[i32]) -> f64 {
    pids.iter()
        .map(|p| proc_cpu(&format!("/proc/{p}/stat")))
        .sum()
}

/// Clock ticks per second of `/proc`'s CPU times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// utime + stime of one process, in seconds (0 when gone).
fn proc_cpu(stat: &str) -> f64 {
    let me = std::fs::read_to_string(stat).unwrap_or_default();
    let after_comm = me.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after_comm
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // Fields after the comm: state is not numeric, so utime/stime are at 11 and 12 here.
    (f.get(10).copied().unwrap_or(0.0) + f.get(11).copied().unwrap_or(0.0)) / USER_HZ
}

/// The statements that took the server's time during a run, busiest first (top-level and
/// nested, e.g. inside triggers), with the WAL each wrote.
fn print_statements(admin: &mut postgres::Client, turns: f64) {
    let rows = admin
        .query(
            "SELECT calls, total_exec_time, rows, wal_records, wal_fpi, wal_bytes::float8, \
             toplevel, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements \
             ORDER BY total_exec_time DESC LIMIT 16",
            &[],
        )
        .expect("pg_stat_statements");
    eprintln!("      server time per turn by statement (us; calls, rows, WAL records/FPI/bytes per turn):");
    for r in rows {
        let (calls, ms, n): (i64, f64, i64) = (r.get(0), r.get(1), r.get(2));
        let (recs, fpi, bytes): (i64, i64, f64) = (r.get(3), r.get(4), r.get(5));
        let (top, q): (bool, String) = (r.get(6), r.get(7));
        eprintln!(
            "      {:>6.1} us {:>5.2} calls {:>5.2} rows {:>5.2}/{:.3}/{:>5.0} {} {:.110}",
            ms * 1e3 / turns,
            calls as f64 / turns,
            n as f64 / turns,
            recs as f64 / turns,
            fpi as f64 / turns,
            bytes / turns,
            if top { "top" } else { "nested" },
            q
        );
    }
}

/// Runs the workload against `bases` (client i talks to `bases[i % n]`): (turns/s, p50, p99),
/// and the PostgreSQL store's counters over the turns (not the set-up). With `admin` (a
/// connection to the PostgreSQL cluster) the WAL written over the turns is printed too.
fn run(
    bases: &[String],
    turns: u64,
    clients: usize,
    mut admin: Option<&mut postgres::Client>,
) -> ((f64, Duration, Duration), PathStats) {
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
    let statements = std::env::var_os("AWARE_BENCH_PG_STATEMENTS").is_some();
    if let (Some(a), true) = (admin.as_deref_mut(), statements) {
        a.batch_execute("SELECT pg_stat_statements_reset()")
            .expect("reset");
    }
    let wal0 = admin.as_deref_mut().map(|a| (wal_lsn(a), server_cpu(a)));
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
    if let (Some(a), Some((w0, (pids, cpu0)))) = (admin, wal0) {
        let w1 = wal_lsn(a);
        let cpu1 = cpu_of(&pids);
        eprintln!(
            "      PostgreSQL's processes: {:.0} us CPU per turn",
            (cpu1 - cpu0) / n * 1e6
        );
        if let Some(w) = wal_between(a, &w0, &w1, n) {
            eprintln!("      WAL per turn: {w}");
        }
        if statements {
            print_statements(a, n);
        }
    }
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
    Cpu {
        machine: busy / USER_HZ,
        process: proc_cpu("/proc/self/stat"),
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
    let mut admin = postgres::Client::connect(&pg.url("postgres"), postgres::NoTls).expect("admin");
    // PostgreSQL 15 and contrib; without them the WAL line is left out.
    if let Err(e) = admin.batch_execute("CREATE EXTENSION pg_walinspect") {
        eprintln!("no WAL per turn: {e}");
    }
    if std::env::var_os("AWARE_BENCH_PG_STATEMENTS").is_some() {
        admin
            .batch_execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            .expect("configure pg_stat_statements");
        drop(admin);
        pg.stop().expect("stop");
        pg.start().expect("restart");
        admin = postgres::Client::connect(&pg.url("postgres"), postgres::NoTls).expect("admin");
        // One statement per call: ALTER SYSTEM refuses the implicit transaction of a batch, and
        // knows the module's settings only once it is loaded.
        for sql in [
            "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
            "ALTER SYSTEM SET pg_stat_statements.track = 'all'",
            "SELECT pg_reload_conf()",
        ] {
            admin.batch_execute(sql).expect("pg_stat_statements");
        }
    }
    let mut rows = Vec::new();
    {
        let dir = tempfile::tempdir().expect("dir");
        let gw = Gateway::start(dir.path(), None);
        rows.push((
            "1 gateway, SQLite full",
            run(std::slice::from_ref(&gw.base), turns, clients, None),
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
            run(&bases, turns, clients, Some(&mut admin)),
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
