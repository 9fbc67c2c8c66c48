//! The write-lock mode a PostgreSQL database records (decision D61), black box against the real
//! binary: a role that may only connect cannot keep gateways from starting or writing.

use crate::common::*;
use aware_store_pg::postgres::{Client, NoTls};
use serde_json::json;

#[test]
fn gateways_start_and_write_while_a_connect_only_role_holds_both_mode_locks() {
    let url = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("a test database");
    let role = format!("mode_holder_{}", std::process::id());
    let mut owner = Client::connect(&url, NoTls).expect("connect as the owner");
    owner
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN"
        ))
        .unwrap();
    // No grant at all: CONNECT comes from PUBLIC, as on a default installation.
    let mut stranger = Client::connect(&url.replacen("postgres@", &format!("{role}@"), 1), NoTls)
        .expect("connect as the stranger");
    for key in [
        aware_store_pg::MODE_DEFAULT_LOCK,
        aware_store_pg::MODE_KEYED_LOCK,
    ] {
        stranger
            .execute("SELECT pg_advisory_lock($1)", &[&key])
            .unwrap();
    }
    let s = Server::with_options(ServerOptions {
        config: DEFAULT_CONFIG.to_string(),
        args: Vec::new(),
        gateways: 2,
        store: StoreChoice::PostgresAt(url),
        pick: Pick::First,
    });
    for i in 0..2 {
        let r = s.request_to(
            s.gateway_base(i),
            "POST",
            "/v1/sessions",
            &[],
            Some(&json!({"key": format!("agent:main:w{i}")}).to_string()),
        );
        assert_eq!(r.status, 201, "gateway {i}: {:?}", r.body);
    }
    assert!(
        s.all_logs().contains("write_mode_lock_held_by_stranger") && s.all_logs().contains(&role),
        "the held lock of the gateways' own mode is named: {}",
        s.all_logs()
    );
    drop(stranger);
}
