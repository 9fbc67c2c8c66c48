//! `aware bench`: throughput and latency of the engine against a raw rusqlite floor.
//!
//! Every workload runs twice in the same process with the same `synchronous` setting: once
//! through the engine (writer thread, savepoints, watcher selection, after-commit effects), once
//! as the "floor": the same row writes (or the same SELECT) with plain SQL on a plain WAL-mode
//! connection, on a fresh file whose schema was created by opening an `aware_store::SqliteStore`
//! on it first. The ratio is engine cost / floor cost, so `1.00x` means "as fast as raw SQL" and
//! `< 1` means faster than the floor. W3 reports engine / floor throughput instead: its floor is
//! the serial one-transaction-per-event rate that group commit exists to beat.
//!
//! Each target of issue 13 is printed under its workload with PASS/FAIL; `--json` (global)
//! writes every figure as a JSON report and `--compare A B` compares two reports.

use anyhow::{anyhow, bail, Context, Result};
use aware_core::{ActorType, AgentId, EventKind, SessionKey, SessionRef};
use aware_engine::{
    AppendOutcome, AppendRequest, CreateSession, Engine, EngineConfig, SystemClock,
};
use aware_store::{Durability, SqliteStore, StoreOptions};
use aware_store::{Store, StoreExt};
use rusqlite::{params, Connection};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Arguments of `aware bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Print a JSON report of every figure and target on stdout (the text goes to stderr), for
    /// `aware bench --compare A.json B.json`.
    #[arg(long)]
    pub json: bool,
    /// Events per append workload (W1, W2, W3); retained rows of W4 and W5; W6 sweeps
    /// events/5 pending cursors.
    #[arg(long, default_value_t = 50_000)]
    pub events: u64,
    /// Concurrent callers of W3.
    #[arg(long, default_value_t = 64)]
    pub writers: usize,
    /// `synchronous` of every workload. Default: normal, except full for W3.
    #[arg(long, value_enum)]
    pub durability: Option<BenchDurability>,
    /// Directory for the database files (a fresh temporary directory is made inside it and
    /// removed afterwards). Default: the system temporary directory.
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<PathBuf>,
    /// Run only these workloads, e.g. `--only W1,W3`.
    #[arg(long, value_delimiter = ',', value_name = "W1,W2,...")]
    pub only: Vec<String>,
    /// Divide every count by 10 (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Compare two reports written with `--json` (by `bench` or `bench-http`): prints B / A
    /// per figure and workload, and the targets whose verdict changed. Runs nothing.
    #[arg(long, num_args = 2, value_names = ["A.json", "B.json"])]
    pub compare: Vec<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchDurability {
    Full,
    Normal,
}

impl From<BenchDurability> for Durability {
    fn from(d: BenchDurability) -> Self {
        match d {
            BenchDurability::Full => Durability::Full,
            BenchDurability::Normal => Durability::Normal,
        }
    }
}

const ALL: [&str; 7] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"];
/// Sessions (streams) of W1, W3 and W5 before `--quick`.
const SESSIONS: u64 = 1000;
/// Watchers of the one target of W2.
const W2_WATCHERS: usize = 10;
/// Calls per listSince measurement before `--quick`.
const READ_CALLS: usize = 2000;
/// Rows of the hot stream of W4 (read with a 200-event page).
const W4_HOT_ROWS: u64 = 1000;
const SUMMARY: &str = "human message via bench";
const ACTOR: &str = "operator";
const AGENT: &str = "main";

struct Plan {
    scale: u64,
    events: u64,
    sessions: u64,
    writers: usize,
    durability: Option<Durability>,
    dir: PathBuf,
}

impl Plan {
    fn durability(&self, default: Durability) -> Durability {
        self.durability.unwrap_or(default)
    }
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Runs the selected workloads and prints one line per workload, then each target with
/// PASS/FAIL. With `json` (the global `--json`), the text goes to stderr and the report (every
/// figure and target) to stdout as JSON.
pub fn run(args: BenchArgs, json: bool) -> Result<()> {
    if !args.compare.is_empty() {
        return compare(&args.compare[0], &args.compare[1]);
    }
    let selected: Vec<&str> = if args.only.is_empty() {
        ALL.to_vec()
    } else {
        let mut v = Vec::new();
        for raw in &args.only {
            let up = raw.trim().to_ascii_uppercase();
            let Some(w) = ALL.iter().find(|w| **w == up) else {
                bail!("unknown workload {raw:?} in --only (expected some of W1,W2,W3,W4,W5,W6,W7)");
            };
            if !v.contains(w) {
                v.push(*w);
            }
        }
        v.sort_unstable();
        v
    };
    let scale = if args.quick { 10 } else { 1 };
    let events = (args.events / scale).max(1);
    if args.writers == 0 {
        bail!("--writers must be at least 1");
    }
    let tmp = match &args.data_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            tempfile::Builder::new()
                .prefix("aware-bench-")
                .tempdir_in(d)
        }
        None => tempfile::Builder::new().prefix("aware-bench-").tempdir(),
    }
    .context("creating the bench directory")?;
    let plan = Plan {
        scale,
        events,
        sessions: (SESSIONS / scale).max(1),
        writers: args.writers,
        durability: args.durability.map(Durability::from),
        dir: tmp.path().to_path_buf(),
    };

    let mut report = Report::new("engine", args.quick, json);
    report.say(&format!(
        "aware bench{}: events={} writers={} durability={} dir={}",
        if args.quick {
            " --quick (counts / 10)"
        } else {
            ""
        },
        fmt_int(plan.events),
        plan.writers,
        args.durability
            .map_or("default (normal; full for W3)", |d| match d {
                BenchDurability::Full => "full",
                BenchDurability::Normal => "normal",
            }),
        plan.dir.display()
    ));
    report.say(
        "Each workload runs through the engine and against a raw rusqlite floor in the same \
         process, same synchronous setting: the floor does the same row writes (or the same \
         SELECT) with plain SQL on a fresh WAL file with the same schema. `ratio` = engine cost / \
         floor cost (time per event, or latency): 1.00x = raw SQL speed, <1 = faster than the \
         floor. Each target of issue 13 is printed under its workload with PASS or FAIL.",
    );
    let started = Instant::now();
    for w in selected {
        let t = Instant::now();
        let outcome = match w {
            "W1" => w1(&plan),
            "W2" => w2(&plan),
            "W3" => w3(&plan),
            "W4" => w4(&plan),
            "W5" => w5(&plan),
            "W6" => w6(&plan),
            _ => w7(&plan).and_then(|o| {
                let (line, mb_s) = w7_oversized(&plan)?;
                let (codex_line, codex_mb_s) = w7_codex(&plan)?;
                let line = format!("{}\n{line}\n{codex_line}", o.line);
                Ok(Outcome { line, ..o }
                    .figure("oversized_check_mb_s", mb_s, "MB/s", Better::Higher)
                    .figure("codex_scan_mb_s", codex_mb_s, "MB/s", Better::Higher))
            }),
        }
        .with_context(|| format!("workload {w}"))?;
        report.add(outcome, t.elapsed().as_secs_f64());
    }
    drop(tmp);
    report.finish(started.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------------

/// W7: the Claude transcript scanner over ~100 MB built from the real fixtures vendored in
/// `crates/aware-upstream/tests/fixtures/claude-code` (synthetic rows if absent), in 1 MiB windows exactly
/// as the monitor reads them, next to a plain newline count over the same bytes.
fn w7(plan: &Plan) -> Result<Outcome> {
    use aware_upstream::scan::scan_window;
    let run = scan_run(
        plan,
        "claude-code",
        "the real fixtures",
        |i| {
            format!("{{\"type\":\"user\",\"uuid\":\"u{i}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"prompt {i}\"}}}}\n{{\"type\":\"assistant\",\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"answer {i}\"}}]}}}}\n")
        },
        |w, input| scan_window(w, input).map(|(n, out)| (n, out.human_turns)),
    )?;
    let (rate, floor_rate, ratio) = (run.rate(), run.floor_rate(), run.ratio());
    let line = format!("W7 Claude {}", run.describe());
    Ok(Outcome::new("W7", line)
        .figure("scan_mb_per_s", rate, "MB/s", Better::Higher)
        .figure("floor_mb_per_s", floor_rate, "MB/s", Better::Higher)
        .figure("ratio", ratio, "x", Better::Lower)
        .target("scan_mb_per_s", 1000.0))
}

/// One W7 scan: ~100 MB (scaled) built from the vendored fixtures of one tool, scanned in 1 MiB
/// windows exactly as the monitor reads them, next to a plain newline count over the same bytes.
struct ScanRun {
    mb: f64,
    source: &'static str,
    windows: u64,
    turns: u64,
    newlines: usize,
    secs: f64,
    floor_secs: f64,
}

impl ScanRun {
    fn rate(&self) -> f64 {
        self.mb / self.secs.max(1e-9)
    }
    fn floor_rate(&self) -> f64 {
        self.mb / self.floor_secs.max(1e-9)
    }
    fn ratio(&self) -> f64 {
        self.secs / self.floor_secs.max(1e-9)
    }
    fn describe(&self) -> String {
        format!(
            "window scan over {:.0} MB of {} ({} windows of <= 1 MiB, {} human turns, {} rows): {:.0} MB/s | floor newline count {:.0} MB/s | ratio {:.1}x",
            self.mb,
            self.source,
            self.windows,
            self.turns,
            self.newlines,
            self.rate(),
            self.floor_rate(),
            self.ratio()
        )
    }
}

/// Builds the corpus from `crates/aware-upstream/tests/fixtures/<fixtures>` (synthetic rows from
/// `synthetic` when the folder is absent) and runs `scan` over it window by window.
fn scan_run(
    plan: &Plan,
    fixtures: &str,
    real: &'static str,
    synthetic: impl Fn(usize) -> String,
    scan: impl Fn(&[u8], &aware_upstream::scan::ScanInput) -> Option<(usize, u32)>,
) -> Result<ScanRun> {
    use aware_upstream::scan::{ScanInput, WINDOW_BYTES};
    let target = (100u64 << 20) / plan.scale;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../aware-upstream/tests/fixtures")
        .join(fixtures);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "jsonl"));
    files.sort();
    let mut corpus: Vec<u8> = Vec::new();
    for f in files {
        let mut bytes = std::fs::read(&f)?;
        if !bytes.ends_with(b"\n") {
            bytes.push(b'\n');
        }
        corpus.extend_from_slice(&bytes);
    }
    let source = if corpus.is_empty() {
        for i in 0..2000 {
            corpus.extend_from_slice(synthetic(i).as_bytes());
        }
        "synthetic rows"
    } else {
        real
    };
    let mut buf = Vec::with_capacity(target as usize + corpus.len());
    while (buf.len() as u64) < target {
        buf.extend_from_slice(&corpus);
    }
    let mb = buf.len() as f64 / (1u64 << 20) as f64;
    let t = Instant::now();
    let newlines = buf.iter().filter(|b| **b == b'\n').count();
    let floor_secs = t.elapsed().as_secs_f64();
    let input = ScanInput {
        own_recent_user_texts: &[],
        queued: &[],
        fallback_time_ms: 0,
    };
    let t = Instant::now();
    let (mut offset, mut turns, mut windows) = (0usize, 0u64, 0u64);
    while offset < buf.len() {
        let end = (offset + WINDOW_BYTES).min(buf.len());
        let Some((consumed, human)) = buf.get(offset..end).and_then(|w| scan(w, &input)) else {
            break;
        };
        offset += consumed;
        turns += u64::from(human);
        windows += 1;
    }
    Ok(ScanRun {
        mb,
        source,
        windows,
        turns,
        newlines,
        secs: t.elapsed().as_secs_f64(),
        floor_secs,
    })
}

/// W7, Codex: the Codex rollout scan (`scan_codex_window`) over ~100 MB built from the real
/// rollouts vendored in `crates/aware-upstream/tests/fixtures/codex` (synthetic rows when
/// absent), in 1 MiB windows as the monitor reads them, next to a plain newline count over the
/// same bytes.
fn w7_codex(plan: &Plan) -> Result<(String, f64)> {
    use aware_upstream::codex::scan::scan_codex_window;
    let run = scan_run(
        plan,
        "codex",
        "the real rollouts",
        |i| {
            format!("{{\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"prompt {i}\"}}]}}}}\n{{\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"prompt {i}\"}}}}\n")
        },
        |w, input| scan_codex_window(w, input).map(|(n, out)| (n, out.human_turns)),
    )?;
    Ok((format!("W7 Codex {}", run.describe()), run.rate()))
}

/// W1: appends round-robin over `sessions` children, each watched by its parent; one caller.
fn w1(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let n = plan.events;
    let engine = open_engine(&plan.file("w1-engine.db"), durability, None)?;
    let pairs = create_pairs(&engine, plan.sessions)?;
    let conn = floor_conn(&plan.file("w1-floor.db"), durability)?;
    let mut streams: Vec<FloorStream> = (0..plan.sessions)
        .map(|i| {
            FloorStream::new(
                &format!("agent:main:c{i}"),
                vec![format!("agent:main:p{i}")],
            )
        })
        .collect();
    seed_cursors(&conn, &streams)?;
    let (engine_secs, floor_secs) = interleaved(
        n,
        |i| {
            let (child, parent) = &pairs[(i % plan.sessions) as usize];
            append_hdm(&engine, child, vec![parent.clone()])
        },
        |i| floor_append(&conn, &mut streams[(i % plan.sessions) as usize], true),
    )?;
    // Fixed cost of one writer op: an empty op through the writer thread (two thread hand-offs,
    // BEGIN IMMEDIATE, SAVEPOINT, RELEASE, COMMIT) against an empty BEGIN IMMEDIATE/COMMIT.
    let calls = (READ_CALLS / plan.scale as usize).max(50);
    let (mut e_noop, mut f_noop) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for _ in 0..calls {
        let t = Instant::now();
        engine
            .store()
            .write(|_tx| Ok(()))
            .map_err(|e| anyhow!("{e}"))?;
        e_noop.push(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE; COMMIT")?;
        f_noop.push(t.elapsed().as_nanos() as u64);
    }
    let ((e_noop, _), (f_noop, _)) = (percentiles(&mut e_noop), percentiles(&mut f_noop));
    engine.close();
    drop(engine);
    let (eng_rate, floor_rate) = (n as f64 / engine_secs, n as f64 / floor_secs);
    let ratio = engine_secs / floor_secs;
    let line = format!(
        "W1 Engine::append human_direct_message (actor human/operator, watcher = parent), {} \
         sessions x 1 watcher, 1 caller [{}]: {} ev {} ev/s | floor {} ev/s (1 tx/event: event \
         insert + head upsert + cursor upsert) | ratio {:.2}x | empty writer op p50 {} vs empty \
         BEGIN IMMEDIATE/COMMIT p50 {}",
        fmt_int(plan.sessions),
        durability.as_str(),
        fmt_int(n),
        fmt_int(eng_rate as u64),
        fmt_int(floor_rate as u64),
        ratio,
        fmt_dur(e_noop),
        fmt_dur(f_noop),
    );
    Ok(Outcome::new("W1", line)
        .figure("engine_ev_per_s", eng_rate, "ev/s", Better::Higher)
        .figure("floor_ev_per_s", floor_rate, "ev/s", Better::Higher)
        .figure("ratio", ratio, "x", Better::Lower)
        .figure(
            "empty_writer_op_p50",
            e_noop as f64 / 1e3,
            "us",
            Better::Lower,
        )
        .figure("empty_tx_p50", f_noop as f64 / 1e3, "us", Better::Lower)
        .target("ratio", 1.3))
}

/// Runs `n` engine steps and `n` floor steps in alternating chunks (so a noisy neighbour hits
/// both alike); returns the seconds spent in each.
fn interleaved(
    n: u64,
    mut engine_step: impl FnMut(u64) -> Result<()>,
    mut floor_step: impl FnMut(u64) -> Result<()>,
) -> Result<(f64, f64)> {
    const CHUNK: u64 = 500;
    let (mut e, mut f) = (Duration::ZERO, Duration::ZERO);
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        let t = Instant::now();
        for j in i..end {
            engine_step(j)?;
        }
        e += t.elapsed();
        let t = Instant::now();
        for j in i..end {
            floor_step(j)?;
        }
        f += t.elapsed();
        i = end;
    }
    Ok((e.as_secs_f64(), f.as_secs_f64()))
}

/// W2: appends on one target watched by 10 registered watchers; one caller.
fn w2(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let n = plan.events;
    let engine = open_engine(&plan.file("w2-engine.db"), durability, None)?;
    let target = session_ref("agent:main:target")?;
    create(&engine, &target, None)?;
    let mut watcher_keys = Vec::new();
    for j in 0..W2_WATCHERS {
        let w = session_ref(&format!("agent:main:w{j}"))?;
        create(&engine, &w, None)?;
        engine.register_watch(&w, &target)?;
        watcher_keys.push(w.key.as_str().to_string());
    }
    let conn = floor_conn(&plan.file("w2-floor.db"), durability)?;
    let mut stream = FloorStream::new("agent:main:target", watcher_keys);
    seed_cursors(&conn, std::slice::from_ref(&stream))?;
    let (engine_secs, floor_secs) = interleaved(
        n,
        |_| append_hdm(&engine, &target, Vec::new()),
        |_| floor_append(&conn, &mut stream, true),
    )?;
    let cursors = engine.watchers(&target)?;
    if cursors.len() != W2_WATCHERS || cursors.iter().any(|c| c.state.material <= 0) {
        bail!("W2: the {W2_WATCHERS} cursors were not all advanced");
    }
    engine.close();
    drop(engine);
    let (eng_rate, floor_rate) = (n as f64 / engine_secs, n as f64 / floor_secs);
    let line = format!(
        "W2 Engine::append human_direct_message on 1 target x {W2_WATCHERS} registered watchers, 1 \
         caller [{}]: {} ev {} ev/s | floor {} ev/s (1 tx/event: insert + head + {W2_WATCHERS} \
         cursor upserts) | ratio {:.2}x",
        durability.as_str(),
        fmt_int(n),
        fmt_int(eng_rate as u64),
        fmt_int(floor_rate as u64),
        engine_secs / floor_secs
    );
    Ok(Outcome::new("W2", line)
        .figure("engine_ev_per_s", eng_rate, "ev/s", Better::Higher)
        .figure("floor_ev_per_s", floor_rate, "ev/s", Better::Higher)
        .figure("ratio", engine_secs / floor_secs, "x", Better::Lower)
        .target("ratio", 1.3))
}

/// W3: `writers` concurrent callers. The engine group-commits; the floor is the same callers
/// sharing one connection behind a mutex, one `BEGIN IMMEDIATE` ... `COMMIT` (one fsync at
/// `full`) per event: the serial one-transaction-per-event rate, with no busy-handler sleeps
/// (64 connections contending with `busy_timeout` mostly measured SQLite's back-off). The two
/// run interleaved in rounds so a noisy neighbour hits both alike.
fn w3(plan: &Plan) -> Result<Outcome> {
    const ROUNDS: usize = 10;
    let durability = plan.durability(Durability::Full);
    let n = plan.events;
    let writers = plan.writers;
    let sessions = plan.sessions.max(writers as u64);
    let engine = open_engine(&plan.file("w3-engine.db"), durability, None)?;
    let pairs = Arc::new(create_pairs_concurrent(&engine, sessions, writers)?);
    let floor_path = plan.file("w3-floor.db");
    let streams: Vec<FloorStream> = (0..sessions)
        .map(|i| {
            FloorStream::new(
                &format!("agent:main:c{i}"),
                vec![format!("agent:main:p{i}")],
            )
        })
        .collect();
    let conn = floor_conn(&floor_path, durability)?;
    seed_cursors(&conn, &streams)?;
    let floor = Arc::new(std::sync::Mutex::new((conn, streams)));
    // Caller t uses the sessions congruent to t modulo `writers`, in both runs.
    let pick = move |t: usize, i: u64, len: usize| {
        let per = (len - t).div_ceil(writers);
        t + writers * (i as usize % per)
    };
    let engine_step: Step = {
        let (engine, pairs) = (engine.clone(), pairs.clone());
        Arc::new(move |t, i| {
            let (child, parent) = &pairs[pick(t, i, pairs.len())];
            append_hdm(&engine, child, vec![parent.clone()])
        })
    };
    let floor_step: Step = {
        let floor = floor.clone();
        Arc::new(move |t, i| {
            let mut guard = floor
                .lock()
                .map_err(|_| anyhow!("the floor connection's mutex is poisoned"))?;
            let (conn, streams) = &mut *guard;
            let k = pick(t, i, streams.len());
            floor_append(conn, &mut streams[k], true)
        })
    };
    // The floor is slow (one fsync per event at full): it stops at a time cap per round.
    let cap = Duration::from_secs(if plan.scale > 1 { 3 } else { 20 });
    let round_cap = cap / ROUNDS as u32;
    let (ops0, commits0) = (
        engine.store().metrics().ops(),
        engine.store().metrics().commits(),
    );
    let (mut engine_secs, mut floor_secs) = (0.0, 0.0);
    let (mut e_lat, mut f_lat) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        let chunk = share(n, ROUNDS, r);
        let (secs, lat) = callers(writers, chunk, None, &engine_step)?;
        engine_secs += secs;
        e_lat.extend(lat);
        let (secs, lat) = callers(writers, chunk, Some(round_cap), &floor_step)?;
        floor_secs += secs;
        f_lat.extend(lat);
    }
    let m = engine.store().metrics();
    let (ops, commits) = (m.ops() - ops0, m.commits() - commits0);
    let max_group = m.max_group();
    drop(engine_step);
    engine.close();
    drop(engine);
    let floor_n = f_lat.len() as u64;
    let (e50, e99) = percentiles(&mut e_lat);
    let (f50, f99) = percentiles(&mut f_lat);
    let (eng_rate, floor_rate) = (n as f64 / engine_secs, floor_n as f64 / floor_secs);
    let line = format!(
        "W3 {writers} concurrent callers of Engine::append, group commit [{}]: {} ev {} ev/s, \
         append p50 {} p99 {}, mean group {:.1} ops/commit ({} commits, max group {}) | floor: \
         the same {writers} callers share one connection behind a mutex, one BEGIN IMMEDIATE/\
         COMMIT per event (one fsync each at full, no group commit): {} ev/s p50 {} p99 {} ({} \
         ev{}) | engine/floor throughput {:.2}x, latency p50 {:.2}x; interleaved in {ROUNDS} \
         rounds",
        durability.as_str(),
        fmt_int(n),
        fmt_int(eng_rate as u64),
        fmt_dur(e50),
        fmt_dur(e99),
        ops as f64 / commits.max(1) as f64,
        fmt_int(commits),
        max_group,
        fmt_int(floor_rate as u64),
        fmt_dur(f50),
        fmt_dur(f99),
        fmt_int(floor_n),
        if floor_n < n {
            format!(", {} s cap per round", round_cap.as_secs_f64())
        } else {
            String::new()
        },
        eng_rate / floor_rate.max(f64::MIN_POSITIVE),
        e50 as f64 / f50.max(1) as f64,
    );
    Ok(Outcome::new("W3", line)
        .figure("engine_ev_per_s", eng_rate, "ev/s", Better::Higher)
        .figure("engine_p50", e50 as f64 / 1e3, "us", Better::Lower)
        .figure("engine_p99", e99 as f64 / 1e3, "us", Better::Lower)
        .figure(
            "ops_per_commit",
            ops as f64 / commits.max(1) as f64,
            "ops",
            Better::Higher,
        )
        .figure("floor_ev_per_s", floor_rate, "ev/s", Better::Higher)
        .figure("floor_p50", f50 as f64 / 1e3, "us", Better::Lower)
        .figure(
            "engine_over_floor",
            eng_rate / floor_rate.max(f64::MIN_POSITIVE),
            "x",
            Better::Higher,
        )
        .target("engine_ev_per_s", 25_000.0))
}

/// One step of a caller: (caller index, step index).
type Step = Arc<dyn Fn(usize, u64) -> Result<()> + Send + Sync>;

/// `writers` threads run `count` steps between them (started together); with `cap`, they stop
/// once it has passed. Returns the wall time and each step's latency (ns).
fn callers(
    writers: usize,
    count: u64,
    cap: Option<Duration>,
    step: &Step,
) -> Result<(f64, Vec<u64>)> {
    let barrier = Arc::new(Barrier::new(writers + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<Worker<u64>> = (0..writers)
        .map(|t| {
            let (barrier, stop, step) = (barrier.clone(), stop.clone(), step.clone());
            let mine = share(count, writers, t);
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(mine as usize);
                barrier.wait();
                for i in 0..mine {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let s = Instant::now();
                    step(t, i)?;
                    lat.push(s.elapsed().as_nanos() as u64);
                }
                Ok(lat)
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    let stopper = cap.map(|cap| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + cap;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
        })
    });
    let lat = join_all(handles);
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = stopper {
        let _ = h.join();
    }
    Ok((secs, lat?))
}

/// W4: listSince pages at `events` retained rows: a 50-event page of one of ~1,000 streams
/// (50 events each) and a 200-event page of one hot stream (1,000 events).
fn w4(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let total = plan.events.max(W4_HOT_ROWS + 50);
    let small_rows = total - W4_HOT_ROWS;
    let streams = (small_rows / 50).max(1);
    let stride = total / W4_HOT_ROWS;
    let mut keys: Vec<String> = (0..streams).map(|i| format!("agent:main:s{i}")).collect();
    keys.push("agent:main:hot".into());
    let hot = streams as usize;
    let mut order = Vec::with_capacity(total as usize);
    let (mut hot_n, mut k) = (0u64, 0u64);
    for r in 0..total {
        if r % stride == 0 && hot_n < W4_HOT_ROWS {
            order.push(hot);
            hot_n += 1;
        } else {
            order.push((k % streams) as usize);
            k += 1;
        }
    }
    let path = plan.file("w4.db");
    {
        let conn = floor_conn(&path, durability)?;
        fill_events(&conn, &keys, &order)?;
    }
    let engine = open_engine(&path, durability, None)?;
    let refs: Vec<SessionRef> = keys.iter().map(|k| session_ref(k)).collect::<Result<_>>()?;
    let calls = (READ_CALLS / plan.scale as usize).max(50);
    let floor = Connection::open(&path)?;
    floor.execute_batch(&format!("PRAGMA synchronous={}", sync_pragma(durability)))?;
    let mut stmt = floor.prepare(
        "SELECT sequence, dedupe_key, session_key, session_id, agent_id, kind, actor_type, \
         actor_id, run_id, occurred_at, summary, payload_json FROM session_state_events \
         WHERE session_key = ?1 AND agent_id = ?2 AND sequence > ?3 ORDER BY sequence LIMIT ?4",
    )?;
    type FloorRow = (
        i64,
        Option<String>,
        String,
        Option<String>,
        String,
        String,
        String,
        Option<String>,
        Option<String>,
        i64,
        String,
        Option<String>,
    );
    let mut floor_page = |key: &str, limit: u32| -> Result<usize> {
        let rows = stmt
            .query_map(params![key, AGENT, 0i64, i64::from(limit) + 1], |r| {
                Ok::<FloorRow, _>((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                    r.get(11)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows.len().min(limit as usize))
    };
    let mut rng = Lcg(0x5eed);
    let mut measure = |limit: u32, pick: &mut dyn FnMut() -> usize| -> Result<[u64; 4]> {
        let (mut eng, mut flo) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
        for round in 0..calls + calls / 10 {
            let i = pick();
            let engine_call = || -> Result<u64> {
                let s = Instant::now();
                let page = engine.list_since(&refs[i], 0, limit)?;
                let e = s.elapsed().as_nanos() as u64;
                if page.events.len() != limit as usize {
                    bail!(
                        "listSince returned {} events, expected {limit}",
                        page.events.len()
                    );
                }
                Ok(e)
            };
            let mut floor_call = || -> Result<u64> {
                let s = Instant::now();
                let got = floor_page(&keys[i], limit)?;
                let f = s.elapsed().as_nanos() as u64;
                if got != limit as usize {
                    bail!("floor page returned {got} rows, expected {limit}");
                }
                Ok(f)
            };
            // Alternate who reads the stream first, so neither always finds it warm.
            let (e, f) = if round % 2 == 0 {
                let e = engine_call()?;
                (e, floor_call()?)
            } else {
                let f = floor_call()?;
                (engine_call()?, f)
            };
            // The first 10% are warm-up.
            if round >= calls / 10 {
                eng.push(e);
                flo.push(f);
            }
        }
        let (e50, e99) = percentiles(&mut eng);
        let (f50, f99) = percentiles(&mut flo);
        Ok([e50, e99, f50, f99])
    };
    let small = measure(50, &mut || (rng.next() % streams) as usize)?;
    let big = measure(200, &mut || hot)?;
    engine.close();
    let line = format!(
        "W4 Engine::list_since at {} rows [{}], {calls} calls each: 50-event page of 1 of {} \
         streams p50 {} p99 {} | floor p50 {} p99 {} | ratio p50 {:.2}x p99 {:.2}x; 200-event \
         page of 1 stream p50 {} p99 {} | floor p50 {} p99 {} | ratio p50 {:.2}x p99 {:.2}x \
         (floor: the events SELECT, prepared, on a plain connection; engine adds head + earliest \
         lookups, BEGIN/COMMIT and conversion)",
        fmt_int(total),
        durability.as_str(),
        fmt_int(streams),
        fmt_dur(small[0]),
        fmt_dur(small[1]),
        fmt_dur(small[2]),
        fmt_dur(small[3]),
        small[0] as f64 / small[2].max(1) as f64,
        small[1] as f64 / small[3].max(1) as f64,
        fmt_dur(big[0]),
        fmt_dur(big[1]),
        fmt_dur(big[2]),
        fmt_dur(big[3]),
        big[0] as f64 / big[2].max(1) as f64,
        big[1] as f64 / big[3].max(1) as f64,
    );
    let us = |ns: u64| ns as f64 / 1e3;
    Ok(Outcome::new("W4", line)
        .figure("page50_p50", us(small[0]), "us", Better::Lower)
        .figure("page50_p99", us(small[1]), "us", Better::Lower)
        .figure("page50_floor_p50", us(small[2]), "us", Better::Lower)
        .figure(
            "page50_ratio_p50",
            small[0] as f64 / small[2].max(1) as f64,
            "x",
            Better::Lower,
        )
        .figure("page200_p50", us(big[0]), "us", Better::Lower)
        .figure("page200_p99", us(big[1]), "us", Better::Lower)
        .figure("page200_floor_p50", us(big[2]), "us", Better::Lower)
        .figure(
            "page200_ratio_p50",
            big[0] as f64 / big[2].max(1) as f64,
            "x",
            Better::Lower,
        )
        .target("page50_ratio_p50", 1.3)
        .target("page200_ratio_p50", 1.3))
}

/// W5: one prune pass from 1.2 x `events` rows down to the row cap `events`.
fn w5(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let cap = plan.events;
    let total = cap + cap / 5;
    let keys: Vec<String> = (0..plan.sessions)
        .map(|i| format!("agent:main:c{i}"))
        .collect();
    let order: Vec<usize> = (0..total).map(|r| (r % plan.sessions) as usize).collect();
    // Engine: rows written raw, then the engine opened with max_rows = cap.
    let path = plan.file("w5-engine.db");
    fill_events(&floor_conn(&path, durability)?, &keys, &order)?;
    let engine = open_engine(&path, durability, Some(cap))?;
    // The cap loop asks `event_count()` (a COUNT(*)) once per batch; time one at full size.
    let mut counts = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        engine
            .store()
            .read(|r| r.event_count())
            .map_err(|e| anyhow!("{e}"))?;
        counts.push(t.elapsed().as_nanos() as u64);
    }
    let (count_ns, _) = percentiles(&mut counts);
    let m = engine.store().metrics();
    let (commits0, us0) = (m.commits(), m.commit_us_sum.load(Ordering::Relaxed));
    let watch = CommitWatch::start(engine.store().clone());
    let t = Instant::now();
    let report = engine
        .prune_pass()
        .ok_or_else(|| anyhow!("prune pass skipped"))?;
    let engine_secs = t.elapsed().as_secs_f64();
    let per_commit = watch.finish();
    let m = engine.store().metrics();
    let commits = m.commits() - commits0;
    let us = m.commit_us_sum.load(Ordering::Relaxed) - us0;
    let hist_max = hist_max_bound(m);
    let left = engine
        .store()
        .read(|r| r.event_count())
        .map_err(|e| anyhow!("{e}"))?;
    engine.close();
    drop(engine);
    if left != cap {
        bail!("prune left {left} rows, expected {cap}");
    }
    // Floor: the same batches (victims SELECT, head watermark UPDATEs, per-row DELETEs).
    // Filled through one connection, pruned through a fresh one (cold cache, like the engine).
    let fpath = plan.file("w5-floor.db");
    fill_events(&floor_conn(&fpath, durability)?, &keys, &order)?;
    let conn = floor_conn(&fpath, durability)?;
    let t = Instant::now();
    let (batches, longest) = floor_prune(&conn, cap, 1000)?;
    let floor_secs = t.elapsed().as_secs_f64();
    let line = format!(
        "W5 Engine::prune_pass {} -> {} rows [{}]: {} in {} batches, {} commits ({} in txns), \
         longest txn {} (watched per commit; histogram bucket <= {}; COUNT(*) at {} rows takes \
         {}, once per batch) | floor {} in {batches} batches, longest batch {} | ratio {:.2}x",
        fmt_int(total),
        fmt_int(cap),
        durability.as_str(),
        fmt_dur((engine_secs * 1e9) as u64),
        report.batches,
        commits,
        fmt_dur(us * 1000),
        per_commit.describe_max(commits),
        hist_max.map_or("-".into(), |b| fmt_dur(b * 1000)),
        fmt_int(total),
        fmt_dur(count_ns),
        fmt_dur((floor_secs * 1e9) as u64),
        fmt_dur(longest),
        engine_secs / floor_secs
    );
    Ok(Outcome::new("W5", line)
        .figure("prune_ms", engine_secs * 1e3, "ms", Better::Lower)
        .figure(
            "longest_txn_ms",
            per_commit.max_us() as f64 / 1e3,
            "ms",
            Better::Lower,
        )
        .figure("floor_ms", floor_secs * 1e3, "ms", Better::Lower)
        .figure(
            "floor_longest_batch_ms",
            longest as f64 / 1e6,
            "ms",
            Better::Lower,
        )
        .figure("ratio", engine_secs / floor_secs, "x", Better::Lower)
        .target("longest_txn_ms", 10.0))
}

/// W6: restart sweep over `events / 5` pending cursors, one distinct watcher each.
fn w6(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let pending = (plan.events / 5).max(1);
    let path = plan.file("w6-engine.db");
    fill_pending(&floor_conn(&path, durability)?, pending)?;
    // "Reopen": the engine opens the file the previous process left.
    let engine = open_engine(&path, durability, None)?;
    let m = engine.store().metrics();
    let (commits0, us0) = (m.commits(), m.commit_us_sum.load(Ordering::Relaxed));
    let watch = CommitWatch::start(engine.store().clone());
    let t = Instant::now();
    let report = engine.restart_sweep()?;
    let engine_secs = t.elapsed().as_secs_f64();
    let per_commit = watch.finish();
    let m = engine.store().metrics();
    let commits = m.commits() - commits0;
    let tx_us = m.commit_us_sum.load(Ordering::Relaxed) - us0;
    let wakes = engine.metrics().wakes_delivered.load(Ordering::Relaxed);
    engine.close();
    drop(engine);
    if report.cursors != pending {
        bail!(
            "sweep re-froze {} cursors, expected {pending}",
            report.cursors
        );
    }
    let fpath = plan.file("w6-floor.db");
    fill_pending(&floor_conn(&fpath, durability)?, pending)?;
    let conn = floor_conn(&fpath, durability)?;
    let t = Instant::now();
    let (swept, watchers) = floor_sweep(&conn, 1000)?;
    let floor_secs = t.elapsed().as_secs_f64();
    if swept != pending || watchers != report.watchers.len() {
        bail!("floor sweep found {swept} cursors / {watchers} watchers");
    }
    let total_ns = (engine_secs * 1e9) as u64;
    let line = format!(
        "W6 Engine::restart_sweep of {} pending cursors ({} watchers) [{}]: {} total ({} commits, \
         {} in txns, longest txn {}; {} outside txns: watcher dedupe + {} wakes) | floor {} \
         (same SELECT/UPDATE batches of 1000, no wakes) | ratio {:.2}x",
        fmt_int(pending),
        fmt_int(report.watchers.len() as u64),
        durability.as_str(),
        fmt_dur(total_ns),
        commits,
        fmt_dur(tx_us * 1000),
        per_commit.describe_max(commits),
        fmt_dur(total_ns.saturating_sub(tx_us * 1000)),
        fmt_int(wakes),
        fmt_dur((floor_secs * 1e9) as u64),
        engine_secs / floor_secs
    );
    Ok(Outcome::new("W6", line)
        .figure("sweep_ms", engine_secs * 1e3, "ms", Better::Lower)
        .figure("floor_ms", floor_secs * 1e3, "ms", Better::Lower)
        .figure("ratio", engine_secs / floor_secs, "x", Better::Lower)
        .target("ratio", 2.0))
}

// ---------------------------------------------------------------------------------------------
// Engine helpers
// ---------------------------------------------------------------------------------------------

fn open_engine(path: &Path, durability: Durability, max_rows: Option<u64>) -> Result<Engine> {
    let mut config = EngineConfig::new(path);
    config.durability = durability;
    if let Some(max_rows) = max_rows {
        config.retention.max_rows = max_rows;
    }
    Ok(Engine::open(config, Arc::new(SystemClock))?)
}

fn session_ref(key: &str) -> Result<SessionRef> {
    Ok(SessionRef {
        key: SessionKey::parse(key)?,
        agent: AgentId::parse(AGENT)?,
    })
}

fn create(engine: &Engine, s: &SessionRef, parent: Option<&SessionRef>) -> Result<()> {
    let mut req = CreateSession::new(s.key.clone());
    if let Some(p) = parent {
        req = req.parent(p.key.clone());
    }
    engine.create_session(req)?;
    Ok(())
}

/// A thread returning its samples.
pub(crate) type Worker<T> = JoinHandle<Result<Vec<T>>>;

/// A child session and the key of its parent (its watcher).
type Pair = (SessionRef, String);

/// `n` parent/child pairs; the child's `child_spawned` event seeds the parent's cursor.
fn create_pairs(engine: &Engine, n: u64) -> Result<Vec<Pair>> {
    (0..n)
        .map(|i| {
            let parent = session_ref(&format!("agent:main:p{i}"))?;
            let child = session_ref(&format!("agent:main:c{i}"))?;
            create(engine, &parent, None)?;
            create(engine, &child, Some(&parent))?;
            Ok((child, parent.key.as_str().to_string()))
        })
        .collect()
}

/// Like [`create_pairs`], from `threads` threads so setup at `full` rides on group commit.
fn create_pairs_concurrent(engine: &Engine, n: u64, threads: usize) -> Result<Vec<Pair>> {
    let threads = threads.clamp(1, 16);
    let handles: Vec<Worker<(u64, Pair)>> = (0..threads)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in (t as u64..n).step_by(threads) {
                    let parent = session_ref(&format!("agent:main:p{i}"))?;
                    let child = session_ref(&format!("agent:main:c{i}"))?;
                    create(&engine, &parent, None)?;
                    create(&engine, &child, Some(&parent))?;
                    out.push((i, (child, parent.key.as_str().to_string())));
                }
                Ok(out)
            })
        })
        .collect();
    let mut all = join_all(handles)?;
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, p)| p).collect())
}

/// One `human_direct_message` from an operator, with the given producer-passed watchers.
fn append_hdm(engine: &Engine, target: &SessionRef, watchers: Vec<String>) -> Result<()> {
    let mut req = AppendRequest::new(
        target.clone(),
        EventKind::HumanDirectMessage,
        ActorType::Human,
    );
    req.actor_id = Some(ACTOR.into());
    req.summary = SUMMARY.into();
    req.watchers = watchers;
    match engine.append(req)? {
        AppendOutcome::Recorded(_) => Ok(()),
        other => bail!("append not recorded: {other:?}"),
    }
}

/// Records the duration of every commit by polling the writer's `commit_us_sum` (each change is
/// one commit when commits are further apart than the poll interval).
struct CommitWatch {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<u64>>,
}

struct CommitTimes(Vec<u64>);

impl CommitWatch {
    fn start(store: std::sync::Arc<dyn aware_store::Store>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sum = |s: &std::sync::Arc<dyn aware_store::Store>| {
            s.metrics().commit_us_sum.load(Ordering::Relaxed)
        };
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

    fn finish(self) -> CommitTimes {
        self.stop.store(true, Ordering::Relaxed);
        CommitTimes(self.handle.join().unwrap_or_default())
    }
}

impl CommitTimes {
    fn max_us(&self) -> u64 {
        self.0.iter().copied().max().unwrap_or(0)
    }

    fn describe_max(&self, commits: u64) -> String {
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
fn hist_max_bound(m: &aware_store::StoreMetrics) -> Option<u64> {
    let bounds = [100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 1_000_000];
    m.commit_us_buckets
        .iter()
        .zip(bounds)
        .rev()
        .find(|(b, _)| b.load(Ordering::Relaxed) > 0)
        .map(|(_, bound)| bound)
}

// ---------------------------------------------------------------------------------------------
// Floor helpers (plain rusqlite)
// ---------------------------------------------------------------------------------------------

fn sync_pragma(d: Durability) -> &'static str {
    match d {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    }
}

/// A plain connection on `path`; the schema is created first by opening (and closing) an
/// `aware_store::SqliteStore` on it.
fn floor_conn(path: &Path, durability: Durability) -> Result<Connection> {
    if !path.exists() {
        let store = SqliteStore::open(StoreOptions::new(path).durability(durability))?;
        store.close();
        drop(store);
    }
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        bail!("floor: journal mode {mode}, expected wal");
    }
    conn.execute_batch(&format!(
        "PRAGMA synchronous={}; PRAGMA temp_store=MEMORY;",
        sync_pragma(durability)
    ))?;
    Ok(conn)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One target stream of the floor and the cursors its appends update.
struct FloorStream {
    key: String,
    /// `(watcher, last_seen, notified, notice_opened_at, created_at)`.
    cursors: Vec<(String, i64, i64, Option<i64>, i64)>,
}

impl FloorStream {
    fn new(key: &str, watchers: Vec<String>) -> Self {
        let now = now_ms();
        FloorStream {
            key: key.to_string(),
            cursors: watchers.into_iter().map(|w| (w, 0, 0, None, now)).collect(),
        }
    }
}

const INSERT_EVENT: &str = "INSERT INTO session_state_events (dedupe_key, session_key, \
     session_id, agent_id, kind, actor_type, actor_id, run_id, occurred_at, summary, payload_json) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
const UPSERT_HEAD: &str = "INSERT INTO session_state_heads (session_key, agent_id, \
     last_sequence, pruned_max_sequence, updated_at) VALUES (?1, ?2, ?3, 0, ?4) \
     ON CONFLICT (session_key, agent_id) DO UPDATE SET \
     last_sequence = MAX(last_sequence, excluded.last_sequence), updated_at = excluded.updated_at";
const UPSERT_CURSOR: &str = "INSERT INTO session_watch_cursors (watcher_session_key, \
     target_session_key, target_agent_id, last_seen_sequence, notified_sequence, \
     material_sequence, muted, origin, notice_opened_at, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
     ON CONFLICT (watcher_session_key, target_session_key, target_agent_id) DO UPDATE SET \
     last_seen_sequence = excluded.last_seen_sequence, notified_sequence = excluded.notified_sequence, \
     material_sequence = excluded.material_sequence, muted = excluded.muted, origin = excluded.origin, \
     notice_opened_at = excluded.notice_opened_at, updated_at = excluded.updated_at";

fn seed_cursors(conn: &Connection, streams: &[FloorStream]) -> Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    {
        let mut stmt = conn.prepare_cached(UPSERT_CURSOR)?;
        for s in streams {
            for (w, ls, nt, opened, created) in &s.cursors {
                stmt.execute(params![
                    w, s.key, AGENT, ls, nt, nt, 0i64, "parent", opened, created, created
                ])?;
            }
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// The row writes of one append: event insert, head upsert, one cursor upsert per watcher;
/// in its own transaction when `own_tx`.
fn floor_append(conn: &Connection, s: &mut FloorStream, own_tx: bool) -> Result<()> {
    let now = now_ms();
    if own_tx {
        conn.execute_batch("BEGIN IMMEDIATE")?;
    }
    let result = (|| -> Result<()> {
        conn.prepare_cached(INSERT_EVENT)?.execute(params![
            None::<String>,
            s.key,
            None::<String>,
            AGENT,
            EventKind::HumanDirectMessage.as_str(),
            ActorType::Human.as_str(),
            ACTOR,
            None::<String>,
            now,
            SUMMARY,
            None::<String>
        ])?;
        let seq = conn.last_insert_rowid();
        conn.prepare_cached(UPSERT_HEAD)?
            .execute(params![s.key, AGENT, seq, now])?;
        let mut stmt = conn.prepare_cached(UPSERT_CURSOR)?;
        for (w, last_seen, notified, opened, created) in &mut s.cursors {
            if *notified == *last_seen {
                *notified = seq;
                *opened = Some(now);
            }
            stmt.execute(params![
                *w, s.key, AGENT, *last_seen, *notified, seq, 0i64, "parent", *opened, *created,
                now
            ])?;
        }
        Ok(())
    })();
    if own_tx {
        match &result {
            Ok(()) => conn.execute_batch("COMMIT")?,
            Err(_) => {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
    }
    result
}

/// Inserts events (stream `keys[order[r]]` for row r) and their heads in one transaction.
fn fill_events(conn: &Connection, keys: &[String], order: &[usize]) -> Result<()> {
    let now = now_ms();
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let mut heads: HashMap<usize, i64> = HashMap::new();
    {
        let mut stmt = conn.prepare_cached(INSERT_EVENT)?;
        for &i in order {
            stmt.execute(params![
                None::<String>,
                keys[i],
                None::<String>,
                AGENT,
                EventKind::HumanDirectMessage.as_str(),
                ActorType::Human.as_str(),
                ACTOR,
                None::<String>,
                now,
                SUMMARY,
                None::<String>
            ])?;
            heads.insert(i, conn.last_insert_rowid());
        }
        let mut stmt = conn.prepare_cached(UPSERT_HEAD)?;
        for (i, seq) in heads {
            stmt.execute(params![keys[i], AGENT, seq, now])?;
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// `n` watcher sessions, `n` target sessions (children of their watcher) and one pending
/// cursor per pair.
fn fill_pending(conn: &Connection, n: u64) -> Result<()> {
    let now = now_ms();
    conn.execute_batch("BEGIN IMMEDIATE")?;
    {
        let mut session = conn.prepare_cached(
            "INSERT INTO sessions (session_key, agent_id, session_id, kind, label, \
             parent_session_key, created_via, active_run_id, goal_text, goal_status, \
             goal_updated_at, orphaned, created_at, updated_at) \
             VALUES (?1, ?2, ?3, 'other', NULL, ?4, 'api', NULL, NULL, NULL, NULL, 0, ?5, ?5)",
        )?;
        let mut cursor = conn.prepare_cached(UPSERT_CURSOR)?;
        for i in 0..n {
            let (w, t) = (format!("agent:main:w{i}"), format!("agent:main:t{i}"));
            session.execute(params![w, AGENT, format!("sid-w{i}"), None::<String>, now])?;
            session.execute(params![t, AGENT, format!("sid-t{i}"), Some(&w), now])?;
            let seq = i as i64 + 1;
            cursor.execute(params![
                w,
                t,
                AGENT,
                0i64,
                seq,
                seq,
                0i64,
                "parent",
                Some(now),
                now,
                now
            ])?;
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// The row-cap prune with plain SQL: batches of `batch` rows, each one transaction. Returns
/// the batches and the longest batch in nanoseconds.
fn floor_prune(conn: &Connection, cap: u64, batch: u64) -> Result<(u64, u64)> {
    let count: i64 = conn.query_row("SELECT COUNT(*) FROM session_state_events", [], |r| {
        r.get(0)
    })?;
    let mut excess = (count as u64).saturating_sub(cap);
    let (mut batches, mut longest) = (0u64, 0u64);
    while excess > 0 {
        let n = excess.min(batch);
        let now = now_ms();
        let t = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let rows: Vec<(i64, String, String)> = conn
            .prepare_cached(
                "SELECT sequence, session_key, agent_id FROM session_state_events \
                 ORDER BY sequence LIMIT ?1",
            )?
            .query_map(params![n as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut per_stream: HashMap<(&str, &str), i64> = HashMap::new();
        for (seq, k, a) in &rows {
            let e = per_stream.entry((k.as_str(), a.as_str())).or_insert(*seq);
            *e = (*e).max(*seq);
        }
        {
            let mut up = conn.prepare_cached(
                "UPDATE session_state_heads SET pruned_max_sequence = ?3, updated_at = ?4 \
                 WHERE session_key = ?1 AND agent_id = ?2 AND pruned_max_sequence < ?3",
            )?;
            for ((k, a), max) in per_stream {
                up.execute(params![k, a, max, now])?;
            }
            let mut del =
                conn.prepare_cached("DELETE FROM session_state_events WHERE sequence = ?1")?;
            for (seq, _, _) in &rows {
                del.execute(params![seq])?;
            }
        }
        conn.execute_batch("COMMIT")?;
        longest = longest.max(t.elapsed().as_nanos() as u64);
        batches += 1;
        excess -= n;
    }
    Ok((batches, longest))
}

/// The restart sweep with plain SQL: the same SELECT/UPDATE batches. Returns the cursors
/// re-frozen and the distinct watchers.
fn floor_sweep(conn: &Connection, batch: i64) -> Result<(u64, usize)> {
    let now = now_ms();
    let (mut after, mut swept) = (0i64, 0u64);
    let mut watchers: HashSet<String> = HashSet::new();
    loop {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let rows: Vec<(i64, String)> = conn
            .prepare_cached(
                "SELECT c.rowid, c.watcher_session_key FROM session_watch_cursors c \
                 WHERE c.rowid > ?1 AND c.muted = 0 AND c.notified_sequence > c.last_seen_sequence \
                 AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key) \
                 ORDER BY c.rowid LIMIT ?2",
            )?
            .query_map(params![after, batch], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        {
            let mut up = conn.prepare_cached(
                "UPDATE session_watch_cursors SET notified_sequence = material_sequence, \
                 updated_at = ?2, notice_opened_at = COALESCE(notice_opened_at, ?2) \
                 WHERE rowid = ?1",
            )?;
            for (rowid, _) in &rows {
                up.execute(params![rowid, now])?;
            }
        }
        conn.execute_batch("COMMIT")?;
        swept += rows.len() as u64;
        match rows.last() {
            Some((rowid, _)) => after = *rowid,
            None => break,
        }
        watchers.extend(rows.into_iter().map(|(_, w)| w));
    }
    Ok((swept, watchers.len()))
}

// ---------------------------------------------------------------------------------------------
// Report: targets with PASS/FAIL, the JSON figures, and comparing two reports
// ---------------------------------------------------------------------------------------------

/// Whether a larger figure is better (throughput) or a smaller one (latency, ratio, memory).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Higher,
    Lower,
}

impl Better {
    fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }
}

/// One workload's result: its line of text, its figures and its targets.
pub(crate) struct Outcome {
    id: String,
    line: String,
    figures: Vec<(String, f64, String, Better)>,
    /// (figure, limit, pass, extra condition that must also hold, if any)
    targets: Vec<(String, f64, bool, Option<String>)>,
}

impl Outcome {
    pub(crate) fn new(id: &str, line: String) -> Self {
        Outcome {
            id: id.to_string(),
            line,
            figures: Vec::new(),
            targets: Vec::new(),
        }
    }

    pub(crate) fn figure(mut self, name: &str, value: f64, unit: &str, better: Better) -> Self {
        self.figures
            .push((name.to_string(), value, unit.to_string(), better));
        self
    }

    fn find(&self, name: &str) -> Option<&(String, f64, String, Better)> {
        self.figures.iter().find(|f| f.0 == name)
    }

    /// A target on a figure recorded before: at least `limit` when higher is better, at most
    /// `limit` when lower is.
    pub(crate) fn target(self, figure: &str, limit: f64) -> Self {
        self.target_and(figure, limit, None)
    }

    /// A target that also needs `extra` (its text, and whether it held).
    pub(crate) fn target_and(
        mut self,
        figure: &str,
        limit: f64,
        extra: Option<(&str, bool)>,
    ) -> Self {
        let pass = match self.find(figure) {
            Some((_, v, _, Better::Higher)) => *v >= limit,
            Some((_, v, _, Better::Lower)) => *v <= limit,
            None => false,
        } && extra.is_none_or(|(_, ok)| ok);
        self.targets.push((
            figure.to_string(),
            limit,
            pass,
            extra.map(|(t, _)| t.to_string()),
        ));
        self
    }
}

/// Formats a figure: thousands separators from 1,000 up, two decimals below.
fn fmt_value(v: f64) -> String {
    if v.abs() >= 1000.0 {
        fmt_int(v.round() as u64)
    } else {
        format!("{v:.2}")
    }
}

/// Collects the workloads of one run; prints text (to stderr when the JSON goes to stdout).
pub(crate) struct Report {
    bench: &'static str,
    quick: bool,
    json: bool,
    workloads: Vec<Value>,
    passed: usize,
    failed: usize,
}

impl Report {
    pub(crate) fn new(bench: &'static str, quick: bool, json: bool) -> Self {
        Report {
            bench,
            quick,
            json,
            workloads: Vec::new(),
            passed: 0,
            failed: 0,
        }
    }

    pub(crate) fn say(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            say!("{text}");
        }
    }

    pub(crate) fn add(&mut self, o: Outcome, secs: f64) {
        self.say(&format!("{}  ({secs:.1} s)", o.line));
        let mut targets = Vec::new();
        for (figure, limit, pass, extra) in &o.targets {
            let (value, unit, better) = o
                .find(figure)
                .map_or((f64::NAN, "", Better::Higher), |f| (f.1, f.2.as_str(), f.3));
            let op = if better == Better::Higher { ">=" } else { "<=" };
            let extra_text = extra
                .as_ref()
                .map(|t| format!(" and {t}"))
                .unwrap_or_default();
            self.say(&format!(
                "    target {} {figure} {op} {} {unit}{extra_text}: {} {unit} -> {}",
                o.id,
                fmt_value(*limit),
                fmt_value(value),
                if *pass { "PASS" } else { "FAIL" }
            ));
            if *pass {
                self.passed += 1;
            } else {
                self.failed += 1;
            }
            targets.push(
                json!({"figure": figure, "op": op, "limit": limit, "value": value,
                                "unit": unit, "also": extra, "pass": pass}),
            );
        }
        let figures: Vec<Value> = o
            .figures
            .iter()
            .map(|(name, value, unit, better)| {
                json!({"name": name, "value": value, "unit": unit, "better": better.as_str()})
            })
            .collect();
        self.workloads
            .push(json!({"id": o.id, "line": o.line, "seconds": secs,
                                   "figures": figures, "targets": targets}));
    }

    /// Prints the totals; with `--json`, writes the report to stdout.
    pub(crate) fn finish(self, total_secs: f64) -> Result<()> {
        self.say(&format!(
            "total {total_secs:.1} s; targets: {} PASS, {} FAIL (targets are reported, not \
             enforced: the exit status does not depend on them)",
            self.passed, self.failed
        ));
        if self.json {
            let unix = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let doc = json!({
                "bench": self.bench,
                "version": env!("CARGO_PKG_VERSION"),
                "quick": self.quick,
                "unixTime": unix,
                "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "seconds": total_secs,
                "workloads": self.workloads,
            });
            say!("{}", serde_json::to_string_pretty(&doc)?);
        }
        Ok(())
    }
}

/// `--compare A B`: for every figure of every workload in both reports, B / A and whether that
/// is better or worse (within 3 % counts as the same); then the targets whose verdict changed.
fn compare(a_path: &Path, b_path: &Path) -> Result<()> {
    let load = |p: &Path| -> Result<Value> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a bench report (JSON)", p.display()))?;
        if !v["workloads"].is_array() {
            bail!(
                "{} is not a bench report: no \"workloads\" array (write one with `aware bench \
                 --json > FILE` or `aware bench-http --json > FILE`)",
                p.display()
            );
        }
        Ok(v)
    };
    let (a, b) = (load(a_path)?, load(b_path)?);
    say!(
        "A = {} ({} {}{}), B = {} ({} {}{}); ratio = B / A",
        a_path.display(),
        a["bench"].as_str().unwrap_or("?"),
        a["version"].as_str().unwrap_or("?"),
        if a["quick"] == true { ", quick" } else { "" },
        b_path.display(),
        b["bench"].as_str().unwrap_or("?"),
        b["version"].as_str().unwrap_or("?"),
        if b["quick"] == true { ", quick" } else { "" },
    );
    if a["quick"] != b["quick"] {
        say!("note: one run is --quick and the other is not; sizes differ");
    }
    let empty = Vec::new();
    let workloads = |v: &Value| v["workloads"].as_array().unwrap_or(&empty).clone();
    let (wa, wb) = (workloads(&a), workloads(&b));
    say!(
        "{:<12} {:<26} {:>14} {:>14} {:<6} {:>8}  verdict",
        "workload",
        "figure",
        "A",
        "B",
        "unit",
        "B/A"
    );
    let (mut better, mut worse) = (0, 0);
    for w in &wb {
        let id = w["id"].as_str().unwrap_or("?");
        let Some(old) = wa.iter().find(|x| x["id"] == w["id"]) else {
            say!("{id:<12} only in B");
            continue;
        };
        for f in w["figures"].as_array().unwrap_or(&empty) {
            let name = f["name"].as_str().unwrap_or("?");
            let Some(of) = old["figures"]
                .as_array()
                .and_then(|fs| fs.iter().find(|x| x["name"] == f["name"]))
            else {
                say!("{id:<12} {name:<26} only in B");
                continue;
            };
            let (va, vb) = (of["value"].as_f64(), f["value"].as_f64());
            let (Some(va), Some(vb)) = (va, vb) else {
                continue;
            };
            let ratio = if va == 0.0 { f64::NAN } else { vb / va };
            let higher = f["better"] == "higher";
            let verdict = if !ratio.is_finite() || (ratio - 1.0).abs() <= 0.03 {
                "same"
            } else if (ratio > 1.0) == higher {
                better += 1;
                "better"
            } else {
                worse += 1;
                "worse"
            };
            say!(
                "{id:<12} {name:<26} {:>14} {:>14} {:<6} {:>7.2}x  {verdict}",
                fmt_value(va),
                fmt_value(vb),
                f["unit"].as_str().unwrap_or(""),
                ratio
            );
        }
        for t in w["targets"].as_array().unwrap_or(&empty) {
            let was = old["targets"].as_array().and_then(|ts| {
                ts.iter()
                    .find(|x| x["figure"] == t["figure"])
                    .map(|x| x["pass"].clone())
            });
            if let Some(was) = was {
                if was != t["pass"] {
                    let word = |p: &Value| if *p == true { "PASS" } else { "FAIL" };
                    say!(
                        "{id:<12} target {} {} {}: {} -> {}",
                        t["figure"].as_str().unwrap_or("?"),
                        t["op"].as_str().unwrap_or("?"),
                        fmt_value(t["limit"].as_f64().unwrap_or(f64::NAN)),
                        word(&was),
                        word(&t["pass"])
                    );
                }
            }
        }
    }
    for w in &wa {
        if !wb.iter().any(|x| x["id"] == w["id"]) {
            say!("{:<12} only in A", w["id"].as_str().unwrap_or("?"));
        }
    }
    say!("{better} figures better, {worse} worse (beyond 3 %)");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------------------------

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

/// W7, rows of any size (issue 15): the local check over one 40 MiB tool-result row and a typed
/// prompt (4 MiB with `--quick`), streamed through the slim-row tokenizer, next to a plain
/// newline count over the same file read in 64 KiB pieces. The check's peak memory is the rise
/// of the process's VmHWM (reset through `/proc/self/clear_refs` first) over its VmRSS.
fn w7_oversized(plan: &Plan) -> Result<(String, f64)> {
    use aware_upstream::local::LocalClaude;
    use aware_upstream::provider::{Outcome, Probe, Provider};
    use std::io::{Read, Write};
    let thread = "0b9f0c2e-1d3a-4c5b-8e7f-0000000000b7";
    let root = plan.file("w7-claude");
    let project = root.join("p1");
    std::fs::create_dir_all(&project)?;
    let path = project.join(format!("{thread}.jsonl"));
    let size = (40u64 << 20) / plan.scale;
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        f.write_all(br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":""#)?;
        let chunk = "build log line\\n".repeat(4096);
        let mut written = 0u64;
        while written < size {
            f.write_all(chunk.as_bytes())?;
            written += chunk.len() as u64;
        }
        f.write_all(b"\"}]}}\n{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"typed after\"}}\n")?;
    }
    let path = std::fs::canonicalize(&path)?;
    let bytes = std::fs::metadata(&path)?.len();
    let mb = bytes as f64 / (1u64 << 20) as f64;
    let t = Instant::now();
    let mut file = std::fs::File::open(&path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut newlines = 0usize;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        newlines += buf
            .get(..n)
            .unwrap_or_default()
            .iter()
            .filter(|b| **b == b'\n')
            .count();
    }
    let floor_secs = t.elapsed().as_secs_f64();
    let status = |field: &str| -> Option<u64> {
        std::fs::read_to_string("/proc/self/status")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
    };
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let rss_before = status("VmRSS:");
    let provider = LocalClaude::new(&root);
    let probe = Probe {
        session_key: "agent:main:claude:w7".into(),
        agent_id: "main".into(),
        host_id: "gateway:local".into(),
        thread_id: thread.into(),
        upstream_kind: "claude-cli".into(),
        upstream_ref: serde_json::json!({"filePath": path.to_string_lossy()}),
        marker: serde_json::json!({"offset": 0}),
        own_recent_user_texts: Vec::new(),
    };
    let t = Instant::now();
    let out = provider.check(&[probe]).map_err(|e| anyhow!("{e}"))?;
    let check_secs = t.elapsed().as_secs_f64();
    let peak = match (reset, rss_before, status("VmHWM:")) {
        (true, Some(before), Some(hwm)) => {
            format!("{:.1} MiB", hwm.saturating_sub(before) as f64 / 1024.0)
        }
        _ => "n/a (no /proc/self/clear_refs)".into(),
    };
    let turns = match out.as_slice() {
        [Outcome::Activity { human_turns, .. }] => *human_turns,
        other => bail!("the oversized check answered {other:?}"),
    };
    let _ = std::fs::remove_dir_all(&root);
    let mb_s = mb / check_secs.max(1e-9);
    Ok((
        format!(
            "W7 oversized row: local check over one {mb:.0} MB tool-result row + a prompt ({turns} human turn, {newlines} rows): {mb_s:.0} MB/s, peak RSS rise {peak} | floor newline count {:.0} MB/s | ratio {:.1}x",
            mb / floor_secs.max(1e-9),
            check_secs / floor_secs.max(1e-9)
        ),
        mb_s,
    ))
}
