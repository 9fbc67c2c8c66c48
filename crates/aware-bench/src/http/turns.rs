//! Workload 2: concurrent human turns, over HTTP and in-process.

use super::raw::{contains, RawConn};
use super::rss::ProcStatus;
use super::setup::*;
use crate::report::*;
use crate::store_seam::*;
use crate::util::*;
use anyhow::{anyhow, bail, Result};
use aware_client::{seg, Client};
use aware_core::{SessionKey, SessionRef};
use aware_engine::{CreateSession, NewTurn};
use aware_gateway::GatewayConfig;
use aware_store_sqlite::Durability;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

pub(crate) fn w2(plan: &Plan, turns: u64, clients: usize) -> Result<Vec<Outcome>> {
    let mut lines = Vec::new();
    // Decision D20's targets: >= 10,000 turns/s and <= 1.2x the engine at normal, >= 8,000 at full.
    for (durability, target) in [(Durability::Normal, 10_000.0), (Durability::Full, 8_000.0)] {
        let name = durability.as_str();
        let (http, health) = w2_http(
            plan,
            durability,
            turns,
            clients,
            durability == Durability::Normal,
        )?;
        let floor = w2_engine(plan, durability, turns, clients)?;
        let (h50, h99) = (http.p50, http.p99);
        let ratio = floor.rate / http.rate.max(f64::MIN_POSITIVE);
        let line = format!(
            "2 [{name}] {clients} clients x POST /v1/sessions/{{child}}/turns (human user turn on \
             its own parent-watched child, 1 keep-alive connection each), fresh gateway: {} \
             turns{} in {:.2} s = {} turns/s, p50 {} p99 {}, {:.1} ops/commit ({} commits), CPU \
             per turn: gateway {} + load clients {} (kernel {:.0}% of all), {} threads after \
             the run | engine floor {clients} threads x Engine::post_turn, same sessions and \
             count: {} turns/s, p50 {} p99 {}, {:.1} ops/commit, CPU per turn {} (kernel {:.0}%) \
             | ratio {:.2}x",
            fmt_int(http.done),
            if http.done < turns {
                format!(" (stopped at the {} s cap)", plan.cap(120).as_secs())
            } else {
                String::new()
            },
            http.secs,
            fmt_int(http.rate as u64),
            fmt_dur(h50),
            fmt_dur(h99),
            http.group,
            fmt_int(http.commits),
            fmt_dur(http.cpu_per_turn),
            fmt_dur(http.client_cpu_per_turn),
            http.kernel_share * 100.0,
            http.threads,
            fmt_int(floor.rate as u64),
            fmt_dur(floor.p50),
            fmt_dur(floor.p99),
            floor.group,
            fmt_dur(floor.cpu_per_turn),
            floor.kernel_share * 100.0,
            ratio,
        );
        let all_done = format!("all {} turns answered", fmt_int(turns));
        let mut o = Outcome::new(&format!("HTTP2-{name}"), line)
            .figure("turns_per_s", http.rate, "turns/s", Better::Higher)
            .figure("p50", http.p50 as f64 / 1e3, "us", Better::Lower)
            .figure("p99", http.p99 as f64 / 1e3, "us", Better::Lower)
            .figure("ops_per_commit", http.group, "ops", Better::Higher)
            .figure(
                "cpu_per_turn",
                http.cpu_per_turn as f64 / 1e3,
                "us",
                Better::Lower,
            )
            .figure("engine_turns_per_s", floor.rate, "turns/s", Better::Higher)
            .figure("ratio", ratio, "x", Better::Lower)
            .target_and(
                "turns_per_s",
                target,
                Some((all_done.as_str(), http.done == turns)),
            );
        if durability == Durability::Normal {
            o = o.target("ratio", 1.2);
        }
        lines.push(o);
        if let Some(h) = health {
            let line = format!(
                "2 HTTP floor, same gateway: {clients} clients x GET /health, {} requests in {:.2} \
                 s = {} req/s, p50 {} p99 {}, CPU per request: gateway {} + load clients {} \
                 (kernel {:.0}% of all) | turns cost {:.2}x a /health round trip",
                fmt_int(h.done),
                h.secs,
                fmt_int(h.rate as u64),
                fmt_dur(h.p50),
                fmt_dur(h.p99),
                fmt_dur(h.cpu_per_turn),
                fmt_dur(h.client_cpu_per_turn),
                h.kernel_share * 100.0,
                h.rate / http.rate.max(f64::MIN_POSITIVE),
            );
            lines.push(
                Outcome::new(&format!("HTTP2-{name}-health"), line)
                    .figure("health_req_per_s", h.rate, "req/s", Better::Higher)
                    .figure("health_p50", h.p50 as f64 / 1e3, "us", Better::Lower),
            );
        }
    }
    Ok(lines)
}

