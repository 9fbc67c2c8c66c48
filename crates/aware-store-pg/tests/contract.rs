//! The backend contract suite against PostgreSQL (a throw-away cluster, one database per test),
//! and the PostgreSQL-specific promises: schema versions, outages, passwords never shown.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_store::Store;
use aware_store_pg::testing::PgCluster;
use aware_store_pg::{PgOptions, PgStore};

/// A fresh store on its own database of the shared test cluster.
struct Fixture {
    store: PgStore,
}

impl std::ops::Deref for Fixture {
    type Target = dyn Store;
    fn deref(&self) -> &Self::Target {
        &self.store
    }
}

fn fixture() -> Fixture {
    let url = PgCluster::shared().database().expect("test database");
    let store = PgStore::open(PgOptions::new(url)).expect("open");
    Fixture { store }
}

aware_store::contract_suite!(fixture);

mod postgres_only {
    use aware_store::{contract, ReadTx, Store, StoreError, StoreExt, WriteTx};
    use aware_store_pg::testing::{ClusterOptions, PgCluster};
    use aware_store_pg::{PgOptions, PgStore, SCHEMA_VERSION};

    /// Submits `ops` while the writer is held, so they form one batch; their outcomes by key
    /// (`Err(true)`: failed as unavailable), sorted.
    fn one_batch<const N: usize>(
        store: &PgStore,
        ops: [(&'static str, aware_store::WriteOp); N],
    ) -> Vec<(&'static str, Result<(), bool>)> {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        store.faults().set_stall_writer(true);
        for (key, op) in ops {
            let done_tx = done_tx.clone();
            store
                .submit(
                    op,
                    Box::new(move |r| {
                        let _ = done_tx.send((key, r.map_err(|e| e.is_unavailable())));
                    }),
                )
                .expect("submit");
        }
        store.faults().set_stall_writer(false);
        drop(done_tx);
        let mut outcomes: Vec<_> = done_rx.iter().collect();
        outcomes.sort();
        outcomes
    }

    fn append(store: &PgStore, key: &'static str, at: i64) -> Result<i64, StoreError> {
        store.write(move |tx: &mut dyn WriteTx| {
            let seq = tx.insert_event(&contract::event(key, "main", at))?;
            tx.upsert_head(key, "main", seq, at)?;
            Ok(seq)
        })
    }

    #[test]
    fn migrations_are_recorded_once_and_a_newer_schema_is_refused() {
        let url = PgCluster::shared().database().expect("database");
        let first = PgStore::open(PgOptions::new(url.clone())).expect("open");
        drop(first);
        // Opening again migrates nothing.
        let store = PgStore::open(PgOptions::new(url.clone())).expect("reopen");
        let mut client = store.connect().expect("connect");
        let versions: Vec<i64> = client
            .query(
                "SELECT version FROM aware_schema_version ORDER BY version",
                &[],
            )
            .expect("versions")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
        client
            .execute(
                "INSERT INTO aware_schema_version (version) VALUES ($1)",
                &[&(SCHEMA_VERSION + 1)],
            )
            .expect("bump");
        match PgStore::open(PgOptions::new(url)) {
            Err(StoreError::SchemaTooNew { found, supported }) => {
                assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
            }
            other => panic!("a newer schema must be refused, got {other:?}"),
        }
    }

    /// PostgreSQL refuses every statement of a transaction after one failed until a rollback,
    /// and turns its COMMIT into a rollback. An op that swallows a failed statement must be
    /// answered as failed and undone alone, while the other ops of its batch commit.
    #[test]
    fn an_op_that_swallows_a_failed_statement_is_undone_alone() {
        let url = PgCluster::shared().database().expect("database");
        let store = PgStore::open(PgOptions::new(url)).expect("open");
        store
            .write(|tx: &mut dyn WriteTx| {
                tx.insert_session(&contract::session("agent:main:x", "main", 1))
            })
            .expect("seed");
        let ops = [
            ("agent:main:a", false),
            ("agent:main:b", true),
            ("agent:main:c", false),
        ]
        .map(|(key, swallow)| {
            let op: aware_store::WriteOp = Box::new(move |tx: &mut dyn WriteTx| {
                if let Err(e) = tx.insert_session(&contract::session(key, "main", 1)) {
                    return Some(e.to_string());
                }
                if swallow {
                    // A duplicate key, its error dropped on the floor.
                    let _ = tx.insert_session(&contract::session("agent:main:x", "main", 1));
                }
                None
            });
            (key, op)
        });
        let outcomes = one_batch(&store, ops);
        assert_eq!(
            outcomes,
            [
                ("agent:main:a", Ok(())),
                ("agent:main:b", Err(true)),
                ("agent:main:c", Ok(()))
            ]
        );
        let exists = |k: &'static str| {
            store
                .read(move |r: &dyn ReadTx| r.session_exists(k, "main"))
                .expect("read")
        };
        assert!(exists("agent:main:a") && exists("agent:main:c"));
        assert!(
            !exists("agent:main:b"),
            "the swallowing op's own write was committed"
        );
    }

    /// Writes are not waited for one by one (docs/performance.md, "PostgreSQL write path"):
    /// a queued write the server refuses is found by a later exchange. Then the whole batch
    /// fails as unavailable and none of it is applied (the ops were not acknowledged), and the
    /// next batch works.
    #[test]
    fn a_queued_write_the_server_refuses_fails_its_batch_and_nothing_of_it_commits() {
        let url = PgCluster::shared().database().expect("database");
        let store = PgStore::open(PgOptions::new(url)).expect("open");
        let ops = [
            ("agent:main:a", false),
            ("agent:main:b", true),
            ("agent:main:c", false),
        ]
        .map(|(key, refused)| {
            let op: aware_store::WriteOp = Box::new(move |tx: &mut dyn WriteTx| {
                let mut turn = human_turn(0);
                turn.id = format!("{key}-0");
                if refused {
                    // Checked at the API edge; here it stands for any write the server refuses.
                    turn.text = "a\u{0}b".into();
                }
                tx.insert_turn(key, "main", &turn)
                    .err()
                    .map(|e| e.to_string())
            });
            (key, op)
        });
        let outcomes = one_batch(&store, ops);
        assert_eq!(
            outcomes,
            [
                ("agent:main:a", Err(true)),
                ("agent:main:b", Err(true)),
                ("agent:main:c", Err(true))
            ]
        );
        let turns = |k: &'static str| {
            store
                .read(move |r: &dyn ReadTx| r.turn_count(k, "main"))
                .expect("read")
        };
        assert_eq!((turns("agent:main:a"), turns("agent:main:c")), (0, 0));
        store
            .write(|tx: &mut dyn WriteTx| tx.insert_turn("agent:main:a", "main", &human_turn(0)))
            .expect("the next batch works");
        assert_eq!(turns("agent:main:a"), 1);
    }

