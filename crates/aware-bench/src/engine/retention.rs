//! W4, W5 and W6: listSince at size, prune to the cap, and the restart sweep.

use super::setup::*;
use crate::prelude::*;
use crate::raw_sqlite::*;
use crate::report::*;
use crate::store_seam::*;
use crate::util::*;

/// W4: listSince pages at `events` retained rows: a 50-event page of one of ~1,000 streams
/// (50 events each) and a 200-event page of one hot stream (1,000 events).
#[expect(
    clippy::too_many_lines,
    reason = "one workload: its set-up, the timed loop and its report, read top to bottom"
)]
pub(crate) fn w4(plan: &Plan) -> Result<Outcome> {
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
    let engine = open_engine(&path, durability, None, true)?;
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
    let mut outcome = Outcome::new("W4", line);
    for (page, m) in [("page50", small), ("page200", big)] {
        outcome = outcome
            .figure(&format!("{page}_p50"), us(m[0]), "us", Better::Lower)
            .figure(&format!("{page}_p99"), us(m[1]), "us", Better::Lower)
            .figure(&format!("{page}_floor_p50"), us(m[2]), "us", Better::Lower)
            .figure(
                &format!("{page}_ratio_p50"),
                m[0] as f64 / m[2].max(1) as f64,
                "x",
                Better::Lower,
            )
            .target(&format!("{page}_ratio_p50"), 1.3);
    }
    Ok(outcome)
}

/// W5: one prune pass from 1.2 x `events` rows down to the row cap `events`.
/// Passes of W5, engine and floor alternated: the target compares two maxima of about ten
/// transactions each, which one preemption decides, so the verdict takes the median pass.
const W5_PASSES: usize = 5;

/// One engine prune pass of W5 on a fresh file.
struct W5Engine {
    secs: f64,
    longest_us: u64,
    batches: u64,
    commits: u64,
    txn_us: u64,
    describe_max: String,
    hist_max: Option<u64>,
    count_ns: u64,
}

fn w5_engine_pass(plan: &Plan, pass: usize, keys: &[String], order: &[usize]) -> Result<W5Engine> {
    let durability = plan.durability(Durability::Normal);
    let cap = plan.events;
    // Engine: rows written raw, then the engine opened with max_rows = cap.
    let path = plan.file(&format!("w5-engine-{pass}.db"));
    fill_events(&floor_conn(&path, durability)?, keys, order)?;
    let engine = open_engine(&path, durability, Some(cap), true)?;
    // The cap loop asks `event_count()` (a COUNT(*)) once per batch; time one at full size.
    let mut counts = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        event_count(&engine)?;
        counts.push(t.elapsed().as_nanos() as u64);
    }
    let (count_ns, _) = percentiles(&mut counts);
    let m = store_metrics(&engine);
    let (commits0, us0) = (m.commits(), m.commit_us_sum.load(Ordering::Relaxed));
    let watch = CommitWatch::start(&engine);
    let t = Instant::now();
    let report = engine
        .prune_pass()
        .ok_or_else(|| anyhow!("prune pass skipped"))?;
    let secs = t.elapsed().as_secs_f64();
    let per_commit = watch.finish();
    let m = store_metrics(&engine);
    let commits = m.commits() - commits0;
    let txn_us = m.commit_us_sum.load(Ordering::Relaxed) - us0;
    let hist_max = hist_max_bound(m);
    let left = event_count(&engine)?;
    engine.close();
    drop(engine);
    let _ = std::fs::remove_file(&path);
    if left != cap {
        bail!("prune left {left} rows, expected {cap}");
    }
    Ok(W5Engine {
        secs,
        longest_us: per_commit.max_us(),
        batches: report.batches,
        commits,
        txn_us,
        describe_max: per_commit.describe_max(commits),
        hist_max,
        count_ns,
    })
}

/// One floor pass of W5: the same batches (victims SELECT, head watermark UPDATEs, per-row
/// DELETEs), filled through one connection, pruned through a fresh one (cold cache, like the
/// engine). Answers (seconds, batches, longest batch in ns).
fn w5_floor_pass(
    plan: &Plan,
    pass: usize,
    keys: &[String],
    order: &[usize],
) -> Result<(f64, u64, u64)> {
    let durability = plan.durability(Durability::Normal);
    let fpath = plan.file(&format!("w5-floor-{pass}.db"));
    fill_events(&floor_conn(&fpath, durability)?, keys, order)?;
    let conn = floor_conn(&fpath, durability)?;
    let t = Instant::now();
    let (batches, longest) = floor_prune(&conn, plan.events, 1000)?;
    let secs = t.elapsed().as_secs_f64();
    drop(conn);
    let _ = std::fs::remove_file(&fpath);
    Ok((secs, batches, longest))
}

/// The median of `v` (the lower of the middle two) and its range.
fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mid = v.get((v.len().max(1) - 1) / 2).copied().unwrap_or(0.0);
    let lo = v.first().copied().unwrap_or(0.0);
    let hi = v.last().copied().unwrap_or(0.0);
    (mid, lo, hi)
}

