//! Unit tests of the SQLite store's gauges and writer.

#[cfg(test)]
mod gauge_tests {
    #![allow(unused_imports)]
    use crate::{handle::*, mapping::*, options::*, schema::*, sqltx::*, writer::*};
    use aware_core::{ActorType, CursorState, EventKind, Origin};
    use aware_store::*;
    use rusqlite::{params, Connection, OptionalExtension};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// The gauges run on every scrape, so each count must be answered from an index (never a
    /// scan of the cursor table) and be right at the sizes decision D18 names: 10,000 sessions and
    /// 100,000 cursors, 1 in 20 pending, 1 in 50 muted.
    #[test]
    fn gauge_counts_are_index_only_and_exact_at_scale() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        {
            let mut s = conn
                .prepare(
                    "INSERT INTO sessions (session_key, agent_id, session_id, kind, created_via, \
                     created_at, updated_at) VALUES (?1, 'main', ?1, 'main', 'api', 0, 0)",
                )
                .unwrap();
            for i in 0..10_000 {
                s.execute([format!("agent:main:s{i}")]).unwrap();
            }
            let mut c = conn
                .prepare(
                    "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, \
                     target_agent_id, last_seen_sequence, notified_sequence, material_sequence, \
                     muted, origin, created_at, updated_at) \
                     VALUES (?1, ?2, 'main', 1, ?3, ?3, ?4, 'explicit', 0, 0)",
                )
                .unwrap();
            for i in 0..100_000i64 {
                // 7,000 distinct watchers with 14 or 15 targets each.
                let watcher = format!("agent:main:s{}", i % 7_000);
                let target = format!("agent:main:s{}", i / 7_000 + 7_000);
                let notified = if i % 20 == 0 { 2 } else { 1 };
                let muted = i64::from(i % 50 == 1);
                c.execute(rusqlite::params![watcher, target, notified, muted])
                    .unwrap();
            }
        }
        conn.execute_batch("COMMIT").unwrap();
        let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(count(COUNT_SESSIONS_SQL), 10_000);
        assert_eq!(count(COUNT_WATCHERS_SQL), 7_000);
        // i % 20 == 0 is never i % 50 == 1, so every pending cursor is unmuted.
        assert_eq!(count(COUNT_PENDING_SQL), 5_000);
        for sql in [COUNT_SESSIONS_SQL, COUNT_WATCHERS_SQL, COUNT_PENDING_SQL] {
            let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let steps: Vec<String> = plan
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            assert!(
                steps
                    .iter()
                    .all(|s| s.contains("INDEX") || s.contains("PRIMARY KEY")),
                "{sql} is not answered from an index: {steps:?}"
            );
        }
        // Every append reads its target's live watchers: one range of one index, in the order
        // asked, with no sort (decision D51).
        let mut plan = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {LIVE_WATCHERS_SQL}"))
            .unwrap();
        let steps: Vec<String> = plan
            .query_map(["agent:main:s7000", "main"], |r| r.get::<_, String>(3))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(
            steps,
            ["SEARCH session_watch_cursors USING INDEX \
              session_watch_cursors_target_watcher (target_session_key=? AND target_agent_id=?)"],
        );
        // Cursor expiry reads the day index (decision D59), not the table.
        let mut plan = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {EXPIRE_CURSORS_SQL}"))
            .unwrap();
        let steps: Vec<String> = plan
            .query_map(rusqlite::params![1_000_000_000_000i64, 100], |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert!(
            steps.iter().any(|s| s.contains(
                "SEARCH session_watch_cursors USING INDEX session_watch_cursors_updated_day"
            )),
            "{steps:?}"
        );
    }

