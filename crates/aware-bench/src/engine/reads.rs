//! W1 and W2: appends with watchers, and reads of the signal log (listSince pages).

use super::setup::*;
use crate::prelude::*;
use crate::raw_sqlite::*;
use crate::report::*;
use crate::store_seam::*;
use crate::util::*;

/// W1: appends round-robin over `sessions` children, each watched by its parent; one caller.
pub(crate) fn w1(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let n = plan.events;
    let engine = open_engine(&plan.file("w1-engine.db"), durability, None, true)?;
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
        noop_write(&engine)?;
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
pub(crate) fn interleaved(
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
pub(crate) fn w2(plan: &Plan) -> Result<Outcome> {
    let durability = plan.durability(Durability::Normal);
    let n = plan.events;
    let engine = open_engine(&plan.file("w2-engine.db"), durability, None, true)?;
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
