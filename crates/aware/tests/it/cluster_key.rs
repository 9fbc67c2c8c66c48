//! The cluster key in a file (`[cluster] key_file`, decision D62), black box against the real
//! binary: two gateways on one PostgreSQL that share a key file hear each other's wakes, the
//! database keeps no key a reading role could sign with, and a wake signed with the key the
//! database held is dropped.

use crate::common::*;
use crate::node_edge_and_roles::open_unread;
use aware_store_pg::postgres::{Client, NoTls};
use serde_json::json;
use std::io::BufRead;
use std::time::{Duration, Instant};

#[test]
fn gateways_sharing_a_key_file_hear_each_other_and_drop_wakes_signed_with_the_database_key() {
    use std::os::unix::fs::PermissionsExt;
    let url = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("a test database");
    // The schema, and with it the database's key, exist before the gateways start: the key a
    // deployment had before it moved to a key file.
    drop(aware_store_pg::PgStore::open(aware_store_pg::PgOptions::new(url.clone())).unwrap());
    let mut owner = Client::connect(&url, NoTls).expect("connect as the owner");
    let old_key: String = owner
        .query_one("SELECT key FROM aware_cluster_key WHERE id = 1", &[])
        .unwrap()
        .get(0);
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, format!("{}\n", "c3".repeat(32))).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = Server::with_options(ServerOptions {
        config: format!(
            "{DEFAULT_CONFIG}[cluster]\nkey_file = \"{}\"\n",
            key_file.display()
        ),
        args: Vec::new(),
        gateways: 2,
        store: StoreChoice::PostgresAt(url.clone()),
        pick: Pick::First,
    });
    // Each gateway's listener deletes the database's key when it connects.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = owner
            .query_one("SELECT COUNT(*) FROM aware_cluster_key", &[])
            .unwrap()
            .get(0);
        if n == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the database still holds its key"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A wake signed with the old key, then a real wake produced on the other gateway, which
    // reaches this one's stream after it (notifications arrive in commit order).
    let (status, head, sse) = open_unread(s.port, "/v1/wakes", None);
    assert_eq!(status, 200, "{head}");
    let forged = json!({"node": "forged", "sessionKey": "agent:main:forged", "agentId": "main",
                        "reason": "message", "at": 1})
    .to_string();
    let signed = aware_cluster::sign(old_key.as_bytes(), &forged);
    owner
        .execute("SELECT pg_notify('aware_wakes', $1)", &[&signed])
        .unwrap();
    let other = s.gateway_base(1).to_string();
    let boss = "agent:main:boss";
    let r = s.request_to(
        &other,
        "POST",
        "/v1/sessions",
        &[],
        Some(&json!({"key": boss}).to_string()),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let r = s.request_to(
        &other,
        "POST",
        "/v1/tools/sessions_spawn",
        &[("X-Aware-Session", seg(boss))],
        Some(&json!({"task": "fence"}).to_string()),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let child = r.body["childSessionKey"].as_str().unwrap().to_string();
    let mut sse = std::io::BufReader::new(sse);
    let mut seen = String::new();
    let mut line = String::new();
    while !seen.contains(&child) {
        line.clear();
        let n = sse.read_line(&mut line).unwrap_or(0);
        assert!(n > 0, "the other gateway's wake never came: {seen}");
        seen.push_str(&line);
    }
    assert!(
        !seen.contains("agent:main:forged"),
        "a wake signed with the database's old key was delivered: {seen}"
    );
    let rejected = s
        .metric("aware_cluster_notifications_rejected_total")
        .unwrap_or(0.0);
    assert!(rejected >= 1.0, "{rejected}");
}
