//! The failure model at the store seam (01 §8, §12), on real SQLite files: appends failing for
//! every session or for one, failing reads, a commit failing under a full group-commit batch, a
//! data dir that turns read-only, and a full disk (`PRAGMA max_page_count`).
//!
//! Each test states the fault it injects, what the caller is answered, and what the store holds
//! afterwards; "nothing half-written" is checked on the raw tables, not only through the engine.

use crate::common::*;
use aware_core::{ActorType, EventKind};
use aware_engine::*;
use aware_store::StoreExt;
use aware_testkit::engine::{open_sqlite_engine, Durability};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

/// Every row of the signal-log and watch tables, as text, for before/after comparisons.
fn log_tables(w: &World) -> BTreeMap<&'static str, Vec<String>> {
    let conn = rusqlite::Connection::open_with_flags(
        w.dir.path().join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut out = BTreeMap::new();
    for (table, sql) in [
        ("events", "SELECT sequence, session_key, agent_id, kind, summary, coalesce(payload_json, '') FROM session_state_events ORDER BY sequence"),
        ("heads", "SELECT session_key, agent_id, last_sequence, pruned_max_sequence FROM session_state_heads ORDER BY 1, 2"),
        ("cursors", "SELECT watcher_session_key, target_session_key, target_agent_id, last_seen_sequence, notified_sequence, material_sequence, muted FROM session_watch_cursors ORDER BY 1, 2, 3"),
    ] {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                let mut cells = Vec::new();
                for i in 0..n {
                    let v: rusqlite::types::Value = r.get(i)?;
                    cells.push(format!("{v:?}"));
                }
                Ok(cells.join("|"))
            })
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        out.insert(table, rows);
    }
    out
}

fn turn_texts(w: &World, s: &str) -> Vec<String> {
    w.engine
        .list_turns(&sref(s), None, 10_000)
        .unwrap()
        .0
        .into_iter()
        .map(|t| t.text)
        .collect()
}

fn failures(w: &World) -> u64 {
    EngineMetrics::get(&w.engine.metrics().append_failures)
}

// ---- Appends failing ----

#[test]
fn appends_failing_for_every_session_leave_each_primary_action_standing() {
    let w = World::family();
    w.hdm(C); // W: (1, 2, 2), a notice pending
    let before = log_tables(&w);
    let notices_before = w.notice_texts(W);
    let hdm_before = w
        .engine
        .metrics()
        .appended_total(EventKind::HumanDirectMessage);
    w.engine.store().faults().set_fail_appends(true);

    // A human turn: stored and answered, no event.
    let out = w.hdm(C);
    assert!(out.event.is_none() && !out.duplicate);
    // A goal change: stored, `changed`, no event.
    let g = w
        .engine
        .set_goal(&sref(C), "ship it", GoalStatus::Active, Actor::system())
        .unwrap();
    assert!(g.changed && g.event.is_none());
    // A compaction: the marker turn is stored, no event.
    let cp = w.engine.compaction(&sref(C), "op-1", None).unwrap();
    assert!(cp.event.is_none() && !cp.duplicate);
    // A run ending with an error: the run ends, no `run_failed`.
    w.engine
        .start_run(&sref(C), Some("r1".into()), None)
        .unwrap();
    let end = w.engine.end_run(&sref(C), "r1", RunOutcome::Error).unwrap();
    assert_eq!(end.run.outcome.as_deref(), Some("error"));
    assert!(end.event.is_none());
    // A spawn: the child, its task turn and its run exist; `created` and `child_spawned` are not
    // recorded, so the parent is not seeded.
    let sp = w.engine.spawn(&sref(W), "task", None, None, None).unwrap();
    let child = w.engine.get_session(&sref(&sp.child_key)).unwrap();
    assert_eq!(child.state_version, 0);
    assert_eq!(child.row.active_run_id.as_deref(), Some(sp.run_id.as_str()));
    assert_eq!(turn_texts(&w, &sp.child_key), vec!["task".to_string()]);
    assert!(w.cursor(W, &sp.child_key).is_none());
    // An operator-created child: `child_spawned` fails, the session stands.
    w.create_child(D, W);
    assert!(w.cursor(W, D).is_none());

    // 1 turn + 1 goal + 1 compaction + 1 run end + 2 spawn + 1 child = 7 failed appends.
    assert_eq!(failures(&w), 7);
    assert_eq!(
        w.engine
            .metrics()
            .appended_total(EventKind::HumanDirectMessage),
        hdm_before
    );
    // Nothing half-written: no event row, no head moved, no cursor touched.
    assert_eq!(log_tables(&w), before);
    assert_eq!(w.notice_texts(W), notices_before);
    assert_eq!(w.triple(W, C), (1, 2, 2));
    // The primary actions are all there.
    assert_eq!(turn_texts(&w, C), vec!["hello", "hello", "[compacted]"]);
    let c = w.engine.get_session(&sref(C)).unwrap();
    assert_eq!(c.goal().map(|g| g.text.as_str()), Some("ship it"));
    assert_eq!(c.status(), "idle");

    // Cleared: the next append takes the next sequence; no number was burnt by the failures.
    w.engine.store().faults().clear();
    assert_eq!(w.hdm_seq(C), 3);
    assert_eq!(w.seqs(C, 0), vec![1, 2, 3]);
    assert_eq!(w.triple(W, C), (1, 2, 3));
}

