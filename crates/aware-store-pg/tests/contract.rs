//! The backend contract suite against PostgreSQL (a throw-away cluster, one database per test),
//! and the PostgreSQL-specific promises: schema versions, outages, passwords never shown.

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
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        // Hold the writer so the three ops form one batch.
        store.faults().set_stall_writer(true);
        let ops: Vec<(&str, bool)> = vec![
            ("agent:main:a", false),
            ("agent:main:b", true),
            ("agent:main:c", false),
        ];
        for (key, swallow) in ops {
            let done_tx = done_tx.clone();
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
        let mut outcomes: Vec<(&str, Result<(), bool>)> = done_rx.iter().collect();
        outcomes.sort();
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

/// A figure, not a test: appends per second through the `Store` trait (an event and its head
/// per op, 16 threads submitting at once, group commit) on PostgreSQL (fsync on,
/// `synchronous_commit = on`) next to SQLite (`full`) on the same machine. Run with
/// `cargo test -p aware-store-pg --test contract --release -- --ignored --nocapture appends_per_second`.
#[test]
#[ignore = "a measurement; prints figures"]
fn appends_per_second_postgres_vs_sqlite() {
    use aware_store::{contract, SqliteStore, StoreExt, StoreOptions, WriteTx};
    use aware_store_pg::testing::{ClusterOptions, PgCluster};
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
        (THREADS * PER_THREAD) as f64 / started.elapsed().as_secs_f64()
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).expect("sqlite");
    let sqlite_rate = measure(Arc::new(sqlite));
    let cluster = PgCluster::start_new(ClusterOptions { fsync: true }).expect("cluster");
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
    use aware_store::{
        contract, CursorRow, ReadTx, SessionFilter, SqliteStore, Store, StoreExt, StoreOptions,
        WriteTx,
    };
    use aware_store_pg::migrate::{postgres_to_sqlite, sqlite_to_postgres};
    use aware_store_pg::testing::PgCluster;
    use aware_store_pg::{PgOptions, PgStore};
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