    /// Savepoints are lazy: rolled back before anything inside them was sent, the queued
    /// writes after them are dropped and the op's other writes commit; a savepoint with a read
    /// inside reaches the server and is rolled back there.
    #[test]
    fn rolling_back_a_savepoint_drops_only_the_writes_after_it() {
        let url = PgCluster::shared().database().expect("database");
        let store = PgStore::open(PgOptions::new(url)).expect("open");
        let turn = |id: &str, index: i64| {
            let mut t = human_turn(index);
            t.id = id.into();
            t
        };
        store
            .write(move |tx: &mut dyn WriteTx| {
                tx.insert_turn("agent:main:a", "main", &turn("a0", 0))?;
                tx.savepoint("queued")?;
                tx.insert_turn("agent:main:a", "main", &turn("a1", 1))?;
                tx.rollback_to("queued")?;
                tx.savepoint("sent")?;
                tx.insert_turn("agent:main:b", "main", &turn("b0", 0))?;
                // A read sends the queue, savepoint included.
                assert_eq!(tx.turns("agent:main:b", "main", None, 10)?.len(), 1);
                tx.rollback_to("sent")?;
                tx.savepoint("kept")?;
                tx.insert_turn("agent:main:c", "main", &turn("c0", 0))?;
                tx.release("kept")
            })
            .expect("write");
        let turns = |k: &'static str| {
            store
                .read(move |r: &dyn ReadTx| r.turn_count(k, "main"))
                .expect("read")
        };
        assert_eq!(
            (
                turns("agent:main:a"),
                turns("agent:main:b"),
                turns("agent:main:c")
            ),
            (1, 0, 1)
        );
    }

    fn watch_cursor(notified: i64, created_at: i64, muted: bool) -> aware_store::CursorRow {
        aware_store::CursorRow {
            watcher: "agent:main:w".into(),
            target_key: "agent:main:t".into(),
            target_agent: "main".into(),
            state: aware_core::CursorState {
                // A muted row is settled.
                last_seen: if muted { notified } else { 0 },
                notified,
                material: notified,
                muted,
                origin: aware_core::Origin::Watch,
                notice_opened_at: (notified > 0 && !muted).then_some(1),
                updated_at: notified,
            },
            created_at,
        }
    }

    fn human_turn(index: i64) -> aware_store::TurnRow {
        aware_store::TurnRow {
            id: format!("turn-{index}"),
            index,
            role: "user".into(),
            text: "hello".into(),
            at: index,
            actor_type: aware_core::ActorType::Human,
            actor_id: None,
            provenance_json: "{}".into(),
            channel: None,
            run_id: None,
            origin: None,
            upstream_text: None,
            idempotency_key: None,
        }
    }

    /// What one writer's batches read: the session, its turn count, the cursor and the live
    /// watchers of the target (the rows a writer may keep between its batches).
    type Seen = (
        Option<aware_store::SessionRow>,
        i64,
        Option<aware_store::CursorRow>,
        Vec<String>,
    );

    fn look(store: &PgStore) -> Seen {
        store
            .write(|tx: &mut dyn WriteTx| {
                Ok((
                    tx.session("agent:main:t", "main")?,
                    tx.turn_count("agent:main:t", "main")?,
                    tx.cursor("agent:main:w", "agent:main:t", "main")?,
                    tx.live_watchers_of("agent:main:t", "main")?,
                ))
            })
            .expect("look")
    }

    /// Two gateways' writers on one database, alternating: each must see the other's writes to
    /// the rows it read or wrote before (the writer's row cache is kept only while no other
    /// writer committed in between), and its own writes across its batches.
    #[test]
    fn a_writer_sees_another_writers_commits_to_rows_it_has_seen() {
        let url = PgCluster::shared().database().expect("database");
        let a = PgStore::open(PgOptions::new(url.clone())).expect("open a");
        let b = PgStore::open(PgOptions::new(url)).expect("open b");
        a.write(|tx: &mut dyn WriteTx| {
            tx.insert_session(&contract::session("agent:main:t", "main", 1))?;
            tx.insert_session(&contract::session("agent:main:w", "main", 1))?;
            let n = tx.turn_count("agent:main:t", "main")?;
            tx.insert_turn("agent:main:t", "main", &human_turn(n))?;
            tx.put_cursor(&watch_cursor(1, 1, false))
        })
        .expect("a writes");
        let (s, turns, c, live) = look(&a);
        assert_eq!(s.map(|s| s.updated_at), Some(1));
        assert_eq!(turns, 1);
        assert_eq!(c.map(|c| c.state.notified), Some(1));
        assert_eq!(live, ["agent:main:w"]);

        // B changes every one of those rows (and reads them first, so it has them too).
        look(&b);
        b.write(|tx: &mut dyn WriteTx| {
            tx.update_session(&contract::session("agent:main:t", "main", 2))?;
            let n = tx.turn_count("agent:main:t", "main")?;
            tx.insert_turn("agent:main:t", "main", &human_turn(n))?;
            tx.put_cursor(&watch_cursor(2, 1, true))
        })
        .expect("b writes");
        let (s, turns, c, live) = look(&a);
        assert_eq!(
            s.map(|s| s.updated_at),
            Some(2),
            "A saw a stale session row"
        );
        assert_eq!(turns, 2, "A saw a stale turn count");
        assert_eq!(
            c.map(|c| (c.state.notified, c.state.muted)),
            Some((2, true)),
            "A saw a stale cursor"
        );
        assert!(live.is_empty(), "A saw stale live watchers: {live:?}");

        // A writes again; B, whose last look is older than A's write, must see it.
        a.write(|tx: &mut dyn WriteTx| {
            tx.delete_cursor("agent:main:w", "agent:main:t", "main")?;
            tx.delete_turns("agent:main:t", "main")?;
            Ok(())
        })
        .expect("a deletes");
        let (_, turns, c, live) = look(&b);
        assert_eq!((turns, c, live), (0, None, Vec::<String>::new()));
        // And a write another process makes outside any gateway (`aware migrate` raises the
        // counter too): B's own rows are re-read after A's commit, so a third commit by A
        // after B's look is seen again.
        a.write(|tx: &mut dyn WriteTx| tx.put_cursor(&watch_cursor(3, 7, false)))
            .expect("a puts");
        let (_, _, c, live) = look(&b);
        assert_eq!(c.map(|c| (c.state.notified, c.created_at)), Some((3, 7)));
        assert_eq!(live, ["agent:main:w"]);
    }

    /// The write log's other paths: a bulk write by another writer (logged as "everything"),
    /// and a write by a process that raises the epoch without a log row (as `aware migrate`
    /// does), must each make a writer drop what it cached; a batch that touched other sessions
    /// only must not hide its own rows' changes either.
    #[test]
    fn a_writer_drops_cached_rows_after_bulk_writes_and_unlogged_epochs() {
        let url = PgCluster::shared().database().expect("database");
        let a = PgStore::open(PgOptions::new(url.clone())).expect("open a");
        let b = PgStore::open(PgOptions::new(url)).expect("open b");
        a.write(|tx: &mut dyn WriteTx| {
            tx.insert_session(&contract::session("agent:main:t", "main", 1))?;
            tx.insert_session(&contract::session("agent:main:w", "main", 1))?;
            tx.insert_session(&contract::session("agent:main:other", "main", 1))?;
            tx.put_cursor(&watch_cursor(1, 1, false))
        })
        .expect("a writes");
        assert_eq!(look(&a).2.map(|c| c.state.notified), Some(1));

        // B writes only another session: A keeps its rows, and they are still right.
        b.write(|tx: &mut dyn WriteTx| {
            tx.update_session(&contract::session("agent:main:other", "main", 9))
        })
        .expect("b writes another session");
        let (s, _, c, _) = look(&a);
        assert_eq!(s.map(|s| s.updated_at), Some(1));
        assert_eq!(c.map(|c| c.state.notified), Some(1));

        // A bulk write by B (cursor expiry, as retention runs it) is logged as everything.
        b.write(|tx: &mut dyn WriteTx| tx.expire_cursors_batch(100, 10))
            .expect("b expires");
        let (_, _, c, live) = look(&a);
        assert_eq!(c, None, "A kept a cursor B's bulk expiry deleted");
        assert!(live.is_empty(), "A kept stale live watchers: {live:?}");
        let mut outside = b.connect().expect("connect");
        // A change from outside any writer: the session row changed and the epoch raised
        // without a log row.
        outside
            .batch_execute(
                "UPDATE sessions SET updated_at = 42 WHERE session_key = 'agent:main:t'; \
                 UPDATE aware_write_epoch SET epoch = epoch + 1",
            )
            .expect("outside write");
        let (s, _, _, _) = look(&a);
        assert_eq!(
            s.map(|s| s.updated_at),
            Some(42),
            "A kept a row across an epoch the log does not account for"
        );
    }

    /// The unix-socket URL form of docs/deployment.md (`postgresql:///db?host=/socket/dir`)
    /// opens the store and carries writes and reads.
    #[test]
    fn the_unix_socket_url_form_connects() {
        let cluster = PgCluster::shared();
        let url = cluster.socket_url(&cluster.database().expect("database"));
        assert!(url.starts_with("postgresql:///"), "{url}");
        let options = PgOptions::new(url.clone());
        options.validate().expect("the URL form is accepted");
        let store = PgStore::open(options).expect("open over the socket");
        store
            .write(|tx: &mut dyn WriteTx| {
                tx.insert_session(&contract::session("agent:main:t", "main", 1))
            })
            .expect("write");
        let found = store
            .read(|tx| tx.session("agent:main:t", "main"))
            .expect("read");
        assert!(found.is_some(), "{url}");
    }

    /// Ops queued while another gateway holds the write lock join the commit of the batch that
    /// waited (decision D47): a gateway's batches do not shrink as gateways are added. Before
    /// D47 (`batch_after_lock` off) the batch was fixed before the wait and they took a second
    /// commit.
    #[test]
    fn ops_queued_during_a_lock_wait_join_the_batch_that_waited() {
        for after_lock in [true, false] {
            let url = PgCluster::shared().database().expect("database");
            let mut options = PgOptions::new(url);
            options.batch_after_lock = after_lock;
            let store = PgStore::open(options).expect("open");
            // Another writer (as another gateway's batch) holds the lock.
            let mut holder = store.connect().expect("connect");
            holder
                .batch_execute("BEGIN; UPDATE aware_write_epoch SET epoch = epoch + 1")
                .expect("take the write lock");
            let commits = store.metrics().commits();
            let (answers, answered) = std::sync::mpsc::channel();
            let submit = |n: u32| {
                let answers = answers.clone();
                store
                    .submit(
                        Box::new(move |tx: &mut dyn WriteTx| {
                            let key = format!("agent:main:q{n}");
                            tx.insert_session(&contract::session(&key, "main", 1))
                                .err()
                                .map(|e| e.to_string())
                        }),
                        Box::new(move |r| {
                            let _ = answers.send(r.is_ok());
                        }),
                    )
                    .expect("submit")
            };
            submit(0);
            let blocked = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity                            WHERE wait_event_type = 'Lock' AND datname = current_database())";
            while !holder
                .query_one(blocked, &[])
                .expect("pg_stat_activity")
                .get::<_, bool>(0)
            {
                std::thread::yield_now();
            }
            for n in 1..10 {
                submit(n);
            }
            holder.batch_execute("ROLLBACK").expect("release the lock");
            for _ in 0..10 {
                assert!(answered.recv().expect("an answer"), "an op failed");
            }
            let taken = store.metrics().commits() - commits;
            assert_eq!(
                taken,
                if after_lock { 1 } else { 2 },
                "commits for ten ops, batch_after_lock = {after_lock}"
            );
            for n in 0..10 {
                let key = format!("agent:main:q{n}");
                let found = store.read(|tx| tx.session_exists(&key, "main"));
                assert!(found.expect("read"), "{key} was not committed");
            }
        }
    }

    /// Writes the writer cached and then rolled back (a failed op, a savepoint rolled back
    /// inside a good op) are not seen by later ops.
    #[test]
    fn rolled_back_writes_are_not_seen_by_later_ops() {
        let url = PgCluster::shared().database().expect("database");
        let store = PgStore::open(PgOptions::new(url)).expect("open");
        store
            .write(|tx: &mut dyn WriteTx| {
                tx.insert_session(&contract::session("agent:main:t", "main", 1))?;
                tx.put_cursor(&watch_cursor(1, 1, false))
            })
            .expect("seed");
        assert_eq!(look(&store).2.map(|c| c.state.notified), Some(1));
        let failed: Result<(), StoreError> = store.write(|tx: &mut dyn WriteTx| {
            tx.put_cursor(&watch_cursor(5, 1, false))?;
            tx.update_session(&contract::session("agent:main:t", "main", 5))?;
            Err(StoreError::Corrupt("the op gives up".into()))
        });
        assert!(failed.is_err());
        let (s, _, c, _) = look(&store);
        assert_eq!(c.map(|c| c.state.notified), Some(1), "a failed op's cursor");
        assert_eq!(s.map(|s| s.updated_at), Some(1), "a failed op's session");
        store
            .write(|tx: &mut dyn WriteTx| {
                tx.savepoint("inner")?;
                tx.put_cursor(&watch_cursor(6, 1, true))?;
                tx.rollback_to("inner")
            })
            .expect("rolled back inside");
        let (_, _, c, live) = look(&store);
        assert_eq!(
            c.map(|c| c.state.notified),
            Some(1),
            "a rolled-back savepoint's cursor"
        );
        assert_eq!(live, ["agent:main:w"]);
    }

    /// The writer numbers a batch's events itself after one `nextval` and moves the sequence
    /// past them before `COMMIT`: numbers stay increasing and unique across batches, ops and
    /// writers of two gateways, and a number is never given twice.
    #[test]
    fn locally_numbered_sequences_continue_across_batches_and_writers() {
        let url = PgCluster::shared().database().expect("database");
        let a = PgStore::open(PgOptions::new(url.clone())).expect("open a");
        let b = PgStore::open(PgOptions::new(url)).expect("open b");
        let three = a
            .write(|tx: &mut dyn WriteTx| {
                let mut out = Vec::new();
                for at in 1..=3 {
                    out.push(tx.insert_event(&contract::event("agent:main:s", "main", at))?);
                }
                Ok(out)
            })
            .expect("three in one op");
        assert_eq!(three, [three[0], three[0] + 1, three[0] + 2]);
        let mut seen = three.clone();
        for i in 0..6 {
            let store = if i % 2 == 0 { &b } else { &a };
            seen.push(append(store, "agent:main:s", 10 + i).expect("append"));
        }
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "sequences not increasing: {seen:?}"
        );
        let stored: Vec<i64> = a
            .read(|r: &dyn ReadTx| r.events_after("agent:main:s", "main", 0, 100))
            .expect("read")
            .iter()
            .map(|e| e.sequence)
            .collect();
        assert_eq!(stored, seen);
    }

    #[test]
    fn an_unreachable_server_fails_with_unavailable() {
        // A loopback port nobody listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let url = format!("postgres://aware:s3cret@127.0.0.1:{port}/aware");
        match PgStore::open(PgOptions::new(url)) {
            Err(e) => {
                assert!(e.is_unavailable(), "expected store_unavailable, got {e:?}");
                assert!(!e.to_string().contains("s3cret"), "password in error: {e}");
            }
            Ok(_) => panic!("opening an unreachable server must fail"),
        }
    }

    /// A pooled reader connection learns that the server restarted only when it is next used.
    /// The single-statement reads then try once more on a new connection, so the first
    /// `state_page` after a restart answers the stream instead of failing (which
    /// `session_status` would turn into an empty page).
    #[test]
    fn the_first_page_read_after_a_server_restart_answers() {
        let cluster = PgCluster::start_new(ClusterOptions::default()).expect("cluster");
        let url = cluster.database().expect("database");
        let store = PgStore::open(PgOptions::new(url)).expect("open");
        let seq = append(&store, "agent:main:r", 1).expect("append");
        // Every pooled reader connection is made and left idle.
        for _ in 0..8 {
            assert!(store.state_page("agent:main:r", "main", 0, 10).is_ok());
            assert!(store.session_exists("agent:main:r", "main").is_ok());
        }
        cluster.kill().expect("kill -9");
        cluster.start().expect("restart");
        for round in 0..8 {
            let page = store
                .state_page("agent:main:r", "main", 0, 10)
                .unwrap_or_else(|e| panic!("read {round} after the restart failed: {e}"));
            let seqs: Vec<i64> = page.events.iter().map(|e| e.sequence).collect();
            assert_eq!(seqs, [seq], "read {round} after the restart");
            let exists = store
                .session_exists("agent:main:r", "main")
                .unwrap_or_else(|e| panic!("exists {round} after the restart failed: {e}"));
            assert!(!exists, "no session row was written");
        }
    }

    #[test]
    fn outage_answers_unavailable_then_recovers_without_losing_commits() {
        let cluster = PgCluster::start_new(ClusterOptions::default()).expect("cluster");
        let url = cluster.database().expect("database");
        let store = PgStore::open(PgOptions::new(url)).expect("open");
        let before = append(&store, "agent:main:o", 1).expect("append");
        assert!(store.state_page("agent:main:o", "main", 0, 10).is_ok());

        cluster.kill().expect("kill -9");
        let w = append(&store, "agent:main:o", 2);
        assert!(
            matches!(&w, Err(e) if e.is_unavailable()),
            "a write during the outage must be store_unavailable: {w:?}"
        );
        let r = store.read(|r: &dyn ReadTx| r.event_count());
        assert!(
            matches!(&r, Err(e) if e.is_unavailable()),
            "a read during the outage must be store_unavailable: {r:?}"
        );
        let p = store.state_page("agent:main:o", "main", 0, 10);
        assert!(matches!(&p, Err(e) if e.is_unavailable()), "{p:?}");

        cluster.start().expect("restart");
        // Connections are made again lazily; a failed connect holds new attempts back for
        // 500 ms, so the first calls after the restart may still fail.
        let mut after = Err(StoreError::WriterGone);
        for _ in 0..100 {
            after = append(&store, "agent:main:o", 3);
            if after.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let after = after.expect("writes recover after the restart");
        assert!(after > before);
        let mut events = Err(StoreError::WriterGone);
        for _ in 0..100 {
            events = store.read(|r: &dyn ReadTx| r.events_after("agent:main:o", "main", 0, 10));
            if events.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let seqs: Vec<i64> = events
            .expect("reads recover after the restart")
            .iter()
            .map(|e| e.sequence)
            .collect();
        // The acknowledged append survived kill -9 (synchronous_commit = on); the failed one
        // never happened.
        assert_eq!(seqs, [before, after]);
        let info = store.info();
        assert_eq!(info.backend, "postgres");
        assert_eq!(info.durability, "synchronous_commit=on");
    }
}

/// A figure: appends per second through the `Store` trait (an event and its head per op, 16
/// threads submitting at once, group commit) on PostgreSQL (fsync on, `synchronous_commit =
/// on`) next to SQLite (`full`) on the same machine; then a check that each store holds every
/// append exactly once, in order per stream. Ignored in CI (it starts a cluster with fsync on);
/// run with
/// `cargo test -p aware-store-pg --test contract --release -- --ignored --nocapture appends_per_second`.
#[test]
#[ignore = "a measurement with fsync on; prints figures"]
fn appends_per_second_postgres_vs_sqlite() {
    use aware_store::{contract, StoreExt, WriteTx};
    use aware_store_pg::testing::{ClusterOptions, PgCluster};
    use aware_store_sqlite::{SqliteStore, StoreOptions};
    use std::sync::Arc;

    const THREADS: usize = 16;
    const PER_THREAD: usize = 250;
    fn measure(store: Arc<dyn Store>) -> f64 {
        let started = std::time::Instant::now();
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let store = store.clone();
                scope.spawn(move || {
                    let key: &'static str = Box::leak(format!("agent:main:b{t}").into_boxed_str());
                    for i in 0..PER_THREAD {
                        store
                            .write(move |tx: &mut dyn WriteTx| {
                                let seq =
                                    tx.insert_event(&contract::event(key, "main", i as i64))?;
                                tx.upsert_head(key, "main", seq, i as i64)
                            })
                            .expect("append");
                    }
                });
            }
        });
        let rate = (THREADS * PER_THREAD) as f64 / started.elapsed().as_secs_f64();
        // Every append is there once: per stream, PER_THREAD events in the order they were
        // made, the head on the last; no sequence in two streams.
        let mut all = std::collections::BTreeSet::new();
        store
            .read(|r| {
                assert_eq!(r.event_count()?, (THREADS * PER_THREAD) as u64);
                for t in 0..THREADS {
                    let key = format!("agent:main:b{t}");
                    let events = r.events_after(&key, "main", 0, 10_000)?;
                    let at: Vec<i64> = events.iter().map(|e| e.occurred_at).collect();
                    assert_eq!(at, (0..PER_THREAD as i64).collect::<Vec<_>>(), "{key}");
                    let last = events.last().map(|e| e.sequence);
                    assert_eq!(
                        r.head(&key, "main")?.map(|h| h.last_sequence),
                        last,
                        "{key}"
                    );
                    all.extend(events.iter().map(|e| e.sequence));
                }
                Ok(())
            })
            .expect("read back");
        assert_eq!(all.len(), THREADS * PER_THREAD, "a sequence in two streams");
        rate
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).expect("sqlite");
    let sqlite_rate = measure(Arc::new(sqlite));
    let cluster = PgCluster::start_new(ClusterOptions {
        fsync: true,
        ..Default::default()
    })
    .expect("cluster");
    let pg = PgStore::open(PgOptions::new(cluster.database().expect("db"))).expect("pg");
    let pg_rate = measure(Arc::new(pg));
    println!(
        "appends/s through the Store trait, {THREADS} threads x {PER_THREAD}: \
         SQLite (full) {sqlite_rate:.0}, PostgreSQL (fsync on, synchronous_commit on) {pg_rate:.0} \
         ({:.0} % of SQLite)",
        100.0 * pg_rate / sqlite_rate
    );
}

