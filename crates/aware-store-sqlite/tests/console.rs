//! The console's session-table read: filters, sort, paging, the pending counts and the last
//! event, plus a timing printout at 10,000 sessions / 100,000 cursors (`--nocapture`; no timing
//! assertion: timings belong to benches).
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_core::{ActorType, CursorState, EventKind, Origin};
use aware_store::*;
use aware_store_sqlite::{Durability, SqliteStore, StoreOptions};
use std::time::Instant;

fn session(key: &str, agent: &str, kind: &str, parent: Option<&str>, at: i64) -> SessionRow {
    SessionRow {
        key: key.into(),
        agent_id: agent.into(),
        session_id: format!("sid-{key}"),
        kind: kind.into(),
        label: None,
        parent_key: parent.map(str::to_string),
        created_via: "api".into(),
        active_run_id: None,
        goal: None,
        orphaned: false,
        created_at: at,
        updated_at: at,
        upstream: None,
    }
}

fn cursor(watcher: &str, key: &str, agent: &str, pending: bool) -> CursorRow {
    CursorRow {
        watcher: watcher.into(),
        target_key: key.into(),
        target_agent: agent.into(),
        state: CursorState {
            last_seen: 0,
            notified: i64::from(pending),
            material: i64::from(pending),
            muted: false,
            origin: Origin::Watch,
            notice_opened_at: pending.then_some(5),
            updated_at: 1,
        },
        created_at: 1,
    }
}

fn event(key: &str, agent: &str, actor: ActorType, at: i64) -> NewEvent {
    NewEvent {
        dedupe_key: None,
        session_key: key.into(),
        session_id: None,
        agent_id: agent.into(),
        kind: EventKind::HumanDirectMessage,
        actor_type: actor,
        actor_id: Some("alice".into()),
        run_id: None,
        occurred_at: at,
        summary: "hello".into(),
        payload: None,
    }
}

fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        StoreOptions::new(dir.path().join("s.db")).durability(Durability::Normal),
    )
    .unwrap();
    (dir, store)
}

const MGR: &str = "agent:main:main";
const W1: &str = "agent:main:subagent:w1";
const W2: &str = "agent:main:subagent:w2";
const OPS: &str = "agent:ops:main";

fn seed(store: &SqliteStore) {
    store
        .write(|tx| {
            tx.insert_session(&session(MGR, "main", "main", None, 10))?;
            tx.insert_session(&session(W1, "main", "subagent", Some(MGR), 20))?;
            let mut w2 = session(W2, "main", "subagent", Some(MGR), 30);
            w2.label = Some("Builder".into());
            tx.insert_session(&w2)?;
            tx.insert_session(&session(OPS, "ops", "main", None, 40))?;
            let seq = tx.insert_event(&event(W1, "main", ActorType::Human, 100))?;
            tx.upsert_head(W1, "main", seq, 100)?;
            let seq = tx.insert_event(&event(W2, "main", ActorType::Agent, 200))?;
            tx.upsert_head(W2, "main", seq, 200)?;
            tx.put_cursor(&cursor(MGR, W1, "main", true))?;
            tx.put_cursor(&cursor(MGR, W2, "main", false))?;
            tx.put_cursor(&cursor(OPS, W1, "main", true))?;
            Ok(())
        })
        .unwrap();
}

fn page(store: &SqliteStore, f: ConsoleFilter) -> (Vec<ConsoleRow>, u64) {
    store.read(|r| r.console_sessions(&f)).unwrap()
}

fn keys(rows: &[ConsoleRow]) -> Vec<&str> {
    rows.iter().map(|r| r.session.key.as_str()).collect()
}