#[test]
fn appends_failing_for_one_session_spare_the_batch_and_the_others() {
    let w = World::family();
    w.create_child(D, W); // sequences are global: C's child_spawned is 1, D's is 2
    w.engine
        .store()
        .faults()
        .set_fail_appends_for(Some(D.into()));
    let before_d: Vec<String> = log_tables(&w)
        .into_values()
        .flat_map(|rows| rows.into_iter().filter(|r| r.contains(D)))
        .collect();
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let (e, b) = (w.engine.clone(), barrier.clone());
            let target = if i % 2 == 0 { C } else { D };
            std::thread::spawn(move || {
                b.wait();
                let turn = e
                    .post_turn(
                        &sref(target),
                        NewTurn::user(format!("t{i}")).channel("telegram"),
                    )
                    .unwrap();
                let goal = e
                    .set_goal(
                        &sref(target),
                        &format!("goal {i}"),
                        GoalStatus::Active,
                        Actor::system(),
                    )
                    .unwrap();
                (target, turn.event.is_some(), goal.event.is_some())
            })
        })
        .collect();
    for h in handles {
        let (target, turn_ev, goal_ev) = h.join().unwrap();
        assert_eq!(turn_ev, target == C, "{target}");
        assert_eq!(goal_ev, target == C, "{target}");
    }
    assert_eq!(failures(&w), 16, "8 turns + 8 goals on D");
    // C: 16 events after its creation, sequences unique and dense (D's failures burnt no
    // number); W's notice on C is open.
    assert_eq!(w.seqs(C, 1), (3..=18).collect::<Vec<_>>());
    assert_eq!(w.triple(W, C), (1, 3, 18));
    // D: every turn and goal stored, its log, head and W's cursor on it exactly as before.
    assert_eq!(turn_texts(&w, D).len(), 8);
    assert!(w.engine.get_session(&sref(D)).unwrap().goal().is_some());
    let after_d: Vec<String> = log_tables(&w)
        .into_values()
        .flat_map(|rows| rows.into_iter().filter(|r| r.contains(D)))
        .collect();
    assert_eq!(after_d, before_d);
    assert_eq!(w.triple(W, D), (2, 2, 2));
    let notices = w.pending(W).notices;
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].target_key, C);
}

// ---- Reads failing ----