mod migration {
    use aware_store::{contract, CursorRow, ReadTx, SessionFilter, Store, StoreExt, WriteTx};
    use aware_store_pg::migrate::{postgres_to_sqlite, sqlite_to_postgres};
    use aware_store_pg::testing::PgCluster;
    use aware_store_pg::{PgOptions, PgStore};
    use aware_store_sqlite::{SqliteStore, StoreOptions};
    use std::path::Path;

    /// Everything the API can read about every session, in one snapshot.
    fn dump(store: &dyn Store) -> String {
        store
            .read(|r: &dyn ReadTx| {
                let mut out = String::new();
                let sessions = r.list_sessions(&SessionFilter {
                    limit: 10_000,
                    ..Default::default()
                })?;
                for s in &sessions {
                    let (k, a) = (&s.key, &s.agent_id);
                    out += &format!("{s:?}\n{:?}\n", r.head(k, a)?);
                    out += &format!("{:?}\n", r.events_after(k, a, 0, 10_000)?);
                    out += &format!("{:?}\n", r.cursors_by_watcher(k)?);
                    out += &format!("{:?}\n", r.system_events(k, a)?);
                    out += &format!("{:?}\n", r.turns(k, a, None, 10_000)?);
                    out += &format!("{:?}\n", r.runs_of(k, a, 10_000)?);
                    out += &format!("{:?}\n", r.link(k, a)?);
                }
                out += &format!("{} {:?}", r.event_count()?, r.gauges()?);
                Ok(out)
            })
            .expect("dump")
    }

