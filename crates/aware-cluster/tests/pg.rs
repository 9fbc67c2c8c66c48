//! The cluster threads against a real PostgreSQL (the throw-away test cluster): two engines,
//! each on its own PostgreSQL store of one database (two gateways, in one process), each with
//! its own cluster connections. Wakes cross through NOTIFY; leadership is held by exactly one
//! and moves when it goes.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_cluster::{Cluster, ClusterOptions, ClusterStatus};
use aware_core::SessionKey;
use aware_engine::*;
use aware_store::Store;
use aware_store_pg::testing::PgCluster;
use aware_store_pg::{PgOptions, PgStore};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const W: &str = "agent:main:main";
const C: &str = "agent:main:subagent:c1";

fn options(store: &PgStore) -> ClusterOptions {
    let s = store.clone();
    ClusterOptions::new(Arc::new(move || s.connect().map_err(|e| e.to_string())))
}

fn sref(s: &str) -> aware_core::SessionRef {
    let key = SessionKey::parse(s).unwrap();
    let agent = key.qualified_agent().unwrap();
    aware_core::SessionRef { key, agent }
}

/// Two engines, each on its own store of one fresh database.
fn engines() -> ((Engine, PgStore), (Engine, PgStore)) {
    let url = PgCluster::shared().database().expect("test database");
    let one = || {
        let store = PgStore::open(PgOptions::new(url.clone())).expect("open");
        let mut config = EngineConfig::new();
        config.notify_on_create = false;
        let dyn_store: Arc<dyn Store> = Arc::new(store.clone());
        let e = Engine::open(dyn_store, config, Arc::new(SystemClock)).unwrap();
        (e, store)
    };
    (one(), one())
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
    let ((a, sa), (b, sb)) = engines();
    let ca = Cluster::start(&a, options(&sa)).unwrap();
    let cb = Cluster::start(&b, options(&sb)).unwrap();
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
    let ((a, sa), (b, sb)) = engines();
    let opts = |s: &PgStore| {
        let mut o = options(s);
        // Tests share the cluster: each takes its own lock.
        o.lock_key = 0x7465_7374_0000_0001;
        o
    };
    let ca = Cluster::start(&a, opts(&sa)).unwrap();
    let cb = Cluster::start(&b, opts(&sb)).unwrap();
    wait_for("a leader", || a.is_leader() || b.is_leader());
    let (leader, follower, fe) = if a.is_leader() {
        (ca, cb, b)
    } else {
        (cb, ca, a)
    };
    // Never two: the follower asks for the lock again and again and is refused every time.
    // Counted, not sampled: a moment of double leadership, however short, would have counted
    // an acquisition on the follower (or a loss on the leader).
    let (l, f) = (leader.status().clone(), follower.status().clone());
    wait_for("the follower to be refused the lock three times", || {
        f.lock_refused.load(Ordering::Relaxed) >= 3
    });
    let counts = |s: &ClusterStatus| {
        (
            s.leader_acquired.load(Ordering::Relaxed),
            s.leader_lost.load(Ordering::Relaxed),
        )
    };
    assert_eq!(counts(&l), (1, 0), "the leader's acquisitions and losses");
    assert_eq!(counts(&f), (0, 0), "the follower's acquisitions and losses");
    assert!(l.is_leader() && !f.is_leader());
    leader.shutdown();
    wait_for("the follower to lead", || fe.is_leader());
    follower.shutdown();
}

/// Writes a key file of `mode` holding `text`, as an operator would (`openssl rand -hex 32`).
fn key_file(dir: &std::path::Path, mode: u32, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("cluster.key");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Decision D62: with a key file, the database holds no key a reading role could sign with (a
/// backup role with `pg_read_all_data` reads an empty table), a wake signed with the key the
/// database held is dropped and counted, and two gateways with the same key file hear each
/// other's wakes.
#[test]
fn with_a_key_file_a_backup_role_reads_no_signing_key_and_the_old_key_signs_nothing() {
    use aware_store_pg::postgres::{Client, NoTls};
    let url = PgCluster::shared().database().expect("test database");
    let ((a, sa), (b, sb)) = {
        // The same two engines as `engines`, on a database whose URL this test also needs.
        let one = || {
            let store = PgStore::open(PgOptions::new(url.clone())).expect("open");
            let mut config = EngineConfig::new();
            config.notify_on_create = false;
            let dyn_store: Arc<dyn Store> = Arc::new(store.clone());
            let e = Engine::open(dyn_store, config, Arc::new(SystemClock)).unwrap();
            (e, store)
        };
        (one(), one())
    };
    let role = format!("backup_{}", std::process::id());
    let mut owner = Client::connect(&url, NoTls).unwrap();
    owner
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; GRANT pg_read_all_data TO {role}"
        ))
        .unwrap();
    let mut backup = Client::connect(&url.replacen("postgres@", &format!("{role}@"), 1), NoTls)
        .expect("connect as the backup role");
    // Without a key file the backup role reads the key every gateway signs with.
    let old_key: String = backup
        .query_one("SELECT key FROM aware_cluster_key WHERE id = 1", &[])
        .expect("the database's key, as the backup role")
        .get(0);

    let dir = tempfile::tempdir().unwrap();
    let path = key_file(dir.path(), 0o600, &format!("{}\n", "5e".repeat(32)));
    let key = aware_cluster::ClusterKey::from_file(&path).expect("a private key file");
    let with_key = |s: &PgStore| {
        let mut o = options(s);
        o.key = Some(key.clone());
        o
    };
    let ca = Cluster::start(&a, with_key(&sa)).unwrap();
    let cb = Cluster::start(&b, with_key(&sb)).unwrap();
    wait_for("both listeners", || {
        ca.status().is_listening() && cb.status().is_listening()
    });
    let rows = backup
        .query("SELECT key FROM aware_cluster_key", &[])
        .expect("the backup role may read the table");
    assert!(rows.is_empty(), "the database still holds a signing key");

    a.create_session(CreateSession::new(SessionKey::parse(W).unwrap()))
        .unwrap();
    a.create_session(
        CreateSession::new(SessionKey::parse(C).unwrap()).parent(SessionKey::parse(W).unwrap()),
    )
    .unwrap();
    let mut on_b = b.subscribe_wakes();
    // A wake a gateway would make, signed with the key the database held, sent by the backup
    // role (any role that may connect may NOTIFY); then a real wake from A, which arrives
    // after it (notifications come in commit order).
    let body = serde_json::json!({"node": "forged", "sessionKey": W, "agentId": "main",
                                  "reason": "message", "at": 1})
    .to_string();
    let forged = aware_cluster::sign(old_key.as_bytes(), &body);
    backup
        .execute(
            "SELECT pg_notify($1, $2)",
            &[&aware_cluster::WAKE_CHANNEL, &forged],
        )
        .unwrap();
    a.post_turn(&sref(C), NewTurn::user("hello").channel("telegram"))
        .unwrap();
    let mut got = Vec::new();
    wait_for("the real wake on B", || {
        while let Ok(w) = on_b.try_recv() {
            got.push(w);
        }
        got.iter().any(|w| w.reason == WakeReason::SessionState)
    });
    assert!(
        got.iter().all(|w| w.reason != WakeReason::Message),
        "the forged wake was delivered: {got:?}"
    );
    assert!(cb.status().rejected.load(Ordering::Relaxed) >= 1);
    assert_eq!(cb.status().received.load(Ordering::Relaxed), 1);
    ca.shutdown();
    cb.shutdown();
}
