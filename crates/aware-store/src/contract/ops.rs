//! Contract checks: Ops and commits: failed ops, savepoints, failed commits, injected faults.

use super::support::*;
use crate::rows::*;
use crate::store::{Store, StoreExt};
use crate::{Result, StoreError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub fn failed_ops_roll_back_and_drop_their_hooks(store: &dyn Store) {
    let ran = Arc::new(AtomicUsize::new(0));
    let r1 = ran.clone();
    let failed: Result<()> = store.write(move |tx| {
        tx.insert_session(&session("agent:main:x", "main", 1))?;
        let r1 = r1.clone();
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
    // The one-statement form agrees with the one inside a read.
    assert!(store.session_exists("agent:main:y", "main").unwrap());
    assert!(!store.session_exists("agent:main:z", "main").unwrap());
    assert!(!store.session_exists("agent:main:y", "other").unwrap());
    let r2 = ran.clone();
    write(store, move |tx| {
        tx.insert_session(&session("agent:main:x", "main", 1))?;
        let r2 = r2.clone();
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