    /// The kept counts (gauges) against the rows, read through the API: every session listed,
    /// every pending cursor of every watcher that has one.
    fn assert_counts_match_rows(store: &dyn Store, side: &str) {
        let (gauges, sessions, pending) = store
            .read(|r: &dyn ReadTx| {
                let sessions = r.list_sessions(&SessionFilter {
                    limit: 10_000,
                    ..Default::default()
                })?;
                let mut pending = 0;
                for w in r.watchers_with_pending()? {
                    pending += r
                        .cursors_by_watcher(&w)?
                        .iter()
                        .filter(|c| !c.state.muted && c.state.notified > c.state.last_seen)
                        .count() as u64;
                }
                Ok((r.gauges()?, sessions.len() as u64, pending))
            })
            .expect("counts");
        assert_eq!(
            (gauges.sessions, gauges.pending),
            (sessions, pending),
            "{side}"
        );
        assert!(
            pending > 0,
            "{side}: the populated store has a pending cursor"
        );
    }

    fn populate(store: &dyn Store) {
        store
            .write(|tx: &mut dyn WriteTx| {
                for i in 0..30 {
                    let key = format!("agent:main:m{}", i % 3);
                    if i < 3 {
                        let mut s = contract::session(&key, "main", i);
                        s.label = Some(format!("label {i}"));
                        tx.insert_session(&s)?;
                    }
                    let seq = tx.insert_event(&contract::event(&key, "main", i))?;
                    tx.upsert_head(&key, "main", seq, i)?;
                    tx.fifo_insert(&key, "main", &format!("line {i}"), None, i)?;
                }
                tx.put_cursor(&CursorRow {
                    watcher: "agent:main:m0".into(),
                    target_key: "agent:main:m1".into(),
                    target_agent: "main".into(),
                    state: aware_core::CursorState {
                        last_seen: 2,
                        notified: 5,
                        material: 8,
                        muted: false,
                        origin: aware_core::Origin::Watch,
                        notice_opened_at: Some(3),
                        updated_at: 4,
                    },
                    created_at: 1,
                })?;
                Ok(())
            })
            .expect("populate");
        // Prune the oldest events (the top of the log stays) and delete the newest event of
        // m2 by deleting nothing else: watermarks must survive the copy.
        store
            .write(|tx: &mut dyn WriteTx| tx.prune_lowest_batch(5, 100))
            .expect("prune");
    }

