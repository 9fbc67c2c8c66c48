//! Locks by key (`PgOptions::keyed_locks`, decision D56): two writers on crossing keys, and ops
//! that are rolled back and run again. The contract suite runs in this mode too, with
//! `AWARE_PG_KEYED_LOCKS=1` (docs/testing.md).
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_store::{contract, Store, StoreExt, WriteTx};
use aware_store_pg::testing::PgCluster;
use aware_store_pg::{PgOptions, PgStore};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

fn keyed(url: &str) -> PgStore {
    let mut options = PgOptions::new(url.to_string());
    options.keyed_locks = true;
    PgStore::open(options).expect("open")
}

const X: &str = "agent:main:x";
const Y: &str = "agent:main:y";

/// The FIFO texts of session `key`, in order.
fn fifo(store: &dyn Store, key: &str) -> Vec<String> {
    let mut texts: Vec<String> = store
        .read(|tx| tx.system_events(key, "main"))
        .expect("read fifo")
        .into_iter()
        .map(|e| e.text)
        .collect();
    texts.sort();
    texts
}

/// Counts of what the ops did: runs (every run), hooks (runs that committed).
#[derive(Default)]
struct Counts {
    runs: AtomicUsize,
    hooks: AtomicUsize,
}

/// An op that writes `first`'s stream, meets the other writer (which then holds its own first
/// key), and writes `second`'s: on its first run only, so a re-run does not wait again.
fn crossing_op(
    name: &'static str,
    (first, second): (&'static str, &'static str),
    (tell, hear): (mpsc::Sender<()>, mpsc::Receiver<()>),
    counts: Arc<Counts>,
    met: Arc<AtomicUsize>,
) -> impl FnMut(&mut dyn WriteTx) -> aware_store::Result<()> + Send + 'static {
    let mut first_run = true;
    move |tx| {
        counts.runs.fetch_add(1, Ordering::SeqCst);
        tx.fifo_insert(first, "main", name, None, 1)?;
        if std::mem::take(&mut first_run) {
            let _ = tell.send(());
            // A guard against a hang, not a timing: both ops run at the same time only when
            // keyed batches of two writers overlap, which is what this counts.
            if hear.recv_timeout(Duration::from_secs(20)).is_ok() {
                met.fetch_add(1, Ordering::SeqCst);
            }
        }
        tx.fifo_insert(second, "main", name, None, 1)?;
        let counts = counts.clone();
        tx.after_commit(Box::new(move || {
            counts.hooks.fetch_add(1, Ordering::SeqCst);
        }));
        Ok(())
    }
}

/// Writer A takes X then Y, writer B takes Y then X, each holding its first key while it asks
/// for the second. With waited locks for both keys this is a deadlock (PostgreSQL fails one
/// batch after `deadlock_timeout`); with the try-lock rule the op that meets a busy key is
/// rolled back, releasing its key, and run again first in its writer's next batch. Both ops
/// must succeed, each exactly once in effect.
#[test]
fn crossing_keys_of_two_writers_neither_deadlock_nor_apply_twice() {
    let url = PgCluster::shared().database().expect("database");
    let (a, b) = (keyed(&url), keyed(&url));
    a.write(|tx: &mut dyn WriteTx| {
        tx.insert_session(&contract::session(X, "main", 1))?;
        tx.insert_session(&contract::session(Y, "main", 1))
    })
    .expect("sessions");
    let (a_tells, b_hears) = mpsc::channel();
    let (b_tells, a_hears) = mpsc::channel();
    let counts = Arc::new(Counts::default());
    let met = Arc::new(AtomicUsize::new(0));
    let op_a = crossing_op(
        "from a",
        (X, Y),
        (a_tells, a_hears),
        counts.clone(),
        met.clone(),
    );
    let op_b = crossing_op(
        "from b",
        (Y, X),
        (b_tells, b_hears),
        counts.clone(),
        met.clone(),
    );
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.write(op_a));
        let tb = s.spawn(|| b.write(op_b));
        (ta.join().expect("a"), tb.join().expect("b"))
    });
    assert!(ra.is_ok() && rb.is_ok(), "a: {ra:?}, b: {rb:?}");
    assert_eq!(
        met.load(Ordering::SeqCst),
        2,
        "the two batches did not overlap: keyed mode did not run"
    );
    assert!(
        counts.runs.load(Ordering::SeqCst) > 2,
        "neither op met a busy key"
    );
    assert_eq!(counts.hooks.load(Ordering::SeqCst), 2, "hooks ran per run");
    for key in [X, Y] {
        assert_eq!(fifo(&a, key), ["from a", "from b"], "effects of {key}");
    }
}

