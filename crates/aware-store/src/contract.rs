//! The backend contract suite (feature `contract`): the promises of [`Store`], [`ReadTx`] and
//! [`WriteTx`] as checks every backend must pass. Each check takes a fresh, empty store; a
//! backend's tests run them all with [`contract_suite!`](crate::contract_suite):
//!
//! ```ignore
//! aware_store::contract_suite!(|| my_fixture());   // a value that derefs to `dyn Store`
//! ```
//!
//! Checks panic on a broken promise, naming it.

use crate::rows::*;
use crate::store::{Store, StoreExt};
use crate::tx::{ReadTx, WriteTx};
use crate::{Result, StoreError};
use aware_core::{ActorType, CursorState, EventKind, Origin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Runs every contract check as its own `#[test]`. `$make` is an expression callable with no
/// arguments that returns a fresh fixture dereferencing to `dyn Store` (it owns whatever the
/// store needs: a temporary directory, a test database).
#[macro_export]
macro_rules! contract_suite {
    ($make:expr) => {
        $crate::contract_suite!(@each $make;
            sequences_increase_and_are_never_reused,
            concurrent_writers_get_distinct_sequences,
            heads_rise_only_and_watermarks_survive_pruning,
            cursor_rows_round_trip_in_the_promised_orders,
            fifo_insert_delete_clear_expire,
            prune_batches_take_the_lowest_sequences,
            cursor_expiry_spares_muted_rows,
            sweep_pages_and_refreezes_pending_cursors,
            event_reads_page_and_order,
            turns_round_trip_and_page,
            runs_round_trip,
            links_round_trip,
            sessions_round_trip_filter_and_delete,
            console_page_sorts_and_counts,
            console_cursors_of_a_watcher_set_in_one_ordered_read,
            state_page_is_one_snapshot_view,
            failed_ops_roll_back_and_drop_their_hooks,
            nested_savepoints_keep_the_outer_writes,
            failed_commit_fails_every_op_of_the_batch,
            injected_faults_hit_the_backend
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let fixture = ($make)();
                $crate::contract::$name(&*fixture);
            }
        )*
    };
}

fn write<R: Send + 'static>(
    store: &dyn Store,
    op: impl FnOnce(&mut dyn WriteTx) -> Result<R> + Send + 'static,
) -> R {
    match store.write(op) {
        Ok(r) => r,
        Err(e) => panic!("write op failed: {e}"),
    }
}

fn read<R>(store: &dyn Store, f: impl FnOnce(&dyn ReadTx) -> Result<R>) -> R {
    match store.read(f) {
        Ok(r) => r,
        Err(e) => panic!("read failed: {e}"),
    }
}

/// An event of stream (`key`, `agent`) at time `at`.
pub fn event(key: &str, agent: &str, at: i64) -> NewEvent {
    NewEvent {
        dedupe_key: None,
        session_key: key.into(),
        session_id: Some(format!("sid-{key}")),
        agent_id: agent.into(),
        kind: EventKind::HumanDirectMessage,
        actor_type: ActorType::Human,
        actor_id: Some("human-1".into()),
        run_id: None,
        occurred_at: at,
        summary: format!("event at {at}"),
        payload: None,
    }
}

fn append(tx: &mut dyn WriteTx, key: &str, agent: &str, at: i64) -> Result<i64> {
    let seq = tx.insert_event(&event(key, agent, at))?;
    tx.upsert_head(key, agent, seq, at)?;
    Ok(seq)
}

fn cursor(watcher: &str, target: &str, agent: &str, st: (i64, i64, i64), at: i64) -> CursorRow {
    let (last_seen, notified, material) = st;
    CursorRow {
        watcher: watcher.into(),
        target_key: target.into(),
        target_agent: agent.into(),
        state: CursorState {
            last_seen,
            notified,
            material,
            muted: false,
            origin: Origin::Watch,
            notice_opened_at: (notified > last_seen).then_some(at),
            updated_at: at,
        },
        created_at: at,
    }
}

fn muted(mut c: CursorRow) -> CursorRow {
    c.state.muted = true;
    c.state.last_seen = c.state.material;
    c.state.notified = c.state.material;
    c.state.notice_opened_at = None;
    c
}

/// A session row of `agent` with `key`.
pub fn session(key: &str, agent: &str, updated_at: i64) -> SessionRow {
    SessionRow {
        key: key.into(),
        agent_id: agent.into(),
        session_id: format!("sid-{key}"),
        kind: "main".into(),
        label: None,
        parent_key: None,
        created_via: "api".into(),
        active_run_id: None,
        goal: None,
        orphaned: false,
        created_at: 1,
        updated_at,
        upstream: None,
    }
}

fn turn(index: i64, role: &str, text: &str) -> TurnRow {
    TurnRow {
        id: format!("turn-{index}-{text}"),
        index,
        role: role.into(),
        text: text.into(),
        at: 100 + index,
        actor_type: ActorType::Human,
        actor_id: None,
        provenance_json: r#"{"kind":"human"}"#.into(),
        channel: None,
        run_id: None,
        origin: None,
        upstream_text: None,
        idempotency_key: None,
    }
}

pub fn sequences_increase_and_are_never_reused(store: &dyn Store) {
    let mut seen = Vec::new();
    for i in 0..5 {
        seen.push(write(store, move |tx| {
            append(tx, "agent:main:a", "main", i)
        }));
    }
    // Two appends in one op, and ops in one batch: still strictly increasing.
    let pair = write(store, |tx| {
        Ok((
            append(tx, "agent:main:a", "main", 9)?,
            append(tx, "agent:main:b", "main", 9)?,
        ))
    });
    seen.extend([pair.0, pair.1]);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "sequences not increasing: {seen:?}"
    );
    // Delete the newest event (pruning everything): the next sequence is still above it.
    let top = *seen.last().unwrap_or(&0);
    write(store, |tx| tx.prune_lowest_batch(100, 50));
    assert_eq!(read(store, |r| r.event_count()), 0);
    let next = write(store, |tx| append(tx, "agent:main:c", "main", 60));
    assert!(
        next > top,
        "sequence {next} reissued at or below a deleted {top}"
    );
    // A rolled-back op's sequence is never visible, and later ones still rise.
    let failed: Result<i64> = store.write(|tx| {
        append(tx, "agent:main:c", "main", 61)?;
        Err(StoreError::Corrupt("refused".into()))
    });
    assert!(failed.is_err());
    let after = write(store, |tx| append(tx, "agent:main:c", "main", 62));
    assert!(after > next);
    let events = read(store, |r| r.events_after("agent:main:c", "main", 0, 10));
    let seqs: Vec<i64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, vec![next, after], "a rolled-back event is visible");
}

