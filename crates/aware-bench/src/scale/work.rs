//! The measured workloads of one scale point, each through the engine's public API.

use super::fill::{Db, HOT_TARGETS, HOT_WATCHERS};
use super::point::{Point, Sample};
use crate::prelude::*;
use crate::store_seam::{open_pg_engine, store_metrics, CommitWatch};
use crate::util::*;
use aware_engine::views::{ConsoleFilter, SessionFilter};

/// Calls per latency figure (the first tenth is warm-up, not counted); `--quick` makes fewer,
/// so that the console's counts at 200,000 sessions on the debug build fit CI's time.
pub(crate) fn calls(quick: bool) -> usize {
    if quick {
        60
    } else {
        220
    }
}

fn open(db: &Db) -> Result<Engine> {
    match db {
        Db::Sqlite(path) => open_engine(path, Durability::Normal, None, true),
        Db::Pg(url) => open_pg_engine(url),
    }
}

/// p50 and p99 in ms of `calls` calls of `f(i)`, the first tenth left out.
fn latency(calls: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<(f64, f64)> {
    let mut ns = Vec::with_capacity(calls);
    for i in 0..calls {
        let t = Instant::now();
        f(i)?;
        if i >= calls / 10 {
            ns.push(t.elapsed().as_nanos() as u64);
        }
    }
    let (p50, p99) = percentiles(&mut ns);
    Ok((p50 as f64 / 1e6, p99 as f64 / 1e6))
}

/// The VmRSS and VmHWM of this process in KiB.
pub(crate) fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets VmHWM, so each scale point reports its own peak (Linux ≥ 4.0; elsewhere the peak
/// stays the process's).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// W4's page: a 50-event `list_since` page of one of `streams` streams.
pub(crate) fn page(db: &Db, streams: u64, calls: usize, out: &mut Sample) -> Result<()> {
    let engine = open(db)?;
    let refs: Vec<SessionRef> = (0..streams.min(100_000))
        .map(|k| session_ref(&format!("agent:main:s{k}")))
        .collect::<Result<_>>()?;
    let mut rng = Lcg(0x5ca1e);
    let (p50, p99) = latency(calls, |_| {
        let r = &refs[(rng.next() % refs.len() as u64) as usize];
        let page = engine.list_since(r, 0, 50)?;
        if page.events.len() != 50 {
            bail!(
                "list_since returned {} events, expected 50",
                page.events.len()
            );
        }
        Ok(())
    })?;
    engine.close();
    out.push(Point::latency("page", p50, p99));
    Ok(())
}

/// The session-table reads (list paging, the console's page and overview), the drain of hot
/// watchers, then the restart sweep, on `n` sessions with one pending cursor each.
pub(crate) fn sessions(db: &Db, n: u64, calls: usize, out: &mut Sample) -> Result<()> {
    // The peak is the engine's: the fill (plain SQL, in this process on SQLite) is behind us.
    reset_peak();
    let engine = open(db)?;
    // The first ten pages of the session list, newest first, as a client pages through it.
    let (p50, p99) = latency(calls, |i| {
        let filter = SessionFilter {
            limit: 50,
            offset: (i % 10) as u64 * 50,
            ..Default::default()
        };
        let got = engine.list_sessions(&filter)?.len();
        if got != 50 {
            bail!("list_sessions returned {got} sessions, expected 50");
        }
        Ok(())
    })?;
    out.push(Point::latency("list", p50, p99));
    // The console's session table (`/v1/console/sessions`: a page and the matching count).
    let (p50, p99) = latency(calls, |i| {
        let filter = ConsoleFilter {
            limit: 50,
            offset: (i % 10) as u64 * 50,
            ..Default::default()
        };
        let (rows, total) = engine.console_sessions(&filter)?;
        if rows.len() != 50 || total < n {
            bail!("console page: {} rows of {total}", rows.len());
        }
        Ok(())
    })?;
    out.push(Point::latency("console_page", p50, p99));
    // `/v1/console/overview`: the session count and the pending-notices count.
    let (p50, p99) = latency(calls, |_| {
        let (_, total) = engine.console_sessions(&ConsoleFilter {
            limit: 1,
            ..Default::default()
        })?;
        let pending = engine.pending_count()?;
        if total < n || pending < n {
            bail!("overview counted {total} sessions, {pending} pending");
        }
        Ok(())
    })?;
    out.push(Point::latency("console_overview", p50, p99));
    // Drains of watchers with HOT_TARGETS pending notices each, in a store of n pending.
    let hot: Vec<SessionRef> = (0..HOT_WATCHERS)
        .map(|j| session_ref(&format!("agent:main:h{j}")))
        .collect::<Result<_>>()?;
    let mut ns = Vec::new();
    for (j, w) in hot.iter().enumerate() {
        let t = Instant::now();
        let drain = engine.drain(w)?;
        let took = t.elapsed().as_nanos() as u64;
        if drain.notices.len() as u64 != HOT_TARGETS {
            bail!("drain of h{j} returned {} notices", drain.notices.len());
        }
        if j >= hot.len() / 10 {
            ns.push(took);
        }
    }
    let (p50, p99) = percentiles(&mut ns);
    out.push(Point::latency("drain", p50 as f64 / 1e6, p99 as f64 / 1e6));
    // The restart sweep over the n pending cursors (the drained ones are no longer pending).
    let m = store_metrics(&engine);
    let commits0 = m.commits();
    let watch = CommitWatch::start(&engine);
    let t = Instant::now();
    let report = engine.restart_sweep()?;
    let total_ms = t.elapsed().as_secs_f64() * 1e3;
    let commits = store_metrics(&engine).commits() - commits0;
    let times = watch.finish();
    let longest_ms = times.max_us() as f64 / 1e3;
    let median_ms = times.median_us() as f64 / 1e3;
    if report.cursors != n {
        bail!(
            "the sweep re-froze {} cursors, expected {n}",
            report.cursors
        );
    }
    out.push(Point::total("sweep", total_ms, n));
    out.push(Point {
        other: Some(("commits", commits as f64)),
        ..Point::total("sweep_longest_txn", longest_ms, 0)
    });
    out.push(Point::total("sweep_median_txn", median_ms, 0));
    let (rss, hwm) = rss_kb();
    out.push(Point::memory(rss, hwm));
    engine.close();
    Ok(())
}
