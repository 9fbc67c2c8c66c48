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

mod appends;
mod reads;
mod retention;
mod scan;

use appends::w3;
use reads::{w1, w2};
use retention::{w4, w5, w6};
use scan::{w7, w7_codex, w7_oversized};

pub(crate) use crate::raw_sqlite::*;
pub(crate) use crate::report::*;
pub(crate) use crate::store_seam::*;
pub(crate) use crate::util::*;
pub(crate) use anyhow::{anyhow, bail, Context, Result};
pub(crate) use aware_core::{ActorType, EventKind, SessionRef};
pub(crate) use aware_engine::{AppendOutcome, AppendRequest, CreateSession, Engine};
pub(crate) use aware_store::Durability;
pub(crate) use rusqlite::{params, Connection};
pub(crate) use serde_json::{json, Value};
pub(crate) use std::collections::{HashMap, HashSet};
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
pub(crate) use std::sync::{Arc, Barrier};
pub(crate) use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

pub(crate) const ALL: [&str; 7] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"];
/// Sessions (streams) of W1, W3 and W5 before `--quick`.
pub(crate) const SESSIONS: u64 = 1000;
/// Watchers of the one target of W2.
pub(crate) const W2_WATCHERS: usize = 10;
/// Calls per listSince measurement before `--quick`.
pub(crate) const READ_CALLS: usize = 2000;
/// Rows of the hot stream of W4 (read with a 200-event page).
pub(crate) const W4_HOT_ROWS: u64 = 1000;
pub(crate) const SUMMARY: &str = "human message via bench";
pub(crate) const ACTOR: &str = "operator";

pub(crate) struct Plan {
    scale: u64,
    events: u64,
    sessions: u64,
    writers: usize,
    durability: Option<Durability>,
    dir: PathBuf,
}

impl Plan {
    pub(crate) fn durability(&self, default: Durability) -> Durability {
        self.durability.unwrap_or(default)
    }
    pub(crate) fn file(&self, name: &str) -> PathBuf {
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
            _ => w7(&plan).and_then(|mut o| {
                let (line, mb_s) = w7_oversized(&plan)?;
                let (codex_line, codex_mb_s) = w7_codex(&plan)?;
                o.line = format!("{}\n{line}\n{codex_line}", o.line);
                Ok(
                    o.figure("oversized_check_mb_s", mb_s, "MB/s", Better::Higher)
                        .figure("codex_scan_mb_s", codex_mb_s, "MB/s", Better::Higher),
                )
            }),
        }
        .with_context(|| format!("workload {w}"))?;
        report.add(outcome, t.elapsed().as_secs_f64());
    }
    drop(tmp);
    report.finish(started.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// Engine helpers
// ---------------------------------------------------------------------------------------------

pub(crate) fn create(engine: &Engine, s: &SessionRef, parent: Option<&SessionRef>) -> Result<()> {
    let mut req = CreateSession::new(s.key.clone());
    if let Some(p) = parent {
        req = req.parent(p.key.clone());
    }
    engine.create_session(req)?;
    Ok(())
}

/// A child session and the key of its parent (its watcher).
pub(crate) type Pair = (SessionRef, String);

/// `n` parent/child pairs; the child's `child_spawned` event seeds the parent's cursor.
pub(crate) fn create_pairs(engine: &Engine, n: u64) -> Result<Vec<Pair>> {
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
pub(crate) fn create_pairs_concurrent(
    engine: &Engine,
    n: u64,
    threads: usize,
) -> Result<Vec<Pair>> {
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
pub(crate) fn append_hdm(
    engine: &Engine,
    target: &SessionRef,
    watchers: Vec<String>,
) -> Result<()> {
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