pub(crate) fn w5(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let cap = plan.events;
    let total = cap + cap / 5;
    let keys: Vec<String> = (0..plan.sessions)
        .map(|i| format!("agent:main:c{i}"))
        .collect();
    let order: Vec<usize> = (0..total).map(|r| (r % plan.sessions) as usize).collect();
    let mut engine_runs = Vec::with_capacity(W5_PASSES);
    let mut floor_runs = Vec::with_capacity(W5_PASSES);
    for pass in 0..W5_PASSES {
        engine_runs.push(w5_engine_pass(plan, pass, &keys, &order)?);
        floor_runs.push(w5_floor_pass(plan, pass, &keys, &order)?);
    }
    let (longest_ms, longest_lo, longest_hi) = median_range(
        engine_runs
            .iter()
            .map(|r| r.longest_us as f64 / 1e3)
            .collect(),
    );
    let (floor_longest_ms, floor_lo, floor_hi) =
        median_range(floor_runs.iter().map(|r| r.2 as f64 / 1e6).collect());
    let (engine_secs, ..) = median_range(engine_runs.iter().map(|r| r.secs).collect());
    let (floor_secs, ..) = median_range(floor_runs.iter().map(|r| r.0).collect());
    // The pass shown in full is the one whose longest transaction is the median.
    let shown = engine_runs
        .iter()
        .find(|r| r.longest_us as f64 / 1e3 == longest_ms)
        .or(engine_runs.first())
        .ok_or_else(|| anyhow!("no W5 pass ran"))?;
    let floor_batches = floor_runs.first().map_or(0, |r| r.1);
    let longest_ratio = longest_ms / floor_longest_ms.max(1e-9);
    let line = format!(
        "W5 Engine::prune_pass {} -> {} rows [{}], {W5_PASSES} passes alternated with the floor's, \
         medians: {} in {} batches, {} commits ({} in txns), longest txn {} (range {:.2}–{:.2} ms; \
         median pass: {}; histogram bucket <= {}; COUNT(*) at {} rows takes {}, once per batch) | \
         floor {} in {floor_batches} batches, longest batch {:.2} ms (range {:.2}–{:.2} ms) | ratio \
         {:.2}x, longest txn / floor's longest batch {:.2}x",
        fmt_int(total),
        fmt_int(cap),
        durability.as_str(),
        fmt_dur((engine_secs * 1e9) as u64),
        shown.batches,
        shown.commits,
        fmt_dur(shown.txn_us * 1000),
        fmt_dur((longest_ms * 1e6) as u64),
        longest_lo,
        longest_hi,
        shown.describe_max,
        shown.hist_max.map_or("-".into(), |b| fmt_dur(b * 1000)),
        fmt_int(total),
        fmt_dur(shown.count_ns),
        fmt_dur((floor_secs * 1e9) as u64),
        floor_longest_ms,
        floor_lo,
        floor_hi,
        engine_secs / floor_secs,
        longest_ratio,
    );
    Ok(Outcome::new("W5", line)
        .figure("prune_ms", engine_secs * 1e3, "ms", Better::Lower)
        .figure("longest_txn_ms", longest_ms, "ms", Better::Lower)
        .figure("floor_ms", floor_secs * 1e3, "ms", Better::Lower)
        .figure(
            "floor_longest_batch_ms",
            floor_longest_ms,
            "ms",
            Better::Lower,
        )
        .figure("longest_txn_ratio", longest_ratio, "x", Better::Lower)
        .figure("ratio", engine_secs / floor_secs, "x", Better::Lower)
        .target("longest_txn_ms", 10.0)
        .target("longest_txn_ratio", 1.1))
}

pub(crate) fn w6(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let pending = (plan.events / 5).max(1);
    let path = plan.file("w6-engine.db");
    fill_pending(&floor_conn(&path, durability)?, pending)?;
    // "Reopen": the engine opens the file the previous process left.
    let engine = open_engine(&path, durability, None, true)?;
    let m = store_metrics(&engine);
    let (commits0, us0) = (m.commits(), m.commit_us_sum.load(Ordering::Relaxed));
    let watch = CommitWatch::start(&engine);
    let t = Instant::now();
    let report = engine.restart_sweep()?;
    let engine_secs = t.elapsed().as_secs_f64();
    let per_commit = watch.finish();
    let m = store_metrics(&engine);
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
    if swept != pending || watchers as u64 != report.watchers {
        bail!("floor sweep found {swept} cursors / {watchers} watchers");
    }
    let total_ns = (engine_secs * 1e9) as u64;
    let line = format!(
        "W6 Engine::restart_sweep of {} pending cursors ({} watchers) [{}]: {} total ({} commits, \
         {} in txns, longest txn {}; {} outside txns: watcher dedupe + {} wakes) | floor {} \
         (same SELECT/UPDATE batches of 1000, no wakes) | ratio {:.2}x",
        fmt_int(pending),
        fmt_int(report.watchers),
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