#[test]
fn console_rows_carry_pending_counts_last_event_and_human_time() {
    let (_d, store) = open();
    seed(&store);
    let (rows, total) = page(
        &store,
        ConsoleFilter {
            limit: 10,
            ..Default::default()
        },
    );
    assert_eq!(total, 4);
    let w1 = rows.iter().find(|r| r.session.key == W1).unwrap();
    assert_eq!(w1.pending_as_target, 2);
    assert_eq!(w1.pending_as_watcher, 0);
    assert_eq!(w1.state_version, 1);
    assert_eq!(w1.last_event_at, Some(100));
    assert_eq!(w1.last_event_kind.as_deref(), Some("human_direct_message"));
    assert_eq!(w1.last_human_at, Some(100));
    let w2 = rows.iter().find(|r| r.session.key == W2).unwrap();
    assert_eq!(w2.last_human_at, None, "an agent actor is not a human");
    let mgr = rows.iter().find(|r| r.session.key == MGR).unwrap();
    assert_eq!(mgr.pending_as_watcher, 1);
    assert_eq!(mgr.state_version, 0);
    assert_eq!(mgr.last_event_kind, None);
}

#[test]
fn console_filters_sort_and_page() {
    let (_d, store) = open();
    seed(&store);
    let only_main = ConsoleFilter {
        agents: vec!["main".into()],
        limit: 10,
        ..Default::default()
    };
    let (rows, total) = page(&store, only_main.clone());
    assert_eq!(total, 3);
    assert_eq!(
        keys(&rows),
        [MGR, W1, W2],
        "default sort is updated_at ascending"
    );
    let (rows, _) = page(
        &store,
        ConsoleFilter {
            kind: Some("subagent".into()),
            text: Some("builder".into()),
            limit: 10,
            ..Default::default()
        },
    );
    assert_eq!(
        keys(&rows),
        [W2],
        "text matches the label, case-insensitively"
    );
    let (rows, _) = page(
        &store,
        ConsoleFilter {
            text: Some("W1".into()),
            limit: 10,
            ..Default::default()
        },
    );
    assert_eq!(keys(&rows), [W1], "text matches the key");
    let (rows, total) = page(
        &store,
        ConsoleFilter {
            sort: ConsoleSort::PendingAsTarget,
            descending: true,
            limit: 1,
            offset: 0,
            ..Default::default()
        },
    );
    assert_eq!((keys(&rows), total), (vec![W1], 4));
    let (rows, _) = page(
        &store,
        ConsoleFilter {
            sort: ConsoleSort::LastEvent,
            descending: true,
            limit: 2,
            offset: 0,
            ..Default::default()
        },
    );
    assert_eq!(keys(&rows), [W2, W1]);
    let (rows, _) = page(
        &store,
        ConsoleFilter {
            sort: ConsoleSort::Key,
            limit: 2,
            offset: 2,
            ..Default::default()
        },
    );
    assert_eq!(keys(&rows), [W2, OPS], "offset skips the first two keys");
    let (rows, total) = page(
        &store,
        ConsoleFilter {
            keys: vec![(W1.into(), "main".into()), (OPS.into(), "ops".into())],
            limit: 10,
            ..Default::default()
        },
    );
    assert_eq!((keys(&rows), total), (vec![W1, OPS], 2));
}

