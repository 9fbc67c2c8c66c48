//! The whole-state copy (`aware_store::dump`, decision D50): what one backend exports, another
//! store (of the same backend or not) imports and exports again unchanged, counters included.

use super::support::*;
use crate::dump::{self, Chunk};
use crate::migrate;
use crate::rows::*;
use crate::store::Store;
use crate::tx::WriteTx;
use crate::StoreError;

/// Every chunk `store` exports, in order.
fn exported(store: &dyn Store) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    migrate::export(store, &mut |c| {
        chunks.push(c);
        Ok(())
    })
    .expect("export");
    chunks
}

/// A store with a row in every table, nulls and not, a pruned stream and a deleted top event.
fn populate(store: &dyn Store) -> i64 {
    write(store, |tx: &mut dyn WriteTx| {
        let mut full = session("agent:main:d1", "main", 5);
        full.label = Some("label".into());
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
        tx.insert_session(&full)?;
        tx.insert_session(&session("agent:ops:d2", "ops", 6))?;
        for i in 0..(dump::PAGE as i64 + 5) {
            append(tx, "agent:main:d1", "main", i)?;
        }
        append(tx, "agent:ops:d2", "ops", 1)?;
        tx.put_cursor(&cursor(
            "agent:main:d1",
            "agent:ops:d2",
            "ops",
            (0, 1, 1),
            3,
        ))?;
        tx.put_cursor(&muted(cursor(
            "agent:ops:d2",
            "agent:main:d1",
            "main",
            (1, 1, 2),
            4,
        )))?;
        tx.fifo_insert("agent:main:d1", "main", "line", Some("ctx"), 8)?;
        tx.fifo_insert("agent:main:d1", "main", "line 2", None, 9)?;
        tx.insert_turn("agent:main:d1", "main", &turn(0, "user", "hi"))?;
        tx.insert_run(&RunRow {
            run_id: "run-1".into(),
            session_key: "agent:main:d1".into(),
            agent_id: "main".into(),
            session_id: "sid".into(),
            started_at: 1,
            ended_at: Some(2),
            outcome: Some("ok".into()),
            deadline_at: None,
            event_sequence: Some(3),
        })?;
        tx.put_link(&LinkRow {
            session_key: "agent:main:d1".into(),
            agent_id: "main".into(),
            catalog_id: "claude".into(),
            host_id: "gateway:local".into(),
            thread_id: "t1".into(),
            upstream_kind: "claude-code".into(),
            upstream_ref_json: r#"{"path":"/x"}"#.into(),
            last_marker_json: None,
            last_scanned_at: Some(4),
            created_at: 1,
            updated_at: 1,
        })?;
        Ok(())
    });
    write(store, |tx: &mut dyn WriteTx| tx.prune_lowest_batch(3, 10));
    // The newest event and FIFO entry are deleted: their numbers must never be issued again.
    write(store, |tx: &mut dyn WriteTx| {
        let top = append(tx, "agent:main:gone", "main", 1)?;
        tx.fifo_insert("agent:main:gone", "main", "x", None, 1)?;
        tx.delete_session("agent:main:gone", "main")?;
        Ok(top)
    })
}

pub fn export_import_round_trips(source: &dyn Store, target: &dyn Store) {
    let top = populate(source);
    let before = exported(source);
    let tables: Vec<usize> = before
        .iter()
        .filter_map(|c| match c {
            Chunk::Rows { table, .. } => Some(*table),
            Chunk::Counters(_) => None,
        })
        .collect();
    assert!(
        (0..dump::TABLES.len()).all(|t| tables.contains(&t)),
        "every table has rows to copy: {tables:?}"
    );
    assert!(
        tables.iter().filter(|t| **t == 1).count() >= 2,
        "the event table spans pages"
    );
    let mut seen = Vec::new();
    let report = migrate::copy(source, target, "not empty: {table}", &mut |t, n, total| {
        seen.push((t.to_string(), n, total))
    })
    .expect("copy");
    assert_eq!(report.tables.len(), dump::TABLES.len());
    assert!(seen
        .iter()
        .any(|(t, n, total)| t == "turns" && *n == 1 && *total == 1));
    assert_eq!(exported(target), before, "export → import → export differs");
    let next = write(target, |tx: &mut dyn WriteTx| {
        append(tx, "agent:main:d1", "main", 99)
    });
    assert!(next > top, "sequence {next} reissued at or below {top}");
    let fifo = write(target, |tx: &mut dyn WriteTx| {
        tx.fifo_insert("agent:main:d1", "main", "after", None, 99)
    });
    let fifo_top = before.iter().find_map(|c| match c {
        Chunk::Counters(v) => v.iter().find(|(t, _)| *t == 4).map(|(_, n)| *n),
        _ => None,
    });
    assert!(Some(fifo) > fifo_top, "FIFO id {fifo} reissued");

    // A target holding any row is refused and left as it was.
    let now = exported(target);
    let refused = migrate::copy(source, target, "not empty: {table}", &mut |_, _, _| {});
    assert!(
        matches!(&refused, Err(StoreError::Refused(m)) if m == "not empty: sessions"),
        "{refused:?}"
    );
    assert_eq!(exported(target), now, "a refused copy changed the target");
}
