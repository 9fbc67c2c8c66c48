//! The soak's output: one line per sample window as it goes, then the slopes over the windows
//! after the warm-up, the verdict, and with `--json` the report (bench-report format of
//! report.rs, plus every window).

use super::shared::Plan;
use super::stats::{median, slope, Row};
use crate::report::{Better, Outcome, Report};
use crate::util::fmt_int;
use anyhow::Result;
use serde_json::{json, Value};

/// fds may differ by this much between the first and the last quarter of the windows after the
/// warm-up: the wake streams and keep-alive connections come and go, a leak keeps growing.
const FD_BOUND: f64 = 24.0;
/// Threads may differ by this much (the blocking pool grows and shrinks with the load).
const THREAD_BOUND: f64 = 8.0;

/// Text to stdout, or to stderr when the JSON report goes to stdout.
pub(crate) struct Out {
    report: Report,
}

impl Out {
    pub(crate) fn new(json: bool, quick: bool) -> Out {
        Out {
            report: Report::new("soak", quick, json),
        }
    }

    pub(crate) fn say(&self, text: &str) {
        self.report.say(text);
    }

    pub(crate) fn window(&self, r: &Row) {
        let worst = r
            .routes
            .iter()
            .filter(|f| f.n >= 5)
            .max_by(|a, b| a.p99_us.total_cmp(&b.p99_us));
        self.say(&format!(
            "t={:>5.0}s {:>5.0} req/s p50 {:>6.2} ms p99 {:>6.2} ms (worst {} {:.2} ms) | rss \
             {:.1} MiB fds {} threads {} | cpu: gateway {:.2} load {:.2} cores, host busy {:.0}% | store {} \
             KiB wal {} KiB ({} restarts) | fsync floor p50 {:.2} p99 {:.2} ms",
            r.t,
            r.req_per_s,
            r.p50_us / 1e3,
            r.p99_us / 1e3,
            worst.map_or("-", |f| f.route),
            worst.map_or(0.0, |f| f.p99_us / 1e3),
            r.rss_mib,
            r.fds,
            r.threads,
            r.gw_cpu,
            r.load_cpu,
            r.host_busy * 100.0,
            fmt_int(r.store_bytes / 1024),
            fmt_int(r.wal_bytes / 1024),
            r.wal_resets,
            r.floor_p50_us / 1e3,
            r.floor_p99_us / 1e3,
        ));
    }
}

/// What the run counted, besides the windows.
pub(crate) struct Facts {
    pub(crate) load_secs: f64,
    pub(crate) requests: u64,
    pub(crate) status_5xx: u64,
    pub(crate) wake_connects: u64,
    pub(crate) wake_events: u64,
    pub(crate) notices: u64,
    pub(crate) drains: u64,
    pub(crate) sessions_created: u64,
    pub(crate) errors: Vec<String>,
    pub(crate) started_rss_mib: f64,
    pub(crate) end_rss_mib: f64,
    pub(crate) end_store_bytes: u64,
    pub(crate) shutdown: std::result::Result<std::time::Duration, String>,
}

/// Growth of `f` between the first and the last quarter of `rows` (max against max).
fn growth(rows: &[Row], f: impl Fn(&Row) -> f64) -> f64 {
    let q = (rows.len() / 4).max(1);
    let max = |s: &[Row]| s.iter().map(&f).fold(f64::MIN, f64::max);
    if rows.is_empty() {
        return 0.0;
    }
    max(&rows[rows.len() - q..]) - max(&rows[..q])
}

