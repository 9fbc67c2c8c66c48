//! `aware bench-http`: the gateway (`aware serve`) driven over loopback HTTP by a Rust load
//! client, each workload next to a floor measured in the same process.
//!
//! Every gateway runs in-process (`aware_gateway::run` on `127.0.0.1:0`, a fresh temporary data
//! dir, the wall clock, `notify_on_create = false`); the clients are plain threads with blocking
//! `ureq` agents, each agent holding one keep-alive connection.
//!
//! 1. `session_status` with `changesSince` returning a 50-event page while the store holds
//!    ~50,000 event rows; one client. Floors: the same page through `Engine::list_since` (the
//!    engine floor) and a `GET /health` round trip (the HTTP floor).
//! 2. Concurrent clients posting human turns on parent-watched sessions, at `normal` and then
//!    `full`, each on a fresh gateway. Floor: the same `Engine::post_turn` calls from as many
//!    threads in-process.
//! 3. Process RSS after building 10,000 sessions and 100,000 cursors over HTTP and idling 2 s,
//!    against the RSS before the gateway started. Runs first, so that baseline is the bare
//!    process rather than what workloads 1 and 2 left in the allocator.

use crate::bench::{
    fmt_dur, fmt_int, join_all, percentiles, share, Better, Outcome, Report, Worker,
};
use anyhow::{anyhow, bail, Context, Result};
use aware_core::{AgentId, SessionKey, SessionRef};
use aware_engine::{CreateSession, Engine, EngineConfig, NewTurn, SystemClock};
use aware_gateway::GatewayConfig;
use aware_store::Durability;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Arguments of `aware bench-http`.
#[derive(clap::Args, Debug)]
pub struct HttpBenchArgs {
    /// Print a JSON report of every figure and target on stdout (the text goes to stderr), for
    /// `aware bench --compare A.json B.json`.
    #[arg(long)]
    pub json: bool,
    /// Run only these workloads, e.g. `--only 1,3` (1 = session_status page, 2 = concurrent
    /// turns, 3 = gateway RSS).
    #[arg(long, value_delimiter = ',', value_name = "1,2,3")]
    pub only: Vec<String>,
    /// Divide every count by 10 (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Human turns posted per durability in workload 2.
    #[arg(long, default_value_t = 20_000)]
    pub turns: u64,
    /// Concurrent clients of workload 2 (threads, each with its own keep-alive connection and
    /// its own parent-watched session).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// `session_status` calls measured in workload 1.
    #[arg(long, default_value_t = 2_000)]
    pub calls: u64,
    /// Directory for the gateways' data dirs (a fresh temporary directory is made inside it and
    /// removed afterwards). Default: the system temporary directory.
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<PathBuf>,
}

const ALL: [&str; 3] = ["1", "2", "3"];
const AGENT: &str = "main";
/// Workload 1: event rows in the store before `--quick`. This is also the default retention
/// cap (`max_rows`), so the gateway's start-up prune leaves every row in place.
const W1_EVENT_ROWS: u64 = 50_000;
/// Workload 1: human turns per child; each child also holds its `child_spawned` event, so the
/// store has `W1_EVENT_ROWS / 51` children (980 at full scale, 49,980 rows).
const W1_TURNS_PER_CHILD: u64 = 50;
/// Workload 1: the page size asked for (and returned).
const W1_PAGE: u64 = 50;
/// Workload 3: sessions and cursors before `--quick`.
const W3_SESSIONS: u64 = 10_000;
const W3_CURSORS: u64 = 100_000;
/// Workload 3: watcher sessions (each registers on cursors / watchers targets).
const W3_WATCHERS: u64 = 100;
/// Client threads that set up sessions (workloads 1 and 2) and populate workload 3.
const SETUP_THREADS: usize = 8;
const TURN_BODY: &str =
    r#"{"role":"user","text":"please use the staging database","channel":"bench"}"#;

struct Plan {
    scale: u64,
    dir: PathBuf,
}

impl Plan {
    /// A fresh data dir for one gateway or engine.
    fn data_dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.dir.join(name);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }
    /// A time cap for a measured phase: `full` seconds, or a sixth of it with `--quick`.
    fn cap(&self, full: u64) -> Duration {
        Duration::from_secs(if self.scale > 1 {
            (full / 6).max(5)
        } else {
            full
        })
    }
}