pub(crate) struct Throughput {
    done: u64,
    secs: f64,
    rate: f64,
    p50: u64,
    p99: u64,
    /// Mean ops per writer commit during the run.
    group: f64,
    commits: u64,
    /// CPU per turn (ns) of everything but the load clients: the gateway (or the engine).
    cpu_per_turn: u64,
    /// CPU per turn (ns) of the load clients' threads (0 for the engine floor).
    client_cpu_per_turn: u64,
    /// Kernel share of the process's CPU time during the run.
    kernel_share: f64,
    /// Threads of the process right after the run (the clients have exited).
    threads: u64,
}

/// The turns over HTTP on a fresh gateway, and optionally the HTTP floor (`GET /health` from
/// the same clients) on the same gateway, the two interleaved in rounds.
pub(crate) fn w2_http(
    plan: &Plan,
    durability: Durability,
    turns: u64,
    clients: usize,
    with_health_floor: bool,
) -> Result<(Throughput, Option<Throughput>)> {
    let dir = plan.data_dir(&format!("w2-http-{}", durability.as_str()))?;
    let gw = Gateway::start(&dir, durability)?;
    // Sessions: one parent and one child per client (a few threads, so `full` rides on group
    // commit during set-up as well).
    let base = gw.base.clone();
    let setup: Vec<Worker<()>> = (0..SETUP_THREADS)
        .map(|t| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent = new_agent(&base)?;
                for i in (t..clients).step_by(SETUP_THREADS) {
                    let (p, c) = (
                        format!("agent:main:p{i}"),
                        format!("agent:main:subagent:c{i}"),
                    );
                    let url = "/v1/sessions";
                    send(
                        &agent,
                        "POST",
                        url,
                        None,
                        Some(&json!({"key": p}).to_string()),
                    )?;
                    send(
                        &agent,
                        "POST",
                        url,
                        None,
                        Some(&json!({"key": c, "parentSessionKey": p}).to_string()),
                    )?;
                }
                Ok(Vec::new())
            })
        })
        .collect();
    join_all(setup)?;
    let metrics_agent = new_agent(&gw.base)?;
    let before = commit_metrics(&metrics_agent)?;
    let turn_load: Vec<Load> = (0..clients)
        .map(|t| Load {
            method: "POST",
            base: gw.base.clone(),
            path: format!(
                "/v1/sessions/{}/turns",
                seg(&format!("agent:main:subagent:c{t}"))
            ),
            body: Some(TURN_BODY),
            expect: (201, "\"human_direct_message\""),
        })
        .collect();
    // The HTTP floor: the same clients and count on GET /health (no engine call at all).
    let health_load: Option<Vec<Load>> = with_health_floor.then(|| {
        (0..clients)
            .map(|_| Load {
                method: "GET",
                base: gw.base.clone(),
                path: "/health".into(),
                body: None,
                expect: (200, "\"ok\""),
            })
            .collect()
    });
    // Turns and floor take turns in rounds, so a change in the shared machine's load between
    // them weighs on both alike instead of on whichever ran second.
    let (mut turns_run, mut health_run) = (Sample::default(), Sample::default());
    for round in 0..W2_ROUNDS {
        let n = share(turns, W2_ROUNDS, round);
        if turns_run.capped || n == 0 {
            break;
        }
        turns_run.add(http_sample(plan, turn_load.clone(), n)?);
        if let Some(load) = &health_load {
            health_run.add(http_sample(plan, load.clone(), n)?);
        }
    }
    let threads = ProcStatus::read()?.threads;
    let after = commit_metrics(&metrics_agent)?;
    let mut t = turns_run.summary();
    t.threads = threads;
    (t.commits, t.group) = {
        let (ops, commits) = (after.0 - before.0, after.1 - before.1);
        (commits, ops as f64 / commits.max(1) as f64)
    };
    let health = health_load.map(|_| health_run.summary());
    drop(metrics_agent);
    gw.stop()?;
    Ok((t, health))
}

/// Rounds of workload 2 over HTTP: turns, then the `/health` floor, this many times.
const W2_ROUNDS: usize = 4;

