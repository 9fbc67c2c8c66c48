//! `aware-bench http`: the gateway (`aware serve`) driven over loopback HTTP by a Rust load
//! client, each workload next to a floor measured in the same process.
//!
//! Every gateway runs in-process (`aware_gateway::run` on `127.0.0.1:0`, a fresh temporary data
//! dir, the wall clock, `notify_on_create = false`); the clients are plain threads, each holding
//! one keep-alive connection. The measured requests go through a raw HTTP/1.1 client
//! (`raw.rs`), which costs the shared cores little; `--ureq-client` uses `aware_client`
//! (ureq) instead, as the runs before round 3 of decision D20 did. Set-up always uses
//! `aware_client`.
//!
//! 1. `session_status` with `changesSince` returning a 50-event page while the store holds
//!    ~50,000 event rows; one client. Floors: the same page through `Engine::list_since` (the
//!    engine floor) and a `GET /health` round trip (the HTTP floor).
//! 2. Concurrent clients posting human turns on parent-watched sessions, at `normal` and then
//!    `full`, each on a fresh gateway. Floor: the same `Engine::post_turn` calls from as many
//!    threads in-process.
//! 4. The hook after a tool call: `aware hook` on `PostToolUse` with nothing pending, the whole
//!    process's wall time, against spawning the same binary for `--version`.
//! 3. Process RSS after building 10,000 sessions and 100,000 cursors over HTTP and idling 2 s,
//!    against the RSS before the gateway started. Runs first, so that baseline is the bare
//!    process rather than what workloads 1 and 2 left in the allocator.

mod hook;
pub(crate) mod raw;
mod rss;
mod status;
mod turns;

use hook::w4;
use rss::w3;
use status::w1;
use turns::w2;

pub(crate) mod setup;

use crate::report::*;
use crate::util::*;
use anyhow::{bail, Context, Result};
pub use setup::HttpBenchArgs;
use setup::*;
use std::time::Instant;

/// Runs the selected workloads and prints one result line per workload, each target under it
/// as met or not met. With `json` (the global `--json`), the text goes to stderr and the report to
/// stdout as JSON (compare two with `aware-bench engine --compare A.json B.json`).
#[expect(
    clippy::too_many_lines,
    reason = "the HTTP bench's workloads in the order the report prints them"
)]
pub fn run(args: HttpBenchArgs, json: bool) -> Result<()> {
    let mut selected: Vec<&str> = if args.only.is_empty() {
        ALL.to_vec()
    } else {
        let mut v = Vec::new();
        for raw in &args.only {
            let w = raw.trim().trim_start_matches(['W', 'w']);
            let Some(w) = ALL.iter().find(|a| **a == w) else {
                bail!("unknown workload {raw:?} in --only (expected some of 1,2,3,4)");
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
        ureq_client: args.ureq_client,
    };
    let turns = (args.turns / scale).max(args.clients as u64);
    let calls = (args.calls / scale).max(50);
    let mut report = Report::new("bench-http", args.quick, json);
    report.say(&format!(
        "aware-bench http{}: in-process gateways on 127.0.0.1:0 (wall clock, notify_on_create \
         off), {} with keep-alive connections; calls={} turns={} clients={} \
         cpus={} loadavg={} dir={}",
        if args.quick {
            " --quick (counts / 10)"
        } else {
            ""
        },
        if args.ureq_client {
            "blocking aware-client (ureq) clients"
        } else {
            "raw HTTP/1.1 load clients (aware-client for set-up)"
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
         turns/s); workload 3 divides the process VmRSS by the VmRSS before the gateway started; \
         workload 4 divides the hook process's wall time by that of `aware --version`. \
         1.00x = no cost over the floor. Workload 3 runs first so its baseline is the bare \
         process.",
    );
    let started = Instant::now();
    for w in selected {
        let t = Instant::now();
        let outcomes = match w {
            "1" => w1(&plan, calls),
            "2" => w2(&plan, turns, args.clients),
            "4" => w4(&plan, (args.hook_runs / scale).max(20)),
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