pub fn concurrent_writers_get_distinct_sequences(store: &dyn Store) {
    // Ops submitted together from many threads: every one commits, with its own sequence.
    let (seq_tx, seq_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (seq_tx, done_tx) = (seq_tx.clone(), done_tx.clone());
            scope.spawn(move || {
                for i in 0..10 {
                    let seq_tx = seq_tx.clone();
                    let op: crate::WriteOp = Box::new(move |w: &mut dyn WriteTx| {
                        match append(w, &format!("agent:main:t{t}"), "main", i) {
                            Ok(seq) => {
                                let _ = seq_tx.send(seq);
                                None
                            }
                            Err(e) => Some(e.to_string()),
                        }
                    });
                    let done_tx = done_tx.clone();
                    let submitted = store.submit(
                        op,
                        Box::new(move |r| {
                            let _ = done_tx.send(r.map_err(|e| e.to_string()));
                        }),
                    );
                    assert!(submitted.is_ok(), "submit failed");
                }
            });
        }
    });
    drop((seq_tx, done_tx));
    let outcomes: Vec<std::result::Result<(), String>> = done_rx.iter().collect();
    assert_eq!(outcomes.len(), 80, "every op is answered once");
    assert!(
        outcomes.iter().all(|r| r.is_ok()),
        "commits failed: {outcomes:?}"
    );
    let mut seqs: Vec<i64> = seq_rx.iter().collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), 80, "sequences reused among concurrent writers");
    for t in 0..8 {
        let key = format!("agent:main:t{t}");
        let (events, head) = read(store, |r| {
            Ok((r.events_after(&key, "main", 0, 100)?, r.head(&key, "main")?))
        });
        assert_eq!(events.len(), 10);
        let last = events.last().map(|e| e.sequence);
        assert_eq!(
            head.map(|h| h.last_sequence),
            last,
            "head is not the stream's newest"
        );
    }
}

pub fn heads_rise_only_and_watermarks_survive_pruning(store: &dyn Store) {
    let k = "agent:main:h";
    let (s1, s2, s3) = write(store, move |tx| {
        Ok((
            append(tx, k, "main", 10)?,
            append(tx, k, "main", 20)?,
            append(tx, k, "main", 30)?,
        ))
    });
    // A lower sequence never lowers the head.
    write(store, move |tx| tx.upsert_head(k, "main", s1, 40));
    let head = read(store, |r| r.head(k, "main")).expect("head");
    assert_eq!(head.last_sequence, s3);
    assert_eq!(head.pruned_max_sequence, 0);
    // Age pruning stamps the watermark with the highest pruned sequence of the stream.
    let res = write(store, |tx| tx.prune_age_batch(25, 100, 50));
    assert_eq!(res.deleted, 2);
    let head = read(store, |r| r.head(k, "main")).expect("head");
    assert_eq!((head.last_sequence, head.pruned_max_sequence), (s3, s2));
    assert_eq!(read(store, |r| r.earliest_sequence(k, "main")), Some(s3));
    // Pruning everything keeps the head and raises the watermark; it never lowers it.
    write(store, |tx| tx.prune_lowest_batch(10, 60));
    let head = read(store, |r| r.head(k, "main")).expect("head kept after pruning");
    assert_eq!((head.last_sequence, head.pruned_max_sequence), (s3, s3));
    assert_eq!(read(store, |r| r.earliest_sequence(k, "main")), None);
    // Pruning events of a stream without a head creates none.
    write(store, |tx| {
        tx.insert_event(&event("agent:main:nohead", "main", 1))
    });
    write(store, |tx| tx.prune_lowest_batch(10, 70));
    assert_eq!(read(store, |r| r.head("agent:main:nohead", "main")), None);
    let heads = read(store, |r| {
        r.heads(&[
            ("agent:main:nohead".into(), "main".into()),
            (k.into(), "main".into()),
        ])
    });
    assert_eq!(heads.len(), 2);
    assert!(
        heads[0].is_none() && heads[1].is_some(),
        "heads not in input order"
    );
}

