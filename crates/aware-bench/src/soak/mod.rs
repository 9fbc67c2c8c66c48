//! `aware-bench soak`: the real `aware serve` (a child process, SQLite or PostgreSQL) driven over
//! loopback HTTP at a target rate for a long time, the way the soak of decision D42 did: teams of a
//! manager, its spawned workers and a peer (team/), humans posting turns and goals, drains
//! checked against a model of the notices (model.rs), reconciles, sends with `watch`, unwatches,
//! deletes and re-creates, and wake streams that reconnect (wakes.rs). Every window it samples
//! the gateway's RSS, fds, threads and CPU, the store's size and per-route latency; at the end it
//! prints the slopes and fails on a model violation, a 5xx, an error, or fd or thread growth
//! beyond a small bound (summary.rs).

mod client;
mod gateway;
mod model;
mod probe;
mod shared;
mod stats;
mod summary;
mod team;
mod wakes;

use crate::util::fmt_int;
use anyhow::{anyhow, bail, Context, Result};
use gateway::{loadavg, sample_proc, Gateway, HostCpu, Store, StoreSizer};
use shared::{Plan, Shared};
use stats::{window_figures, Row, Stats};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Arguments of `aware-bench soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// How long the load runs, e.g. `12m`, `90s`, `1h` [default: 12m; 150s with --quick].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Target requests per second over all teams [default: 300; 120 with --quick].
    #[arg(long)]
    pub rate: Option<u32>,
    /// Where the state lives: `sqlite` (a fresh data dir), `pg` (a throw-away PostgreSQL
    /// cluster of the machine's server binaries) or a `postgres://` URL of an empty database.
    #[arg(long, value_name = "sqlite|pg|URL")]
    pub store: Option<String>,
    /// Print the report as JSON on stdout (the text goes to stderr), with every sample window.
    #[arg(long)]
    pub json: bool,
    /// The CI form: 150 s at 120 req/s (6 teams), 4 wake streams, 10 s windows.
    #[arg(long)]
    pub quick: bool,
    /// Load threads, each owning one team of sessions [default: rate / 20, 4..=32].
    #[arg(long)]
    pub teams: Option<usize>,
    /// Wake streams that reconnect every few seconds [default: 20; 4 with --quick].
    #[arg(long)]
    pub wake_streams: Option<usize>,
    /// Length of a sample window [default: 10s].
    #[arg(long, value_parser = parse_duration)]
    pub window: Option<Duration>,
    /// Directory for the data dir (a fresh temporary directory inside it, removed afterwards).
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<PathBuf>,
    /// Durability of the gateway's commits (`aware serve --durability`): `full` (its default)
    /// waits for the disk on every commit, `normal` only at checkpoints.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    pub durability: String,
    /// Keep the gateway's JSON log (stderr at `info`) in this file.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 90s, 12m or 1h"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?}: the unit must be s, m or h")),
    };
    Ok(Duration::from_secs(secs))
}

