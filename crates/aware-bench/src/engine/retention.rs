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
pub(crate) fn w5(plan: &Plan) -> Result<Outcome> {
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
    let engine_secs = t.elapsed().as_secs_f64();
    let per_commit = watch.finish();
    let m = store_metrics(&engine);
    let commits = m.commits() - commits0;
    let us = m.commit_us_sum.load(Ordering::Relaxed) - us0;
    let hist_max = hist_max_bound(m);
    let left = event_count(&engine)?;
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
