//! The console's engine reads: the watch graph's neighbourhood and edge kinds, the session page,
//! the change generation, and their answers and timings (printed with `--nocapture`, not
//! judged) at 10,000 sessions / 100,000 cursors.

use crate::common::*;
use aware_core::{ActorType, CursorState, EventKind, Origin};
use aware_engine::*;
use aware_store::StoreExt;
use aware_store::{ConsoleFilter, CursorRow, NewEvent, SessionRow};
use std::time::Instant;

fn edge<'a>(g: &'a Graph, w: &str, t: &str) -> Option<&'a GraphEdge> {
    g.edges.iter().find(|e| e.from.0 == w && e.to.0 == t)
}

fn node_keys(g: &Graph) -> Vec<&str> {
    g.nodes.iter().map(|n| n.session.key.as_str()).collect()
}

#[test]
fn graph_neighbourhood_follows_cursors_and_parents_with_edge_kinds() {
    let w = World::family();
    w.create_child(D, W);
    w.create(X);
    w.watch(X, C);
    assert!(w.engine.unwatch(&sref(W), &sref(D)).unwrap());
    w.hdm(C);
    let g = w.engine.console_graph(Some(&sref(C)), 1, 300, &[]).unwrap();
    assert_eq!(
        node_keys(&g),
        [X, W, C],
        "one hop: parent and watcher, not the sibling"
    );
    let e = edge(&g, W, C).expect("spawn edge");
    assert_eq!((e.kind, e.pending), (EdgeKind::Spawn, true));
    let e = edge(&g, X, C).expect("watch edge");
    assert_eq!((e.kind, e.pending), (EdgeKind::Watch, true));
    let g = w.engine.console_graph(Some(&sref(C)), 2, 300, &[]).unwrap();
    assert!(node_keys(&g).contains(&D), "two hops reach the sibling");
    assert_eq!(edge(&g, W, D).unwrap().kind, EdgeKind::Muted);
    let g = w.engine.console_graph(Some(&sref(C)), 2, 2, &[]).unwrap();
    assert!(g.truncated && g.nodes.len() == 2, "the node limit cuts");
    let g = w
        .engine
        .console_graph(None, 2, 300, &["ops".into()])
        .unwrap();
    assert!(g.nodes.is_empty(), "an agent filter keeps other agents out");
}

#[test]
fn session_page_shows_notices_both_ways_and_newest_events_first() {
    let w = World::family();
    let seq = w.hdm_seq(C);
    let d = w.engine.console_session(&sref(W), None, 50, 50).unwrap();
    assert_eq!(d.notices.len(), 1);
    assert_eq!(d.notices[0].text, nt(C, seq - 1));
    let c = w.engine.console_session(&sref(C), None, 1, 50).unwrap();
    assert_eq!(c.events[0].sequence, seq);
    assert!(c.more_events, "one event per page, more below");
    assert_eq!(c.notices_on[0].0, W);
    assert_eq!(c.turns.len(), 1);
    assert_eq!(c.turn_count, 1);
    let older = w
        .engine
        .console_session(&sref(C), Some(seq), 50, 50)
        .unwrap();
    assert!(older.events.iter().all(|e| e.sequence < seq));
}

#[test]
fn every_committed_write_bumps_the_change_generation() {
    let w = World::family();
    let mut rx = w.engine.subscribe_changes();
    rx.borrow_and_update();
    assert!(!rx.has_changed().unwrap());
    w.hdm(C);
    assert!(rx.has_changed().unwrap());
    rx.borrow_and_update();
    w.drain(W);
    assert!(rx.has_changed().unwrap(), "an ack is a change too");
}

fn session_row(key: &str, parent: &str, at: i64) -> SessionRow {
    SessionRow {
        key: key.into(),
        agent_id: "main".into(),
        session_id: format!("sid-{at}"),
        kind: "subagent".into(),
        label: None,
        parent_key: Some(parent.into()),
        created_via: "api".into(),
        active_run_id: None,
        goal: None,
        orphaned: false,
        created_at: at,
        updated_at: at,
        upstream: None,
    }
}

/// The median and the fastest of 21 runs: on a shared machine the fastest is the better guess
/// at the work itself, the median at what a user waits.
struct Timing(std::time::Duration, std::time::Duration);

impl std::fmt::Debug for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2?} (min {:.2?})", self.0, self.1)
    }
}

fn p50(mut f: impl FnMut()) -> Timing {
    let mut t: Vec<_> = (0..21)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    Timing(t[10], t[0])
}