#[test]
fn failing_reads_degrade_while_writes_go_on() {
    let w = World::family();
    w.create(X);
    w.engine.store().faults().set_fail_reads(true);
    // The writer's own reads are not affected: the turn is recorded at the right sequence and
    // opens W's notice; X registers at the true head, not at a degraded 0.
    assert_eq!(w.hdm_seq(C), 2);
    assert_eq!(triple(&w.watch(X, C).state), (2, 2, 2));
    // Reads degrade (01 §12): 0, an empty map, the empty page, a session at version 0.
    assert_eq!(w.engine.version(&sref(C)), 0);
    assert!(w.engine.versions(&[sref(C), sref(W)]).is_empty());
    assert_eq!(w.changes(C, 0), StateChanges::default());
    assert_eq!(w.engine.get_session(&sref(C)).unwrap().state_version, 0);
    assert_eq!(EngineMetrics::get(&w.engine.metrics().read_failures), 4);
    // Notices are cursors, not log reads: still visible and drainable.
    assert_eq!(w.notice_texts(W), vec![nt(C, 1)]);
    // Cleared: everything written during the fault is there.
    w.engine.store().faults().clear();
    assert_eq!(w.engine.version(&sref(C)), 2);
    assert_eq!(w.seqs(C, 0), vec![1, 2]);
    assert_eq!(w.engine.versions(&[sref(C)])[&sref(C)], 2);
    let d = w.drain(W);
    assert_eq!(d.notices.len(), 1);
    assert_eq!(w.triple(W, C), (2, 2, 2));
}

// ---- A commit failing mid-batch ----

/// Holds the writer inside one op until `n` threads have counted themselves in `arrived`
/// (each right before submitting its op), plus a margin, so every one of those ops lands in
/// the *next* batch. With `fail_next_batch`, the op's after-commit hook arms
/// `fail_next_commits(1)`, so that next batch is the one whose COMMIT fails.
fn hold_writer(
    w: &World,
    arrived: Arc<AtomicUsize>,
    n: usize,
    fail_next_batch: bool,
) -> std::thread::JoinHandle<()> {
    let store = w.engine.store().clone();
    let (started_tx, started_rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let s2 = store.clone();
        store
            .write(move |tx| {
                let _ = started_tx.send(());
                let deadline = Instant::now() + Duration::from_secs(20);
                while arrived.load(Ordering::SeqCst) < n && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(Duration::from_millis(150));
                if fail_next_batch {
                    let s2 = s2.clone();
                    tx.after_commit(Box::new(move || s2.faults().fail_next_commits(1)));
                }
                Ok(())
            })
            .unwrap();
    });
    started_rx.recv().unwrap();
    h
}

#[derive(Debug)]
enum Op {
    Turn(String, Result<Option<i64>, String>),
    Other(&'static str, Result<(), String>),
}

#[test]
fn a_commit_failing_mid_batch_fails_every_op_of_that_batch_and_nothing_else() {
    let w = World::family();
    w.create(X);
    w.hdm(C); // W: (1, 2, 2) pending
    let commits_failed = || {
        w.engine
            .store()
            .metrics()
            .commit_failures
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = log_tables(&w);
    let appended_before = w
        .engine
        .metrics()
        .appended_total(EventKind::HumanDirectMessage);

    // Phase A: 32 threads queue behind a held writer; their batch's COMMIT fails.
    let arrived = Arc::new(AtomicUsize::new(0));
    let holder = hold_writer(&w, arrived.clone(), 32, true);
    let barrier = Arc::new(Barrier::new(32));
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let (e, b, arrived) = (w.engine.clone(), barrier.clone(), arrived.clone());
            std::thread::spawn(move || {
                b.wait();
                arrived.fetch_add(1, Ordering::SeqCst);
                let code = |e: EngineError| format!("{}: {e}", e.kind_name());
                match i {
                    // A drain, a registration and a goal change share the failing batch.
                    0 => Op::Other("drain", e.drain(&sref(W)).map(|_| ()).map_err(code)),
                    1 => Op::Other(
                        "register",
                        e.register_watch(&sref(X), &sref(C))
                            .map(|_| ())
                            .map_err(code),
                    ),
                    2 => Op::Other(
                        "goal",
                        e.set_goal(&sref(C), "g", GoalStatus::Active, Actor::system())
                            .map(|_| ())
                            .map_err(code),
                    ),
                    _ => {
                        let text = format!("phase-a-{i}");
                        let r = e
                            .post_turn(&sref(C), NewTurn::user(text.clone()).channel("telegram"))
                            .map(|t| t.event.map(|ev| ev.sequence))
                            .map_err(code);
                        Op::Turn(text, r)
                    }
                }
            })
        })
        .collect();
    let results: Vec<Op> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    holder.join().unwrap();
    let failed = results
        .iter()
        .filter(|r| match r {
            Op::Turn(_, r) => r.is_err(),
            Op::Other(_, r) => r.is_err(),
        })
        .count();
    eprintln!("phase A: {failed}/32 ops of one batch failed on its COMMIT");
    assert_eq!(
        failed, 32,
        "every op queued behind the writer shares the failing batch: {results:?}"
    );
    for r in &results {
        let (what, err) = match r {
            Op::Turn(t, Err(e)) => (t.as_str(), e),
            Op::Other(what, Err(e)) => (*what, e),
            _ => unreachable!(),
        };
        assert!(
            err.starts_with("store_unavailable: ") && err.contains("commit failed"),
            "{what}: {err}"
        );
    }
    assert_eq!(commits_failed(), 1);
    // Nothing of the batch is stored: no turn, no event, no goal, no cursor change; the
    // drained notice is still pending (a failed drain acks nothing).
    assert_eq!(log_tables(&w), before);
    assert_eq!(turn_texts(&w, C), vec!["hello"]);
    assert!(w.engine.get_session(&sref(C)).unwrap().goal().is_none());
    assert!(w.cursor(X, C).is_none());
    assert_eq!(w.notice_texts(W), vec![nt(C, 1)]);
    assert_eq!(
        w.engine
            .metrics()
            .appended_total(EventKind::HumanDirectMessage),
        appended_before,
        "after-commit effects of a failed batch are dropped"
    );
    // Later ops succeed.
    assert_eq!(w.hdm_seq(C), 3);