/// Runs the selected workloads and prints one result line per workload, each target under it
/// with PASS/FAIL. With `json` (the global `--json`), the text goes to stderr and the report to
/// stdout as JSON (compare two with `aware bench --compare A.json B.json`).
pub fn run(args: HttpBenchArgs, json: bool) -> Result<()> {
    let mut selected: Vec<&str> = if args.only.is_empty() {
        ALL.to_vec()
    } else {
        let mut v = Vec::new();
        for raw in &args.only {
            let w = raw.trim().trim_start_matches(['W', 'w']);
            let Some(w) = ALL.iter().find(|a| **a == w) else {
                bail!("unknown workload {raw:?} in --only (expected some of 1,2,3)");
            };
            if !v.contains(w) {
                v.push(*w);
            }
        }
        v
    };
    // Workload 3 measures the process, so it runs before anything else has grown the heap.
    selected.sort_by_key(|w| {
        if *w == "3" {
            0
        } else {
            w.parse::<u8>().unwrap_or(9)
        }
    });
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let scale = if args.quick { 10 } else { 1 };
    let tmp = match &args.data_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            tempfile::Builder::new()
                .prefix("aware-bench-http-")
                .tempdir_in(d)
        }
        None => tempfile::Builder::new()
            .prefix("aware-bench-http-")
            .tempdir(),
    }
    .context("creating the bench directory")?;
    let plan = Plan {
        scale,
        dir: tmp.path().to_path_buf(),
    };
    let turns = (args.turns / scale).max(args.clients as u64);
    let calls = (args.calls / scale).max(50);
    let mut report = Report::new("bench-http", args.quick, json);
    report.say(&format!(
        "aware bench-http{}: in-process gateways on 127.0.0.1:0 (wall clock, notify_on_create \
         off), blocking ureq clients with keep-alive connections; calls={} turns={} clients={} \
         cpus={} loadavg={} dir={}",
        if args.quick {
            " --quick (counts / 10)"
        } else {
            ""
        },
        fmt_int(calls),
        fmt_int(turns),
        args.clients,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| {
                let v: Vec<&str> = l.split_whitespace().take(3).collect();
                (v.len() == 3).then(|| v.join("/"))
            })
            .unwrap_or_else(|| "?".into()),
        plan.dir.display()
    ));
    report.say(
        "Ratios are gateway cost / floor cost, floors measured in this process: workload 1 \
         divides the HTTP session_status p50 by the engine floor (Engine::list_since of the same \
         page, no HTTP) and by the HTTP floor (a GET /health round trip on the same connection); \
         workload 2 divides the gateway's time per turn by that of the same Engine::post_turn \
         calls from as many threads in-process (2.00x = the gateway reaches half the engine's \
         turns/s); workload 3 divides the process VmRSS by the VmRSS before the gateway started. \
         1.00x = no cost over the floor. Workload 3 runs first so its baseline is the bare \
         process.",
    );
    let started = Instant::now();
    for w in selected {
        let t = Instant::now();
        let outcomes = match w {
            "1" => w1(&plan, calls),
            "2" => w2(&plan, turns, args.clients),
            _ => w3(&plan),
        }
        .with_context(|| format!("workload {w}"))?;
        let secs = t.elapsed().as_secs_f64();
        for o in outcomes {
            report.add(o, secs);
        }
    }
    drop(tmp);
    report.finish(started.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// Workload 1: session_status changesSince, one keep-alive client
// ---------------------------------------------------------------------------------------------

/// One child stream of workload 1: its parent (the caller), its key, the sequence of its
/// `child_spawned` event (the `changesSince` that returns exactly the 50 human turns).
struct Stream {
    parent: SessionRef,
    child: SessionRef,
    since: i64,
    /// `session_status` with `changesSince` (the measured call).
    body: String,
    /// `session_status` without `changesSince`: the same call minus the page.
    bare_body: String,
}

fn w1(plan: &Plan, calls: u64) -> Result<Vec<Outcome>> {
    let durability = Durability::Normal;
    let children = (W1_EVENT_ROWS / plan.scale / (W1_TURNS_PER_CHILD + 1)).max(10);
    let dir = plan.data_dir("w1")?;
    let db = GatewayConfig::for_data_dir(&dir).db_path();
    // The store is filled in-process (fast), then served by a gateway on the same file. The
    // engine handle stays open for the floor: a second reader of the same WAL file.
    let engine = open_engine(&db, durability)?;
    let streams = fill_w1(&engine, children)?;
    let gw = Gateway::start(&dir, durability)?;
    let event_rows = count_rows(&db, "session_state_events")?;
    if event_rows != children * (W1_TURNS_PER_CHILD + 1) {
        bail!(
            "the store holds {event_rows} event rows after the gateway's start-up, expected {}",
            children * (W1_TURNS_PER_CHILD + 1)
        );
    }
    let agent = new_agent();
    let status_url = gw.url("/v1/tools/session_status");
    let health_url = gw.url("/health");

    // Check one answer against the engine before timing anything.
    let s0 = &streams[0];
    let (_, text) = send(
        &agent,
        "POST",
        &status_url,
        Some(s0.parent.key.as_str()),
        Some(&s0.body),
    )?;
    let answer: Value = serde_json::from_str(&text).context("session_status answer")?;
    let events = answer["stateChanges"]["events"]
        .as_array()
        .map_or(0, |a| a.len());
    let page = engine.list_since(&s0.child, s0.since, W1_PAGE as u32)?;
    if events as u64 != W1_PAGE
        || page.events.len() as u64 != W1_PAGE
        || answer["stateChanges"]["truncated"] != false
        || answer["stateChanges"]["events"][0]["sequence"] != page.events[0].sequence
    {
        bail!(
            "session_status did not return the expected {W1_PAGE}-event page (got {events} \
             events over HTTP, {} in-process)",
            page.events.len()
        );
    }
    let answer_bytes = text.len();
    let status_text_bytes = answer["statusText"].as_str().map_or(0, str::len);
    let (_, bare) = send(
        &agent,
        "POST",
        &status_url,
        Some(s0.parent.key.as_str()),
        Some(&s0.bare_body),
    )?;
    let bare_bytes = bare.len();

    // Four ways of doing "the same" work, interleaved in chunks so noise hits all alike.
    let mut rng = Lcg(0x5eed);
    let picks: Vec<usize> = (0..calls)
        .map(|_| (rng.next() % streams.len() as u64) as usize)
        .collect();
    // Returns when the status line and headers had arrived (the rest is reading the body).
    let http_status = |s: &Stream, start: Instant| -> Result<Duration> {
        let resp = agent
            .post(&status_url)
            .set("X-Aware-Session", s.parent.key.as_str())
            .set("Content-Type", "application/json")
            .send_string(&s.body);
        let headers = start.elapsed();
        let (code, body) = match resp {
            Ok(r) => (r.status(), r.into_string()?),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => bail!("session_status: {e}"),
        };
        if code != 200 || body.len() < 100 {
            bail!("session_status answered {code}: {body}");
        }
        Ok(headers)
    };
    let engine_page = |s: &Stream| -> Result<()> {
        let p = engine.list_since(&s.child, s.since, W1_PAGE as u32)?;
        if p.events.len() as u64 != W1_PAGE {
            bail!("list_since returned {} events", p.events.len());
        }
        Ok(())
    };
    // What the session_status handler asks the engine for: caller exists, target exists, then
    // get_session + version + list_since.
    let engine_handler = |s: &Stream| -> Result<()> {
        if !engine.session_exists(&s.parent)? || !engine.session_exists(&s.child)? {
            bail!("session vanished");
        }
        let _session = engine.get_session(&s.child)?;
        let _v = engine.version(&s.child);
        let p = engine.list_since(&s.child, s.since, W1_PAGE as u32)?;
        if p.events.len() as u64 != W1_PAGE {
            bail!("list_since returned {} events", p.events.len());
        }
        Ok(())
    };
    let http_bare = |s: &Stream| -> Result<()> {
        let (code, body) = send(
            &agent,
            "POST",
            &status_url,
            Some(s.parent.key.as_str()),
            Some(&s.bare_body),
        )?;
        if code != 200 || body.contains("stateChanges") {
            bail!("session_status without changesSince answered {code}: {body}");
        }
        Ok(())
    };
    let health = |_: &Stream| -> Result<()> {
        let (code, _) = send(&agent, "GET", &health_url, None, None)?;
        if code != 200 {
            bail!("/health answered {code}");
        }
        Ok(())
    };
    // Warm-up: connection, reader pool, page cache.
    for (i, s) in streams.iter().enumerate().take(200) {
        http_status(s, Instant::now())?;
        engine_page(s)?;
        if i < 50 {
            health(s)?;
            http_bare(s)?;
            engine_handler(s)?;
        }
    }
    let cap = plan.cap(90);
    let t0 = Instant::now();
    let mut hh = Vec::new();
    let (mut h, mut e, mut eh, mut hf, mut hb) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for chunk in picks.chunks(100) {
        if t0.elapsed() > cap {
            break;
        }
        for &i in chunk {
            let t = Instant::now();
            let headers = http_status(&streams[i], t)?;
            h.push(t.elapsed().as_nanos() as u64);
            hh.push(headers.as_nanos() as u64);
        }
        for &i in chunk {
            let t = Instant::now();
            engine_page(&streams[i])?;
            e.push(t.elapsed().as_nanos() as u64);
        }
        for &i in chunk {
            let t = Instant::now();
            engine_handler(&streams[i])?;
            eh.push(t.elapsed().as_nanos() as u64);
        }
        for &i in chunk {
            let t = Instant::now();
            health(&streams[i])?;
            hf.push(t.elapsed().as_nanos() as u64);
        }
        for &i in chunk {
            let t = Instant::now();
            http_bare(&streams[i])?;
            hb.push(t.elapsed().as_nanos() as u64);
        }
    }
    let done = h.len() as u64;
    let (h50, h99) = percentiles(&mut h);
    let (e50, e99) = percentiles(&mut e);
    let (eh50, _) = percentiles(&mut eh);
    let (hf50, hf99) = percentiles(&mut hf);
    let (hb50, _) = percentiles(&mut hb);
    let (hh50, _) = percentiles(&mut hh);
    drop(agent);
    gw.stop()?;
    engine.close();
    // No "left for framing and JSON" figure: a difference of medians of different
    // distributions is not the median of anything. The parts are shown as measured.
    let line = format!(
        "1 POST /v1/tools/session_status changesSince -> {W1_PAGE}-event page ({} B answer, {} \
         B of it statusText) of one of {} parent-watched child streams ({} event rows in the \
         store), 1 client, 1 keep-alive connection [{}]: {} calls{} p50 {} p99 {} (status line \
         and headers in after p50 {}) | engine floor Engine::list_since same page: p50 {} p99 {} \
         -> ratio {:.1}x | HTTP floor GET /health: p50 {} p99 {} -> ratio {:.1}x | the \
         handler's engine reads in-process (caller + target exists, get_session, version, \
         list_since) p50 {} | the same call without changesSince (no page, {} B answer) p50 {}",
        fmt_int(answer_bytes as u64),
        fmt_int(status_text_bytes as u64),
        fmt_int(children),
        fmt_int(event_rows),
        durability.as_str(),
        fmt_int(done),
        if done < calls {
            format!(" (stopped at the {} s cap)", cap.as_secs())
        } else {
            String::new()
        },
        fmt_dur(h50),
        fmt_dur(h99),
        fmt_dur(hh50),
        fmt_dur(e50),
        fmt_dur(e99),
        h50 as f64 / e50.max(1) as f64,
        fmt_dur(hf50),
        fmt_dur(hf99),
        h50 as f64 / hf50.max(1) as f64,
        fmt_dur(eh50),
        fmt_int(bare_bytes as u64),
        fmt_dur(hb50),
    );
    let us = |ns: u64| ns as f64 / 1e3;
    Ok(vec![Outcome::new("HTTP1", line)
        .figure("status_p50", us(h50), "us", Better::Lower)
        .figure("status_p99", us(h99), "us", Better::Lower)
        .figure("engine_page_p50", us(e50), "us", Better::Lower)
        .figure("engine_handler_reads_p50", us(eh50), "us", Better::Lower)
        .figure("health_p50", us(hf50), "us", Better::Lower)
        .figure("status_without_page_p50", us(hb50), "us", Better::Lower)
        .figure("answer_bytes", answer_bytes as f64, "B", Better::Lower)
        .target("status_p50", 300.0)])
}

/// Creates `children` parent/child pairs and 50 human turns on each child, from several threads.
fn fill_w1(engine: &Engine, children: u64) -> Result<Vec<Stream>> {
    let handles: Vec<Worker<(u64, Stream)>> = (0..SETUP_THREADS)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in (t as u64..children).step_by(SETUP_THREADS) {
                    let parent = session_ref(&format!("agent:main:p{i}"))?;
                    let child = session_ref(&format!("agent:main:subagent:c{i}"))?;
                    engine.create_session(CreateSession::new(parent.key.clone()))?;
                    let (_, session) = engine.create_session(
                        CreateSession::new(child.key.clone()).parent(parent.key.clone()),
                    )?;
                    let since = session.state_version;
                    if since <= 0 {
                        bail!("child {} has no child_spawned event", child.key);
                    }
                    for k in 0..W1_TURNS_PER_CHILD {
                        let o = engine.post_turn(
                            &child,
                            NewTurn::user(format!("turn {k}")).channel("bench"),
                        )?;
                        if o.event.is_none() {
                            bail!("a human turn on a parented child recorded no event");
                        }
                    }
                    let body = json!({"sessionKey": child.key.as_str(), "changesSince": since,
                                      "limit": W1_PAGE})
                    .to_string();
                    let bare_body = json!({"sessionKey": child.key.as_str()}).to_string();
                    out.push((
                        i,
                        Stream {
                            parent,
                            child,
                            since,
                            body,
                            bare_body,
                        },
                    ));
                }
                Ok(out)
            })
        })
        .collect();
    let mut all = join_all(handles)?;
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, s)| s).collect())
}

