//! `aware-bench engine`: throughput and latency of the engine against a raw rusqlite floor.
//!
//! Every workload runs twice in the same process with the same `synchronous` setting: once
//! through the engine (writer thread, savepoints, watcher selection, after-commit effects), once
//! as the "floor": the same row writes (or the same SELECT) with plain SQL on a plain WAL-mode
//! connection, on a fresh file whose schema was created by opening an `aware_store_sqlite::SqliteStore`
//! on it first. The ratio is engine cost / floor cost, so `1.00x` means "as fast as raw SQL" and
//! `< 1` means faster than the floor. W3 reports engine / floor throughput instead: its floor is
//! the serial one-transaction-per-event rate that group commit exists to beat.
//!
//! Each design goal is printed under its workload as met or not met; `--json` (global)
//! writes every figure as a JSON report and `--compare A B` compares two reports.

mod appends;
mod reads;
mod retention;
mod scan;

use appends::w3;
use reads::{w1, w2};
use retention::{w4, w5, w6};
use scan::{w7, w7_codex, w7_oversized};

pub(crate) mod setup;

use crate::prelude::*;
use crate::report::*;
use crate::util::*;
use setup::*;
pub use setup::{BenchArgs, BenchDurability};

/// Runs the selected workloads and prints one line per workload, then each target with
/// met or not met. With `json` (the global `--json`), the text goes to stderr and the report (every
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
        "aware-bench engine{}: events={} writers={} durability={} dir={}",
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
         floor. Under each workload, its design goal (informational) and whether this run met it.",
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
