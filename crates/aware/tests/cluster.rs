//! Several gateways on one PostgreSQL, black-box (the real `aware serve` and `aware migrate` on
//! the throw-away test cluster of `aware_store_pg::testing`).

mod common;

use aware_store_pg::testing::PgCluster;
use common::*;
use serde_json::{json, Value};
use std::process::Command;

const MIGRATE_CONFIG: &str = "notify_on_create = false\n[retention]\nmax_age_days = 1\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n";

fn migrate(from: &str, to: &str) -> std::process::Output {
    Command::new(bin())
        .args(["migrate", "--from", from, "--to", to])
        .output()
        .expect("run aware migrate")
}

/// Every answer a client can get about every session: the list, and per session its status
/// with `changesSince 0` (as the operator's main session sees it), pending notices, watches,
/// watchers and turns.
fn snapshot(s: &Server) -> Value {
    let list = s.get("/v1/sessions");
    assert_eq!(list.status, 200, "{}", list.body);
    let mut keys: Vec<String> = list.body["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|x| x["key"].as_str().expect("key").to_string())
        .collect();
    keys.sort();
    let mut per = serde_json::Map::new();
    for k in &keys {
        let p = |suffix: &str| s.get(&format!("/v1/sessions/{}{suffix}", seg(k))).body;
        per.insert(
            k.clone(),
            json!({
                "session": p(""),
                "status": s.status(W, k, 0),
                "pending": p("/pending"),
                "watches": p("/watches"),
                "watchers": p("/watchers"),
                "turns": p("/turns"),
            }),
        );
    }
    json!({"list": list.body, "sessions": per})
}

/// SQLite → PostgreSQL → SQLite keeps every answer, the FIFO, the pruned watermarks and the
/// sequence counter (the next event gets the number the original store would give it).
#[test]
fn migrate_round_trip_sqlite_postgres_sqlite_keeps_every_answer() {
    let mut a = Server::with_config(MIGRATE_CONFIG);
    a.create(W);
    a.create_child(C, W);
    a.create(X);
    assert_eq!(a.watch(X, C).status, 200);
    a.hdm(C);
    let r = a.put(
        &format!("/v1/sessions/{}/goal", seg(C)),
        json!({"text": "ship it"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = a.post(
        &format!("/v1/sessions/{}/runs", seg(C)),
        json!({"runId": "r1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = a.post(
        &format!("/v1/sessions/{}/runs/r1/end", seg(C)),
        json!({"outcome": "ok"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // Two days later: everything so far is past `max_age_days`; prune leaves watermarks.
    let later = a.now + 2 * DAY;
    a.set_clock(later);
    a.hdm(X);
    let pruned = a.prune();
    assert!(
        pruned["deletedByAge"].as_i64().unwrap_or(0) > 0,
        "the prune deleted events: {pruned}"
    );
    a.hdm(C);
    // After the prune, which expires FIFO entries older than a day.
    let r = a.post(
        &format!("/v1/sessions/{}/system-events", seg(W)),
        json!({"text": "deploy finished", "contextKey": "deploy"}),
    );
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    // The highest sequence issued is then no longer stored: its session is deleted.
    a.create_child(D, W);
    let top = a.hdm_seq(D);
    assert_eq!(a.delete(&format!("/v1/sessions/{}", seg(D))).status, 200);
    let before = snapshot(&a);
    assert_eq!(
        before["sessions"][W]["pending"]["systemEvents"][0]["text"],
        "deploy finished"
    );
    a.stop();

    let pg = PgCluster::shared().database().expect("test database");
    let data = a.data_dir().to_str().expect("utf-8 path").to_string();
    let out = migrate(&data, &pg);
    assert!(
        out.status.success(),
        "migrate to PostgreSQL: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(progress.contains("counts verified"), "{progress}");

    // A second copy into the now non-empty database is refused, and nothing changes.
    let again = migrate(&data, &pg);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not empty"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // And back into a fresh data dir.
    let back = tempfile::tempdir().expect("tempdir");
    let back_dir = back.path().join("data");
    let out = migrate(&pg, back_dir.to_str().expect("utf-8"));
    assert!(
        out.status.success(),
        "migrate to SQLite: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The original and the round-tripped store answer alike, at the same test time.
    a.restart();
    let mut b = Server::with_args(MIGRATE_CONFIG, &[]);
    b.stop();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", b.db_path().display()));
    }
    std::fs::copy(back_dir.join("state.db"), b.db_path()).expect("copy the migrated store");
    b.now = a.now;
    b.restart();
    // (Both restarted at the same time, so both restart sweeps re-froze the same notices.)
    let (sa, sb) = (snapshot(&a), snapshot(&b));
    for (key, va) in sa["sessions"].as_object().expect("sessions") {
        assert_eq!(va, &sb["sessions"][key], "the round trip changed {key}");
    }
    assert_eq!(sa, sb);
    // The counters came along: the next event has the same sequence on both.
    assert_eq!(a.hdm_seq(C), top + 1);
    assert_eq!(
        b.hdm_seq(C),
        top + 1,
        "a deleted session's sequence was issued again"
    );
    assert_eq!(a.drain(W), b.drain(W), "the FIFO came along");
}