// ---------------------------------------------------------------------------------------------
// Workload 2: concurrent human turns
// ---------------------------------------------------------------------------------------------

fn w2(plan: &Plan, turns: u64, clients: usize) -> Result<Vec<Outcome>> {
    let mut lines = Vec::new();
    // Issue 13's targets: >= 10,000 turns/s and <= 1.2x the engine at normal, >= 8,000 at full.
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

struct Throughput {
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
/// the same clients) on the same gateway afterwards.
fn w2_http(
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
                let agent = new_agent();
                for i in (t..clients).step_by(SETUP_THREADS) {
                    let (p, c) = (
                        format!("agent:main:p{i}"),
                        format!("agent:main:subagent:c{i}"),
                    );
                    let url = format!("{base}/v1/sessions");
                    send(
                        &agent,
                        "POST",
                        &url,
                        None,
                        Some(&json!({"key": p}).to_string()),
                    )?;
                    send(
                        &agent,
                        "POST",
                        &url,
                        None,
                        Some(&json!({"key": c, "parentSessionKey": p}).to_string()),
                    )?;
                }
                Ok(Vec::new())
            })
        })
        .collect();
    join_all(setup)?;
    let metrics_agent = new_agent();
    let before = commit_metrics(&metrics_agent, &gw)?;
    let turn_load = (0..clients)
        .map(|t| Load {
            method: "POST",
            url: gw.url(&format!(
                "/v1/sessions/{}/turns",
                crate::client::seg(&format!("agent:main:subagent:c{t}"))
            )),
            body: Some(TURN_BODY),
            expect: (201, "\"human_direct_message\""),
        })
        .collect();
    let mut t = http_load(plan, turn_load, turns)?;
    let after = commit_metrics(&metrics_agent, &gw)?;
    (t.commits, t.group) = {
        let (ops, commits) = (after.0 - before.0, after.1 - before.1);
        (commits, ops as f64 / commits.max(1) as f64)
    };
    // The HTTP floor: the same clients and count on GET /health (no engine call at all).
    let health = if with_health_floor {
        let load = (0..clients)
            .map(|_| Load {
                method: "GET",
                url: gw.url("/health"),
                body: None,
                expect: (200, "\"ok\""),
            })
            .collect();
        Some(http_load(plan, load, turns)?)
    } else {
        None
    };
    drop(metrics_agent);
    gw.stop()?;
    Ok((t, health))
}

