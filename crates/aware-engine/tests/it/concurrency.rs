//! Races on the writer (01 §8, 02 §5–§9, §11), on a real SQLite file: two drains of one
//! session, many writers on one target, registration racing a material event, unwatch racing
//! a spawn edge, reset racing a drain. Each race runs many times with threads released by a
//! barrier; after each round the outcome must be one of the serial orders, with no notice lost
//! or returned twice and every cursor satisfying `last_seen ≤ notified ≤ material`.

use crate::common::*;
use aware_core::{ActorType, EventKind};
use aware_engine::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::Instant;

const ROUNDS: usize = 200;

/// One racer.
type Job<T> = Box<dyn FnOnce() -> T + Send>;

/// Runs each closure on its own thread, all released together; returns results in order.
fn race<T: Send + 'static>(jobs: Vec<Job<T>>) -> Vec<T> {
    let barrier = Arc::new(Barrier::new(jobs.len()));
    let handles: Vec<JoinHandle<T>> = jobs
        .into_iter()
        .map(|job| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                job()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Every cursor in the store satisfies the row invariants.
fn assert_cursor_invariants(w: &World, watchers: &[&str]) {
    for watcher in watchers {
        for c in w.engine.watches(&sref(watcher)).unwrap() {
            assert!(
                c.state.invariant_holds(),
                "{watcher} → {}: {:?}",
                c.target_key,
                c.state
            );
        }
    }
}

/// No unseen material work without a pending notice: `pending ⟺ material > last_seen`.
fn assert_nothing_lost(w: &World, watcher: &str, target: &str) {
    let c = w.cursor(watcher, target).expect("cursor");
    if !c.state.muted {
        assert_eq!(
            c.state.is_pending(),
            c.state.material > c.state.last_seen,
            "{watcher} → {target}: {:?}",
            c.state
        );
    }
}

/// Every sequence of a stream, paging `listSince` 200 at a time.
fn all_seqs(w: &World, s: &str) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    let mut after = 0;
    loop {
        let page = w.changes(s, after);
        out.extend(page.events.iter().map(|e| e.sequence));
        match page.events.last() {
            Some(e) if page.truncated => after = e.sequence,
            _ => return out,
        }
    }
}

fn acked(w: &World) -> u64 {
    EngineMetrics::get(&w.engine.metrics().notices_acked)
}

fn opened(w: &World) -> u64 {
    EngineMetrics::get(&w.engine.metrics().notices_opened)
}

fn hdm_on(e: &Engine, s: &str) -> Option<i64> {
    e.post_turn(&sref(s), NewTurn::user("hi").channel("telegram"))
        .unwrap()
        .event
        .map(|ev| ev.sequence)
}