    /// A store made by an earlier aware loses the indexes the schema replaced, and expiry by the
    /// day's index deletes exactly the cursors older than the cut, on both sides of a day's edge.
    #[test]
    fn replaced_indexes_are_dropped_and_expiry_cuts_exactly() {
        const DAY: i64 = 86_400_000;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let conn = Connection::open(&path).unwrap();
        migrate(&conn).unwrap();
        conn.execute_batch(
            "CREATE INDEX session_watch_cursors_target \
                 ON session_watch_cursors (target_session_key, target_agent_id); \
             CREATE INDEX session_watch_cursors_updated ON session_watch_cursors (updated_at);",
        )
        .unwrap();
        // (updated_at, muted): around the cut at 20 days + 5 ms, and one muted row that never
        // expires.
        let cut = 20 * DAY + 5;
        let rows = [
            (3 * DAY, 0),
            (20 * DAY, 0),
            (20 * DAY + 4, 0),
            (20 * DAY + 5, 0),
            (20 * DAY + 6, 0),
            (21 * DAY, 0),
            (2 * DAY, 1),
        ];
        for (i, (at, muted)) in rows.iter().enumerate() {
            conn.execute(
                "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, \
                 target_agent_id, last_seen_sequence, notified_sequence, material_sequence, \
                 muted, origin, created_at, updated_at) \
                 VALUES (?1, 't', 'main', 0, 0, 0, ?2, 'explicit', 0, ?3)",
                rusqlite::params![format!("w{i}"), muted, at],
            )
            .unwrap();
        }
        drop(conn);
        let conn = Connection::open(&path).unwrap();
        migrate(&conn).unwrap();
        let indexes: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'index' \
                 AND tbl_name = 'session_watch_cursors' AND sql IS NOT NULL ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(
            indexes,
            [
                "session_watch_cursors_pending_target",
                "session_watch_cursors_pending_watcher",
                "session_watch_cursors_target_watcher",
                "session_watch_cursors_updated_day",
            ]
        );
        let deleted = conn
            .execute(EXPIRE_CURSORS_SQL, rusqlite::params![cut, 100])
            .unwrap();
        assert_eq!(deleted, 3);
        let left: Vec<i64> = conn
            .prepare("SELECT updated_at FROM session_watch_cursors ORDER BY updated_at")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(left, [2 * DAY, 20 * DAY + 5, 20 * DAY + 6, 21 * DAY]);
    }

    /// The trigger-kept counts equal the rows they count after every kind of write, and a store
    /// made before `aware_counts` gets them from its rows when it is next opened.
    #[test]
    fn kept_counts_follow_every_write_and_are_seeded_on_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let conn = Connection::open(&path).unwrap();
        migrate(&conn).unwrap();
        let kept = |conn: &Connection| -> (i64, i64, i64) {
            let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
            (
                one(COUNT_SESSIONS_SQL),
                one("SELECT COALESCE(SUM(n), 0) FROM aware_counts \
                     WHERE counter = 'sessions' AND agent_id = 'ops'"),
                one(COUNT_PENDING_SQL),
            )
        };
        let counted = |conn: &Connection| -> (i64, i64, i64) {
            let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
            (
                one("SELECT COUNT(*) FROM sessions"),
                one("SELECT COUNT(*) FROM sessions WHERE agent_id = 'ops'"),
                one(
                    "SELECT COUNT(*) FROM session_watch_cursors WHERE muted = 0 \
                     AND notified_sequence > last_seen_sequence",
                ),
            )
        };
        let session =
            "INSERT INTO sessions (session_key, agent_id, session_id, kind, created_via, \
                       created_at, updated_at) VALUES (?1, ?2, ?1, 'main', 'api', 0, 0)";
        let cursor = "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, \
                      target_agent_id, last_seen_sequence, notified_sequence, material_sequence, \
                      muted, origin, created_at, updated_at) \
                      VALUES (?1, ?2, 'main', ?3, ?4, ?4, ?5, 'explicit', 0, 0) \
                      ON CONFLICT (watcher_session_key, target_session_key, target_agent_id) \
                      DO UPDATE SET notified_sequence = excluded.notified_sequence, \
                      muted = excluded.muted";
        for i in 0..60i64 {
            let agent = if i % 3 == 0 { "ops" } else { "main" };
            conn.execute(session, params![format!("agent:{agent}:s{i}"), agent])
                .unwrap();
            conn.execute(
                cursor,
                params![
                    format!("agent:main:s{}", i % 7),
                    format!("agent:main:t{i}"),
                    1,
                    1 + i % 2,
                    i64::from(i % 5 == 0)
                ],
            )
            .unwrap();
        }
        assert_eq!(kept(&conn), counted(&conn));
        let writes = [
            // An upsert that opens and one that mutes.
            "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, \
             target_agent_id, last_seen_sequence, notified_sequence, material_sequence, muted, \
             origin, created_at, updated_at) VALUES ('agent:main:s0', 'agent:main:t2', 'main', \
             1, 9, 9, 0, 'explicit', 0, 0) ON CONFLICT (watcher_session_key, \
             target_session_key, target_agent_id) DO UPDATE SET notified_sequence = 9",
            "UPDATE session_watch_cursors SET muted = 1 WHERE target_session_key = 'agent:main:t3'",
            // A drain's acknowledgement, a sweep's re-freeze, unmuting everything.
            "UPDATE session_watch_cursors SET last_seen_sequence = notified_sequence \
             WHERE watcher_session_key = 'agent:main:s1'",
            "UPDATE session_watch_cursors SET notified_sequence = material_sequence + 1, \
             updated_at = 5 WHERE rowid % 4 = 0",
            "UPDATE session_watch_cursors SET muted = 0",
            "UPDATE session_watch_cursors SET updated_at = 7",
            // Unwatch, a deleted session's cursors, deleted sessions, an agent renamed.
            "DELETE FROM session_watch_cursors WHERE watcher_session_key = 'agent:main:s2'",
            "DELETE FROM session_watch_cursors WHERE rowid % 5 = 1",
            "DELETE FROM sessions WHERE rowid % 4 = 0",
            "UPDATE sessions SET agent_id = 'ops' WHERE rowid % 7 = 1",
            "DELETE FROM session_watch_cursors",
        ];
        for sql in writes {
            conn.execute_batch(sql).unwrap();
            assert_eq!(kept(&conn), counted(&conn), "after {sql}");
        }
        // A store from before the table: rows but no counts, then opened again.
        conn.execute_batch(
            "DROP TABLE aware_counts; DROP TRIGGER sessions_count_insert; \
             DROP TRIGGER sessions_count_delete; DROP TRIGGER sessions_count_update; \
             DROP TRIGGER cursors_pending_insert; DROP TRIGGER cursors_pending_delete; \
             DROP TRIGGER cursors_pending_update;",
        )
        .unwrap();
        for i in 0..5 {
            conn.execute(session, params![format!("agent:main:u{i}"), "main"])
                .unwrap();
            conn.execute(
                cursor,
                params!["agent:main:u0", format!("agent:main:u{i}"), 1, 2, 0],
            )
            .unwrap();
        }
        drop(conn);
        let conn = Connection::open(&path).unwrap();
        migrate(&conn).unwrap();
        assert_eq!(kept(&conn), counted(&conn));
        assert_eq!(counted(&conn).2, 5);
        migrate(&conn).unwrap();
        assert_eq!(kept(&conn), counted(&conn), "seeded once only");
    }
}