pub fn cursor_rows_round_trip_in_the_promised_orders(store: &dyn Store) {
    let w = "agent:main:w";
    let rows = vec![
        cursor(w, "agent:main:t2", "main", (1, 5, 5), 10),
        cursor(w, "agent:main:t1", "ops", (1, 5, 7), 11),
        cursor(w, "agent:main:t1", "main", (2, 3, 3), 12),
        muted(cursor(w, "agent:main:t0", "main", (0, 0, 9), 13)),
        cursor(w, "agent:main:t3", "main", (4, 4, 4), 14),
        cursor("agent:main:v", "agent:main:t1", "main", (0, 1, 1), 15),
    ];
    let put = rows.clone();
    write(store, move |tx| {
        put.iter().try_for_each(|c| tx.put_cursor(c))
    });
    let back = read(store, |r| r.cursor(w, "agent:main:t1", "ops")).expect("cursor");
    assert_eq!(back, rows[1], "cursor row does not round-trip");
    let order = |v: Vec<CursorRow>| -> Vec<(String, String)> {
        v.into_iter()
            .map(|c| (c.target_key, c.target_agent))
            .collect()
    };
    let by_watcher = read(store, |r| r.cursors_by_watcher(w));
    assert_eq!(
        order(by_watcher),
        [
            ("agent:main:t0", "main"),
            ("agent:main:t1", "main"),
            ("agent:main:t1", "ops"),
            ("agent:main:t2", "main"),
            ("agent:main:t3", "main")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let by_target: Vec<String> = read(store, |r| r.cursors_by_target("agent:main:t1", "main"))
        .into_iter()
        .map(|c| c.watcher)
        .collect();
    assert_eq!(by_target, ["agent:main:v", w]);
    // Pending: notified > last_seen and not muted, by notified, then key, then agent.
    let pending = order(read(store, |r| r.pending_by_watcher(w)));
    let expected = [
        ("agent:main:t1", "main"),
        ("agent:main:t1", "ops"),
        ("agent:main:t2", "main"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(pending, expected);
    assert_eq!(
        order(read(store, |r| r.pending_by_watcher_limit(w, 2))),
        expected[..2]
    );
    assert_eq!(
        read(store, |r| r.watchers_with_pending()),
        ["agent:main:v", w]
    );
    assert_eq!(read(store, |r| r.count_pending()), 4);
    assert_eq!(
        read(store, |r| r.live_watchers_of("agent:main:t0", "main")),
        Vec::<String>::new(),
        "a muted cursor is not a live watcher"
    );
    assert_eq!(
        read(store, |r| r.live_watchers_of("agent:main:t1", "main")),
        ["agent:main:v", w]
    );
    let g = read(store, |r| r.gauges());
    assert_eq!((g.watchers, g.pending), (2, 4));
    // An update replaces the state but keeps created_at.
    let mut acked = rows[0].clone();
    acked.state.last_seen = 5;
    acked.state.notice_opened_at = None;
    acked.state.updated_at = 99;
    acked.created_at = 777;
    let put = acked.clone();
    write(store, move |tx| tx.put_cursor(&put));
    let back = read(store, |r| r.cursor(w, "agent:main:t2", "main")).expect("cursor");
    assert_eq!(back.state, acked.state);
    assert_eq!(back.created_at, 10, "an update must not change created_at");
    // Deletes.
    assert!(write(store, move |tx| tx.delete_cursor(
        w,
        "agent:main:t3",
        "main"
    )));
    assert!(!write(store, move |tx| tx.delete_cursor(
        w,
        "agent:main:t3",
        "main"
    )));
    assert_eq!(
        write(store, |tx| tx
            .delete_cursors_of_target("agent:main:t1", "main")),
        2
    );
    assert_eq!(write(store, move |tx| tx.delete_cursors_of_watcher(w)), 3);
    assert_eq!(read(store, |r| r.cursors_by_watcher(w)), vec![]);
}

pub fn fifo_insert_delete_clear_expire(store: &dyn Store) {
    let (k, a) = ("agent:main:f", "main");
    let ids = write(store, move |tx| {
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(tx.fifo_insert(
                k,
                a,
                &format!("line {i}"),
                (i % 2 == 0).then_some("ctx"),
                10 + i,
            )?);
        }
        // The same text again is inserted too: dedupe is the engine's business.
        ids.push(tx.fifo_insert(k, a, "line 0", Some("ctx"), 20)?);
        tx.fifo_insert("agent:main:other", a, "x", None, 1_000)?;
        Ok(ids)
    });
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "FIFO ids not ascending: {ids:?}"
    );
    let all = read(store, |r| r.system_events(k, a));
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    assert_eq!(all[0].text, "line 0");
    assert_eq!(all[0].context_key.as_deref(), Some("ctx"));
    assert_eq!(all[1].context_key, None);
    assert_eq!(all[1].enqueued_at, 11);
    let first2 = read(store, |r| r.system_events_limit(k, a, 2));
    assert_eq!(first2, all[..2]);
    let del = vec![ids[0], ids[2], 999_999];
    assert_eq!(write(store, move |tx| tx.fifo_delete(k, a, &del)), 2);
    assert_eq!(write(store, move |tx| tx.fifo_delete(k, a, &[])), 0);
    assert_eq!(read(store, |r| r.system_events(k, a)).len(), 4);
    // Expiry takes entries enqueued before the cut-off, at most `limit` per batch.
    assert_eq!(write(store, |tx| tx.expire_fifo_batch(14, 1)).deleted, 1);
    assert_eq!(write(store, |tx| tx.expire_fifo_batch(14, 10)).deleted, 1);
    assert_eq!(read(store, |r| r.system_events(k, a)).len(), 2);
    assert_eq!(write(store, move |tx| tx.fifo_clear(k, a)), 2);
    assert_eq!(read(store, |r| r.system_events(k, a)), vec![]);
    assert_eq!(
        read(store, |r| r.system_events("agent:main:other", a)).len(),
        1
    );
}

pub fn prune_batches_take_the_lowest_sequences(store: &dyn Store) {
    let seqs = write(store, |tx| {
        let mut s = Vec::new();
        for i in 0..6 {
            let key = if i % 2 == 0 {
                "agent:main:p"
            } else {
                "agent:main:q"
            };
            // Older events get higher sequences for stream q: age and sequence order differ.
            let at = if i % 2 == 0 { i } else { 100 - i };
            s.push(append(tx, key, "main", at)?);
        }
        Ok(s)
    });
    // Age batch: events older than 50 (the three of p), lowest sequences first, `limit` each.
    assert_eq!(write(store, |tx| tx.prune_age_batch(50, 2, 200)).deleted, 2);
    let left: Vec<i64> = read(store, |r| r.events_after("agent:main:p", "main", 0, 10))
        .iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(left, [seqs[4]]);
    assert_eq!(write(store, |tx| tx.prune_age_batch(50, 2, 200)).deleted, 1);
    assert_eq!(write(store, |tx| tx.prune_age_batch(50, 2, 200)).deleted, 0);
    // Cap batch: the `count` lowest sequences whatever their age.
    assert_eq!(write(store, |tx| tx.prune_lowest_batch(2, 210)).deleted, 2);
    let left: Vec<i64> = read(store, |r| r.events_after("agent:main:q", "main", 0, 10))
        .iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(left, [seqs[5]]);
    let head = read(store, |r| r.head("agent:main:q", "main")).expect("head");
    assert_eq!(head.pruned_max_sequence, seqs[3]);
    assert_eq!(read(store, |r| r.event_count()), 1);
}

pub fn cursor_expiry_spares_muted_rows(store: &dyn Store) {
    write(store, |tx| {
        tx.put_cursor(&cursor(
            "agent:main:a",
            "agent:main:t",
            "main",
            (0, 0, 0),
            5,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:b",
            "agent:main:t",
            "main",
            (0, 1, 1),
            6,
        ))?;
        tx.put_cursor(&muted(cursor(
            "agent:main:c",
            "agent:main:t",
            "main",
            (0, 0, 0),
            1,
        )))?;
        tx.put_cursor(&cursor(
            "agent:main:d",
            "agent:main:t",
            "main",
            (0, 0, 0),
            50,
        ))
    });
    assert_eq!(write(store, |tx| tx.expire_cursors_batch(10, 1)).deleted, 1);
    assert_eq!(
        write(store, |tx| tx.expire_cursors_batch(10, 10)).deleted,
        1
    );
    let left: Vec<String> = read(store, |r| r.cursors_by_target("agent:main:t", "main"))
        .into_iter()
        .map(|c| c.watcher)
        .collect();
    assert_eq!(left, ["agent:main:c", "agent:main:d"]);
}

pub fn sweep_pages_and_refreezes_pending_cursors(store: &dyn Store) {
    write(store, |tx| {
        for w in ["agent:main:w1", "agent:main:w2", "agent:main:w3"] {
            tx.insert_session(&session(w, "main", 1))?;
        }
        // Pending with material ahead of notified: the sweep re-freezes notified := material.
        tx.put_cursor(&cursor(
            "agent:main:w1",
            "agent:main:t",
            "main",
            (1, 2, 5),
            10,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:w2",
            "agent:main:t",
            "main",
            (1, 3, 3),
            10,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:w3",
            "agent:main:t",
            "main",
            (4, 4, 6),
            10,
        ))?;
        // The watcher session does not exist: left alone.
        tx.put_cursor(&cursor(
            "agent:main:gone",
            "agent:main:t",
            "main",
            (1, 2, 5),
            10,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:w2",
            "agent:main:u",
            "main",
            (0, 1, 2),
            10,
        ))
    });
    let mut after = 0;
    let mut touched = Vec::new();
    let mut batches = 0;
    loop {
        let (last, watchers) = write(store, move |tx| tx.sweep_batch(after, 2, 500));
        match last {
            Some(l) => {
                assert!(l > after, "sweep must page forward");
                assert!(watchers.len() <= 2, "sweep batch exceeds its limit");
                after = l;
                touched.extend(watchers);
                batches += 1;
            }
            None => {
                assert!(watchers.is_empty());
                break;
            }
        }
        assert!(batches < 10, "sweep does not end");
    }
    touched.sort();
    assert_eq!(touched, ["agent:main:w1", "agent:main:w2", "agent:main:w2"]);
    let c = read(store, |r| r.cursor("agent:main:w1", "agent:main:t", "main")).expect("cursor");
    assert_eq!(
        (c.state.notified, c.state.material, c.state.updated_at),
        (5, 5, 500)
    );
    assert_eq!(
        c.state.notice_opened_at,
        Some(10),
        "an open notice keeps its opening time"
    );
    let c = read(store, |r| r.cursor("agent:main:w3", "agent:main:t", "main")).expect("cursor");
    assert_eq!(c.state.notified, 4, "a settled cursor is not swept");
    let c = read(store, |r| {
        r.cursor("agent:main:gone", "agent:main:t", "main")
    })
    .expect("cursor");
    assert_eq!(
        c.state.notified, 2,
        "a cursor of a missing watcher is not swept"
    );
    let grouped = store
        .pending_cursors_by_watcher()
        .expect("pending_cursors_by_watcher");
    let shape: Vec<(String, usize)> = grouped.iter().map(|(w, l)| (w.clone(), l.len())).collect();
    assert_eq!(
        shape,
        [
            ("agent:main:gone".to_string(), 1),
            ("agent:main:w1".into(), 1),
            ("agent:main:w2".into(), 2)
        ]
    );
    // Within a watcher: by notified (u's 2 before t's 3).
    assert_eq!(grouped[2].1[0].target_key, "agent:main:u");
}

pub fn event_reads_page_and_order(store: &dyn Store) {
    let (k, a) = ("agent:main:e", "main");
    let seqs = write(store, move |tx| {
        let mut s = Vec::new();
        for i in 0..5 {
            s.push(append(tx, k, a, 100 + i)?);
        }
        append(tx, k, "ops", 1)?;
        let mut d = event(k, a, 200);
        d.dedupe_key = Some("dedupe-1".into());
        d.kind = EventKind::RunCompleted;
        d.actor_type = ActorType::System;
        d.run_id = Some("run-1".into());
        let mut payload = serde_json::Map::new();
        payload.insert("outcome".into(), serde_json::json!("ok"));
        d.payload = Some(payload);
        s.push(tx.insert_event(&d)?);
        Ok(s)
    });
    let after = read(store, |r| r.events_after(k, a, seqs[1], 2));
    assert_eq!(
        after.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        seqs[2..4]
    );
    let before = read(store, |r| r.events_before(k, a, seqs[3], 10));
    assert_eq!(
        before.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        [seqs[2], seqs[1], seqs[0]],
        "events_before is newest first"
    );
    assert_eq!(read(store, |r| r.earliest_sequence(k, a)), Some(seqs[0]));
    let d = read(store, |r| r.event_by_dedupe("dedupe-1")).expect("by dedupe");
    assert_eq!(d.sequence, seqs[5]);
    assert_eq!(d.kind, EventKind::RunCompleted);
    assert_eq!(d.actor_type, ActorType::System);
    assert_eq!(d.run_id.as_deref(), Some("run-1"));
    assert_eq!(
        d.payload.as_ref().and_then(|p| p.get("outcome")),
        Some(&serde_json::json!("ok"))
    );
    assert_eq!(read(store, |r| r.event_by_sequence(seqs[5])), Some(d));
    let e0 = read(store, |r| r.event_by_sequence(seqs[0])).expect("by sequence");
    assert_eq!(e0.session_id.as_deref(), Some("sid-agent:main:e"));
    assert_eq!((e0.occurred_at, e0.summary.as_str()), (100, "event at 100"));
    assert_eq!(read(store, |r| r.event_by_sequence(-1)), None);
    assert_eq!(read(store, |r| r.event_count()), 7);
    // A second event with the same dedupe key is refused by the store.
    let dup: Result<i64> = store.write(|tx| {
        let mut d = event("agent:main:e", "main", 300);
        d.dedupe_key = Some("dedupe-1".into());
        tx.insert_event(&d)
    });
    assert!(dup.is_err(), "a duplicate dedupe key must fail");
}

pub fn turns_round_trip_and_page(store: &dyn Store) {
    let (k, a) = ("agent:main:tr", "main");
    let mut full = turn(0, "user", "hello");
    full.actor_id = Some("h".into());
    full.channel = Some("cli".into());
    full.run_id = Some("run-9".into());
    full.origin = Some("import".into());
    full.upstream_text = Some("héllo upstream".into());
    full.idempotency_key = Some("idem-1".into());
    let t0 = full.clone();
    write(store, move |tx| {
        tx.insert_turn(k, a, &t0)?;
        tx.insert_turn(k, a, &turn(1, "assistant", "ab"))?;
        tx.insert_turn(k, a, &turn(2, "tool", "tool output"))?;
        tx.insert_turn(k, a, &turn(3, "user", "ünïcödé text"))?;
        let mut reply = turn(4, "assistant", "reply");
        reply.run_id = Some("run-9".into());
        tx.insert_turn(k, a, &reply)
    });
    let all = read(store, |r| r.turns(k, a, None, 100));
    assert_eq!(all.len(), 5);
    assert_eq!(all[0], full, "turn row does not round-trip");
    assert_eq!(
        read(store, |r| r.turns(k, a, Some(1), 2))
            .iter()
            .map(|t| t.index)
            .collect::<Vec<_>>(),
        [2, 3]
    );
    assert_eq!(read(store, |r| r.turn_count(k, a)), 5);
    assert_eq!(read(store, |r| r.turn_count(k, "nobody")), 0);
    assert_eq!(
        read(store, |r| r.turn_by_idempotency(k, a, "idem-1")).map(|t| t.index),
        Some(0)
    );
    assert_eq!(read(store, |r| r.turn_by_idempotency(k, a, "idem-2")), None);
    // Own user turns: not imported, newest first.
    let own: Vec<i64> = read(store, |r| r.recent_own_user_turns(k, a, 10))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(own, [3]);
    assert_eq!(
        read(store, |r| r.reply_for_run(k, a, "run-9")).map(|t| t.index),
        Some(4)
    );
    // Byte budget: the first turn always comes; the page stops before passing the budget.
    let budget = "hello".len() + "héllo upstream".len() + 2;
    let (page, cut) = read(store, |r| r.turns_within(k, a, None, 10, budget));
    assert_eq!((page.len(), cut), (2, true));
    let (page, cut) = read(store, |r| r.turns_within(k, a, Some(0), 10, 1));
    assert_eq!(
        (page.len(), cut),
        (1, true),
        "the first turn comes even over the budget"
    );
    let (page, cut) = read(store, |r| r.turns_within(k, a, None, 3, 1 << 20));
    assert_eq!((page.len(), cut), (3, false));
    // Transcript pages: newest `limit` ascending, tools only on request, texts cut by chars.
    let newest: Vec<i64> = read(store, |r| r.turns_page(k, a, None, false, 2, 100))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(newest, [3, 4]);
    let from: Vec<i64> = read(store, |r| r.turns_page(k, a, Some(1), true, 2, 100))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(from, [1, 2]);
    let from: Vec<i64> = read(store, |r| r.turns_page(k, a, Some(1), false, 2, 100))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(from, [1, 3]);
    let cut = read(store, |r| r.turns_page(k, a, Some(3), false, 1, 3));
    assert_eq!(
        cut[0].text, "ünïc",
        "texts are cut to max_chars + 1 characters"
    );
    let cut0 = read(store, |r| r.turns_page(k, a, Some(0), false, 1, 2));
    assert_eq!(cut0[0].upstream_text.as_deref(), Some("hél"));
    // A duplicate index is refused; delete_turns removes the session's turns only.
    let dup: Result<()> = store.write(move |tx| tx.insert_turn(k, a, &turn(1, "user", "again")));
    assert!(dup.is_err(), "a duplicate turn index must fail");
    write(store, |tx| {
        tx.insert_turn("agent:main:other", "main", &turn(0, "user", "x"))
    });
    assert_eq!(write(store, move |tx| tx.delete_turns(k, a)), 5);
    assert_eq!(read(store, |r| r.turn_count("agent:main:other", "main")), 1);
}

pub fn runs_round_trip(store: &dyn Store) {
    let run = |id: &str, started: i64, deadline: Option<i64>| RunRow {
        run_id: id.into(),
        session_key: "agent:main:r".into(),
        agent_id: "main".into(),
        session_id: "sid".into(),
        started_at: started,
        ended_at: None,
        outcome: None,
        deadline_at: deadline,
        event_sequence: None,
    };
    let (r1, r2, r3) = (
        run("r1", 10, Some(100)),
        run("r2", 20, Some(50)),
        run("r3", 30, None),
    );
    let rows = [r1.clone(), r2.clone(), r3.clone()];
    write(store, move |tx| {
        rows.iter().try_for_each(|r| tx.insert_run(r))
    });
    assert_eq!(read(store, |r| r.run("r1")), Some(r1.clone()));
    assert_eq!(read(store, |r| r.run("nope")), None);
    let of: Vec<String> = read(store, |r| r.runs_of("agent:main:r", "main", 2))
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(of, ["r3", "r2"], "runs_of is newest start first, limited");
    assert_eq!(read(store, |r| r.next_run_deadline()), Some(50));
    let due: Vec<String> = read(store, |r| r.due_runs(100))
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(due, ["r2", "r1"], "due runs by deadline");
    assert_eq!(read(store, |r| r.due_runs(49)), vec![]);
    let mut ended = r2.clone();
    ended.ended_at = Some(60);
    ended.outcome = Some("completed".into());
    ended.event_sequence = Some(42);
    let e2 = ended.clone();
    write(store, move |tx| tx.update_run(&e2));
    assert_eq!(read(store, |r| r.run("r2")), Some(ended));
    assert_eq!(
        read(store, |r| r.next_run_deadline()),
        Some(100),
        "ended runs have no deadline"
    );
}

pub fn links_round_trip(store: &dyn Store) {
    let link = |key: &str, catalog: &str| LinkRow {
        session_key: key.into(),
        agent_id: "main".into(),
        catalog_id: catalog.into(),
        host_id: "gateway:local".into(),
        thread_id: format!("thread-{key}"),
        upstream_kind: "claude-code".into(),
        upstream_ref_json: r#"{"path":"/x"}"#.into(),
        last_marker_json: None,
        last_scanned_at: None,
        created_at: 1,
        updated_at: 1,
    };
    let (l1, l2, l3) = (
        link("agent:main:l1", "claude"),
        link("agent:main:l2", "codex"),
        link("agent:main:l3", "claude"),
    );
    let rows = [l1.clone(), l2.clone(), l3.clone()];
    write(store, move |tx| {
        rows.iter().try_for_each(|l| tx.put_link(l))?;
        tx.put_cursor(&cursor(
            "agent:main:w",
            "agent:main:l2",
            "main",
            (0, 0, 0),
            1,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:w",
            "agent:main:l1",
            "main",
            (0, 0, 0),
            1,
        ))?;
        tx.put_cursor(&muted(cursor(
            "agent:main:w",
            "agent:main:l3",
            "main",
            (0, 0, 0),
            1,
        )))
    });
    assert_eq!(
        read(store, |r| r.link("agent:main:l1", "main")),
        Some(l1.clone())
    );
    let watched: Vec<String> = read(store, |r| r.watched_links())
        .into_iter()
        .map(|l| l.session_key)
        .collect();
    assert_eq!(
        watched,
        ["agent:main:l1", "agent:main:l2"],
        "watched links by catalog, then key"
    );
    let mut moved = l1.clone();
    moved.last_marker_json = Some(r#"{"offset":10}"#.into());
    moved.last_scanned_at = Some(77);
    moved.updated_at = 78;
    let m = moved.clone();
    write(store, move |tx| tx.put_link(&m));
    assert_eq!(
        read(store, |r| r.link("agent:main:l1", "main")),
        Some(moved)
    );
    assert!(write(store, |tx| tx.delete_link("agent:main:l1", "main")));
    assert!(!write(store, |tx| tx.delete_link("agent:main:l1", "main")));
    assert_eq!(read(store, |r| r.link("agent:main:l1", "main")), None);
}

pub fn sessions_round_trip_filter_and_delete(store: &dyn Store) {
    let mut full = session("agent:main:s1", "main", 30);
    full.label = Some("Label One".into());
    full.active_run_id = Some("run-1".into());
    full.goal = Some(GoalRow {
        text: "ship it".into(),
        status: "active".into(),
        updated_at: 7,
    });
    full.upstream = Some(UpstreamSource {
        catalog_id: "claude".into(),
        host_id: "gateway:local".into(),
        thread_id: "t1".into(),
    });
    let mut child = session("agent:main:s1:sub:1", "main", 20);
    child.kind = "subagent".into();
    child.parent_key = Some("agent:main:s1".into());
    let mut other_child = session("agent:ops:c", "ops", 20);
    other_child.parent_key = Some("agent:main:s1".into());
    let rows = [
        full.clone(),
        child.clone(),
        other_child.clone(),
        session("agent:main:s0", "main", 30),
        session("agent:ops:x", "ops", 10),
    ];
    write(store, move |tx| {
        rows.iter().try_for_each(|s| tx.insert_session(s))
    });
    assert_eq!(
        read(store, |r| r.session("agent:main:s1", "main")),
        Some(full.clone())
    );
    assert!(read(store, |r| r.session_exists("agent:main:s1", "main")));
    assert!(!read(store, |r| r.session_exists("agent:main:s1", "ops")));
    assert_eq!(
        read(store, |r| r.session_by_label("main", "Label One")).map(|s| s.key),
        Some(full.key.clone())
    );
    // The label is unique per agent.
    let mut clash = session("agent:main:s9", "main", 1);
    clash.label = Some("Label One".into());
    let refused: Result<()> = store.write(move |tx| tx.insert_session(&clash));
    assert!(
        refused.is_err(),
        "a second session with the same label must fail"
    );
    // Lists: updated_at descending, then key, then agent; filters ANDed; limit and offset.
    let keys = |f: SessionFilter| -> Vec<String> {
        read(store, |r| r.list_sessions(&f))
            .into_iter()
            .map(|s| s.key)
            .collect()
    };
    let all = SessionFilter {
        limit: 100,
        ..Default::default()
    };
    assert_eq!(
        keys(all.clone()),
        [
            "agent:main:s0",
            "agent:main:s1",
            "agent:main:s1:sub:1",
            "agent:ops:c",
            "agent:ops:x"
        ]
    );
    assert_eq!(
        keys(SessionFilter {
            limit: 2,
            offset: 1,
            ..all.clone()
        }),
        ["agent:main:s1", "agent:main:s1:sub:1"]
    );
    assert_eq!(
        keys(SessionFilter {
            agents: vec!["ops".into()],
            ..all.clone()
        }),
        ["agent:ops:c", "agent:ops:x"]
    );
    assert_eq!(
        keys(SessionFilter {
            kinds: vec!["subagent".into()],
            ..all.clone()
        }),
        ["agent:main:s1:sub:1"]
    );
    assert_eq!(
        keys(SessionFilter {
            kind_not: Some("subagent".into()),
            updated_since: Some(20),
            ..all.clone()
        }),
        ["agent:main:s0", "agent:main:s1", "agent:ops:c"]
    );
    assert_eq!(
        keys(SessionFilter {
            parent_key: Some("agent:main:s1".into()),
            agents: vec!["main".into()],
            ..all.clone()
        }),
        ["agent:main:s1:sub:1"]
    );
    assert_eq!(
        keys(SessionFilter {
            label: Some("Label One".into()),
            ..all.clone()
        }),
        ["agent:main:s1"]
    );
    // Update replaces every column.
    let mut changed = full.clone();
    changed.goal = None;
    changed.label = None;
    changed.upstream = None;
    changed.orphaned = true;
    changed.updated_at = 99;
    let c = changed.clone();
    write(store, move |tx| tx.update_session(&c));
    assert_eq!(
        read(store, |r| r.session("agent:main:s1", "main")),
        Some(changed)
    );
    // Orphaning: one agent's children, or every agent's.
    assert_eq!(
        write(store, |tx| tx
            .mark_children_orphaned("agent:main:s1", Some("main"))),
        1
    );
    assert!(
        !read(store, |r| r.session("agent:ops:c", "ops"))
            .expect("row")
            .orphaned
    );
    assert_eq!(
        write(store, |tx| tx.mark_children_orphaned("agent:main:s1", None)),
        2
    );
    assert!(
        read(store, |r| r.session("agent:ops:c", "ops"))
            .expect("row")
            .orphaned
    );
    // Delete removes the session's rows of every table, not other sessions' or cursors.
    write(store, |tx| {
        let k = "agent:main:s1";
        append(tx, k, "main", 1)?;
        append(tx, "agent:main:s0", "main", 1)?;
        tx.insert_turn(k, "main", &turn(0, "user", "x"))?;
        tx.fifo_insert(k, "main", "line", None, 1)?;
        tx.put_cursor(&cursor("agent:main:s0", k, "main", (0, 0, 0), 1))?;
        tx.insert_run(&RunRow {
            run_id: "run-del".into(),
            session_key: k.into(),
            agent_id: "main".into(),
            session_id: "sid".into(),
            started_at: 1,
            ended_at: None,
            outcome: None,
            deadline_at: None,
            event_sequence: None,
        })
    });
    assert!(write(store, |tx| tx.delete_session("agent:main:s1", "main")));
    assert!(!write(store, |tx| tx.delete_session("agent:main:s1", "main")));
    let k = "agent:main:s1";
    read(store, |r| {
        assert_eq!(r.session(k, "main")?, None);
        assert_eq!(r.head(k, "main")?, None);
        assert_eq!(r.events_after(k, "main", 0, 10)?, vec![]);
        assert_eq!(r.turn_count(k, "main")?, 0);
        assert_eq!(r.system_events(k, "main")?, vec![]);
        assert_eq!(r.run("run-del")?, None);
        assert_eq!(r.events_after("agent:main:s0", "main", 0, 10)?.len(), 1);
        assert!(
            r.cursor("agent:main:s0", k, "main")?.is_some(),
            "cursors are the engine's business"
        );
        assert!(
            r.session("agent:main:s1:sub:1", "main")?.is_some(),
            "children are not deleted"
        );
        Ok(())
    });
}

pub fn console_page_sorts_and_counts(store: &dyn Store) {
    write(store, |tx| {
        for (i, key) in ["agent:main:b", "agent:main:A", "agent:main:c"]
            .iter()
            .enumerate()
        {
            let mut s = session(key, "main", 10 * i as i64);
            if i == 2 {
                s.label = Some("Needle".into());
            }
            tx.insert_session(&s)?;
        }
        append(tx, "agent:main:b", "main", 5)?;
        append(tx, "agent:main:b", "main", 6)?;
        tx.put_cursor(&cursor(
            "agent:main:c",
            "agent:main:b",
            "main",
            (0, 2, 2),
            1,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:A",
            "agent:main:b",
            "main",
            (0, 1, 1),
            1,
        ))
    });
    let page = |f: ConsoleFilter| -> (Vec<String>, u64) {
        let (rows, total) = read(store, |r| r.console_sessions(&f));
        (rows.into_iter().map(|r| r.session.key).collect(), total)
    };
    let base = ConsoleFilter {
        limit: 10,
        ..Default::default()
    };
    // Byte order, as SQLite: upper case before lower case.
    let (keys, total) = page(ConsoleFilter {
        sort: ConsoleSort::Key,
        ..base.clone()
    });
    assert_eq!(
        (keys, total),
        (
            vec![
                "agent:main:A".to_string(),
                "agent:main:b".into(),
                "agent:main:c".into()
            ],
            3
        )
    );
    let (keys, total) = page(ConsoleFilter {
        sort: ConsoleSort::Updated,
        descending: true,
        limit: 2,
        ..base.clone()
    });
    assert_eq!(
        (keys, total),
        (vec!["agent:main:c".to_string(), "agent:main:A".into()], 3)
    );
    let (keys, _) = page(ConsoleFilter {
        sort: ConsoleSort::StateVersion,
        descending: true,
        ..base.clone()
    });
    assert_eq!(
        keys[0], "agent:main:b",
        "a session with events sorts above those without"
    );
    let (keys, _) = page(ConsoleFilter {
        sort: ConsoleSort::StateVersion,
        ..base.clone()
    });
    assert_eq!(
        keys[2], "agent:main:b",
        "sessions without events sort first ascending"
    );
    let (keys, total) = page(ConsoleFilter {
        text: Some("needle".into()),
        ..base.clone()
    });
    assert_eq!((keys, total), (vec!["agent:main:c".to_string()], 1));
    let (keys, total) = page(ConsoleFilter {
        keys: vec![
            ("agent:main:b".into(), "main".into()),
            ("agent:main:zz".into(), "main".into()),
        ],
        ..base.clone()
    });
    assert_eq!((keys, total), (vec!["agent:main:b".to_string()], 1));
    let (rows, _) = read(store, |r| {
        r.console_sessions(&ConsoleFilter {
            sort: ConsoleSort::Key,
            ..base.clone()
        })
    });
    let b = &rows[1];
    assert_eq!(b.session.key, "agent:main:b");
    assert!(b.state_version > 0);
    assert_eq!(b.last_event_at, Some(6));
    assert_eq!(
        b.last_event_kind.as_deref(),
        Some(EventKind::HumanDirectMessage.as_str())
    );
    assert_eq!(b.last_human_at, Some(6));
    assert_eq!(b.pending_as_target, 2);
    assert_eq!(rows[2].pending_as_watcher, 1);
    assert_eq!(rows[0].state_version, 0);
}

/// The console graph's one edge read: every cursor (muted ones too) held by any watcher of the
/// set, by watcher, then target key, then target agent; none of watchers outside the set.
pub fn console_cursors_of_a_watcher_set_in_one_ordered_read(store: &dyn Store) {
    let rows = vec![
        cursor("agent:main:b", "agent:main:t2", "main", (1, 1, 1), 10),
        muted(cursor(
            "agent:main:a",
            "agent:main:t9",
            "main",
            (0, 0, 3),
            11,
        )),
        cursor("agent:main:a", "agent:main:t1", "ops", (1, 2, 2), 12),
        cursor("agent:main:a", "agent:main:t1", "main", (0, 0, 0), 13),
        cursor("agent:main:c", "agent:main:t1", "main", (0, 0, 0), 14),
    ];
    let put = rows.clone();
    write(store, move |tx| {
        put.iter().try_for_each(|c| tx.put_cursor(c))
    });
    let set = vec!["agent:main:b".to_string(), "agent:main:a".to_string()];
    let got: Vec<(String, String, String)> = read(store, |r| r.console_cursors_held_by(&set))
        .into_iter()
        .map(|c| (c.watcher, c.target_key, c.target_agent))
        .collect();
    let want: Vec<(String, String, String)> = [
        ("agent:main:a", "agent:main:t1", "main"),
        ("agent:main:a", "agent:main:t1", "ops"),
        ("agent:main:a", "agent:main:t9", "main"),
        ("agent:main:b", "agent:main:t2", "main"),
    ]
    .iter()
    .map(|(w, t, a)| (w.to_string(), t.to_string(), a.to_string()))
    .collect();
    assert_eq!(
        got, want,
        "cursors of the watcher set, in watcher/target order"
    );
    assert!(read(store, |r| r.console_cursors_held_by(&[])).is_empty());
}

pub fn state_page_is_one_snapshot_view(store: &dyn Store) {
    let (k, a) = ("agent:main:sp", "main");
    let missing = store.state_page(k, a, 0, 10).expect("state_page");
    assert_eq!(
        missing,
        StatePage::default(),
        "a missing stream has no head and no events"
    );
    let seqs = write(store, move |tx| {
        let mut s = Vec::new();
        for i in 0..4 {
            s.push(append(tx, k, a, 10 + i)?);
        }
        Ok(s)
    });
    write(store, |tx| tx.prune_lowest_batch(1, 100));
    let page = store.state_page(k, a, seqs[1], 1).expect("state_page");
    assert_eq!(
        page.events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        [seqs[2]]
    );
    assert_eq!(page.events[0].kind, EventKind::HumanDirectMessage);
    assert_eq!(page.events[0].summary, "event at 12");
    assert_eq!(page.events[0].actor_id.as_deref(), Some("human-1"));
    let head = page.head.expect("head");
    assert_eq!(
        (head.last_sequence, head.pruned_max_sequence),
        (seqs[3], seqs[0])
    );
    assert_eq!(page.earliest, Some(seqs[1]));
    let all = store.state_page(k, a, 0, 100).expect("state_page");
    assert_eq!(all.events.len(), 3);
    assert!(all.events.windows(2).all(|w| w[0].sequence < w[1].sequence));
}

pub fn failed_ops_roll_back_and_drop_their_hooks(store: &dyn Store) {
    let ran = Arc::new(AtomicUsize::new(0));
    let r1 = ran.clone();
    let failed: Result<()> = store.write(move |tx| {
        tx.insert_session(&session("agent:main:x", "main", 1))?;
        tx.after_commit(Box::new(move || {
            r1.fetch_add(1, Ordering::SeqCst);
        }));
        Err(StoreError::Corrupt("refused".into()))
    });
    assert!(
        matches!(failed, Err(StoreError::Corrupt(_))),
        "the op's own error comes back: {failed:?}"
    );
    assert!(
        !read(store, |r| r.session_exists("agent:main:x", "main")),
        "a failed op's writes stay"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a failed op's hook ran");
    // An op that fails on a statement (a duplicate key) rolls back too, and the next op works.
    write(store, |tx| {
        tx.insert_session(&session("agent:main:y", "main", 1))
    });
    let dup: Result<()> = store.write(|tx| {
        tx.insert_session(&session("agent:main:z", "main", 1))?;
        tx.insert_session(&session("agent:main:y", "main", 1))
    });
    assert!(dup.is_err());
    assert!(!read(store, |r| r.session_exists("agent:main:z", "main")));
    let r2 = ran.clone();
    write(store, move |tx| {
        tx.insert_session(&session("agent:main:x", "main", 1))?;
        tx.after_commit(Box::new(move || {
            r2.fetch_add(1, Ordering::SeqCst);
        }));
        Ok(())
    });
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "a committed op's hook runs before it is answered"
    );
    assert!(read(store, |r| r.session_exists("agent:main:x", "main")));
}

pub fn nested_savepoints_keep_the_outer_writes(store: &dyn Store) {
    write(store, |tx| {
        tx.insert_session(&session("agent:main:n", "main", 1))?;
        tx.savepoint("append")?;
        // A statement that fails inside the inner savepoint (duplicate key), then its rollback.
        let inner = tx
            .insert_session(&session("agent:main:inner", "main", 1))
            .and_then(|_| tx.insert_session(&session("agent:main:n", "main", 1)));
        assert!(inner.is_err());
        tx.rollback_to("append")?;
        tx.savepoint("again")?;
        tx.fifo_insert("agent:main:n", "main", "kept", None, 1)?;
        tx.release("again")?;
        Ok(())
    });
    read(store, |r| {
        assert!(r.session_exists("agent:main:n", "main")?);
        assert!(
            !r.session_exists("agent:main:inner", "main")?,
            "the inner savepoint's write stayed"
        );
        assert_eq!(r.system_events("agent:main:n", "main")?.len(), 1);
        Ok(())
    });
}

pub fn failed_commit_fails_every_op_of_the_batch(store: &dyn Store) {
    store.faults().fail_next_commits(1);
    let r: Result<()> = store.write(|tx| tx.insert_session(&session("agent:main:c1", "main", 1)));
    assert!(
        matches!(&r, Err(e) if e.is_unavailable()),
        "a failed commit is store_unavailable: {r:?}"
    );
    assert!(!read(store, |r| r.session_exists("agent:main:c1", "main")));
    write(store, |tx| {
        tx.insert_session(&session("agent:main:c1", "main", 1))
    });
    assert!(read(store, |r| r.session_exists("agent:main:c1", "main")));
}

pub fn injected_faults_hit_the_backend(store: &dyn Store) {
    write(store, |tx| append(tx, "agent:main:i", "main", 1));
    store
        .faults()
        .set_fail_appends_for(Some("agent:main:i".into()));
    let r: Result<i64> = store.write(|tx| append(tx, "agent:main:i", "main", 2));
    assert!(matches!(r, Err(StoreError::InjectedFault(_))));
    write(store, |tx| append(tx, "agent:main:j", "main", 2));
    store.faults().clear();
    store.faults().set_fail_reads(true);
    assert!(store.state_page("agent:main:i", "main", 0, 10).is_err());
    assert!(store
        .read(|r| r.events_after("agent:main:i", "main", 0, 10))
        .is_err());
    // Non-log reads still work.
    assert!(store
        .read(|r| r.session_exists("agent:main:i", "main"))
        .is_ok());
    store.faults().clear();
    assert_eq!(
        store
            .state_page("agent:main:i", "main", 0, 10)
            .expect("page")
            .events
            .len(),
        1
    );
    store.faults().set_fail_link_settles(true);
    let r: Result<()> = store.write(|tx| {
        tx.put_link(&LinkRow {
            session_key: "agent:main:i".into(),
            agent_id: "main".into(),
            catalog_id: "c".into(),
            host_id: "h".into(),
            thread_id: "t".into(),
            upstream_kind: "k".into(),
            upstream_ref_json: "{}".into(),
            last_marker_json: None,
            last_scanned_at: None,
            created_at: 1,
            updated_at: 1,
        })
    });
    assert!(matches!(r, Err(StoreError::InjectedFault(_))));
    store.faults().clear();
}
