//! Contract checks: Sequences, heads and watermarks, pruning, event reads, the state page.

use super::support::*;
use crate::rows::*;
use crate::store::{Store, StoreExt};
use crate::tx::WriteTx;
use crate::{Result, StoreError};
use aware_core::{ActorType, EventKind};

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