/// Prints the summary; the failures (empty when the soak passed).
#[expect(
    clippy::too_many_lines,
    reason = "the summary's sections in the order they are printed"
)]
pub(crate) fn finish(out: &mut Out, plan: &Plan, rows: &[Row], f: &Facts) -> Result<Vec<String>> {
    // Warm-up: the first fifth of the run (at least 30 s) fills caches, pools and the store's
    // first pages; slopes are taken over the windows after it.
    let warm = (plan.duration.as_secs_f64() / 5.0).max(30.0);
    let steady: Vec<Row> = rows.iter().filter(|r| r.t > warm).cloned().collect();
    let hours = |r: &Row| r.t / 3600.0;
    let rss_slope = slope(
        &steady
            .iter()
            .map(|r| (hours(r), r.rss_mib))
            .collect::<Vec<_>>(),
    );
    let fd_slope = slope(
        &steady
            .iter()
            .map(|r| (hours(r), r.fds as f64))
            .collect::<Vec<_>>(),
    );
    let fd_growth = growth(&steady, |r| r.fds as f64);
    let thread_growth = growth(&steady, |r| r.threads as f64);
    let (tmin, tmax) = steady.iter().fold((u64::MAX, 0), |(a, b), r| {
        (a.min(r.threads), b.max(r.threads))
    });
    let store_per_kop = slope(
        &steady
            .iter()
            .map(|r| (r.ops as f64 / 1000.0, r.store_bytes as f64))
            .collect::<Vec<_>>(),
    );
    let p99s: Vec<f64> = steady.iter().map(|r| r.p99_us / 1e3).collect();
    let p99_median = median(p99s.clone());
    let p99_max = p99s.iter().copied().fold(0.0, f64::max);
    let bursts = p99s.iter().filter(|p| **p > 2.0 * p99_median).count();
    let p50_median = median(steady.iter().map(|r| r.p50_us / 1e3).collect());
    let rate = f.requests as f64 / f.load_secs.max(1e-9);
    out.say(&format!(
        "p99 per window (ms, after the {warm:.0} s warm-up): {}",
        p99s.iter()
            .map(|p| format!("{p:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let line = format!(
        "soak [{}, {}] {} requests in {:.0} s = {:.0} req/s (target {}); {} sessions created; \
         {} drains checked against the model, {} notices, exactly once; {} wake-stream connects, \
         {} wakes | RSS {:.1} -> {:.1} MiB, slope {:+.1} MiB/h | fds slope {:+.1}/h, growth {:+.0} \
         (bound {FD_BOUND}) | threads {}..{}, growth {:+.0} (bound {THREAD_BOUND}) | store {} KiB \
         at the end, {:+.1} KiB per 1k requests | p50 median {:.2} ms, p99 median {:.2} ms, max \
         {:.2} ms, {} of {} windows over 2x the median | 5xx {} | SIGTERM exit {}",
        plan.store,
        plan.durability,
        fmt_int(f.requests),
        f.load_secs,
        rate,
        plan.rate,
        fmt_int(f.sessions_created),
        fmt_int(f.drains),
        fmt_int(f.notices),
        fmt_int(f.wake_connects),
        fmt_int(f.wake_events),
        f.started_rss_mib,
        f.end_rss_mib,
        rss_slope,
        fd_slope,
        fd_growth,
        if tmin == u64::MAX { 0 } else { tmin },
        tmax,
        thread_growth,
        fmt_int(f.end_store_bytes / 1024),
        store_per_kop / 1024.0,
        p50_median,
        p99_median,
        p99_max,
        bursts,
        p99s.len(),
        f.status_5xx,
        match &f.shutdown {
            Ok(d) => format!("{:.2} s", d.as_secs_f64()),
            Err(e) => format!("failed: {e}"),
        },
    );
    let outcome = Outcome::new("SOAK", line)
        .figure("req_per_s", rate, "req/s", Better::Higher)
        .figure("rss_slope", rss_slope, "MiB/h", Better::Lower)
        .figure("end_rss", f.end_rss_mib, "MiB", Better::Lower)
        .figure("fd_slope", fd_slope, "fds/h", Better::Lower)
        .figure("fd_growth", fd_growth, "fds", Better::Lower)
        .figure("thread_growth", thread_growth, "threads", Better::Lower)
        .figure(
            "store_per_1k_ops",
            store_per_kop / 1024.0,
            "KiB",
            Better::Lower,
        )
        .figure("p50_median", p50_median, "ms", Better::Lower)
        .figure("p99_median", p99_median, "ms", Better::Lower)
        .figure("p99_max", p99_max, "ms", Better::Lower)
        .figure("burst_windows", bursts as f64, "windows", Better::Lower)
        .figure(
            "notices_checked",
            f.notices as f64,
            "notices",
            Better::Higher,
        );
    out.report.add(outcome, f.load_secs);

    let mut failures = Vec::new();
    failures.extend(f.errors.iter().cloned());
    if f.status_5xx > 0 {
        failures.push(format!("{} answers were 5xx", f.status_5xx));
    }
    if fd_growth > FD_BOUND {
        failures.push(format!("fds grew by {fd_growth:.0} (bound {FD_BOUND})"));
    }
    if thread_growth > THREAD_BOUND {
        failures.push(format!(
            "threads grew by {thread_growth:.0} (bound {THREAD_BOUND})"
        ));
    }
    if let Err(e) = &f.shutdown {
        failures.push(format!("shutdown: {e}"));
    }
    if steady.is_empty() && failures.is_empty() {
        failures.push("no sample window after the warm-up: run longer".into());
    }
    out.say(&if failures.is_empty() {
        "verdict: pass (no model violation, no 5xx, no error, fds and threads flat)".to_string()
    } else {
        format!("verdict: FAIL: {}", failures.join("; "))
    });
    let windows: Vec<Value> = rows.iter().map(window_json).collect();
    let report = std::mem::replace(&mut out.report, Report::new("soak", false, false));
    report.finish_with(
        f.load_secs,
        vec![
            ("store", json!(plan.store)),
            ("durability", json!(plan.durability)),
            ("quickForm", json!(plan.quick)),
            ("failures", json!(failures)),
            ("windows", Value::Array(windows)),
        ],
    )?;
    Ok(failures)
}

fn window_json(r: &Row) -> Value {
    let routes: Vec<Value> = r
        .routes
        .iter()
        .map(|f| json!({"route": f.route, "n": f.n, "p50Ms": f.p50_us / 1e3, "p99Ms": f.p99_us / 1e3}))
        .collect();
    json!({"t": r.t, "ops": r.ops, "reqPerS": r.req_per_s, "p50Ms": r.p50_us / 1e3,
           "p99Ms": r.p99_us / 1e3, "rssMiB": r.rss_mib, "fds": r.fds, "threads": r.threads,
           "gatewayCpuCores": r.gw_cpu, "loadCpuCores": r.load_cpu, "hostBusy": r.host_busy, "storeBytes": r.store_bytes,
           "walBytes": r.wal_bytes, "walRestarts": r.wal_resets,
           "fsyncFloorP50Ms": r.floor_p50_us / 1e3, "fsyncFloorP99Ms": r.floor_p99_us / 1e3,
           "routes": routes})
}
