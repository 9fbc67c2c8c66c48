//! The cluster threads against a real PostgreSQL: wakes cross processes through NOTIFY, and
//! leadership is held by exactly one node and moves when it goes. Both engines share one store
//! (as gateways share one database); each has its own cluster connections.

use aware_cluster::{Cluster, ClusterOptions};
use aware_core::SessionKey;
use aware_engine::*;
use aware_store::{SqliteStore, Store, StoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

const W: &str = "agent:main:main";
const C: &str = "agent:main:subagent:c1";

fn pg_config() -> postgres::Config {
    let url = std::env::var("AWARE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:55432/postgres".into());
    url.parse().expect("AWARE_TEST_PG_URL is a PostgreSQL URL")
}

fn sref(s: &str) -> aware_core::SessionRef {
    let key = SessionKey::parse(s).unwrap();
    let agent = key.qualified_agent().unwrap();
    aware_core::SessionRef { key, agent }
}

fn engines(dir: &tempfile::TempDir) -> (Engine, Engine) {
    let mut config = EngineConfig::new(dir.path().join("state.db"));
    config.notify_on_create = false;
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(StoreOptions::new(&config.db_path)).unwrap());
    let clock = Arc::new(SystemClock);
    let a = Engine::open_with_store(store.clone(), config.clone(), clock.clone()).unwrap();
    let b = Engine::open_with_store(store, config, clock).unwrap();
    (a, b)
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_wake_crosses_processes_through_notify() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = engines(&dir);
    let ca = Cluster::start(&a, ClusterOptions::from_config(pg_config())).unwrap();
    let cb = Cluster::start(&b, ClusterOptions::from_config(pg_config())).unwrap();
    wait_for("both listeners", || {
        ca.status().is_listening() && cb.status().is_listening()
    });
    a.create_session(CreateSession::new(SessionKey::parse(W).unwrap()))
        .unwrap();
    a.create_session(
        CreateSession::new(SessionKey::parse(C).unwrap()).parent(SessionKey::parse(W).unwrap()),
    )
    .unwrap();
    let mut on_b = b.subscribe_wakes();
    a.post_turn(&sref(C), NewTurn::user("hello").channel("telegram"))
        .unwrap();
    let mut got = None;
    wait_for("the remote wake on B", || {
        if let Ok(w) = on_b.try_recv() {
            got = Some(w);
        }
        got.is_some()
    });
    let w = got.unwrap();
    assert_eq!(
        (w.reason, w.session_key.as_str(), w.remote),
        (WakeReason::SessionState, W, true)
    );
    assert_eq!(w.targets, vec![(C.to_string(), "main".to_string())]);
    assert!(
        ca.status()
            .published
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    ca.shutdown();
    cb.shutdown();
}

#[test]
fn exactly_one_leader_and_leadership_moves_when_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = engines(&dir);
    let opts = || {
        let mut o = ClusterOptions::from_config(pg_config());
        o.lock_key = 0x7465_7374_0000_0001;
        o
    };
    let ca = Cluster::start(&a, opts()).unwrap();
    let cb = Cluster::start(&b, opts()).unwrap();
    wait_for("a leader", || a.is_leader() || b.is_leader());
    // Hold for a few retry periods: never two.
    for _ in 0..30 {
        assert!(!(a.is_leader() && b.is_leader()), "two leaders");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (leader, follower, fe) = if a.is_leader() {
        (ca, cb, b)
    } else {
        (cb, ca, a)
    };
    leader.shutdown();
    wait_for("the follower to lead", || fe.is_leader());
    follower.shutdown();
}
