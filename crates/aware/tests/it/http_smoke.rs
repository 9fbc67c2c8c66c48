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

/// S041/S049 on a PostgreSQL store (`--store`): the notice is exact, survives kill -9 of the
/// gateway, `/health` names the backend's durability, no SQLite file is made and the URL's
/// password never reaches the log.
#[test]
fn s049_on_postgres_notices_survive_kill_9() {
    let db = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("test database");
    // The test cluster trusts every login, so a password in the URL is accepted and ignored.
    // In the config file: on the command line (`--store`) a password is refused (decision D38).
    let url = db.replacen("postgres://postgres@", "postgres://postgres:s3cret@", 1);
    let mut s = Server::with_config(&format!("{DEFAULT_CONFIG}[store]\nurl = \"{url}\"\n"));
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

/// `aware migrate` SQLite → PostgreSQL → SQLite: every session answers the same (status with
/// changesSince 0, pending, watches, turns, the session) on each store, with progress and the
/// count check on stderr, and a non-empty target is refused.
#[test]
fn migrate_round_trip_keeps_every_api_answer() {
    let mut s = Server::family();
    s.hdm(C);
    s.hdm(W);
    let answers = |s: &Server| -> Vec<serde_json::Value> {
        let mut v = Vec::new();
        for k in [W, C] {
            v.push(s.status(W, k, 0));
            v.push(s.pending(k));
            for tail in ["", "/turns", "/watches"] {
                v.push(s.get(&format!("/v1/sessions/{}{tail}", seg(k))).body);
            }
        }
        v
    };
    let before = answers(&s);
    s.stop();
    let migrate = |from: &str, to: &str| {
        std::process::Command::new(bin())
            .args(["migrate", "--from", from, "--to", to])
            .output()
            .expect("run aware migrate")
    };
    let url = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("test database");
    let out = migrate(&s.data_dir().display().to_string(), &url);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("session_state_events: 2/2 rows"),
        "{stderr}"
    );
    assert!(stderr.contains("counts verified"), "{stderr}");
    let pg = Server::with_args(DEFAULT_CONFIG, &["--store", &url]);
    assert_eq!(answers(&pg), before, "PostgreSQL answers differ");
    drop(pg);
    let again = migrate(&s.data_dir().display().to_string(), &url);
    assert_eq!(
        again.status.code(),
        Some(1),
        "a non-empty target must be refused"
    );
    let refused = String::from_utf8_lossy(&again.stderr).to_string();
    assert!(refused.contains("not empty"), "{refused}");
    // A refusal is not corruption (decision D14): nothing alarming that is not true.
    assert!(!refused.contains("corrupt"), "{refused}");
    // Into a new folder: created private (0700), as `aware serve` creates its data dir.
    let fresh = tempfile::tempdir().unwrap();
    let new_dir = fresh.path().join("new-data");
    let out = migrate(&url, &new_dir.display().to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&new_dir).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");

    let mut back = Server::start();
    back.stop();
    let out = migrate(&url, &back.data_dir().display().to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    back.restart();
    assert_eq!(
        answers(&back),
        before,
        "SQLite answers after the round trip differ"
    );
}

/// The largest offset a list accepts pages past the end instead of overflowing the next
/// offset (found by the `tool_bodies` fuzz target: `sessions_list` with offset 2^63-1 panicked
/// the gateway's handler).
#[test]
fn the_largest_offset_is_an_empty_last_page() {
    let s = Server::family();
    let max = i64::MAX;
    let r = s.get(&format!("/v1/sessions?offset={max}&limit=500"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["sessions"], json!([]), "{}", r.body);
    let r = s.tool(W, "sessions_list", json!({"limit": 200, "offset": max}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["sessions"], json!([]), "{}", r.body);
}

/// U+0000 in free text is refused with the same 400 on SQLite and PostgreSQL (PostgreSQL's
/// text type cannot hold it; it used to fail the commit there with a 503), and nothing is
/// stored by the refused requests.
#[test]
fn nul_in_free_text_is_refused_alike_on_both_stores() {
    let db = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("test database");
    for s in [Server::family(), {
        let s = Server::with_args(DEFAULT_CONFIG, &["--store", &db]);
        s.create(W);
        s.create_child(C, W);
        s
    }] {
        let child = format!("/v1/sessions/{}", C.replace(':', "%3A"));
        for (method, path, body, field) in [
            (
                "POST",
                format!("{child}/turns"),
                json!({"role": "user", "text": "a\u{0}b"}),
                "text",
            ),
            (
                "POST",
                format!("{child}/turns"),
                json!({"role": "user", "text": "ab", "upstreamText": "\u{0}"}),
                "upstreamText",
            ),
            (
                "PUT",
                format!("{child}/goal"),
                json!({"text": "g\u{0}"}),
                "text",
            ),
            (
                "POST",
                format!("{child}/system-events"),
                json!({"text": "x\u{0}y"}),
                "text",
            ),
            (
                "POST",
                format!("{child}/system-events"),
                json!({"text": "x", "contextKey": "k\u{0}"}),
                "contextKey",
            ),
            (
                "POST",
                "/v1/sessions".to_string(),
                json!({"key": "agent:main:n", "label": "l\u{0}"}),
                "label",
            ),
        ] {
            let r = s.request(method, &path, None, Some(&body.to_string()));
            assert_eq!(r.status, 400, "{method} {path} {body}: {}", r.body);
            assert_eq!(r.body["error"]["code"], "invalid_argument", "{}", r.body);
            let msg = r.body["error"]["message"].as_str().unwrap_or_default();
            assert!(msg.contains(field) && msg.contains("U+0000"), "{msg}");
        }
        let turns = s.get(&format!("{child}/turns"));
        assert_eq!(turns.body["turns"], json!([]), "{}", turns.body);
        assert_eq!(s.get("/v1/sessions/agent%3Amain%3An").status, 404);
    }
}