/// The requests of one or more [`http_sample`] runs, added up.
#[derive(Default)]
pub(crate) struct Sample {
    lat: Vec<u64>,
    secs: f64,
    cpu: (u64, u64),
    client_cpu: u64,
    /// A run stopped at the time cap.
    capped: bool,
}

impl Sample {
    fn add(&mut self, other: Sample) {
        self.lat.extend(other.lat);
        self.secs += other.secs;
        self.cpu = (self.cpu.0 + other.cpu.0, self.cpu.1 + other.cpu.1);
        self.client_cpu += other.client_cpu;
        self.capped |= other.capped;
    }

    fn summary(self) -> Throughput {
        summarise(self.lat, self.secs, 0, 0, self.cpu, self.client_cpu)
    }
}

/// What one load client sends, over and over, and what it expects back.
#[derive(Clone)]
pub(crate) struct Load {
    method: &'static str,
    base: String,
    path: String,
    body: Option<&'static str>,
    /// Status and a substring of the answer.
    expect: (u16, &'static str),
}

/// One client thread per `Load` (own agent, one keep-alive connection), `total` requests shared
/// out, all released together; stops at the time cap.
pub(crate) fn http_sample(plan: &Plan, loads: Vec<Load>, total: u64) -> Result<Sample> {
    let clients = loads.len();
    let ureq_client = plan.ureq_client;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let client_cpu = Arc::new(AtomicU64::new(0));
    let handles: Vec<Worker<u64>> = loads
        .into_iter()
        .enumerate()
        .map(|(t, load)| {
            let (barrier, stop, client_cpu) = (barrier.clone(), stop.clone(), client_cpu.clone());
            let count = share(total, clients, t);
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(count as usize);
                let failed = |code: u16, body: &[u8]| {
                    anyhow!(
                        "{} {} answered {code}: {}",
                        load.method,
                        load.path,
                        String::from_utf8_lossy(body)
                    )
                };
                if ureq_client {
                    let agent = new_agent(&load.base)?;
                    // Open the connection before the clock starts.
                    let _ = send(&agent, "GET", "/health", None, None);
                    barrier.wait();
                    let cpu0 = thread_cpu_ns();
                    for _ in 0..count {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let s = Instant::now();
                        let (code, body) = send(&agent, load.method, &load.path, None, load.body)?;
                        lat.push(s.elapsed().as_nanos() as u64);
                        if code != load.expect.0 || !body.contains(load.expect.1) {
                            return Err(failed(code, body.as_bytes()));
                        }
                    }
                    client_cpu.fetch_add(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
                    return Ok(lat);
                }
                let mut conn = RawConn::connect(&load.base)?;
                let request =
                    RawConn::request(&load.base, load.method, &load.path, None, load.body);
                // Open the connection before the clock starts.
                let health = RawConn::request(&load.base, "GET", "/health", None, None);
                conn.send(&health)?;
                barrier.wait();
                let cpu0 = thread_cpu_ns();
                for _ in 0..count {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let s = Instant::now();
                    let a = conn.send(&request)?;
                    lat.push(s.elapsed().as_nanos() as u64);
                    if a.status != load.expect.0 || !contains(a.body, load.expect.1) {
                        return Err(failed(a.status, a.body));
                    }
                }
                client_cpu.fetch_add(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
                Ok(lat)
            })
        })
        .collect();
    let (lat, secs, cpu) = timed_join(handles, &barrier, &stop, plan.cap(120))?;
    Ok(Sample {
        capped: (lat.len() as u64) < total,
        lat,
        secs,
        cpu,
        client_cpu: client_cpu.load(Ordering::Relaxed),
    })
}

pub(crate) fn w2_engine(
    plan: &Plan,
    durability: Durability,
    turns: u64,
    clients: usize,
) -> Result<Throughput> {
    let dir = plan.data_dir(&format!("w2-engine-{}", durability.as_str()))?;
    let engine = open_engine(
        &GatewayConfig::for_data_dir(&dir).db_path(),
        durability,
        None,
        false,
    )?;
    engine.start()?;
    let setup: Vec<Worker<(usize, SessionRef)>> = (0..SETUP_THREADS)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in (t..clients).step_by(SETUP_THREADS) {
                    let parent = SessionKey::parse(&format!("agent:main:p{i}"))?;
                    let child = session_ref(&format!("agent:main:subagent:c{i}"))?;
                    engine.create_session(CreateSession::new(parent.clone()))?;
                    engine.create_session(CreateSession::new(child.key.clone()).parent(parent))?;
                    out.push((i, child));
                }
                Ok(out)
            })
        })
        .collect();
    let mut children = join_all(setup)?;
    children.sort_by_key(|(i, _)| *i);
    let m = store_metrics(&engine);
    let before = (m.ops(), m.commits());
    let barrier = Arc::new(Barrier::new(clients + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<Worker<u64>> = children
        .into_iter()
        .map(|(t, child)| {
            let (engine, barrier, stop) = (engine.clone(), barrier.clone(), stop.clone());
            let count = share(turns, clients, t);
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(count as usize);
                barrier.wait();
                for _ in 0..count {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let s = Instant::now();
                    let o = engine.post_turn(
                        &child,
                        NewTurn::user("please use the staging database").channel("bench"),
                    )?;
                    lat.push(s.elapsed().as_nanos() as u64);
                    if o.event.is_none() {
                        bail!("a human turn on a parented child recorded no event");
                    }
                }
                Ok(lat)
            })
        })
        .collect();
    let (lat, secs, cpu) = timed_join(handles, &barrier, &stop, plan.cap(120))?;
    let threads = ProcStatus::read()?.threads;
    let m = store_metrics(&engine);
    let (ops, commits) = (m.ops() - before.0, m.commits() - before.1);
    engine.close();
    let mut t = summarise(lat, secs, ops, commits, cpu, 0);
    t.threads = threads;
    Ok(t)
}

