//! Contract checks: Cursor rows, their expiry, the restart sweep, the console's edge read.

use super::support::*;
use crate::rows::*;
use crate::store::Store;

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
    // The read a wake stream's `session=` catch-up makes per listed session: that watcher's
    // rows only (not `v`'s on the same target), nothing for a watcher without rows.
    assert_eq!(
        order(read(store, |r| r.pending_by_watcher("agent:main:v"))),
        [("agent:main:t1".to_string(), "main".to_string())]
    );
    assert!(read(store, |r| r.pending_by_watcher("agent:main:nobody")).is_empty());
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
    let mut finished = Vec::new();
    let mut cursors = 0;
    let mut batches = 0;
    loop {
        let b = write(store, move |tx| tx.sweep_batch(after, 2, 500));
        match b.last {
            Some(l) => {
                assert!(l > after, "sweep must page forward");
                assert!(b.cursors <= 2, "sweep batch exceeds its limit");
                after = l;
                cursors += b.cursors;
                finished.extend(b.finished_watchers);
                batches += 1;
            }
            None => {
                assert_eq!((b.cursors, b.finished_watchers.len()), (0, 0));
                break;
            }
        }
        assert!(batches < 10, "sweep does not end");
    }
    assert_eq!(cursors, 3, "three pending cursors of existing watchers");
    // w2's cursors span the two batches: it is named once, by the batch that re-froze its last.
    assert_eq!(finished, ["agent:main:w1", "agent:main:w2"]);
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
    // Already frozen at its material sequence (SQLite updates it without naming
    // `notified_sequence`, to spare the pending indexes): swept all the same.
    let c = read(store, |r| r.cursor("agent:main:w2", "agent:main:t", "main")).expect("cursor");
    assert_eq!(
        (c.state.notified, c.state.material, c.state.updated_at),
        (3, 3, 500)
    );
    assert_eq!(c.state.notice_opened_at, Some(10));
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
    // The targets of a sweep batch's wakes: the listed watchers' pending cursors only.
    let mut listed: Vec<(String, String)> = read(store, |r| {
        r.pending_by_watchers(&["agent:main:w2".into(), "agent:main:w3".into()])
    })
    .into_iter()
    .map(|c| (c.watcher, c.target_key))
    .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("agent:main:w2".to_string(), "agent:main:t".to_string()),
            ("agent:main:w2".into(), "agent:main:u".into())
        ]
    );
    // Within a watcher: by notified (u's 2 before t's 3).
    assert_eq!(grouped[2].1[0].target_key, "agent:main:u");
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

/// `watcher_cursors` answers what `session_exists` and `cursor` answer for each candidate, in
/// order, and `update_cursor` leaves the row (and every read over the cursor indexes) as
/// `put_cursor` would, whether only the watermark moved or more.
pub fn watcher_cursors_and_update_cursor_match_the_row_primitives(store: &dyn Store) {
    let t = "agent:main:t";
    let c1 = cursor("agent:main:w1", t, "main", (1, 3, 3), 10);
    let c3 = cursor("agent:main:w3", t, "main", (2, 2, 2), 11);
    let other = cursor("agent:main:w2", "agent:main:u", "main", (0, 4, 4), 12);
    let put = [c1.clone(), c3.clone(), other];
    write(store, move |tx| {
        tx.insert_session(&session("agent:main:w1", "main", 1))?;
        tx.insert_session(&session("agent:main:w2", "main", 1))?;
        put.iter().try_for_each(|c| tx.put_cursor(c))
    });
    let candidates = [
        ("agent:main:w3", "main"), // a cursor, no session
        ("agent:main:w1", "main"),
        ("agent:main:w2", "main"), // a session, a cursor on another target only
        ("agent:main:w1", "ops"),  // the key exists under another agent only
        ("agent:main:nobody", "main"),
    ];
    let found = read(store, |r| r.watcher_cursors(t, "main", &candidates));
    let one_by_one: Vec<(bool, Option<CursorRow>)> = read(store, |r| {
        candidates
            .iter()
            .map(|(k, a)| {
                let exists = r.session_exists(k, a)?;
                Ok((
                    exists,
                    if exists {
                        r.cursor(k, t, "main")?
                    } else {
                        None
                    },
                ))
            })
            .collect()
    });
    assert_eq!(
        found, one_by_one,
        "watcher_cursors differs from the row reads"
    );
    assert_eq!(
        found,
        [
            (false, None),
            (true, Some(c1.clone())),
            (true, None),
            (false, None),
            (false, None)
        ]
    );
    assert!(read(store, |r| r.watcher_cursors(t, "main", &[])).is_empty());

    // Only the frozen watermark and the time move (the append's usual case).
    let mut moved = c1.clone();
    moved.state.material = 7;
    moved.state.updated_at = 20;
    let (before, after) = (c1.clone(), moved.clone());
    write(store, move |tx| tx.update_cursor(&before, &after));
    assert_eq!(
        read(store, |r| r.cursor("agent:main:w1", t, "main")),
        Some(moved.clone())
    );
    // More moves: an ack-like change leaves nothing pending.
    let mut acked = moved.clone();
    acked.state.last_seen = 3;
    acked.state.notified = 3;
    acked.state.material = 3;
    acked.state.notice_opened_at = None;
    acked.state.updated_at = 30;
    let (before, after) = (moved.clone(), acked.clone());
    write(store, move |tx| tx.update_cursor(&before, &after));
    assert_eq!(
        read(store, |r| r.cursor("agent:main:w1", t, "main")),
        Some(acked)
    );
    assert!(read(store, |r| r.pending_by_watcher("agent:main:w1")).is_empty());
    // And back to pending through the narrow path again: the pending reads see it.
    let reopened = {
        let mut c = cursor("agent:main:w1", t, "main", (3, 8, 8), 40);
        c.created_at = c1.created_at;
        c
    };
    let mut later = reopened.clone();
    later.state.material = 9;
    later.state.updated_at = 41;
    let (a, b, c) = (acked_row(&reopened), reopened.clone(), later.clone());
    write(store, move |tx| {
        tx.update_cursor(&a, &b)?;
        tx.update_cursor(&b, &c)
    });
    assert_eq!(
        read(store, |r| r.cursor("agent:main:w1", t, "main")),
        Some(later.clone())
    );
    assert_eq!(
        read(store, |r| r.pending_by_watcher("agent:main:w1")),
        [later]
    );
    assert_eq!(read(store, |r| r.cursors_by_target(t, "main")).len(), 2);
}

/// The row `reopened` was written over: its acked predecessor (same key, nothing pending).
fn acked_row(reopened: &CursorRow) -> CursorRow {
    let mut c = reopened.clone();
    c.state.notified = c.state.last_seen;
    c.state.material = c.state.last_seen;
    c.state.notice_opened_at = None;
    c.state.updated_at = 30;
    c
}