    fn sqlite(dir: &Path) -> SqliteStore {
        SqliteStore::open(StoreOptions::new(dir.join("state.db"))).expect("sqlite")
    }

    #[test]
    fn sqlite_to_postgres_to_sqlite_keeps_every_answer_and_sequence() {
        let a = tempfile::tempdir().expect("tempdir");
        let original = sqlite(a.path());
        populate(&original);
        let top = original
            .write(|tx: &mut dyn WriteTx| {
                let seq = tx.insert_event(&contract::event("agent:main:gone", "main", 1))?;
                // The newest event is deleted: its number must still never be issued again.
                tx.delete_session("agent:main:gone", "main")?;
                Ok(seq)
            })
            .expect("top");
        let before = dump(&original);
        original.close();
        drop(original);

        let url = PgCluster::shared().database().expect("database");
        let mut seen = Vec::new();
        let report =
            sqlite_to_postgres(a.path(), PgOptions::new(url.clone()), &mut |t, n, total| {
                seen.push((t.to_string(), n, total))
            })
            .expect("sqlite → postgres");
        assert!(report
            .tables
            .iter()
            .any(|(t, n)| t == "session_state_events" && *n == 25));
        assert!(seen
            .iter()
            .any(|(t, n, total)| t == "session_system_events" && n == total));
        let pg = PgStore::open(PgOptions::new(url.clone())).expect("pg");
        assert_eq!(dump(&pg), before, "PostgreSQL answers differ from SQLite's");
        assert_counts_match_rows(&pg, "PostgreSQL after the copy");
        let next = pg
            .write(|tx: &mut dyn WriteTx| {
                tx.insert_event(&contract::event("agent:main:m0", "main", 200))
            })
            .expect("append");
        assert!(next > top, "sequence {next} reissued at or below {top}");
        let after_pg = dump(&pg);
        pg.close();

        // A non-empty target is refused either way, and left as it was.
        let refused = sqlite_to_postgres(a.path(), PgOptions::new(url.clone()), &mut |_, _, _| {});
        assert!(refused.is_err_and(|e| e.to_string().contains("not empty")));
        let refused = postgres_to_sqlite(PgOptions::new(url.clone()), a.path(), &mut |_, _, _| {});
        assert!(refused.is_err_and(|e| e.to_string().contains("not empty")));

        let b = tempfile::tempdir().expect("tempdir");
        postgres_to_sqlite(PgOptions::new(url), b.path(), &mut |_, _, _| {})
            .expect("postgres → sqlite");
        let back = sqlite(b.path());
        assert_counts_match_rows(&back, "SQLite after the round trip");
        assert_eq!(
            dump(&back),
            after_pg,
            "SQLite answers after the round trip differ"
        );
        let again = back
            .write(|tx: &mut dyn WriteTx| {
                tx.insert_event(&contract::event("agent:main:m0", "main", 300))
            })
            .expect("append");
        assert!(again > next, "sequence {again} reissued at or below {next}");
    }
}