    // Phase B: 32 threads × 4 turns; one commit fails somewhere in the middle of the storm.
    let barrier = Arc::new(Barrier::new(33));
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let (e, b) = (w.engine.clone(), barrier.clone());
            std::thread::spawn(move || {
                b.wait();
                (0..4)
                    .map(|j| {
                        let text = format!("phase-b-{i}-{j}");
                        let r = e
                            .post_turn(&sref(C), NewTurn::user(text.clone()).channel("telegram"))
                            .map(|t| t.event.map(|ev| ev.sequence))
                            .map_err(|e| e.kind_name().to_string());
                        (text, r)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let ops_before = w.engine.store().metrics().ops();
    barrier.wait();
    while w.engine.store().metrics().ops() < ops_before + 40 {
        std::thread::yield_now();
    }
    w.engine.store().faults().fail_next_commits(1);
    let results: Vec<(String, Result<Option<i64>, String>)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let ok: BTreeMap<String, i64> = results
        .iter()
        .filter_map(|(t, r)| r.as_ref().ok().map(|s| (t.clone(), s.expect("event"))))
        .collect();
    let err: BTreeSet<String> = results
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(t, _)| t.clone())
        .collect();
    eprintln!(
        "phase B: {} ok, {} failed; largest committed group {}",
        ok.len(),
        err.len(),
        w.engine.store().metrics().max_group()
    );
    assert!(!err.is_empty(), "the armed commit failure hit a batch");
    assert!(results
        .iter()
        .all(|(_, r)| r.as_ref().err().is_none_or(|c| c == "store_unavailable")));
    assert_eq!(commits_failed(), 2);
    // Exactly the answered turns are stored; their sequences are unique and are the log's.
    let stored: BTreeSet<String> = turn_texts(&w, C)
        .into_iter()
        .filter(|t| t.starts_with("phase-b-"))
        .collect();
    assert_eq!(stored, ok.keys().cloned().collect::<BTreeSet<_>>());
    let mut seqs: Vec<i64> = ok.values().copied().collect();
    seqs.sort();
    let unique: BTreeSet<i64> = seqs.iter().copied().collect();
    assert_eq!(unique.len(), seqs.len(), "sequences answered twice");
    assert_eq!(w.seqs(C, 3), seqs);
    assert_eq!(w.engine.version(&sref(C)), *seqs.last().unwrap());
    let (ls, n, m) = w.triple(W, C);
    assert_eq!((ls, n, m), (1, 2, *seqs.last().unwrap()));
}

// ---- A read-only data dir ----

const RO_PARENT_TEST: &str = "faults::a_read_only_data_dir_answers_errors_never_panics";
const ENV_RO_DB: &str = "AWARE_FAULTS_RO_CHILD_DB";

/// Whether this process runs as root (file modes do not bind root): the owner of a file it
/// just created.
fn running_as_root(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let probe = dir.join("uid-probe");
    std::fs::write(&probe, b"x").unwrap();
    let uid = std::fs::metadata(&probe).unwrap().uid();
    std::fs::remove_file(&probe).unwrap();
    uid == 0
}

/// The reopen half of the read-only case, in a process of its own (this same test run again
/// with `AWARE_FAULTS_RO_CHILD_DB` set): opens the engine on that data dir and prints the
/// outcome.
fn read_only_reopen_child(db: std::ffi::OsString) {
    let mut config = EngineConfig::new();
    config.notify_on_create = false;
    let db = std::path::PathBuf::from(db);
    match open_sqlite_engine(&db, Durability::Full, config, Arc::new(SystemClock)) {
        Ok(_) => println!("RO-CHILD opened"),
        Err(e) => println!("RO-CHILD code={} error={e}", e.kind_name()),
    }
}

#[test]
fn a_read_only_data_dir_answers_errors_never_panics() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // Run again as the reopen child (no ignored helper test that passes doing nothing alone).
    if let Some(db) = std::env::var_os(ENV_RO_DB) {
        return read_only_reopen_child(db);
    }
    let mut w = World::family();
    w.hdm(C);
    let snapshot = log_tables(&w);

    // 1. Reopening on a read-only directory. File modes do not bind root, so as root the open
    // runs in a child process under uid/gid 65534 (nobody), for whom they do: the case always
    // runs, whoever runs the suite.
    w.engine.close();
    let set = |mode| {
        for entry in std::fs::read_dir(w.dir.path()).unwrap() {
            let p = entry.unwrap().path();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o666)).unwrap();
        }
        std::fs::set_permissions(w.dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    set(0o555);
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", RO_PARENT_TEST, "--nocapture"])
        .env(ENV_RO_DB, w.dir.path().join("state.db"));
    let as_root = running_as_root(&std::env::temp_dir());
    if as_root {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output();
    set(0o755);
    let out = out.expect("run the read-only reopen child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RO-CHILD"))
        .unwrap_or_else(|| {
            panic!(
                "the reopen child printed no outcome (as root: {as_root}): {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        line.starts_with("RO-CHILD code=store_unavailable "),
        "a read-only data dir must not open for writing: {line}"
    );
    eprintln!("read-only reopen (chmod, as root: {as_root}, child as nobody): {line}");
    w.restart();

    // 2. The data dir turns read-only under a running engine: PRAGMA query_only on the writer
    // connection (what a read-only remount gives: every write transaction is refused).
    w.sqlite.set_writer_query_only(true);
    let code = |e: EngineError| (e.kind_name(), e.to_string());
    let (c, msg) = code(
        w.engine
            .post_turn(&sref(C), NewTurn::user("x").channel("telegram"))
            .unwrap_err(),
    );
    assert_eq!(c, "store_unavailable");
    assert!(msg.contains("readonly"), "{msg}");
    assert_eq!(
        code(w.engine.drain(&sref(W)).unwrap_err()).0,
        "store_unavailable"
    );
    assert_eq!(
        code(
            w.engine
                .set_goal(&sref(C), "g", GoalStatus::Active, Actor::system())
                .unwrap_err()
        )
        .0,
        "store_unavailable"
    );
    assert_eq!(
        code(
            w.engine
                .create_session(CreateSession::new(key(X)))
                .unwrap_err()
        )
        .0,
        "store_unavailable"
    );
    assert_eq!(
        code(w.engine.spawn(&sref(W), "t", None, None, None).unwrap_err()).0,
        "store_unavailable"
    );
    // Timers and a prune pass report, they do not panic.
    w.clock.set(T0 + 40 * DAY).unwrap();
    let _ = w.engine.run_timers();
    assert!(w.engine.prune_pass().is_none_or(|r| r.batches == 0));
    assert_eq!(EngineMetrics::get(&w.engine.metrics().prune_failures), 1);
    // Reads keep working and show the store as it was.
    assert_eq!(w.engine.version(&sref(C)), 2);
    assert_eq!(w.seqs(C, 0), vec![1, 2]);
    assert_eq!(w.notice_texts(W), vec![nt(C, 1)]);
    assert_eq!(log_tables(&w), snapshot);

    // 3. Writable again: writes succeed, nothing was lost.
    w.sqlite.set_writer_query_only(false);
    assert_eq!(w.hdm_seq(C), 3);
    assert_eq!(w.drain(W).notices.len(), 1);
    assert_eq!(w.triple(W, C), (2, 3, 3));

    // 4. A store that cannot be opened at all is an error too.
    let bad = w.dir.path(); // a directory
    let err = open_sqlite_engine(bad, Durability::Full, w.config.clone(), w.clock.clone())
        .err()
        .expect("open fails");
    assert_eq!(err.kind_name(), "store_unavailable", "{err}");
}

// ---- A full disk ----

#[test]
fn a_full_disk_fails_writes_cleanly_and_loses_nothing() {
    let w = World::family();
    for _ in 0..5 {
        w.hdm(C);
    }
    let goal_sessions: Vec<String> = (0..8).map(|i| format!("agent:main:g{i}")).collect();
    for g in &goal_sessions {
        w.create(g);
        w.engine
            .set_goal(&sref(g), "before", GoalStatus::Active, Actor::system())
            .unwrap();
    }
    let store = w.sqlite.clone();
    // No room from now on: SQLite keeps max_page_count at the current size.
    store.set_max_page_count(1);

    // Sequentially: fill the last free space in existing pages until a write is refused.
    let big = "x".repeat(6000);
    let mut answered: Vec<(String, Option<i64>)> = Vec::new();
    let mut refused = Vec::new();
    let small = "y".repeat(200);
    for i in 0..400 {
        let text = format!("full-{i}-{small}");
        match w
            .engine
            .post_turn(&sref(C), NewTurn::user(text.clone()).channel("telegram"))
        {
            Ok(t) => answered.push((text, t.event.map(|e| e.sequence))),
            Err(e) => {
                refused.push((text, e.kind_name(), e.to_string()));
                if refused.len() >= 3 {
                    break;
                }
            }
        }
    }
    eprintln!(
        "full disk: {} turns fitted, first refusal: {:?}",
        answered.len(),
        refused.first().map(|r| &r.2)
    );
    assert_eq!(
        refused.len(),
        3,
        "writes must fail once the database is full"
    );
    for (_, code, msg) in &refused {
        assert_eq!(*code, "store_unavailable");
        assert!(msg.contains("full"), "a clear error: {msg}");
    }

    // One batch, while full: big turns (no room) mixed with goal changes that rewrite a row in
    // place (room enough). SQLite rolls the whole batch transaction back on SQLITE_FULL, so an op
    // after the failing one must neither commit on its own nor be answered as stored.
    let arrived = Arc::new(AtomicUsize::new(0));
    let holder = hold_writer(&w, arrived.clone(), 16, false);
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let (e, b, big) = (w.engine.clone(), barrier.clone(), big.clone());
            let (g, arrived) = (goal_sessions[i / 2].clone(), arrived.clone());
            std::thread::spawn(move || {
                b.wait();
                arrived.fetch_add(1, Ordering::SeqCst);
                if i % 2 == 0 {
                    let text = format!("full-c{i}-{big}");
                    let r = e.post_turn(&sref(C), NewTurn::user(text.clone()).channel("telegram"));
                    (
                        true,
                        text,
                        r.map(|t| t.event.map(|e| e.sequence))
                            .map_err(|e| e.kind_name()),
                    )
                } else {
                    let r = e.set_goal(&sref(&g), "during", GoalStatus::Active, Actor::system());
                    (false, g, r.map(|_| None).map_err(|e| e.kind_name()))
                }
            })
        })
        .collect();
    holder.join().unwrap();
    let goal = |g: &str| {
        w.engine
            .get_session(&sref(g))
            .unwrap()
            .goal()
            .unwrap()
            .text
            .clone()
    };
    for h in handles {
        let (is_turn, text, r) = h.join().unwrap();
        match (is_turn, r) {
            (true, Ok(seq)) => answered.push((text, seq)),
            (true, Err(code)) => {
                assert_eq!(code, "store_unavailable");
                refused.push((text, code, String::new()));
            }
            (false, Ok(_)) => assert_eq!(goal(&text), "during", "{text}: answered, not stored"),
            (false, Err(code)) => {
                assert_eq!(code, "store_unavailable");
                assert_eq!(goal(&text), "before", "{text}: refused, yet stored");
            }
        }
    }
    // Nothing already stored is lost; exactly the answered turns are stored.
    let stored = turn_texts(&w, C);
    assert_eq!(stored.len(), 5 + answered.len());
    assert!(stored[..5].iter().all(|t| t == "hello"));
    let stored_set: BTreeSet<&String> = stored.iter().collect();
    for (t, _) in &answered {
        assert!(stored_set.contains(t));
    }
    for (t, _, _) in &refused {
        assert!(!stored_set.contains(t), "a refused turn was stored");
    }
    // Every answered event is in the log, in order, with unique sequences; a turn that fitted
    // while its event did not counts as an append failure (01 §12).
    let mut seqs: Vec<i64> = answered.iter().filter_map(|(_, s)| *s).collect();
    seqs.sort();
    let expected: Vec<i64> = (1..=6).chain(seqs.iter().copied()).collect();
    assert_eq!(w.seqs(C, 0), expected);
    let no_event = answered.iter().filter(|(_, s)| s.is_none()).count() as u64;
    assert_eq!(failures(&w), no_event);

    // Inside one op: once SQLite aborted the batch transaction (the big turn), the op's next
    // statement — here a small event that would fit — must not run on its own, where it would
    // autocommit outside the batch.
    let before_op = log_tables(&w);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (seen2, text) = (seen.clone(), format!("raw-{big}"));
    let r = store.write(move |tx| {
        let turn = aware_store::TurnRow {
            id: "raw-turn".into(),
            index: 10_000,
            role: "user".into(),
            text: text.clone(),
            at: T0,
            actor_type: ActorType::Human,
            actor_id: None,
            provenance_json: r#"{"kind":"human"}"#.into(),
            channel: None,
            run_id: None,
            origin: None,
            upstream_text: None,
            idempotency_key: None,
        };
        let first = tx.insert_turn(C, "main", &turn);
        let second = tx.insert_event(&aware_store::NewEvent {
            dedupe_key: None,
            session_key: C.into(),
            session_id: None,
            agent_id: "main".into(),
            kind: EventKind::Compacted,
            actor_type: ActorType::System,
            actor_id: None,
            run_id: None,
            occurred_at: T0,
            summary: "s".into(),
            payload: None,
        });
        seen2
            .lock()
            .unwrap()
            .extend([first.is_err(), second.is_err()]);
        Ok(())
    });
    assert_eq!(
        *seen.lock().unwrap(),
        vec![true, true],
        "both statements refused"
    );
    let err = r.unwrap_err().to_string();
    assert!(err.contains("rolled back"), "{err}");
    assert_eq!(log_tables(&w), before_op, "nothing autocommitted");

    // Room again: writes succeed and continue the log.
    store.set_max_page_count(u32::MAX - 1);
    let highest = log_tables(&w)["events"].len() as i64; // no prune ran: sequences are dense
    let next = w.hdm_seq(C);
    assert_eq!(next, highest + 1);
    assert_eq!(w.seqs(C, *expected.last().unwrap()), vec![next]);
    for i in 0..20 {
        w.engine
            .post_turn(&sref(C), NewTurn::user(format!("after-{i}-{big}")))
            .unwrap();
    }
    assert_eq!(turn_texts(&w, C).len(), 5 + answered.len() + 21);
    assert_eq!(w.triple(W, C), (1, 2, w.engine.version(&sref(C))));
}