/// What one load client sends, over and over, and what it expects back.
struct Load {
    method: &'static str,
    url: String,
    body: Option<&'static str>,
    /// Status and a substring of the answer.
    expect: (u16, &'static str),
}

/// One client thread per `Load` (own agent, one keep-alive connection), `total` requests shared
/// out, all released together; stops at the time cap.
fn http_load(plan: &Plan, loads: Vec<Load>, total: u64) -> Result<Throughput> {
    let clients = loads.len();
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
                let agent = new_agent();
                // Open the connection before the clock starts.
                let origin_end = load.url[7..].find('/').map_or(load.url.len(), |i| i + 7);
                let _ = send(
                    &agent,
                    "GET",
                    &format!("{}/health", &load.url[..origin_end]),
                    None,
                    None,
                );
                let mut lat = Vec::with_capacity(count as usize);
                barrier.wait();
                let cpu0 = thread_cpu_ns();
                for _ in 0..count {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let s = Instant::now();
                    let (code, body) = send(&agent, load.method, &load.url, None, load.body)?;
                    lat.push(s.elapsed().as_nanos() as u64);
                    if code != load.expect.0 || !body.contains(load.expect.1) {
                        bail!("{} {} answered {code}: {body}", load.method, load.url);
                    }
                }
                client_cpu.fetch_add(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
                Ok(lat)
            })
        })
        .collect();
    let (lat, secs, cpu) = timed_join(handles, &barrier, &stop, plan.cap(120))?;
    let threads = ProcStatus::read()?.threads;
    let mut t = summarise(lat, secs, 0, 0, cpu, client_cpu.load(Ordering::Relaxed));
    t.threads = threads;
    Ok(t)
}