/// Prints the p50 of console pages at 10,000 sessions / 100,000 cursors, and checks every
/// page it timed: 50 rows, the exact total, one pending notice each way on every row (each
/// session watches ten others and only its first cursor is pending, which lands on a
/// different target for every watcher). About 4 s in a debug build; the figures with
/// `cargo test --release -p aware-store --test console -- --nocapture console_page_timing`.
#[test]
fn console_page_timing_at_10k_sessions() {
    let (_d, store) = open();
    let n = 10_000;
    store
        .write(move |tx| {
            for i in 0..n {
                let key = format!("agent:main:subagent:s{i:05}");
                tx.insert_session(&session(&key, "main", "subagent", Some(MGR), i))?;
                let seq = tx.insert_event(&event(&key, "main", ActorType::Agent, i))?;
                tx.upsert_head(&key, "main", seq, i)?;
            }
            for i in 0..n {
                let w = format!("agent:main:subagent:s{i:05}");
                for j in 1..=10 {
                    let t = format!("agent:main:subagent:s{:05}", (i + j * 7) % n);
                    tx.put_cursor(&cursor(&w, &t, "main", j == 1))?;
                }
            }
            Ok(())
        })
        .unwrap();
    for (name, sort, text) in [
        ("updated", ConsoleSort::Updated, None),
        ("lastEvent", ConsoleSort::LastEvent, None),
        ("pendingAsTarget", ConsoleSort::PendingAsTarget, None),
        ("pendingAsWatcher", ConsoleSort::PendingAsWatcher, None),
        ("text q=s09", ConsoleSort::Updated, Some("s09".to_string())),
    ] {
        let mut times = Vec::new();
        for _ in 0..21 {
            let t = Instant::now();
            let (rows, total) = page(
                &store,
                ConsoleFilter {
                    sort,
                    descending: true,
                    text: text.clone(),
                    limit: 50,
                    offset: 100,
                    ..Default::default()
                },
            );
            times.push(t.elapsed());
            assert_eq!(rows.len(), 50);
            // `s09` matches s09000..=s09999 only.
            assert_eq!(total, if text.is_some() { 1_000 } else { n as u64 });
            for r in &rows {
                assert_eq!(
                    (r.pending_as_watcher, r.pending_as_target),
                    (1, 1),
                    "{}",
                    r.session.key
                );
                if let Some(t) = &text {
                    assert!(r.session.key.contains(t.as_str()), "{}", r.session.key);
                }
            }
        }
        times.sort();
        println!("console_sessions sort={name}: p50 {:?}", times[10]);
    }
}

#[test]
fn events_before_pages_backwards_and_runs_of_lists_newest_first() {
    let (_d, store) = open();
    seed(&store);
    store
        .write(|tx| {
            for at in 300..303 {
                let seq = tx.insert_event(&event(W1, "main", ActorType::System, at))?;
                tx.upsert_head(W1, "main", seq, at)?;
            }
            for (i, at) in [(1, 10), (2, 30), (3, 20)] {
                tx.insert_run(&RunRow {
                    run_id: format!("r{i}"),
                    session_key: W1.into(),
                    agent_id: "main".into(),
                    session_id: "sid".into(),
                    started_at: at,
                    ended_at: None,
                    outcome: None,
                    deadline_at: None,
                    event_sequence: None,
                })?;
            }
            Ok(())
        })
        .unwrap();
    let page = store
        .read(|r| r.events_before(W1, "main", i64::MAX, 2))
        .unwrap();
    let at: Vec<i64> = page.iter().map(|e| e.occurred_at).collect();
    assert_eq!(at, [302, 301], "newest first");
    let older = store
        .read(|r| r.events_before(W1, "main", page[1].sequence, 10))
        .unwrap();
    let at: Vec<i64> = older.iter().map(|e| e.occurred_at).collect();
    assert_eq!(
        at,
        [300, 100],
        "the next page continues below the last sequence shown"
    );
    let runs = store.read(|r| r.runs_of(W1, "main", 2)).unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["r2", "r3"]);
}

#[test]
fn cursors_held_by_a_set_of_watchers_come_in_one_ordered_read() {
    let (_d, store) = open();
    store
        .write(|tx| {
            tx.put_cursor(&cursor(W1, OPS, "ops", false))?;
            tx.put_cursor(&cursor(MGR, W2, "main", true))?;
            tx.put_cursor(&cursor(MGR, W1, "main", false))?;
            tx.put_cursor(&cursor(W2, W1, "main", false))?;
            Ok(())
        })
        .unwrap();
    let held = |w: &[&str]| {
        let w: Vec<String> = w.iter().map(|s| s.to_string()).collect();
        store
            .read(|r| r.console_cursors_held_by(&w))
            .unwrap()
            .into_iter()
            .map(|c| (c.watcher, c.target_key))
            .collect::<Vec<_>>()
    };
    let pair = |w: &str, t: &str| (w.to_string(), t.to_string());
    assert_eq!(
        held(&[W1, MGR]),
        [pair(MGR, W1), pair(MGR, W2), pair(W1, OPS)],
        "every cursor of the named watchers, by watcher then target; none of W2's"
    );
    assert!(held(&[]).is_empty(), "no watchers, no cursors");
    assert!(held(&["agent:main:nobody"]).is_empty());
}