/// Prints the p50 of the console's reads at 10,000 sessions / 100,000 cursors, then checks
/// their answers at that size. About 5 s in a debug build; the figures with
/// `cargo test --release -p aware-engine --test it console:: -- --nocapture`.
#[test]
fn console_reads_timing_at_10k_sessions_100k_cursors() {
    let w = World::new();
    w.create(W);
    let n: i64 = 10_000;
    let key = |i: i64| format!("agent:main:subagent:s{i:05}");
    w.engine
        .store()
        .write(move |tx| {
            for i in 0..n {
                tx.insert_session(&session_row(&key(i), W, T0 + i))?;
                for j in 0..3 {
                    let seq = tx.insert_event(&NewEvent {
                        dedupe_key: None,
                        session_key: key(i),
                        session_id: None,
                        agent_id: "main".into(),
                        kind: EventKind::HumanDirectMessage,
                        actor_type: if j == 0 {
                            ActorType::Human
                        } else {
                            ActorType::Agent
                        },
                        actor_id: None,
                        run_id: None,
                        occurred_at: T0 + i,
                        summary: "s".into(),
                        payload: None,
                    })?;
                    tx.upsert_head(&key(i), "main", seq, T0 + i)?;
                }
                for j in 1..=10 {
                    let pending = j == 1;
                    tx.put_cursor(&CursorRow {
                        watcher: key(i),
                        target_key: key((i + j * 7) % n),
                        target_agent: "main".into(),
                        state: CursorState {
                            last_seen: 0,
                            notified: i64::from(pending),
                            material: i64::from(pending),
                            muted: false,
                            origin: Origin::Watch,
                            notice_opened_at: pending.then_some(T0),
                            updated_at: T0,
                        },
                        created_at: T0,
                    })?;
                }
            }
            Ok(())
        })
        .unwrap();
    let e = &w.engine;
    let focus = sref(&key(4242));
    println!(
        "console_sessions (-updatedAt, 50 rows): p50 {:?}",
        p50(|| {
            e.console_sessions(&ConsoleFilter {
                descending: true,
                limit: 50,
                ..Default::default()
            })
            .unwrap();
        })
    );
    println!(
        "console_session (page of one session): p50 {:?}",
        p50(|| {
            e.console_session(&focus, None, 50, 50).unwrap();
        })
    );
    println!(
        "console_sessions (-updatedAt, 300 rows): p50 {:?}",
        p50(|| {
            e.console_sessions(&ConsoleFilter {
                descending: true,
                limit: 300,
                ..Default::default()
            })
            .unwrap();
        })
    );
    println!(
        "300 x cursors_by_watcher: p50 {:?}",
        p50(|| {
            for i in 0..300 {
                e.watches(&sref(&key(i))).unwrap();
            }
        })
    );
    let watchers: Vec<String> = (0..300).map(key).collect();
    println!(
        "console_cursors_held_by (300 watchers, one query): p50 {:?}",
        p50(|| {
            e.store()
                .read(|r| r.console_cursors_held_by(&watchers))
                .unwrap();
        })
    );
    println!(
        "list_sessions (children of a parent of 10,000, 301 rows): p50 {:?}",
        p50(|| {
            e.store()
                .read(|r| {
                    r.list_sessions(&aware_store::SessionFilter {
                        parent_key: Some(W.into()),
                        limit: 301,
                        ..Default::default()
                    })
                })
                .unwrap();
        })
    );
    let keys: Vec<(String, String)> = (0..300)
        .map(|i| (key(i * 30), "main".to_string()))
        .collect();
    println!(
        "console_sessions (300 named keys): p50 {:?}",
        p50(|| {
            e.console_sessions(&ConsoleFilter {
                keys: keys.clone(),
                limit: 300,
                ..Default::default()
            })
            .unwrap();
        })
    );
    println!(
        "console_graph (focus, depth 2): p50 {:?}",
        p50(|| {
            e.console_graph(Some(&focus), 2, 300, &[]).unwrap();
        })
    );
    println!(
        "console_graph (no focus, 300 nodes): p50 {:?}",
        p50(|| {
            e.console_graph(None, 2, 300, &[]).unwrap();
        })
    );
    // What was timed answers right at this size: W and its 10,000 children; ten cursors per
    // watcher, one of them pending; the named keys, exactly.
    let (rows, total) = e
        .console_sessions(&ConsoleFilter {
            descending: true,
            limit: 50,
            ..Default::default()
        })
        .unwrap();
    assert_eq!((rows.len(), total), (50, n as u64 + 1));
    for i in [0, 4242, n - 1] {
        let held = e.watches(&sref(&key(i))).unwrap();
        assert_eq!(held.len(), 10, "{}", key(i));
        assert_eq!(
            held.iter()
                .filter(|c| c.state.notified > c.state.last_seen)
                .count(),
            1
        );
    }
    let held = e
        .store()
        .read(|r| r.console_cursors_held_by(&watchers))
        .unwrap();
    assert_eq!(held.len(), 3_000);
    let children = e
        .store()
        .read(|r| {
            r.list_sessions(&aware_store::SessionFilter {
                parent_key: Some(W.into()),
                limit: 301,
                ..Default::default()
            })
        })
        .unwrap();
    assert_eq!(children.len(), 301);
    let (rows, total) = e
        .console_sessions(&ConsoleFilter {
            keys: keys.clone(),
            limit: 300,
            ..Default::default()
        })
        .unwrap();
    assert_eq!((rows.len(), total), (300, 300));
    let mut named: Vec<&str> = rows.iter().map(|r| r.session.key.as_str()).collect();
    named.sort();
    let mut want: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    want.sort();
    assert_eq!(named, want);
}