fn w2_engine(
    plan: &Plan,
    durability: Durability,
    turns: u64,
    clients: usize,
) -> Result<Throughput> {
    let dir = plan.data_dir(&format!("w2-engine-{}", durability.as_str()))?;
    let engine = open_engine(&GatewayConfig::for_data_dir(&dir).db_path(), durability)?;
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
    let m = engine.store().metrics();
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
    let m = engine.store().metrics();
    let (ops, commits) = (m.ops() - before.0, m.commits() - before.1);
    engine.close();
    let mut t = summarise(lat, secs, ops, commits, cpu, 0);
    t.threads = threads;
    Ok(t)
}

/// Releases the barrier, starts the clock, stops the workers at `cap`, and joins them. Returns
/// the samples, the wall seconds and the CPU time `(user, kernel)` the whole process used
/// meanwhile (ns).
fn timed_join(
    handles: Vec<Worker<u64>>,
    barrier: &Barrier,
    stop: &Arc<AtomicBool>,
    cap: Duration,
) -> Result<(Vec<u64>, f64, (u64, u64))> {
    let cpu0 = process_cpu_ns();
    barrier.wait();
    let t = Instant::now();
    let stopper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + cap;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
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
fn process_cpu_ns() -> (u64, u64) {
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
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn summarise(
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
fn commit_metrics(agent: &ureq::Agent, gw: &Gateway) -> Result<(u64, u64)> {
    let (_, text) = send(agent, "GET", &gw.url("/metrics"), None, None)?;
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

// ---------------------------------------------------------------------------------------------
// Workload 3: gateway RSS with 10,000 sessions and 100,000 cursors
// ---------------------------------------------------------------------------------------------

fn w3(plan: &Plan) -> Result<Vec<Outcome>> {
    let durability = Durability::Normal;
    let sessions = (W3_SESSIONS / plan.scale).max(W3_WATCHERS * 2);
    let cursors = (W3_CURSORS / plan.scale).max(W3_WATCHERS);
    let watchers = W3_WATCHERS;
    let targets = sessions - watchers;
    let per_watcher = cursors / watchers;
    if per_watcher > targets {
        bail!("{per_watcher} cursors per watcher need at least as many targets (have {targets})");
    }
    let before = ProcStatus::read()?;
    let dir = plan.data_dir("w3")?;
    let gw = Gateway::start(&dir, durability)?;
    let started = ProcStatus::read()?;
    let cap = plan.cap(240);
    let t0 = Instant::now();
    let deadline = t0 + cap;

    // Sessions: watchers agent:main:w{j}, targets agent:main:t{i}.
    let base = gw.base.clone();
    let create: Vec<Worker<()>> = (0..SETUP_THREADS)
        .map(|t| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent = new_agent();
                let url = format!("{base}/v1/sessions");
                for i in (t as u64..sessions).step_by(SETUP_THREADS) {
                    if Instant::now() > deadline {
                        bail!("creating {sessions} sessions took over {} s", cap.as_secs());
                    }
                    let key = if i < watchers {
                        format!("agent:main:w{i}")
                    } else {
                        format!("agent:main:t{}", i - watchers)
                    };
                    let (code, _) = send(
                        &agent,
                        "POST",
                        &url,
                        None,
                        Some(&json!({"key": key}).to_string()),
                    )?;
                    if code != 201 {
                        bail!("creating {key} answered {code}");
                    }
                }
                Ok(Vec::new())
            })
        })
        .collect();
    join_all(create)?;
    let created_secs = t0.elapsed().as_secs_f64();

    // Cursors: watcher j registers on `per_watcher` consecutive targets from its own offset.
    let t1 = Instant::now();
    let register: Vec<Worker<()>> = (0..SETUP_THREADS)
        .map(|t| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent = new_agent();
                for j in (t as u64..watchers).step_by(SETUP_THREADS) {
                    let url = format!("{base}/v1/sessions/agent:main:w{j}/watches");
                    let offset = j * (targets / watchers);
                    for k in 0..per_watcher {
                        if Instant::now() > deadline {
                            bail!(
                                "registering {cursors} cursors took over {} s",
                                cap.as_secs()
                            );
                        }
                        let target = format!("agent:main:t{}", (offset + k) % targets);
                        let (code, body) = send(
                            &agent,
                            "POST",
                            &url,
                            None,
                            Some(&json!({"target": target}).to_string()),
                        )?;
                        if code != 200 || !body.contains("\"watched\":true") {
                            bail!("registering w{j} on {target} answered {code}: {body}");
                        }
                    }
                }
                Ok(Vec::new())
            })
        })
        .collect();
    join_all(register)?;
    let registered_secs = t1.elapsed().as_secs_f64();

    std::thread::sleep(Duration::from_secs(2));
    let idle = ProcStatus::read()?;

    // Check what was built, straight from the file.
    let db = GatewayConfig::for_data_dir(&dir).db_path();
    let (n_sessions, n_cursors) = (
        count_rows(&db, "sessions")?,
        count_rows(&db, "session_watch_cursors")?,
    );
    gw.stop()?;
    if n_sessions != sessions || n_cursors != cursors {
        bail!(
            "expected {sessions} sessions and {cursors} cursors, the store holds {n_sessions} and \
             {n_cursors}"
        );
    }
    let db_bytes = std::fs::metadata(&db).map_or(0, |m| m.len())
        + std::fs::metadata(db.with_extension("db-wal")).map_or(0, |m| m.len());
    let line = format!(
        "3 gateway RSS [{}]: {} sessions + {} cursors ({} watchers x {} POST \
         /v1/sessions/{{w}}/watches) built over HTTP by {SETUP_THREADS} clients (sessions {:.1} \
         s = {} req/s, cursors {:.1} s = {} req/s), then 2 s idle: VmRSS {} (RssAnon {}, \
         RssFile {}, {} threads; peak VmHWM {}) | baseline before the gateway started: VmRSS {} \
         ({} right after start-up) -> ratio {:.1}x, gateway share {} | store on disk {}",
        durability.as_str(),
        fmt_int(sessions),
        fmt_int(cursors),
        watchers,
        fmt_int(per_watcher),
        created_secs,
        fmt_int((sessions as f64 / created_secs.max(1e-9)) as u64),
        registered_secs,
        fmt_int((cursors as f64 / registered_secs.max(1e-9)) as u64),
        fmt_kb(idle.rss_kb),
        fmt_kb(idle.anon_kb),
        fmt_kb(idle.file_kb),
        idle.threads,
        fmt_kb(idle.hwm_kb),
        fmt_kb(before.rss_kb),
        fmt_kb(started.rss_kb),
        idle.rss_kb as f64 / before.rss_kb.max(1) as f64,
        fmt_kb(idle.rss_kb.saturating_sub(before.rss_kb)),
        fmt_kb(db_bytes / 1024),
    );
    let mib = |kb: u64| kb as f64 / 1024.0;
    Ok(vec![Outcome::new("HTTP3", line)
        .figure("vmrss", mib(idle.rss_kb), "MiB", Better::Lower)
        .figure("vmhwm", mib(idle.hwm_kb), "MiB", Better::Lower)
        .figure(
            "gateway_share",
            mib(idle.rss_kb.saturating_sub(before.rss_kb)),
            "MiB",
            Better::Lower,
        )
        .target("vmrss", 40.0)])
}