/// The console's counts kept by triggers (decision D54) against the rows they count.
mod kept_counts {
    use aware_core::{CursorState, Origin};
    use aware_store::{contract, ConsoleFilter, CursorRow, ReadTx, Store, StoreExt, WriteTx};
    use aware_store_pg::testing::PgCluster;
    use aware_store_pg::{PgOptions, PgStore};

    /// (sessions, sessions of agent `ops`, pending) as the store's reads answer them.
    fn kept(store: &PgStore) -> (u64, u64, u64) {
        store
            .read(|r: &dyn ReadTx| {
                let all = r.console_sessions(&ConsoleFilter {
                    limit: 1,
                    ..Default::default()
                })?;
                let ops = r.console_sessions(&ConsoleFilter {
                    agents: vec!["ops".into()],
                    limit: 1,
                    ..Default::default()
                })?;
                let gauges = r.gauges()?;
                assert_eq!(gauges.sessions, all.1, "the gauge and the console's total");
                assert_eq!(gauges.pending, r.count_pending()?);
                Ok((all.1, ops.1, gauges.pending))
            })
            .expect("kept counts")
    }

    /// The same, counted over the rows.
    fn counted(client: &mut postgres::Client) -> (u64, u64, u64) {
        let mut one = |sql: &str| -> u64 {
            let n: i64 = client.query_one(sql, &[]).expect(sql).get(0);
            n as u64
        };
        (
            one("SELECT COUNT(*) FROM sessions"),
            one("SELECT COUNT(*) FROM sessions WHERE agent_id = 'ops'"),
            one(
                "SELECT COUNT(*) FROM session_watch_cursors WHERE muted = 0 \
                 AND notified_sequence > last_seen_sequence",
            ),
        )
    }

