//! Quick end-to-end checks of the gateway harness itself.

mod common;
use common::*;
use serde_json::json;

#[test]
fn s041_exact_notice_over_http() {
    let s = Server::family();
    s.hdm(C);
    let p = s.pending(W);
    assert_eq!(
        p["notices"],
        json!([{"targetSessionKey": C, "targetAgentId": "main", "lastSeen": 1,
        "contextKey": format!("session-state:{HEX_C}"), "openedAt": T0, "text": nt(C, 1)}])
    );
}

#[test]
fn s049_notices_survive_kill_9() {
    let mut s = Server::family();
    s.hdm(C);
    s.kill9_restart();
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
}

/// S041/S049 on a PostgreSQL store (`--store`): the notice is exact, survives kill -9 of the
/// gateway, `/health` names the backend's durability, no SQLite file is made and the URL's
/// password never reaches the log.
#[test]
fn s049_on_postgres_notices_survive_kill_9() {
    let db = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("test database");
    // The test cluster trusts every login, so a password in the URL is accepted and ignored.
    let url = db.replacen("postgres://postgres@", "postgres://postgres:s3cret@", 1);
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--store", &url]);
    s.create(W);
    s.create_child(C, W);
    assert_eq!(s.hdm_seq(C), 2);
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    s.kill9_restart();
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    assert_eq!(s.seqs(C, 0), vec![1, 2]);
    let health = s.get("/health");
    assert_eq!(health.body["durability"], "synchronous_commit=on");
    assert!(
        !s.db_path().exists(),
        "a PostgreSQL gateway made a SQLite file"
    );
    let logs = s.logs();
    assert!(
        logs.contains("store postgres://postgres@127.0.0.1:"),
        "{logs}"
    );
    assert!(!logs.contains("s3cret"), "password in the log: {logs}");
}
