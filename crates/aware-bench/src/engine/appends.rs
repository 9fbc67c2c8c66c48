//! W3: concurrent appenders against the serial one-transaction-per-event floor.

use super::setup::*;
use crate::prelude::*;
use crate::raw_sqlite::*;
use crate::report::*;
use crate::store_seam::*;
use crate::util::*;

/// W3: `writers` concurrent callers. The engine group-commits; the floor is the same callers
/// sharing one connection behind a mutex, one `BEGIN IMMEDIATE` ... `COMMIT` (one fsync at
/// `full`) per event: the serial one-transaction-per-event rate, with no busy-handler sleeps
/// (64 connections contending with `busy_timeout` mostly measured SQLite's back-off). The two
/// run interleaved in rounds so a noisy neighbour hits both alike.
#[expect(
    clippy::too_many_lines,
    reason = "one workload: its set-up, the timed loop and its report, read top to bottom"
)]
pub(crate) fn w3(plan: &Plan) -> Result<Outcome> {
    const ROUNDS: usize = 10;
    let durability = plan.durability(Durability::Full);
    let n = plan.events;
    let writers = plan.writers;
    let sessions = plan.sessions.max(writers as u64);
    let engine = open_engine(&plan.file("w3-engine.db"), durability, None, true)?;
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
        store_metrics(&engine).ops(),
        store_metrics(&engine).commits(),
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
    let m = store_metrics(&engine);
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
pub(crate) type Step = Arc<dyn Fn(usize, u64) -> Result<()> + Send + Sync>;

/// `writers` threads run `count` steps between them (started together); with `cap`, they stop
/// once it has passed. Returns the wall time and each step's latency (ns).
pub(crate) fn callers(
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
    let stopper = cap.map(|cap| stop_after(&stop, cap, Duration::from_millis(5)));
    let lat = join_all(handles);
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = stopper {
        let _ = h.join();
    }
    Ok((secs, lat?))
}