#[test]
fn two_drains_of_one_session_return_each_item_exactly_once() {
    let started = Instant::now();
    let w = World::family();
    w.create_child(D, W);
    let mut returned: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut notices_returned = 0u64;
    let acked_before = acked(&w);
    for round in 0..ROUNDS {
        // Something to drain: two FIFO lines, material work on C (and on D every other round).
        let ids: BTreeSet<i64> = (0..2)
            .map(|j| {
                w.engine
                    .enqueue_system_event(&sref(W), &format!("line {round}.{j}"), None)
                    .unwrap()
                    .expect("new line")
            })
            .collect();
        w.hdm(C);
        if round % 2 == 0 {
            w.hdm(D);
        }
        // Two drains and a material event on C, released together.
        let (e1, e2, e3) = (w.engine.clone(), w.engine.clone(), w.engine.clone());
        let out = race::<Option<Drain>>(vec![
            Box::new(move || Some(e1.drain(&sref(W)).unwrap())),
            Box::new(move || Some(e2.drain(&sref(W)).unwrap())),
            Box::new(move || {
                hdm_on(&e3, C);
                None
            }),
        ]);
        let drains: Vec<Drain> = out.into_iter().flatten().collect();
        // FIFO: each line returned by exactly one drain; the other got none of them.
        let got: Vec<i64> = drains
            .iter()
            .flat_map(|d| d.system_events.iter().map(|e| e.id))
            .collect();
        assert_eq!(
            got.iter().copied().collect::<BTreeSet<_>>(),
            ids,
            "round {round}"
        );
        assert_eq!(got.len(), ids.len(), "round {round}: a line returned twice");
        assert!(drains.iter().any(|d| d.system_events.is_empty()));
        for d in &drains {
            for n in &d.notices {
                returned
                    .entry(n.target_key.clone())
                    .or_default()
                    .push(n.last_seen);
                notices_returned += 1;
            }
        }
        assert_cursor_invariants(&w, &[W]);
        assert_nothing_lost(&w, W, C);
        assert_nothing_lost(&w, W, D);
        assert_eq!(
            w.cursor(W, C).unwrap().state.material,
            w.engine.version(&sref(C))
        );
    }
    // Drain what is left (at most a notice and its follow-up per target).
    for _ in 0..3 {
        for n in w.drain(W).notices {
            returned
                .entry(n.target_key.clone())
                .or_default()
                .push(n.last_seen);
            notices_returned += 1;
        }
    }
    // Every ack was of a returned notice, and nothing is left unseen.
    assert_eq!(acked(&w) - acked_before, notices_returned);
    for (target, first) in [(C, 1), (D, 2)] {
        let head = w.engine.version(&sref(target));
        assert_eq!(w.triple(W, target), (head, head, head), "{target}");
        // Per target the returned notices form one chain: distinct, increasing `lastSeen`s
        // starting at the spawn seed, each an event of the target (where the previous ack
        // stopped). A duplicate would repeat a `lastSeen`.
        let mut ls = returned[target].clone();
        let n = ls.len();
        ls.sort();
        ls.dedup();
        assert_eq!(ls.len(), n, "{target}: a notice returned twice");
        assert_eq!(ls[0], first, "{target}");
        let events = all_seqs(&w, target);
        assert!(ls.iter().all(|l| events.contains(l)), "{target}: {ls:?}");
    }
    eprintln!(
        "two drains: {ROUNDS} rounds, {notices_returned} notices returned once each, {:?}",
        started.elapsed()
    );
}