#[cfg(test)]
mod writer_tests {
    #![allow(unused_imports)]
    use crate::{handle::*, mapping::*, options::*, schema::*, sqltx::*, writer::*};
    use aware_core::{ActorType, CursorState, EventKind, Origin};
    use aware_store::*;
    use rusqlite::{params, Connection, OptionalExtension};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    fn event(key: &str, at: i64) -> NewEvent {
        NewEvent {
            dedupe_key: None,
            session_key: key.into(),
            session_id: None,
            agent_id: "main".into(),
            kind: EventKind::HumanDirectMessage,
            actor_type: ActorType::Human,
            actor_id: None,
            run_id: None,
            occurred_at: at,
            summary: "x".into(),
            payload: None,
        }
    }

    /// Polls a future to completion on this thread (the crate's tokio has no runtime).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::park();
        }
    }

    /// Callers that lead their own commits and ops queued to the writer thread (async
    /// submitters, and blocking callers that found a leader) mix freely: every op commits once,
    /// none is lost or run twice, and after-commit hooks run in commit (sequence) order.
    #[test]
    fn caller_led_and_thread_led_commits_mix_in_commit_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(
            StoreOptions::new(dir.path().join("w.db")).durability(Durability::Normal),
        )
        .unwrap();
        let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
        let (threads, per) = (6usize, 150i64);
        let blocking: Vec<_> = (0..threads)
            .map(|t| {
                let (store, seen) = (store.clone(), seen.clone());
                std::thread::spawn(move || {
                    for i in 0..per {
                        let seen = seen.clone();
                        let seq = store
                            .write(move |tx| {
                                let seq = tx.insert_event(&event(&format!("s{t}"), i))?;
                                let seen = seen.clone();
                                tx.after_commit(Box::new(move || seen.lock().unwrap().push(seq)));
                                Ok(seq)
                            })
                            .unwrap();
                        assert!(seq > 0);
                    }
                })
            })
            .collect();
        block_on(async {
            for i in 0..per {
                let seen = seen.clone();
                store
                    .write_async(move |tx| {
                        let seq = tx.insert_event(&event("async", i))?;
                        let seen = seen.clone();
                        tx.after_commit(Box::new(move || seen.lock().unwrap().push(seq)));
                        Ok(())
                    })
                    .await
                    .unwrap();
            }
        });
        for h in blocking {
            h.join().unwrap();
        }
        let total = (threads as u64 + 1) * per as u64;
        assert_eq!(store.read(|r| r.event_count()).unwrap(), total);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len() as u64, total, "every hook ran once");
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "hooks ran out of commit order"
        );
        assert_eq!(store.metrics().ops(), total);
    }

    /// The writer's commits never checkpoint while the WAL is under its bound: the checkpointer
    /// thread does, off the writer's path; past the bound the writer does, so the WAL stays
    /// bounded when the thread cannot keep up (decision D60).
    #[test]
    fn checkpoints_run_off_the_writer_until_the_wal_reaches_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let store =
            SqliteStore::open(StoreOptions::new(&path).durability(Durability::Normal)).unwrap();
        let wal = dir.path().join("w.db-wal");
        let page = 4096;
        let wal_pages = || std::fs::metadata(&wal).unwrap().len() / page;
        // One event per page (a 3 KB payload), 100 per commit.
        let mut written = 0u64;
        let mut write_pages = |commits: u64| {
            for _ in 0..commits {
                store
                    .write(|tx| {
                        for i in 0..100 {
                            let mut e = event("big", i);
                            let mut payload = serde_json::Map::new();
                            payload.insert("blob".into(), "x".repeat(3_000).into());
                            e.payload = Some(payload);
                            tx.insert_event(&e)?;
                        }
                        Ok(())
                    })
                    .unwrap();
                written += 100;
            }
            written
        };
        store.pause_checkpoints(true);
        write_pages(30);
        assert_eq!(store.checkpoint_runs(), (0, 0));
        let grown = wal_pages();
        assert!(
            grown >= 3_000,
            "the WAL holds every page written ({grown} pages): no commit checkpointed"
        );
        store.pause_checkpoints(false);
        assert!(store.wait_background_checkpoints(1, Duration::from_secs(60)));
        // The checkpoint was complete, so the next commit starts the WAL over at its beginning:
        // the file does not grow.
        write_pages(5);
        assert_eq!(wal_pages(), grown);
        // With the thread held back, the writer checkpoints once the WAL reaches its bound, and
        // the WAL starts over after it.
        store.pause_checkpoints(true);
        let total = write_pages(110);
        let (_, inline) = store.checkpoint_runs();
        assert!(inline >= 1, "the writer never checkpointed past the bound");
        let bounded = wal_pages();
        assert!(
            bounded <= 10_500,
            "the WAL grew to {bounded} pages past its bound of 10,000"
        );
        assert_eq!(store.read(|r| r.event_count()).unwrap(), total);
    }

    /// A failed op rolls back only itself when it leads its own commit, and the store keeps
    /// taking writes; close waits for queued ops, and later writes fail as WriterGone.
    #[test]
    fn failed_op_then_close() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(StoreOptions::new(dir.path().join("w.db"))).unwrap();
        let failed = store.write(|tx| {
            tx.insert_event(&event("a", 1))?;
            Err::<(), _>(StoreError::Corrupt("no".into()))
        });
        assert!(failed.is_err());
        store.write(|tx| tx.insert_event(&event("a", 2))).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        store
            .submit(
                Box::new(|w: &mut dyn WriteTx| {
                    w.insert_event(&event("a", 3)).err().map(|e| e.to_string())
                }),
                Box::new(move |r| tx.send(r.is_ok()).unwrap()),
            )
            .unwrap();
        store.close();
        assert!(
            rx.recv().unwrap(),
            "an op queued before close still commits"
        );
        assert_eq!(store.read(|r| r.event_count()).unwrap(), 2);
        assert!(matches!(
            store.write(|tx| tx.insert_event(&event("a", 4))),
            Err(StoreError::WriterGone)
        ));
    }
}