/// Releases the barrier, starts the clock, stops the workers at `cap`, and joins them. Returns
/// the samples, the wall seconds and the CPU time `(user, kernel)` the whole process used
/// meanwhile (ns).
pub(crate) fn timed_join(
    handles: Vec<Worker<u64>>,
    barrier: &Barrier,
    stop: &Arc<AtomicBool>,
    cap: Duration,
) -> Result<(Vec<u64>, f64, (u64, u64))> {
    let cpu0 = process_cpu_ns();
    barrier.wait();
    let t = Instant::now();
    let stopper = stop_after(stop, cap, Duration::from_millis(20));
    let joined = join_all(handles);
    let secs = t.elapsed().as_secs_f64();
    let cpu1 = process_cpu_ns();
    let cpu = (cpu1.0.saturating_sub(cpu0.0), cpu1.1.saturating_sub(cpu0.1));
    stop.store(true, Ordering::Relaxed);
    let _ = stopper.join();
    Ok((joined?, secs, cpu))
}

/// CPU time `(user, kernel)` of the whole process, live and exited threads (utime and stime
/// of `/proc/self/stat`, in USER_HZ = 100 ticks per second), in ns.
pub(crate) fn process_cpu_ns() -> (u64, u64) {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
            // Field 3 (state) is f[0]; utime and stime are fields 14 and 15.
            Some((
                f.get(11)?.parse::<u64>().ok()?,
                f.get(12)?.parse::<u64>().ok()?,
            ))
        })
        .map_or((0, 0), |(u, k)| (u * 10_000_000, k * 10_000_000))
}

/// CPU time of the calling thread in ns (`/proc/thread-self/schedstat`, first field).
pub(crate) fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn summarise(
    mut lat: Vec<u64>,
    secs: f64,
    ops: u64,
    commits: u64,
    (user_ns, kernel_ns): (u64, u64),
    client_cpu_ns: u64,
) -> Throughput {
    let done = lat.len() as u64;
    let (p50, p99) = percentiles(&mut lat);
    let per = |ns: u64| ns / done.max(1);
    Throughput {
        cpu_per_turn: per((user_ns + kernel_ns).saturating_sub(client_cpu_ns)),
        kernel_share: kernel_ns as f64 / (user_ns + kernel_ns).max(1) as f64,
        threads: 0,
        client_cpu_per_turn: per(client_cpu_ns),
        done,
        secs,
        rate: done as f64 / secs.max(1e-9),
        p50,
        p99,
        group: ops as f64 / commits.max(1) as f64,
        commits,
    }
}

/// `(ops, commits)` of the gateway's writer, from `/metrics`.
pub(crate) fn commit_metrics(agent: &Client) -> Result<(u64, u64)> {
    let (_, text) = send(agent, "GET", "/metrics", None, None)?;
    let value = |name: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .ok_or_else(|| anyhow!("/metrics has no {name}"))
    };
    Ok((
        value("aware_group_commit_ops_sum")?,
        value("aware_commits_total")?,
    ))
}