#[test]
fn many_writers_on_one_target_open_one_notice_per_watcher() {
    let started = Instant::now();
    let w = World::new();
    let target = "agent:main:target";
    w.create(target);
    let watchers: Vec<String> = (0..8).map(|i| format!("agent:main:w{i}")).collect();
    for k in &watchers {
        w.create(k);
        w.watch(k, target);
    }
    let self_actor = watchers[0].clone();
    // Where each watcher's cursor stands: w0 is never told of its own goal changes, so it can
    // stay behind the head.
    let mut seen: BTreeMap<String, i64> = watchers.iter().map(|k| (k.clone(), 0)).collect();
    let mut events_checked = 0usize;
    for round in 0..ROUNDS {
        let h = w.engine.version(&sref(target));
        let opened_before = opened(&w);
        // Eight human writers (two turns each) and one goal change made by watcher w0 itself.
        let mut jobs: Vec<Job<Vec<(i64, bool)>>> = (0..8)
            .map(|_| {
                let e = w.engine.clone();
                Box::new(move || {
                    (0..2)
                        .map(|_| (hdm_on(&e, target).expect("watched"), false))
                        .collect()
                }) as Job<Vec<(i64, bool)>>
            })
            .collect();
        let (e, actor) = (w.engine.clone(), self_actor.clone());
        jobs.push(Box::new(move || {
            let g = e
                .set_goal(
                    &sref(target),
                    &format!("goal {round}"),
                    GoalStatus::Active,
                    Actor::agent(&key(&actor)),
                )
                .unwrap();
            vec![(g.event.expect("goal event").sequence, true)]
        }));
        let seqs: Vec<(i64, bool)> = race(jobs).into_iter().flatten().collect();
        let all: BTreeSet<i64> = seqs.iter().map(|s| s.0).collect();
        assert_eq!(all.len(), 17, "round {round}: a sequence answered twice");
        assert_eq!(w.seqs(target, h), all.iter().copied().collect::<Vec<_>>());
        events_checked += all.len();
        let others: BTreeSet<i64> = seqs.iter().filter(|s| !s.1).map(|s| s.0).collect();
        // One notice per watcher, frozen at the first event it was told about.
        let mut told: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for k in &watchers {
            let (first, last) = if *k == self_actor {
                (*others.first().unwrap(), *others.last().unwrap())
            } else {
                (*all.first().unwrap(), *all.last().unwrap())
            };
            told.insert(k.clone(), (first, last));
            assert_eq!(
                w.triple(k, target),
                (seen[k], first, last),
                "round {round}: {k}"
            );
            let p = w.pending(k);
            assert_eq!(p.notices.len(), 1, "round {round}: {k}");
            assert_eq!(p.notices[0].text, nt(target, seen[k]));
        }
        assert_eq!(opened(&w) - opened_before, watchers.len() as u64);
        // All watchers drain at once: the notice, then its one follow-up, then nothing.
        for first_drain in [true, false] {
            let drains = race(
                watchers
                    .iter()
                    .map(|k| {
                        let (e, k) = (w.engine.clone(), k.clone());
                        Box::new(move || (k.clone(), e.drain(&sref(&k)).unwrap()))
                            as Job<(String, Drain)>
                    })
                    .collect(),
            );
            for (k, d) in drains {
                assert_eq!(d.notices.len(), 1, "round {round}: {k}");
                let ls = d.notices[0].last_seen;
                let expected = if first_drain { seen[&k] } else { told[&k].0 };
                assert_eq!(
                    ls, expected,
                    "round {round}: {k} (follow-up from the watermark)"
                );
            }
        }
        for k in &watchers {
            let m = told[k].1;
            assert_eq!(w.triple(k, target), (m, m, m), "round {round}: {k}");
            seen.insert(k.clone(), m);
        }
        assert_cursor_invariants(&w, &watchers.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    }
    eprintln!(
        "many writers: {} rounds, {events_checked} events, {:?}",
        ROUNDS,
        started.elapsed()
    );
}

#[test]
fn registration_racing_a_material_event() {
    let started = Instant::now();
    let w = World::new();
    w.create(W);
    w.create(X);
    let mut outcomes: BTreeMap<&'static str, usize> = BTreeMap::new();
    for round in 0..ROUNDS {
        // A target without parent: a human turn is recorded only when someone watches it.
        let t = format!("agent:main:r{round}");
        w.create(&t);
        let opened_before = opened(&w);
        let (e1, e2, e3) = (w.engine.clone(), w.engine.clone(), w.engine.clone());
        let (t1, t2, t3) = (t.clone(), t.clone(), t.clone());
        let out = race::<(Option<i64>, Option<i64>)>(vec![
            Box::new(move || {
                let c = e1.register_watch(&sref(W), &sref(&t1)).unwrap();
                (Some(c.state.last_seen), None)
            }),
            Box::new(move || {
                let c = e2.register_watch(&sref(X), &sref(&t2)).unwrap();
                (Some(c.state.last_seen), None)
            }),
            Box::new(move || (None, hdm_on(&e3, &t3))),
        ]);
        let (reg_w, reg_x, event) = (out[0].0.unwrap(), out[1].0.unwrap(), out[2].1);
        let head = w.engine.version(&sref(&t));
        let mut newly_pending = 0;
        match event {
            None => {
                // Nobody watched yet: not recorded; both registered at head 0, nothing pending.
                assert_eq!((reg_w, reg_x, head), (0, 0, 0), "round {round}");
                *outcomes
                    .entry("turn before both registrations")
                    .or_default() += 1;
            }
            Some(s) => {
                assert_eq!(head, s);
                assert!(
                    reg_w == 0 || reg_x == 0,
                    "recorded, so someone watched first"
                );
                for (k, reg) in [(W, reg_w), (X, reg_x)] {
                    if reg == 0 {
                        // Registered before the event: told exactly once, from 0.
                        assert_eq!(w.triple(k, &t), (0, s, s), "round {round}: {k}");
                        let texts = w.notice_texts(k);
                        assert_eq!(texts.iter().filter(|x| **x == nt(&t, 0)).count(), 1);
                        newly_pending += 1;
                    } else {
                        // Registered after it: at the head, nothing pending.
                        assert_eq!(reg, s);
                        assert_eq!(w.triple(k, &t), (s, s, s), "round {round}: {k}");
                    }
                }
                *outcomes
                    .entry(if reg_w == 0 && reg_x == 0 {
                        "turn after both registrations"
                    } else {
                        "turn between the registrations"
                    })
                    .or_default() += 1;
            }
        }
        assert_eq!(opened(&w) - opened_before, newly_pending, "round {round}");
        assert_nothing_lost(&w, W, &t);
        assert_nothing_lost(&w, X, &t);
        // Consume, so the next round starts with empty notice lists.
        w.drain(W);
        w.drain(X);
    }
    assert_cursor_invariants(&w, &[W, X]);
    eprintln!(
        "registration vs material: {ROUNDS} rounds {outcomes:?}, {:?}",
        started.elapsed()
    );
}

/// Spins `f` until it stops answering `session_not_found` (the session is being created by a
/// racing thread).
fn once_it_exists<T>(mut f: impl FnMut() -> Result<T>) -> T {
    for _ in 0..100_000 {
        match f() {
            Err(EngineError::SessionNotFound(_)) => std::thread::yield_now(),
            other => return other.unwrap(),
        }
    }
    panic!("the session never appeared");
}

#[test]
fn unwatch_racing_a_spawn_edge() {
    let started = Instant::now();
    let w = World::new();
    w.create(W);
    let mut events = 0usize;
    let mut turn_before_unwatch = 0usize;
    for round in 0..ROUNDS {
        let child = format!("agent:main:subagent:u{round}");
        let opened_before = opened(&w);
        // 1. The child's creation under W (its `child_spawned` seeds W) races W's unwatch and a
        //    human turn on the child.
        let (e1, e2, e3) = (w.engine.clone(), w.engine.clone(), w.engine.clone());
        let (c1, c2, c3) = (child.clone(), child.clone(), child.clone());
        let out = race::<Option<bool>>(vec![
            Box::new(move || {
                e1.create_session(CreateSession::new(key(&c1)).parent(key(W)))
                    .unwrap();
                None
            }),
            Box::new(move || Some(once_it_exists(|| e2.unwatch(&sref(W), &sref(&c2))))),
            Box::new(move || {
                once_it_exists(|| {
                    e3.post_turn(&sref(&c3), NewTurn::user("hi").channel("telegram"))
                })
                .event
                .expect("a child's turn is always recorded");
                None
            }),
        ]);
        assert_eq!(
            out[1],
            Some(true),
            "round {round}: W is the parent, so unwatch mutes"
        );
        let check_muted = |phase: &str| {
            let c = w.cursor(W, &child).expect("muted row");
            assert!(c.state.muted, "round {round} {phase}: {:?}", c.state);
            assert!(c.state.invariant_holds());
            assert!(c.state.last_seen <= w.engine.version(&sref(&child)));
            assert!(
                w.pending(W).notices.iter().all(|n| n.target_key != child),
                "round {round} {phase}: a notice survived the unwatch"
            );
        };
        check_muted("creation");
        // A turn that landed between the creation and the unwatch opened a notice, which the
        // unwatch then withdrew.
        turn_before_unwatch += (opened(&w) - opened_before) as usize;

        // 2. Watching again unmutes; then the unwatch races a second spawn edge (a producer
        //    passing W) and another human turn. Seeding never unmutes, so W ends muted.
        w.watch(W, &child);
        let (e1, e2, e3) = (w.engine.clone(), w.engine.clone(), w.engine.clone());
        let (c1, c2, c3) = (child.clone(), child.clone(), child.clone());
        let out = race::<Option<bool>>(vec![
            Box::new(move || Some(e1.unwatch(&sref(W), &sref(&c1)).unwrap())),
            Box::new(move || {
                let mut req =
                    AppendRequest::new(sref(&c2), EventKind::ChildSpawned, ActorType::System);
                req.watchers = vec![W.to_string()];
                assert!(e2.append(req).unwrap().event().is_some());
                None
            }),
            Box::new(move || {
                hdm_on(&e3, &c3).expect("recorded");
                None
            }),
        ]);
        assert_eq!(out[0], Some(true), "round {round}");
        check_muted("second edge");
        // Later material work stays silent.
        let before = w.cursor(W, &child).unwrap().state;
        w.hdm(&child);
        assert_eq!(w.cursor(W, &child).unwrap().state, before);
        check_muted("after");
        events += w.seqs(&child, 0).len();
    }
    assert!(w.pending(W).notices.is_empty());
    assert_cursor_invariants(&w, &[W]);
    eprintln!(
        "unwatch vs spawn edge: {ROUNDS} rounds ({turn_before_unwatch} with the turn before the unwatch), {events} events, {:?}",
        started.elapsed()
    );
}

#[test]
fn reset_racing_a_drain() {
    let started = Instant::now();
    let w = World::family();
    let mut outcomes: BTreeMap<&'static str, usize> = BTreeMap::new();
    for round in 0..ROUNDS {
        // W has a pending notice on C and one FIFO line.
        w.hdm(C);
        let before = w.cursor(W, C).unwrap().state;
        assert!(before.is_pending());
        let line = w
            .engine
            .enqueue_system_event(&sref(W), &format!("line {round}"), None)
            .unwrap()
            .unwrap();
        let (e1, e2, e3) = (w.engine.clone(), w.engine.clone(), w.engine.clone());
        let out = race::<(Option<Drain>, Option<i64>)>(vec![
            Box::new(move || {
                e1.reset_session(&sref(W)).unwrap();
                (None, None)
            }),
            Box::new(move || (Some(e2.drain(&sref(W)).unwrap()), None)),
            Box::new(move || (None, hdm_on(&e3, C))),
        ]);
        let d = out[1].0.clone().unwrap();
        let s = out[2].1.expect("C has a parent: always recorded");
        let after = w.cursor(W, C).map(|c| c.state);
        let drained: Vec<i64> = d.notices.iter().map(|n| n.last_seen).collect();
        let fifo: Vec<i64> = d.system_events.iter().map(|e| e.id).collect();
        // Drain before reset: the line and the old notice, together. After: no line at all.
        let outcome = match (fifo.as_slice(), drained.as_slice()) {
            ([id], [ls]) => {
                assert_eq!((*id, *ls), (line, before.last_seen), "round {round}");
                match after {
                    // ... and the turn came after the reset: a fresh cursor from 0.
                    Some(a) => {
                        assert_eq!((a.last_seen, a.notified, a.material), (0, s, s));
                        "drain, reset, turn"
                    }
                    None => "drain and turn, then reset",
                }
            }
            ([], []) if after.is_none() => "turn, reset, drain",
            ([], []) => {
                // Reset first, then the drain found nothing; the turn after both left a pending
                // cursor from 0.
                let a = after.unwrap();
                assert_eq!(
                    (a.last_seen, a.notified, a.material),
                    (0, s, s),
                    "round {round}"
                );
                "reset, drain, turn"
            }
            ([], [0]) => {
                // Reset, turn, drain: the fresh notice was returned and acked.
                let a = after.expect("cursor");
                assert_eq!(
                    (a.last_seen, a.notified, a.material),
                    (s, s, s),
                    "round {round}"
                );
                "reset, turn, drain"
            }
            other => panic!("round {round}: partial drain {other:?} (after: {after:?})"),
        };
        *outcomes.entry(outcome).or_default() += 1;
        // Whatever the order: at most one cursor, consistent, and unseen work is pending.
        if let Some(a) = after {
            assert!(a.invariant_holds());
            assert_eq!(a.is_pending(), a.material > a.last_seen);
        }
        assert!(w.engine.watches(&sref(W)).unwrap().len() <= 1);
    }
    eprintln!(
        "reset vs drain: {ROUNDS} rounds {outcomes:?}, {:?}",
        started.elapsed()
    );
}

/// The async write path (`post_turn_async`, the gateway's `POST …/turns`) dropped right after
/// its first poll, as when the client hangs up: the turn still commits and its wake still goes
/// out, without waiting for another write to apply the effects queue.
#[test]
fn a_dropped_async_turn_still_commits_and_wakes_its_watcher() {
    let w = World::family();
    let mut wakes = w.engine.subscribe_wakes();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let engine = w.engine.clone();
    rt.block_on(async move {
        let child = sref(C);
        let mut fut = std::pin::pin!(engine.post_turn_async(&child, NewTurn::user("hello")));
        tokio::select! {
            biased;
            _ = &mut fut => {}
            () = std::future::ready(()) => {}
        }
        // `fut` is dropped here, mid-flight.
    });
    let wake = rt
        .block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(20), wakes.recv()).await
        })
        .expect("the dropped turn's wake never came")
        .expect("wake");
    assert_eq!(wake.session_key, W, "{wake:?}");
    assert_eq!(w.pending(W).notices.len(), 1);
}