#[expect(
    clippy::too_many_lines,
    reason = "the soak's one loop: clients, checks and samples, which share its state"
)]
pub fn run(args: SoakArgs) -> Result<()> {
    let quick = args.quick;
    let duration = args
        .duration
        .unwrap_or(Duration::from_secs(if quick { 150 } else { 720 }));
    let rate = args.rate.unwrap_or(if quick { 120 } else { 300 });
    if rate == 0 {
        bail!("--rate must be at least 1");
    }
    let teams = args
        .teams
        .unwrap_or((rate as usize / 20).clamp(4, 32))
        .max(1);
    let window = args.window.unwrap_or(Duration::from_secs(10));
    if window < Duration::from_secs(1) {
        bail!("--window must be at least 1s");
    }
    let store = Store::open(args.store.as_deref())?;
    let plan = Plan {
        duration,
        rate,
        teams,
        wake_streams: args.wake_streams.unwrap_or(if quick { 4 } else { 20 }),
        window,
        store: store.name(),
        durability: args.durability.clone(),
        quick,
    };
    let tmp = match &args.data_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            tempfile::Builder::new().prefix("aware-soak-").tempdir_in(d)
        }
        None => tempfile::Builder::new().prefix("aware-soak-").tempdir(),
    }
    .context("creating the soak directory")?;
    let data_dir = tmp.path().join("data");
    std::fs::create_dir_all(&data_dir)?;
    let log = args
        .log
        .clone()
        .unwrap_or_else(|| tmp.path().join("gateway.log"));
    let mut out = summary::Out::new(args.json, quick);
    out.say(&format!(
        "aware-bench soak{}: aware serve on {} ({}, durability {}), {} req/s target from {} teams (1 keep-alive \
         connection each) + {} reconnecting wake streams, for {} s, {} s windows; cpus={} \
         loadavg={} gateway log: {}",
        if quick { " --quick" } else { "" },
        plan.store,
        data_dir.display(),
        plan.durability,
        plan.rate,
        plan.teams,
        plan.wake_streams,
        plan.duration.as_secs(),
        plan.window.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
        log.display(),
    ));
    let gw = Gateway::start(&data_dir, &store, &plan.durability, &log)?;
    let mut sizer = StoreSizer::new(&store, &gw.data_dir)?;
    let shared = Shared {
        base: gw.base.clone(),
        stats: Arc::new(Stats::default()),
        stop: Arc::new(AtomicBool::new(false)),
        managers: Arc::new(Mutex::new(vec![String::new(); plan.teams])),
    };
    let started_proc = sample_proc(gw.pid)?;
    let interval = Duration::from_secs_f64(plan.teams as f64 / f64::from(plan.rate));
    let team_threads: Vec<JoinHandle<Result<team::TeamReport>>> = (0..plan.teams)
        .map(|i| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let r = team::Team::new(i, shared.clone(), interval).and_then(|t| t.run());
                if let Err(e) = &r {
                    // One failure ends the run: the rest stop and do their final drains.
                    shared.stats.error(format!("team {i}: {e:#}"));
                    shared.stop.store(true, Ordering::Relaxed);
                }
                r
            })
        })
        .collect();
    let wake_threads: Vec<JoinHandle<Result<()>>> = (0..plan.wake_streams)
        .map(|i| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let r = wakes::run(i, shared.clone());
                if let Err(e) = &r {
                    shared.stats.error(format!("wake stream {i}: {e:#}"));
                    shared.stop.store(true, Ordering::Relaxed);
                }
                r
            })
        })
        .collect();

    let probe = {
        let (shared, dir) = (shared.clone(), tmp.path().to_path_buf());
        std::thread::spawn(move || probe::run(&dir, shared))
    };

    // The sampler: one row per window until the duration is over (or a thread failed).
    let t0 = Instant::now();
    let mut rows: Vec<Row> = Vec::new();
    let mut host = HostCpu::new();
    host.busy_share();
    let mut last_cpu = started_proc.cpu_ticks;
    let me = std::process::id();
    let mut last_self_cpu = sample_proc(me)?.cpu_ticks;
    let mut last_ops = 0u64;
    let mut last_wal_seq = sizer.wal_checkpoint_seq();
    let mut next = t0 + plan.window;
    while !shared.stopped() {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(200)));
            continue;
        }
        let elapsed = t0.elapsed();
        let p = sample_proc(gw.pid)?;
        let own = sample_proc(me)?;
        let (store_bytes, wal_bytes) = sizer.sample()?;
        let wal_seq = sizer.wal_checkpoint_seq();
        let wal_resets = match (last_wal_seq, wal_seq) {
            (Some(a), Some(b)) => u64::from(b.wrapping_sub(a)),
            _ => 0,
        };
        last_wal_seq = wal_seq;
        let (routes, p50, p99, _) = window_figures(shared.stats.take_window());
        let (floor_p50_us, floor_p99_us) = shared.stats.take_floor();
        let ops = shared.stats.requests.load(Ordering::Relaxed);
        let secs = plan.window.as_secs_f64() + (now - next).as_secs_f64();
        let row = Row {
            t: elapsed.as_secs_f64(),
            ops,
            req_per_s: (ops - last_ops) as f64 / secs,
            p50_us: p50,
            p99_us: p99,
            routes,
            rss_mib: p.rss_kb as f64 / 1024.0,
            fds: p.fds,
            threads: p.threads,
            gw_cpu: (p.cpu_ticks - last_cpu.min(p.cpu_ticks)) as f64 / 100.0 / secs,
            load_cpu: (own.cpu_ticks - last_self_cpu.min(own.cpu_ticks)) as f64 / 100.0 / secs,
            host_busy: host.busy_share(),
            store_bytes,
            wal_bytes,
            wal_resets,
            floor_p50_us,
            floor_p99_us,
        };
        last_cpu = p.cpu_ticks;
        last_self_cpu = own.cpu_ticks;
        last_ops = ops;
        out.window(&row);
        rows.push(row);
        next += plan.window;
        if elapsed >= plan.duration {
            break;
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let load_secs = t0.elapsed().as_secs_f64();
    let mut reports = Vec::new();
    let mut thread_errors = Vec::new();
    for h in team_threads {
        match h.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => thread_errors.push(format!("{e:#}")),
            Err(_) => thread_errors.push("a team thread panicked".into()),
        }
    }
    for h in wake_threads {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => thread_errors.push(format!("{e:#}")),
            Err(_) => thread_errors.push("a wake stream thread panicked".into()),
        }
    }
    match probe.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => thread_errors.push(format!("the fsync floor: {e:#}")),
        Err(_) => thread_errors.push("the fsync floor thread panicked".into()),
    }
    let end_proc = sample_proc(gw.pid)?;
    let end_store = sizer.sample()?;
    drop(sizer);
    let stop = gw.stop();
    let facts = summary::Facts {
        load_secs,
        requests: shared.stats.requests.load(Ordering::Relaxed),
        status_5xx: shared.stats.status_5xx.load(Ordering::Relaxed),
        wake_connects: shared.stats.wake_connects.load(Ordering::Relaxed),
        wake_events: shared.stats.wake_events.load(Ordering::Relaxed),
        notices: reports.iter().map(|r| r.notices).sum(),
        drains: reports.iter().map(|r| r.drains).sum(),
        sessions_created: reports.iter().map(|r| r.sessions_created).sum(),
        errors: {
            let mut e = shared.stats.errors();
            for t in thread_errors {
                if !e.iter().any(|x| x.contains(&t)) {
                    e.push(t);
                }
            }
            e
        },
        started_rss_mib: started_proc.rss_kb as f64 / 1024.0,
        end_rss_mib: end_proc.rss_kb as f64 / 1024.0,
        end_store_bytes: end_store.0,
        shutdown: stop.map_err(|e| format!("{e:#}")),
    };
    let failures = summary::finish(&mut out, &plan, &rows, &facts)?;
    drop(tmp);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "the soak failed after {} requests: {}",
            fmt_int(facts.requests),
            failures.join("; ")
        ))
    }
}
