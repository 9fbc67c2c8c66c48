//! Quick end-to-end checks of the gateway harness itself.

use crate::common::*;
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