/// An op that needs the cluster key exclusively (deleting a watcher's cursors reaches rows of
/// keys it cannot name) after a keyed write: its first run is rolled back and it runs again in
/// a batch of its own that holds the cluster key; what it wrote before is applied once, its
/// hook runs once, and its answer is the last run's.
#[test]
fn an_op_rerun_for_the_exclusive_key_applies_its_effects_once() {
    let url = PgCluster::shared().database().expect("database");
    let store = keyed(&url);
    store
        .write(|tx: &mut dyn WriteTx| tx.insert_session(&contract::session(X, "main", 1)))
        .expect("session");
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    let answer = store
        .write(move |tx: &mut dyn WriteTx| {
            let run = c.runs.fetch_add(1, Ordering::SeqCst);
            tx.fifo_insert(X, "main", "once", None, 1)?;
            let deleted = tx.delete_cursors_of_watcher(Y)?;
            let c = c.clone();
            tx.after_commit(Box::new(move || {
                c.hooks.fetch_add(1, Ordering::SeqCst);
            }));
            Ok((run, deleted))
        })
        .expect("op");
    assert_eq!(counts.runs.load(Ordering::SeqCst), 2, "runs");
    assert_eq!(answer, (1, 0), "the answer is the second run's");
    assert_eq!(counts.hooks.load(Ordering::SeqCst), 1, "hooks");
    assert_eq!(fifo(&store, X), ["once"]);
}

/// A gateway of the default mode and one of the keyed mode on one database would each miss the
/// other's writes in their row caches: the second to open is refused, naming the mode, and
/// writes once the other has gone.
#[test]
fn writers_of_the_two_modes_never_share_a_database() {
    let url = PgCluster::shared().database().expect("database");
    let refused = |result: aware_store::Result<PgStore>| match result {
        Err(aware_store::StoreError::Refused(why)) => why,
        Err(other) => panic!("want Refused, got {other}"),
        Ok(_) => panic!("a writer of the other mode opened beside a running one"),
    };
    let default = PgStore::open(PgOptions::new(url.clone())).expect("open default");
    let second_default = PgStore::open(PgOptions::new(url.clone())).expect("same mode opens");
    let why = refused(PgStore::open({
        let mut o = PgOptions::new(url.clone());
        o.keyed_locks = true;
        o
    }));
    assert!(why.contains("same mode"), "{why}");
    drop(default);
    drop(second_default);

    let store = keyed(&url);
    store
        .write(|tx| tx.fifo_insert(X, "main", "keyed", None, 1))
        .expect("keyed write");
    let why = refused(PgStore::open(PgOptions::new(url.clone())));
    assert!(why.contains("keyed"), "{why}");
    drop(store);
    let back = PgStore::open(PgOptions::new(url)).expect("default again once keyed is gone");
    back.write(|tx| tx.fifo_insert(Y, "main", "default", None, 1))
        .expect("default write");
}

/// A role that may only connect (`CONNECT` from `PUBLIC`, no grant at all), connected to `url`'s
/// database: any such role can take any advisory lock.
fn stranger(url: &str, name: &str) -> postgres::Client {
    let role = format!("{name}_{}", std::process::id());
    let mut admin = postgres::Client::connect(url, postgres::NoTls).expect("connect as owner");
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN"
        ))
        .expect("create the stranger role");
    let stranger_url = url.replacen("postgres@", &format!("{role}@"), 1);
    postgres::Client::connect(&stranger_url, postgres::NoTls).expect("connect as the stranger")
}

/// Sessions of this connection's role (the gateways' in these tests) holding advisory lock `key`.
fn gateways_holding(admin: &mut postgres::Client, key: i64) -> i64 {
    admin
        .query_one(
            "SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND l.classid = (($1::bigint >> 32) & 4294967295)::oid \
             AND l.objid = ($1::bigint & 4294967295)::oid AND a.usename = current_user",
            &[&key],
        )
        .expect("pg_locks")
        .get(0)
}

/// Takes advisory lock `key` exclusively for the session, as a stranger would to stop writes.
fn hold(client: &mut postgres::Client, key: i64) {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .expect("the stranger takes the lock");
}