/// The memory lines of `/proc/self/status`, in KiB.
struct ProcStatus {
    rss_kb: u64,
    hwm_kb: u64,
    anon_kb: u64,
    file_kb: u64,
    threads: u64,
}

impl ProcStatus {
    fn read() -> Result<ProcStatus> {
        let text =
            std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let s = ProcStatus {
            rss_kb: field("VmRSS"),
            hwm_kb: field("VmHWM"),
            anon_kb: field("RssAnon"),
            file_kb: field("RssFile"),
            threads: field("Threads"),
        };
        if s.rss_kb == 0 {
            bail!("/proc/self/status has no VmRSS");
        }
        Ok(s)
    }
}

// ---------------------------------------------------------------------------------------------
// The in-process gateway and the client
// ---------------------------------------------------------------------------------------------

struct Gateway {
    runtime: Option<tokio::runtime::Runtime>,
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<Result<(), aware_gateway::RunError>>>,
}

impl Gateway {
    /// Starts `aware_gateway::run` on `127.0.0.1:0` over `data_dir` and waits until `/health`
    /// answers 200 (start-up done).
    fn start(data_dir: &Path, durability: Durability) -> Result<Gateway> {
        let mut config = GatewayConfig::for_data_dir(data_dir);
        config.notify_on_create = false;
        config.durability = durability;
        config.test_clock_start = None;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("start the async runtime")?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))?;
        let addr = listener.local_addr()?;
        config.bind = addr;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = runtime.spawn(aware_gateway::run(listener, config, async {
            let _ = stop_rx.await;
        }));
        let gw = Gateway {
            runtime: Some(runtime),
            base: format!("http://{addr}"),
            stop: Some(stop_tx),
            server: Some(server),
        };
        let agent = new_agent();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match agent.get(&gw.url("/health")).call() {
                Ok(r) if r.status() == 200 => break,
                _ if Instant::now() > deadline => bail!("the gateway was not ready within 30 s"),
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        Ok(gw)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Graceful shutdown: in-flight requests finish, the engine closes.
    fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let (Some(runtime), Some(server)) = (self.runtime.take(), self.server.take()) else {
            return Ok(());
        };
        let outcome =
            runtime.block_on(async { tokio::time::timeout(Duration::from_secs(30), server).await });
        runtime.shutdown_timeout(Duration::from_secs(5));
        match outcome {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(anyhow!("the gateway failed: {e}")),
            Ok(Err(e)) => Err(anyhow!("the gateway task failed: {e}")),
            Err(_) => Err(anyhow!("the gateway did not shut down within 30 s")),
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// A client with one keep-alive connection (ureq pools it once a body is read to the end).
fn new_agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

/// One request; any status is returned with the body read to the end (so the connection goes
/// back to the pool), transport errors fail.
fn send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    caller: Option<&str>,
    body: Option<&str>,
) -> Result<(u16, String)> {
    let mut req = agent.request(method, url);
    if let Some(c) = caller {
        req = req.set("X-Aware-Session", c);
    }
    let resp = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(b),
        None => req.call(),
    };
    match resp {
        Ok(r) => {
            let code = r.status();
            Ok((code, r.into_string()?))
        }
        Err(ureq::Error::Status(code, r)) => Ok((code, r.into_string().unwrap_or_default())),
        Err(e) => Err(anyhow!("{method} {url}: {e}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Engine and store helpers
// ---------------------------------------------------------------------------------------------

fn open_engine(path: &Path, durability: Durability) -> Result<Engine> {
    let mut config = EngineConfig::new(path);
    config.durability = durability;
    config.notify_on_create = false;
    Ok(Engine::open(config, Arc::new(SystemClock))?)
}

fn session_ref(key: &str) -> Result<SessionRef> {
    Ok(SessionRef {
        key: SessionKey::parse(key)?,
        agent: AgentId::parse(AGENT)?,
    })
}

/// Rows of `table`, read with a plain read-only connection.
fn count_rows(db: &Path, table: &str) -> Result<u64> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
    Ok(n as u64)
}

// ---------------------------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------------------------

fn fmt_kb(kb: u64) -> String {
    if kb < 10 * 1024 {
        format!("{:.2} MiB", kb as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", kb as f64 / 1024.0)
    }
}

/// A tiny deterministic generator for picking streams.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}