    /// A cursor row that keeps the cursor invariant (a muted row is settled).
    fn cursor(
        watcher: &str,
        target: &str,
        last_seen: i64,
        notified: i64,
        muted: bool,
    ) -> CursorRow {
        let last_seen = if muted { notified } else { last_seen };
        CursorRow {
            watcher: watcher.into(),
            target_key: target.into(),
            target_agent: "main".into(),
            state: CursorState {
                last_seen,
                notified,
                // Some rows have material the sweep's re-freeze moves `notified` up to.
                material: if muted || notified % 3 != 0 {
                    notified
                } else {
                    notified + 2
                },
                muted,
                origin: Origin::Watch,
                notice_opened_at: (notified > last_seen).then_some(1),
                updated_at: notified,
            },
            created_at: 1,
        }
    }

    fn write(
        store: &PgStore,
        what: &str,
        op: impl FnMut(&mut dyn WriteTx) -> aware_store::Result<()> + Send + 'static,
    ) {
        store.write(op).unwrap_or_else(|e| panic!("{what}: {e}"));
    }

    type Op = Box<dyn FnMut(&mut dyn WriteTx) -> aware_store::Result<()> + Send>;

    /// Each kind of write the engine makes on cursors and sessions, as store calls.
    fn writes_through_store() -> Vec<(&'static str, Op)> {
        vec![
            (
                "a new notice",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.put_cursor(&cursor("agent:main:s1", "agent:main:t1", 1, 9, false))
                }),
            ),
            (
                "an upsert that mutes",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.put_cursor(&cursor("agent:main:s2", "agent:main:t2", 1, 9, true))
                }),
            ),
            (
                "an ack",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.put_cursor(&cursor("agent:main:s3", "agent:main:t3", 9, 9, false))
                }),
            ),
            (
                "the sweep's re-freeze",
                Box::new(|tx: &mut dyn WriteTx| {
                    let mut after = 0;
                    while let Some(last) = tx.sweep_batch(after, 50, 20)?.last {
                        after = last;
                    }
                    Ok(())
                }),
            ),
            (
                "an unwatch",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.delete_cursor("agent:main:s4", "agent:main:t4", "main")
                        .map(drop)
                }),
            ),
            (
                "a watcher's cursors",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.delete_cursors_of_watcher("agent:main:s5").map(drop)
                }),
            ),
            (
                "a target's cursors",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.delete_cursors_of_target("agent:main:t6", "main")
                        .map(drop)
                }),
            ),
            (
                "the expiry of idle cursors",
                Box::new(|tx: &mut dyn WriteTx| tx.expire_cursors_batch(3, 1_000).map(drop)),
            ),
            (
                "a session deleted with its cursors",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.delete_session("agent:ops:s9", "ops")?;
                    tx.delete_cursors_of_watcher("agent:ops:s9")?;
                    tx.delete_cursors_of_target("agent:ops:s9", "ops").map(drop)
                }),
            ),
            (
                "a session updated",
                Box::new(|tx: &mut dyn WriteTx| {
                    tx.update_session(&contract::session("agent:main:s1", "main", 99))
                }),
            ),
        ]
    }

    /// Writes in plain SQL, as another client of the database would make them.
    const PLAIN_SQL: [&str; 9] = [
        "UPDATE session_watch_cursors SET muted = 1 WHERE row_id % 3 = 0",
        "UPDATE session_watch_cursors SET last_seen_sequence = notified_sequence \
         WHERE watcher_session_key = 'agent:main:s0'",
        "UPDATE session_watch_cursors SET muted = 0",
        "UPDATE session_watch_cursors SET notified_sequence = notified_sequence + 1 \
         WHERE row_id % 2 = 0",
        "UPDATE session_watch_cursors SET updated_at = 7",
        "UPDATE sessions SET agent_id = 'ops' WHERE session_key LIKE 'agent:main:s1%'",
        "UPDATE sessions SET agent_id = agent_id",
        "DELETE FROM sessions WHERE session_key LIKE '%7'",
        "DELETE FROM session_watch_cursors WHERE row_id % 5 = 1",
    ];

    /// Back to schema 5 (no counts, no recorded write mode), then rows written without triggers.
    const SCHEMA_5_STORE: &str = "\
        DROP TABLE aware_counts, aware_count_deltas; \
        DROP FUNCTION aware_count_sessions, aware_count_pending CASCADE; \
        DROP TABLE aware_key_versions; DROP FUNCTION aware_take_key; \
        ALTER TABLE aware_write_epoch DROP COLUMN mode; \
        DELETE FROM aware_schema_version WHERE version >= 6; \
        INSERT INTO sessions (session_key, agent_id, session_id, kind, created_via, created_at, \
            updated_at) \
        SELECT 'agent:ops:u' || i, 'ops', 'u' || i, 'main', 'api', 0, 0 \
        FROM generate_series(1, 40) i; \
        INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, \
            target_agent_id, last_seen_sequence, notified_sequence, material_sequence, muted, \
            origin, created_at, updated_at) \
        SELECT 'agent:ops:u1', 'agent:ops:u' || i, 'ops', 1, 1 + i % 2, 2, (i % 3 <> 0)::int, \
            'watch', 0, 0 FROM generate_series(1, 40) i";

    /// Every kind of write, through the store and in plain SQL, leaves the kept counts equal to
    /// the rows; so does a store migrated from schema 5, whose counts come from its rows.
    #[test]
    fn kept_counts_follow_every_write_and_are_seeded_on_upgrade() {
        let url = PgCluster::shared().database().expect("database");
        let store = PgStore::open(PgOptions::new(url.clone())).expect("open");
        let mut client = store.connect().expect("connect");
        write(&store, "sessions and cursors", |tx| {
            for i in 0..300i64 {
                let agent = if i % 3 == 0 { "ops" } else { "main" };
                tx.insert_session(&contract::session(&format!("agent:{agent}:s{i}"), agent, i))?;
                let notified = 1 + i % 4;
                tx.put_cursor(&cursor(
                    &format!("agent:main:s{}", i % 7),
                    &format!("agent:main:t{i}"),
                    1,
                    notified,
                    i % 5 == 0,
                ))?;
            }
            Ok(())
        });
        assert_eq!(kept(&store), counted(&mut client), "after the inserts");
        let deltas = |client: &mut postgres::Client| -> i64 {
            client
                .query_one("SELECT COUNT(*) FROM aware_count_deltas", &[])
                .expect("deltas")
                .get(0)
        };
        assert!(
            deltas(&mut client) < 128,
            "the writer folds a batch's deltas"
        );

        for (what, op) in writes_through_store() {
            write(&store, what, op);
            assert_eq!(kept(&store), counted(&mut client), "after {what}");
        }
        // Plain SQL, in autocommit: deltas the writer has not folded yet are counted too.
        for sql in PLAIN_SQL {
            client.batch_execute(sql).expect(sql);
            assert_eq!(kept(&store), counted(&mut client), "after {sql}");
        }
        // A reset: the idle cursors expire, then every row goes at once.
        write(&store, "every idle cursor", |tx| {
            tx.expire_cursors_batch(i64::MAX, 100_000).map(drop)
        });
        assert_eq!(kept(&store), counted(&mut client), "after the expiry");
        client
            .batch_execute("DELETE FROM sessions; DELETE FROM session_watch_cursors")
            .expect("reset");
        assert_eq!(kept(&store), counted(&mut client), "after the reset");
        assert_eq!(kept(&store), (0, 0, 0));
        store.close();

        // A store at schema 5 (migrations 6 to 8 undone): no counts, rows written without
        // triggers, then opened.
        client.batch_execute(SCHEMA_5_STORE).expect("schema 5");
        let store = PgStore::open(PgOptions::new(url.clone())).expect("upgrade");
        let upgraded = counted(&mut client);
        assert_eq!(kept(&store), upgraded, "after the upgrade");
        assert_eq!(upgraded, (40, 40, 7));
        store.close();
        let store = PgStore::open(PgOptions::new(url)).expect("reopen");
        assert_eq!(kept(&store), upgraded, "seeded once only");
    }
}