/// Writes one FIFO row, retrying while the store reconnects after a restart (a failed connect
/// holds new attempts back for 500 ms); answers the last outcome.
fn write_once_reconnected(store: &PgStore, text: &'static str) -> aware_store::Result<()> {
    let mut last = Err(aware_store::StoreError::WriterGone);
    for _ in 0..100 {
        last = store
            .write(move |tx| tx.fifo_insert(X, "main", text, None, 1))
            .map(drop);
        if last.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    last
}

/// Decision D61: a role that may only connect holds both write modes' locks, before the
/// gateway starts and again after a server restart (it reconnects first). A store of the
/// default mode still opens, writes, reconnects and writes; a second one opens beside it; and
/// a keyed store is still refused while they live (the stranger stops no writer and helps no
/// mix of modes).
#[test]
fn a_connect_only_role_holding_the_mode_locks_stops_no_default_writes() {
    let cluster =
        PgCluster::start_new(aware_store_pg::testing::ClusterOptions::default()).expect("cluster");
    let url = cluster.database().expect("database");
    // The schema exists before the stranger comes (its role cannot create it).
    drop(PgStore::open(PgOptions::new(url.clone())).expect("create the schema"));
    let mut s = stranger(&url, "mode_stranger");
    hold(&mut s, aware_store_pg::MODE_KEYED_LOCK);
    let store = PgStore::open(PgOptions::new(url.clone())).expect("a default store opens");
    store
        .write(|tx| tx.fifo_insert(X, "main", "before", None, 1))
        .expect("a default write");
    match PgStore::open({
        let mut o = PgOptions::new(url.clone());
        o.keyed_locks = true;
        o
    }) {
        Err(aware_store::StoreError::Refused(why)) => assert!(why.contains("same mode"), "{why}"),
        Err(other) => panic!("want Refused, got {other}"),
        Ok(_) => panic!("a keyed writer opened beside a default one"),
    }

    cluster.stop().expect("stop the server");
    cluster.start().expect("restart");
    let mut s = stranger(&url, "mode_stranger");
    hold(&mut s, aware_store_pg::MODE_KEYED_LOCK);
    hold(&mut s, aware_store_pg::MODE_DEFAULT_LOCK);
    write_once_reconnected(&store, "after").expect("writes again after the restart");
    let second = PgStore::open(PgOptions::new(url)).expect("another default store opens");
    second
        .write(|tx| tx.fifo_insert(X, "main", "second", None, 1))
        .expect("its write");
    assert_eq!(fifo(&store, X), ["after", "before", "second"]);
    drop(s);
}

/// Decision D61: a stranger that holds the default mode's lock keeps a default writer from
/// showing it is live, so a keyed writer started then takes the database over. The default
/// writer's next batch sees the recorded mode under its lock and is refused (never a write on
/// a stale row cache); once the keyed writer has gone it claims the database back and writes.
#[test]
fn a_default_writer_whose_marker_a_stranger_holds_stops_when_a_keyed_writer_takes_over() {
    let url = PgCluster::shared().database().expect("database");
    drop(PgStore::open(PgOptions::new(url.clone())).expect("create the schema"));
    let mut s = stranger(&url, "marker_stranger");
    hold(&mut s, aware_store_pg::MODE_DEFAULT_LOCK);
    let default = PgStore::open(PgOptions::new(url.clone())).expect("a default store opens");
    default
        .write(|tx| tx.fifo_insert(X, "main", "default", None, 1))
        .expect("a default write");
    let keyed_store = keyed(&url);
    keyed_store
        .write(|tx| tx.fifo_insert(X, "main", "keyed", None, 1))
        .expect("a keyed write");
    let e = default
        .write(|tx| tx.fifo_insert(X, "main", "refused", None, 1))
        .expect_err("a default batch after the keyed writer took over");
    assert!(e.to_string().contains("write-lock mode"), "{e}");
    drop(keyed_store);
    // Its backend ends (and frees its marker) after the socket closes, not with the drop.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect as owner");
    let mut polls = 0;
    while gateways_holding(&mut admin, aware_store_pg::MODE_KEYED_LOCK) > 0 {
        polls += 1;
        assert!(polls < 1_000, "the keyed writer's session never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    default
        .write(|tx| tx.fifo_insert(X, "main", "back", None, 1))
        .expect("the default writer claims the database back");
    assert_eq!(fifo(&default, X), ["back", "default", "keyed"]);
    drop(s);
}
