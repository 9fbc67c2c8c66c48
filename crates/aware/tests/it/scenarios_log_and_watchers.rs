//! Acceptance scenarios S1–S40 (05 groups A to E: keys, signal log, durability, watchers and the
//! frozen watermark, registration / `sessions_send` / unwatch), black-box over HTTP against a real
//! `aware serve --test-clock` process.

use crate::common::*;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Small helpers local to this file.
// ---------------------------------------------------------------------------------------------

/// `/v1/sessions/<key>` with the key percent-encoded as one path segment.
fn sp(key: &str) -> String {
    format!("/v1/sessions/{}", seg(key))
}

fn get_session(s: &Server, key: &str) -> Value {
    let r = s.get(&sp(key));
    assert_eq!(r.status, 200, "GET {key}: {}", r.body);
    r.body
}

/// `stateVersion` of a session as reported by `GET /v1/sessions/{key}`.
fn version(s: &Server, key: &str) -> i64 {
    get_session(s, key)["stateVersion"]
        .as_i64()
        .unwrap_or_else(|| panic!("no stateVersion for {key}"))
}

/// The compact events of `key` after `since`, read as `caller` through `session_status`.
fn events_as(s: &Server, caller: &str, key: &str, since: i64) -> Vec<Value> {
    s.status(caller, key, since)["stateChanges"]["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn turns(s: &Server, key: &str) -> Vec<Value> {
    let r = s.get(&format!("{}/turns", sp(key)));
    assert_eq!(r.status, 200, "turns {key}: {}", r.body);
    r.body["turns"].as_array().unwrap().clone()
}

fn watches(s: &Server, key: &str) -> Vec<Value> {
    let r = s.get(&format!("{}/watches", sp(key)));
    assert_eq!(r.status, 200, "watches {key}: {}", r.body);
    r.body["watches"].as_array().unwrap().clone()
}

fn watchers(s: &Server, key: &str) -> Vec<Value> {
    let r = s.get(&format!("{}/watchers", sp(key)));
    assert_eq!(r.status, 200, "watchers {key}: {}", r.body);
    r.body["watchers"].as_array().unwrap().clone()
}

fn send(s: &Server, caller: &str, args: Value) -> Resp {
    s.tool(caller, "sessions_send", args)
}

fn start_run(s: &Server, key: &str, run_id: &str) {
    let r = s.post(&format!("{}/runs", sp(key)), json!({ "runId": run_id }));
    assert_eq!(r.status, 201, "start run {run_id}: {}", r.body);
}

fn end_run(s: &Server, key: &str, run_id: &str, outcome: &str) -> Resp {
    s.post(
        &format!("{}/runs/{}/end", sp(key), seg(run_id)),
        json!({ "outcome": outcome }),
    )
}

fn compaction(s: &Server, key: &str, op: &str) -> Resp {
    s.post(
        &format!("{}/compaction", sp(key)),
        json!({ "operationId": op }),
    )
}

fn seq_of(r: &Resp) -> i64 {
    r.body["event"]["sequence"]
        .as_i64()
        .unwrap_or_else(|| panic!("no event in {}", r.body))
}

fn no_notices(s: &Server, key: &str) -> bool {
    s.pending(key)["notices"].as_array().unwrap().is_empty()
}

/// Number of log lines containing `needle`, waiting up to 3 s for at least `min` of them.
fn log_lines(s: &Server, needle: &str, min: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        // Every gateway's log: the line is written by the gateway the request reached.
        let n = s.all_logs().lines().filter(|l| l.contains(needle)).count();
        if n >= min || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_lower_uuid_v4(u: &str) -> bool {
    let b = u.as_bytes();
    if b.len() != 36 {
        return false;
    }
    for (i, c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *c == b'-',
            14 => *c == b'4',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Starts `aware serve` without waiting for `/health` to be 200 (for S15), on `dir`.
fn start_unhealthy(dir: tempfile::TempDir) -> Server {
    let port_file = dir.path().join("port");
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--bind")
        .arg("127.0.0.1:0")
        .arg("--port-file")
        .arg(&port_file)
        .arg("--test-clock")
        .arg("--test-clock-start")
        .arg(T0.to_string())
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_DATA_DIR")
        .env_remove("AWARE_BIND")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start aware serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    let port: u16 = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            if let Ok(port) = p.trim().parse() {
                break port;
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("server exited early with {st}");
        }
        assert!(Instant::now() < deadline, "server did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    };
    Server::from_process(dir, child, port)
}

/// The lines of `GET /metrics`.
fn metric_lines(s: &Server) -> Vec<String> {
    s.get("/metrics")
        .body
        .as_str()
        .unwrap_or("")
        .lines()
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A. Keys and identity
// ---------------------------------------------------------------------------------------------

#[test]
fn s001_canonical_keys() {
    let s = Server::start();
    let r = s.post("/v1/sessions", json!({"key": "  Agent:MAIN:Work  "}));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["created"], true);
    assert_eq!(r.body["session"]["key"], "agent:main:Work");
    assert_eq!(r.body["session"]["agentId"], "main");
    assert_eq!(r.body["session"]["kind"], "other");

    let again = s.post("/v1/sessions", json!({"key": "agent:main:Work"}));
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["created"], false);
    assert_eq!(
        again.body["session"]["sessionId"],
        r.body["session"]["sessionId"]
    );

    let lower = s.post("/v1/sessions", json!({"key": "agent:main:work"}));
    assert_eq!(lower.status, 201, "{}", lower.body);
    assert_eq!(lower.body["session"]["key"], "agent:main:work");
}

#[test]
fn s002_key_limits() {
    let s = Server::start();
    let k512 = format!("agent:main:{}", "a".repeat(501));
    assert_eq!(k512.len(), 512);
    let r = s.post("/v1/sessions", json!({ "key": k512 }));
    assert_eq!(r.status, 201, "{}", r.body);

    let k513 = format!("agent:main:{}", "a".repeat(502));
    let r = s.post("/v1/sessions", json!({ "key": k513 }));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.code(), "invalid_session_key");
    assert!(
        r.message().contains("512") && r.message().contains("byte"),
        "{}",
        r.message()
    );

    for bad in ["agent:main:a\nb", "   "] {
        let r = s.post("/v1/sessions", json!({ "key": bad }));
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
        assert_eq!(r.code(), "invalid_session_key", "{bad:?}");
    }

    let list = s.get("/v1/sessions");
    assert_eq!(list.status, 200);
    let keys: Vec<&str> = list.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec![k512.as_str()]);
}

#[test]
fn s003_malformed_agent_qualified_keys() {
    let s = Server::start();
    for bad in ["agent:bad/id:x", "agent:main", "agent::x", "AGENT:main:"] {
        let r = s.post("/v1/sessions", json!({ "key": bad }));
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert_eq!(r.code(), "invalid_session_key", "{bad}");
        if bad == "agent:bad/id:x" {
            assert!(
                r.message().contains("[a-z0-9][a-z0-9_-]{0,63}"),
                "{}",
                r.message()
            );
        }
    }
    let list = s.get("/v1/sessions");
    assert_eq!(list.body["sessions"], json!([]), "{}", list.body);
}

#[test]
fn s004_bare_keys_belong_to_an_agent() {
    let s = Server::start();
    let a = s.post("/v1/sessions", json!({"key": "global", "agentId": "ops"}));
    assert_eq!(a.status, 201, "{}", a.body);
    let b = s.post("/v1/sessions", json!({"key": "global", "agentId": "main"}));
    assert_eq!(b.status, 201, "{}", b.body);
    assert_ne!(
        a.body["session"]["sessionId"],
        b.body["session"]["sessionId"]
    );

    let g = s.get("/v1/sessions/global?agentId=ops");
    assert_eq!(g.status, 200, "{}", g.body);
    assert_eq!(g.body["agentId"], "ops");
    assert_eq!(g.body["key"], "global");

    let again = s.post("/v1/sessions", json!({"key": "global", "agentId": "OPS"}));
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["created"], false);
    assert_eq!(again.body["session"]["agentId"], "ops");

    let shared = s.post("/v1/sessions", json!({"key": "shared"}));
    assert_eq!(shared.status, 201, "{}", shared.body);
    assert_eq!(shared.body["session"]["agentId"], "main");

    let clash = s.post(
        "/v1/sessions",
        json!({"key": "agent:main:x", "agentId": "ops"}),
    );
    assert_eq!(clash.status, 400, "{}", clash.body);
    assert_eq!(clash.code(), "invalid_argument");
}

#[test]
fn s005_kinds_and_minted_keys() {
    let s = Server::family();
    assert_eq!(get_session(&s, W)["kind"], "main");
    assert_eq!(s.create("agent:main:SubAgent:z")["kind"], "subagent");
    let room = s.post(
        "/v1/sessions",
        json!({"key": "agent:main:room", "kind": "group"}),
    );
    assert_eq!(room.status, 201, "{}", room.body);
    assert_eq!(room.body["session"]["kind"], "group");

    let r = s.tool(W, "sessions_spawn", json!({"task": "t"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let k = r.body["childSessionKey"].as_str().unwrap();
    let uuid = k
        .strip_prefix("agent:main:subagent:")
        .unwrap_or_else(|| panic!("minted key {k}"));
    assert!(is_lower_uuid_v4(uuid), "minted key {k}");

    let s2 = Server::with_config(&format!("main_key = \"home\"\n{DEFAULT_CONFIG}"));
    assert_eq!(s2.create("agent:main:home")["kind"], "main");
    assert_eq!(s2.create("agent:main:main")["kind"], "other");
}

// ---------------------------------------------------------------------------------------------
// B. Signal log
// ---------------------------------------------------------------------------------------------

#[test]
fn s006_one_global_sequence() {
    let s = Server::family();
    let d = s.post("/v1/sessions", json!({"key": D, "parentSessionKey": W}));
    assert_eq!(d.status, 201, "{}", d.body);
    assert_eq!(s.hdm_seq(C), 3);
    assert_eq!(s.status(W, C, 0)["stateVersion"], 3);
    assert_eq!(events_as(&s, W, D, 0)[0]["sequence"], 2);
    for (key, v) in [(C, 3), (D, 2), (W, 0)] {
        let r = s.tool(W, "session_status", json!({ "sessionKey": key }));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["stateVersion"], v, "{key}");
    }
}

#[test]
fn s007_sequences_are_never_reused() {
    let s = Server::family();
    assert_eq!(s.hdm_seq(C), 2);
    let del = s.delete(&sp(C));
    assert_eq!(del.status, 200, "{}", del.body);
    assert_eq!(del.body, json!({"deleted": true}));
    s.create_child(C, W);
    let ev = events_as(&s, W, C, 0);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["kind"], "child_spawned");
    assert_eq!(ev[0]["sequence"], 3);
}

#[test]
fn s008_dedupe_returns_the_existing_event() {
    let s = Server::family();
    s.create_child(D, W);

    let a = compaction(&s, C, "op-1");
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(seq_of(&a), 3);
    let b = compaction(&s, C, "op-1");
    assert_eq!(b.status, 200, "{}", b.body);
    assert_eq!(seq_of(&b), 3);
    assert_eq!(b.body["duplicate"], true);
    let compacted = events_as(&s, W, C, 0)
        .into_iter()
        .filter(|e| e["kind"] == "compacted")
        .count();
    assert_eq!(compacted, 1);
    assert_eq!(version(&s, C), 3);

    let d = compaction(&s, D, "op-1");
    assert_eq!(d.status, 201, "{}", d.body);
    assert_eq!(seq_of(&d), 4);

    start_run(&s, C, "r1");
    let e1 = end_run(&s, C, "r1", "ok");
    assert_eq!(e1.status, 200, "{}", e1.body);
    let e2 = end_run(&s, C, "r1", "ok");
    assert_eq!(e2.status, 200, "{}", e2.body);
    assert_eq!(seq_of(&e1), 5);
    assert_eq!(e1.body["event"]["kind"], "run_completed");
    assert_eq!(e1.body["event"], e2.body["event"]);
    assert_eq!(s.triple(W, C), (1, 1, 1));
    assert!(no_notices(&s, W));
}

#[test]
fn s009_occurred_at_is_clamped() {
    let s = Server::family();
    let cases = [
        (Some(T0 - 172_800_000), T0 - DAY),
        (Some(T0 + 3_600_000), T0),
        (None, T0),
    ];
    for (given, expected) in cases {
        let mut body = json!({"role": "user", "text": "hello", "channel": "telegram"});
        if let Some(t) = given {
            body["occurredAt"] = json!(t);
        }
        let r = s.post(&format!("{}/turns", sp(C)), body);
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.body["event"]["occurredAt"], expected, "given {given:?}");
        assert_eq!(s.cursor(W, C).unwrap()["updatedAt"], T0);
    }
    let occurred: Vec<i64> = events_as(&s, W, C, 1)
        .iter()
        .map(|e| e["occurredAt"].as_i64().unwrap())
        .collect();
    assert_eq!(occurred, vec![T0 - DAY, T0, T0]);
}

#[test]
fn s010_log_only_kinds_never_touch_cursors() {
    let s = Server::family();
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    start_run(&s, C, "r1");
    assert_eq!(seq_of(&end_run(&s, C, "r1", "ok")), 2);
    assert_eq!(seq_of(&compaction(&s, C, "op-1")), 3);
    start_run(&s, C, "r2");
    let r2 = end_run(&s, C, "r2", "cancelled");
    assert_eq!(seq_of(&r2), 4);
    assert_eq!(r2.body["event"]["kind"], "run_failed");

    assert_eq!(s.status(W, C, 0)["stateVersion"], 4);
    assert_eq!(s.triple(W, C), (1, 1, 1));
    let p = s.pending(W);
    assert_eq!(p["notices"], json!([]));
    assert_eq!(p["systemEvents"], json!([]));
    assert_eq!(wakes.settle(), Vec::<Value>::new());
}

#[test]
fn s011_privacy_of_content() {
    let s = Server::family();
    let t = s.post(
        &format!("{}/turns", sp(C)),
        json!({"role": "user", "text": "SECRET-PASSPHRASE-42\nsecond line", "channel": "telegram"}),
    );
    assert_eq!(t.status, 201, "{}", t.body);
    assert_eq!(t.body["event"]["summary"], "human message via telegram");
    let g = s.put(
        &format!("{}/goal", sp(C)),
        json!({"text": "Ship SECRET-XYZ"}),
    );
    assert_eq!(g.status, 200, "{}", g.body);
    assert_eq!(g.body["event"]["summary"], "goal created");

    // Every column of every row of the log, read straight from the database.
    let conn = rusqlite::Connection::open_with_flags(
        s.db_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut stmt = conn.prepare("SELECT * FROM session_state_events").unwrap();
    let ncol = stmt.column_count();
    let mut rows = stmt.query([]).unwrap();
    let mut dump = String::new();
    let mut nrows = 0;
    while let Some(row) = rows.next().unwrap() {
        nrows += 1;
        for i in 0..ncol {
            match row.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                    dump.push_str(&String::from_utf8_lossy(t))
                }
                other => dump.push_str(&format!("{other:?}")),
            }
            dump.push('|');
        }
        dump.push('\n');
    }
    assert_eq!(nrows, 3, "{dump}");
    assert!(!dump.contains("SECRET-PASSPHRASE-42"), "{dump}");
    assert!(!dump.contains("SECRET-XYZ"), "{dump}");

    let st = s.status(W, C, 0);
    let whole = st.to_string();
    assert!(!whole.contains("SECRET-PASSPHRASE-42"), "{whole}");
    // Spec conflict: S11 says no part of the answer contains `SECRET-XYZ`, but 03 §6.2 makes
    // `session_status` show the session's own goal (`goal` field and the `Goal: <text>` line of
    // `statusText`), and the goal here *is* "Ship SECRET-XYZ". A user asking for the status
    // expects to see the goal, so only the reconciliation part (the compact events, in the result
    // and in the statusText's JSON block) is required to be free of the goal text.
    //
    // So exactly the documented reading: the goal text is in the `goal` field and on the
    // `Goal:` line of `statusText` (03 §6.2), and nowhere else in the answer.
    let changes = st["stateChanges"].to_string();
    assert!(!changes.contains("SECRET-XYZ"), "{changes}");
    assert_eq!(st["goal"]["text"], "Ship SECRET-XYZ", "{whole}");
    let text = st["statusText"].as_str().unwrap();
    let goal_lines: Vec<&str> = text.lines().filter(|l| l.contains("SECRET-XYZ")).collect();
    assert_eq!(goal_lines, vec!["Goal: Ship SECRET-XYZ [active]"], "{text}");
    let mut rest = st.clone();
    rest.as_object_mut().unwrap().remove("goal");
    rest["statusText"] = Value::String(text.replace("Goal: Ship SECRET-XYZ [active]", ""));
    assert!(!rest.to_string().contains("SECRET-XYZ"), "{whole}");
    assert!(!text.contains("SECRET-PASSPHRASE-42"), "{text}");

    for bad in ["tele gram", "x\ny"] {
        let r = s.post(
            &format!("{}/turns", sp(C)),
            json!({"role": "user", "text": "hello", "channel": bad}),
        );
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
        assert_eq!(r.code(), "invalid_argument");
        assert!(r.message().contains("channel"), "{}", r.message());
        assert!(
            r.message().contains("[A-Za-z0-9][A-Za-z0-9._:-]{0,63}"),
            "{}",
            r.message()
        );
    }
    let ok = s.post(
        &format!("{}/turns", sp(C)),
        json!({"role": "user", "text": "hello", "channel": "a".repeat(64)}),
    );
    assert_eq!(ok.status, 201, "{}", ok.body);
}

#[test]
fn s012_sanitised_summaries_and_whitelisted_payloads() {
    let s = Server::family();
    let summary = format!("line one\n\n  line two{}", "x".repeat(300));
    let r = s.post(
        "/v1/admin/events",
        json!({"sessionKey": C, "kind": "compacted", "actorType": "system", "summary": summary}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let stored = r.body["event"]["summary"].as_str().unwrap().to_string();
    // The scenario writes the expected prefix as `line one line two xxx`, but its input has no
    // whitespace between "two" and the x's, and sanitising only collapses whitespace (see
    // ARCHITECTURE.md): exactly "line one line two", 182 x's and the ellipsis, 200 characters.
    assert_eq!(stored, format!("line one line two{}…", "x".repeat(182)));
    assert_eq!(stored.chars().count(), 200, "{stored}");
    let listed = events_as(&s, W, C, 1);
    assert_eq!(listed[0]["summary"], stored.as_str());

    let r = s.post(
        "/v1/admin/events",
        json!({"sessionKey": C, "kind": "run_failed", "actorType": "system",
               "payload": {"outcome": "timeout", "detail": "stack trace", "nested": {"a": 1}}}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["payload"], json!({"outcome": "timeout"}));
    assert!(
        log_lines(&s, "payload_field_dropped", 1) >= 1,
        "{}",
        s.logs()
    );
}

#[test]
fn s013_a_failed_append_never_fails_the_turn() {
    let s = Server::family();
    // D's turn is the log marker below.
    s.create_child(D, W);
    s.set_faults(&json!({"failAppends": true}));
    let r = s.hdm(C);
    assert!(r.body.get("event").is_none(), "{}", r.body);
    let ts = turns(&s, C);
    assert_eq!(ts.len(), 1, "{ts:?}");
    assert_eq!(ts[0]["text"], "hello");
    assert_eq!(s.metric_sum("aware_event_append_failures_total"), Some(1.0));
    // Exactly one line: a failed append on D's stream, sent through every gateway, is the
    // marker in each gateway's log. Log lines keep their order within a process, so once every
    // gateway's marker is in, any second line for C would be before one of them.
    let w_line = format!("stream={D}");
    let body = json!({"role": "user", "text": "hello", "channel": "telegram"}).to_string();
    for i in 0..s.gateway_count() {
        let marker = s.request_to(
            s.gateway_base(i),
            "POST",
            &format!("{}/turns", sp(D)),
            &[],
            Some(&body),
        );
        assert!(marker.body.get("event").is_none(), "{}", marker.body);
    }
    let n = s.gateway_count();
    assert_eq!(log_lines(&s, &w_line, n), n, "{}", s.all_logs());
    let c_line = format!("stream={C}");
    let lines_for_c = s
        .all_logs()
        .lines()
        .filter(|l| l.contains("record_failed") && l.contains(&c_line))
        .count();
    assert_eq!(lines_for_c, 1, "{}", s.all_logs());
    assert_eq!(s.status(W, C, 0)["stateVersion"], 1);
    assert!(no_notices(&s, W));

    s.set_faults(&json!({}));
    assert!(s.hdm_seq(C) > 1);
}

#[test]

fn s014_failed_reads_degrade() {
    let s = Server::family();
    s.set_faults(&json!({"failReads": true}));
    let st = s.status(W, C, 0);
    assert_eq!(st["stateVersion"], 0, "{st}");
    assert_eq!(
        st["stateChanges"],
        json!({"events": [], "truncated": false, "earliestAvailableSequence": 0, "historyGap": false})
    );
    assert!(log_lines(&s, "read_failed", 1) >= 1, "{}", s.logs());
}

#[test]
fn s015_a_store_that_cannot_be_opened() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), DEFAULT_CONFIG).unwrap();
    std::fs::create_dir(dir.path().join("state.db")).unwrap();
    let s = start_unhealthy(dir);

    let h = s.get("/health");
    assert_eq!(h.status, 503, "{}", h.body);
    assert_eq!(h.body, json!({"status": "unavailable"}));
    let r = s.post("/v1/sessions", json!({"key": W}));
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.code(), "store_unavailable");

    std::fs::remove_dir(s.data_dir().join("state.db")).unwrap();
    // The server retries every 5 s by itself (no restart, no request needed). The wait is
    // bounded only so that a server that never retries fails instead of hanging; how soon it
    // reopens is not judged.
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.get("/health").status != 200 {
        assert!(
            Instant::now() < deadline,
            "the store was not reopened without a restart"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = s.post("/v1/sessions", json!({"key": W}));
    assert_eq!(r.status, 201, "{}", r.body);
}

// ---------------------------------------------------------------------------------------------
// C. Durability
// ---------------------------------------------------------------------------------------------

#[test]
fn s016_durability_modes() {
    let s = Server::start();
    let h = s.get("/health");
    assert_eq!(h.status, 200);
    assert_eq!(h.body["durability"], "full", "{}", h.body);
    assert_eq!(h.body["status"], "ok");
    drop(s);

    let s = Server::with_config(&format!("durability = \"normal\"\n{DEFAULT_CONFIG}"));
    assert_eq!(s.get("/health").body["durability"], "normal");
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--bind")
        .arg("127.0.0.1:0")
        .arg("--durability")
        .arg("bogus")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_DATA_DIR")
        .env_remove("AWARE_BIND")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("aware serve --durability bogus did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(text.contains("full") && text.contains("normal"), "{text}");
}

#[test]
fn s017_group_commit() {
    let s = Server::family();
    let commits_before = s
        .metric("aware_commits_total")
        .expect("aware_commits_total");
    let barrier = std::sync::Barrier::new(200);
    let seqs: Vec<i64> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..200)
            .map(|_| {
                sc.spawn(|| {
                    barrier.wait();
                    s.hdm_seq(C)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (2..=201).collect::<Vec<i64>>());
    let commits_after = s.metric("aware_commits_total").unwrap();
    assert!(
        commits_after - commits_before < 200.0,
        "commits rose by {}",
        commits_after - commits_before
    );
    // An observation > 1 exists iff the histogram's count exceeds its `le="1"` bucket.
    let lines = metric_lines(&s);
    let value = |pred: &dyn Fn(&str) -> bool| -> f64 {
        lines
            .iter()
            .find(|l| pred(l))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("metric not found in:\n{}", lines.join("\n")))
    };
    let le1 = value(&|l: &str| {
        l.starts_with("aware_group_commit_ops_bucket")
            && (l.contains("le=\"1\"") || l.contains("le=\"1.0\""))
    });
    let count = value(&|l: &str| l.starts_with("aware_group_commit_ops_count"));
    assert!(count > le1, "no group commit larger than 1 op: {lines:?}");
}

#[test]
fn s018_acknowledged_events_survive_kill_9() {
    let mut s = Server::family();
    let url = format!("{}{}/turns", s.base, sp(C));
    let acked = Arc::new(Mutex::new(Vec::<i64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::<String>::new()));
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let (url, acked, stop, count, unexpected) = (
                url.clone(),
                acked.clone(),
                stop.clone(),
                count.clone(),
                unexpected.clone(),
            );
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(10))
                    .build();
                let body = json!({"role":"user","text":"hello","channel":"telegram"}).to_string();
                while !stop.load(Ordering::SeqCst) {
                    match agent
                        .post(&url)
                        .set("Content-Type", "application/json")
                        .send_string(&body)
                    {
                        Ok(resp) => {
                            let status = resp.status();
                            let v: Value = resp.into_json().unwrap_or(Value::Null);
                            match v["event"]["sequence"].as_i64() {
                                Some(seq) if status == 201 => {
                                    acked.lock().unwrap().push(seq);
                                    count.fetch_add(1, Ordering::SeqCst);
                                }
                                _ => unexpected.lock().unwrap().push(format!("{status} {v}")),
                            }
                        }
                        // Under load, before the kill, every turn must be answered 201 with
                        // its event: a 4xx or 5xx is a failure, not something to skip.
                        Err(ureq::Error::Status(code, r)) => {
                            let text = r.into_string().unwrap_or_default();
                            unexpected.lock().unwrap().push(format!("{code} {text}"));
                        }
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count.load(Ordering::SeqCst) < 150 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // kill -9 mid-stream.
    {
        let c = s.child.as_mut().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }
    s.child = None;
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 150, "only {} acknowledged", acked.len());
    let unexpected = unexpected.lock().unwrap().clone();
    assert!(
        unexpected.is_empty(),
        "{} turns not answered 201 with an event under load, e.g. {:?}",
        unexpected.len(),
        &unexpected[..unexpected.len().min(3)]
    );
    s.kill9_restart();

    // Page through C's whole log.
    let mut present = std::collections::BTreeSet::new();
    let mut since = 0;
    loop {
        let st = s.status(W, C, since);
        let evs = st["stateChanges"]["events"].as_array().unwrap().clone();
        for e in &evs {
            present.insert(e["sequence"].as_i64().unwrap());
        }
        if st["stateChanges"]["truncated"] != true {
            break;
        }
        since = evs.last().unwrap()["sequence"].as_i64().unwrap();
    }
    for seq in &acked {
        assert!(present.contains(seq), "acknowledged sequence {seq} lost");
    }
    let max = *acked.iter().max().unwrap();
    let head = s.status(W, C, 0)["stateVersion"].as_i64().unwrap();
    assert!(head >= max, "stateVersion {head} < acknowledged {max}");
    let next = s.hdm_seq(C);
    assert!(
        next > max && next > head,
        "next {next}, max {max}, head {head}"
    );
    for key in [W, C] {
        for c in watches(&s, key) {
            let (l, n, m) = (
                c["lastSeen"].as_i64().unwrap(),
                c["notified"].as_i64().unwrap(),
                c["material"].as_i64().unwrap(),
            );
            assert!(l <= n && n <= m, "cursor invariant broken: {c}");
            assert_eq!(c["pending"], json!(n > l), "{c}");
        }
    }
}

#[test]
fn s019_one_failing_append_does_not_spoil_the_batch() {
    let s = Server::family();
    s.create_child(D, W);
    s.set_faults(&json!({"failAppendsFor": "agent:main:subagent:d1"}));
    let barrier = std::sync::Barrier::new(20);
    let answers: Vec<(String, Resp)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..20)
            .map(|i| {
                let key = if i % 2 == 0 { C } else { D };
                let (s, barrier) = (&s, &barrier);
                sc.spawn(move || {
                    barrier.wait();
                    let r = s.post(
                        &format!("{}/turns", sp(key)),
                        json!({"role":"user","text":"hello","channel":"telegram"}),
                    );
                    (key.to_string(), r)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (key, r) in &answers {
        assert_eq!(r.status, 201, "{key}: {}", r.body);
        assert_eq!(r.body.get("event").is_some(), key == C, "{key}: {}", r.body);
    }
    assert_eq!(events_as(&s, W, C, 1).len(), 10);
    assert_eq!(events_as(&s, W, D, 2), Vec::<Value>::new());
    assert_eq!(version(&s, D), 2);
    assert_eq!(turns(&s, C).len(), 10);
    assert_eq!(turns(&s, D).len(), 10);
}

// ---------------------------------------------------------------------------------------------
// D. Watchers and the frozen watermark
// ---------------------------------------------------------------------------------------------

#[test]
fn s020_spawn_seeds_the_parent() {
    let s = Server::start();
    s.create(W);
    let r = s.tool(W, "sessions_spawn", json!({"task": "research"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "accepted");
    let run = r.body["runId"].as_str().unwrap().to_string();
    let k = r.body["childSessionKey"].as_str().unwrap().to_string();
    assert_eq!(
        r.body,
        json!({"status": "accepted", "runId": run, "childSessionKey": k})
    );

    let ev = events_as(&s, W, &k, 0);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0]["sequence"], 1);
    assert_eq!(ev[0]["kind"], "created");
    assert_eq!(ev[0]["actorType"], "agent");
    assert_eq!(ev[0]["actorId"], W);
    assert_eq!(ev[1]["sequence"], 2);
    assert_eq!(ev[1]["kind"], "child_spawned");
    assert_eq!(ev[1]["actorType"], "agent");
    assert_eq!(ev[1]["actorId"], W);
    assert_eq!(ev[1]["runId"], run.as_str());

    assert_eq!(s.triple(W, &k), (2, 2, 2));
    assert_eq!(s.cursor(W, &k).unwrap()["origin"], "spawn");
    assert!(no_notices(&s, W));
}

#[test]
fn s021_one_frozen_notice_for_many_changes() {
    let s = Server::family();
    for expected in 2..=4 {
        assert_eq!(s.hdm_seq(C), expected);
    }
    assert_eq!(s.triple(W, C), (1, 2, 4));
    let p = s.pending(W);
    assert_eq!(
        p["notices"],
        json!([{"targetSessionKey": C, "targetAgentId": "main", "lastSeen": 1,
                "contextKey": format!("session-state:{HEX_C}"), "openedAt": T0,
                "text": nt(C, 1)}])
    );
}

#[test]
fn s022_twenty_rapid_changes_one_line_one_wake() {
    let s = Server::family();
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    assert_eq!(s.hdm_seq(C), 2);
    let first = s.pending(W);
    for expected in 3..=21 {
        assert_eq!(s.hdm_seq(C), expected);
    }
    let last = s.pending(W);
    assert_eq!(first["notices"].as_array().unwrap().len(), 1);
    assert_eq!(first["notices"][0]["text"], nt(C, 1));
    assert_eq!(first["notices"].to_string(), last["notices"].to_string());
    assert_eq!(first["prompt"], last["prompt"]);
    assert_eq!(s.triple(W, C), (1, 2, 21));
    let got = wakes.settle();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["sessionKey"], W);
    assert_eq!(got[0]["reason"], "session-state");
}

#[test]
fn s023_self_suppression() {
    let s = Server::family();
    s.create(X);
    assert_eq!(s.watch(X, C).status, 200);
    assert_eq!(s.triple(X, C), (1, 1, 1));

    let g = s.request(
        "PUT",
        &format!("{}/goal", sp(C)),
        Some(W),
        Some(&json!({"text": "g1"}).to_string()),
    );
    assert_eq!(g.status, 200, "{}", g.body);
    assert_eq!(g.body["event"]["sequence"], 2);
    assert_eq!(g.body["event"]["actorType"], "agent");
    assert_eq!(g.body["event"]["actorId"], W);
    assert_eq!(s.triple(W, C), (1, 1, 1));
    assert!(no_notices(&s, W));
    assert_eq!(s.notice_texts(X), vec![nt(C, 1)]);
    assert_eq!(s.triple(X, C), (1, 2, 2));

    assert_eq!(s.hdm_seq(C), 3);
    assert_eq!(s.triple(W, C), (1, 3, 3));
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    assert_eq!(s.seqs(C, 1), vec![2, 3]);
}

#[test]
fn s024_registered_watchers_need_no_producer() {
    let s = Server::start();
    let y = "agent:main:worker";
    s.create(W);
    s.create(X);
    s.create(y);
    let r = s.watch(X, y);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["watched"], true);
    assert_eq!(s.triple(X, y), (0, 0, 0));
    assert_eq!(s.hdm_seq(y), 1);
    assert_eq!(s.notice_texts(X), vec![nt(y, 0)]);
}

#[test]
fn s025_cursor_created_on_demand_at_zero() {
    let s = Server::family();
    let r = s.post(&format!("{}/reset", sp(W)), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(watches(&s, W).is_empty());
    assert_eq!(s.hdm_seq(C), 2);
    assert_eq!(s.triple(W, C), (0, 2, 2));
    assert_eq!(s.cursor(W, C).unwrap()["origin"], "parent");
    assert_eq!(s.notice_texts(W), vec![nt(C, 0)]);
}

#[test]
fn s026_a_deleted_parent_is_not_a_watcher() {
    let s = Server::family();
    let r = s.delete(&sp(W));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.hdm_seq(C), 2);
    assert_eq!(watchers(&s, C), Vec::<Value>::new());
    s.create(W);
    let p = s.pending(W);
    assert_eq!(p["notices"], json!([]), "{p}");
}

#[test]
fn s027_bare_sessions_never_watch() {
    let s = Server::family();
    let g = "global";
    let g1 = "agent:main:subagent:g1";
    assert_eq!(s.create(g)["agentId"], "main");
    s.create_child(g1, g);
    assert_eq!(events_as(&s, W, g1, 0)[0]["sequence"], 2);
    assert_eq!(s.hdm_seq(g1), 3);

    assert_eq!(watchers(&s, g1), Vec::<Value>::new());
    for who in [W, C, g, g1] {
        assert!(no_notices(&s, who), "{who} has a notice");
    }

    let st = s.tool(
        g,
        "session_status",
        json!({"sessionKey": g1, "changesSince": 0}),
    );
    assert_eq!(st.status, 200, "{}", st.body);
    let seqs: Vec<i64> = st.body["stateChanges"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, vec![2, 3]);

    let r = send(
        &s,
        g,
        json!({"sessionKey": C, "message": "hi", "timeoutSeconds": 0, "watch": true}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["watched"], false, "{}", r.body);
    assert_eq!(watchers(&s, C).len(), 1);
    assert_eq!(watchers(&s, C)[0]["watcherSessionKey"], W);
    assert_eq!(watches(&s, g), Vec::<Value>::new());
}

#[test]
fn s028_cursors_are_per_target_agent() {
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[agents.main]\nvisible_agents = [\"ops\"]\n"
    ));
    for agent in ["main", "ops"] {
        let r = s.post("/v1/sessions", json!({"key": "global", "agentId": agent}));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    s.create(W);
    s.create(X);
    let r = s.post(
        &format!("{}/watches", sp(X)),
        json!({"target": "global", "targetAgentId": "ops"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.post(
        &format!("{}/watches", sp(W)),
        json!({"target": "global", "targetAgentId": "main"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);

    let turn = json!({"role":"user","text":"hello","channel":"telegram"});
    let r = s.post("/v1/sessions/global/turns?agentId=ops", turn.clone());
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 1);
    let xn = s.pending(X)["notices"].clone();
    assert_eq!(xn.as_array().unwrap().len(), 1, "{xn}");
    assert_eq!(xn[0]["targetSessionKey"], "global");
    assert_eq!(xn[0]["targetAgentId"], "ops");
    assert!(no_notices(&s, W));

    let r = s.post("/v1/sessions/global/turns?agentId=main", turn);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 2);
    let wn = s.pending(W)["notices"].clone();
    assert_eq!(wn.as_array().unwrap().len(), 1, "{wn}");
    assert_eq!(wn[0]["targetAgentId"], "main");
    assert_eq!(s.pending(X)["notices"], xn, "X must not see main's global");

    let r = s.delete("/v1/sessions/global?agentId=ops");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(watches(&s, X), Vec::<Value>::new());
    let w = watches(&s, W);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0]["targetAgentId"], "main");
    let g = s.get("/v1/sessions/global?agentId=main");
    assert_eq!(g.body["stateVersion"], 2, "{}", g.body);
}

#[test]
fn s029_goal_changes_notify_the_parent() {
    let s = Server::family();
    let r = s.put(&format!("{}/goal", sp(C)), json!({"text": "g"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let e = &r.body["event"];
    assert_eq!(e["sequence"], 2);
    assert_eq!(e["kind"], "goal_changed");
    assert_eq!(e["actorType"], "system");
    assert_eq!(e["summary"], "goal created");
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
}

#[test]
fn s030_watchers_advance_independently() {
    let s = Server::family();
    s.create(X);
    assert_eq!(s.watch(X, C).status, 200);
    assert_eq!(s.hdm_seq(C), 2);
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    assert_eq!(s.notice_texts(X), vec![nt(C, 1)]);
    let d = s.drain(X);
    assert_eq!(d["notices"][0]["text"], nt(C, 1));
    assert_eq!(s.triple(X, C), (2, 2, 2));
    assert_eq!(s.triple(W, C), (1, 2, 2));
    assert_eq!(s.hdm_seq(C), 3);
    assert_eq!(s.notice_texts(X), vec![nt(C, 2)]);
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
}

// ---------------------------------------------------------------------------------------------
// E. Registration, sessions_send and unwatch
// ---------------------------------------------------------------------------------------------

#[test]
fn s031_sessions_send_with_watch_true() {
    let s = Server::family();
    s.create(X);

    // Without `watch`, or with `watch: false`: no `watched` field and no cursor.
    for extra in [json!({}), json!({"watch": false})] {
        let mut args = json!({"sessionKey": C, "message": "status?", "timeoutSeconds": 0});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        let r = send(&s, X, args);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["status"], "accepted");
        assert!(r.body.get("watched").is_none(), "{}", r.body);
        assert_eq!(watches(&s, X), Vec::<Value>::new());
    }

    let r = send(
        &s,
        X,
        json!({"sessionKey": C, "message": "status?", "timeoutSeconds": 0, "watch": true}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let run = r.body["runId"].as_str().expect("runId").to_string();
    assert_eq!(
        r.body,
        json!({"runId": run, "status": "accepted", "sessionKey": C, "watched": true})
    );
    assert_eq!(s.triple(X, C), (1, 1, 1));
    assert_eq!(s.cursor(X, C).unwrap()["origin"], "watch");
    assert!(no_notices(&s, X));

    let ts = turns(&s, C);
    let last = ts.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["text"], "status?");
    assert_eq!(last["actorType"], "agent");
    assert_eq!(last["actorId"], X);
    assert_eq!(last["provenance"]["kind"], "inter_session");
    assert_eq!(last["runId"], run.as_str());
    assert_eq!(version(&s, C), 1);
}

#[test]
fn s032_registration_starts_at_the_current_head() {
    let s = Server::family();
    s.create(X);
    for expected in 2..=5 {
        assert_eq!(s.hdm_seq(C), expected);
    }
    let r = send(
        &s,
        X,
        json!({"sessionKey": C, "message": "m", "timeoutSeconds": 0, "watch": true}),
    );
    assert_eq!(r.body["watched"], true, "{}", r.body);
    assert_eq!(s.triple(X, C), (5, 5, 5));
    assert!(no_notices(&s, X));
    assert_eq!(s.hdm_seq(C), 6);
    assert_eq!(s.notice_texts(X), vec![nt(C, 5)]);
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    assert_eq!(s.triple(W, C), (1, 2, 6));
}

#[test]
fn s033_rewatching_keeps_a_pending_cursor() {
    let mut s = Server::family();
    s.create(X);
    for _ in 2..=5 {
        s.hdm(C);
    }
    let args = json!({"sessionKey": C, "message": "m", "timeoutSeconds": 0, "watch": true});
    assert_eq!(send(&s, X, args.clone()).body["watched"], true);
    assert_eq!(s.hdm_seq(C), 6);
    assert_eq!(s.triple(X, C), (5, 6, 6));

    s.set_clock(T0 + 10_000);
    let r = send(&s, X, args);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["watched"], true);
    assert_eq!(s.triple(X, C), (5, 6, 6));
    assert_eq!(s.notice_texts(X), vec![nt(C, 5)]);
    assert_eq!(s.cursor(X, C).unwrap()["updatedAt"], T0 + 10_000);
}

#[test]
fn s034_no_hidden_watch_no_self_watch() {
    let s = Server::family();
    s.create(X);
    let r = send(
        &s,
        X,
        json!({"sessionKey": "agent:main:nope", "message": "hi", "watch": true}),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.code(), "session_not_found");
    let w = s.get("/v1/sessions/agent:main:coord/watches");
    assert_eq!(w.status, 200, "{}", w.body);
    assert_eq!(w.body["watches"], json!([]));

    let r = send(
        &s,
        X,
        json!({"sessionKey": X, "message": "hi", "timeoutSeconds": 0}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.code(), "invalid_argument");
    assert!(
        r.message()
            .contains("cannot send a message to the caller's own session"),
        "{}",
        r.message()
    );

    let r = s.watch(X, X);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.code(), "invalid_argument");
    assert_eq!(watches(&s, X), Vec::<Value>::new());

    // Ambiguity: with F and X only, `global` does not exist, and 03 §5.5 checks existence (404)
    // before the body. The scenario's point is the refusal of a bare watcher, so `global` is
    // created first; the message is the one the scenario quotes.
    s.create("global");
    let r = s.post(
        "/v1/sessions/global/watches?agentId=main",
        json!({"target": C}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.code(), "invalid_argument");
    assert!(
        r.message()
            .contains("watcher must be an agent-qualified session key"),
        "{}",
        r.message()
    );
}

#[test]

fn s035_visibility_on_send() {
    let s = Server::start();
    s.create(X);
    s.create(O);
    let args = json!({"sessionKey": O, "message": "hi", "timeoutSeconds": 0});
    let r = send(&s, X, args.clone());
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "forbidden");
    assert_eq!(
        r.message(),
        "session \"agent:ops:main\" belongs to agent \"ops\", which agent \"main\" may not access"
    );
    assert_eq!(turns(&s, O), Vec::<Value>::new());

    let s2 = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[agents.main]\nvisible_agents = [\"ops\"]\n"
    ));
    s2.create(X);
    s2.create(O);
    let r = send(&s2, X, args);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "accepted");
    assert_eq!(turns(&s2, O).len(), 1);
}

#[test]
fn s036_unwatch_an_explicit_watch() {
    let s = Server::family();
    s.create(X);
    assert_eq!(s.watch(X, C).status, 200);
    assert_eq!(s.hdm_seq(C), 2);
    assert_eq!(s.notice_texts(X), vec![nt(C, 1)]);

    let r = s.tool(X, "sessions_unwatch", json!({"sessionKey": C}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"status": "ok", "sessionKey": C, "agentId": "main", "unwatched": true})
    );
    let p = s.pending(X);
    assert_eq!(p["notices"], json!([]));
    assert_eq!(p["systemEvents"], json!([]));
    let row = s.cursor(X, C).expect("muted row kept");
    assert_eq!(row["muted"], true);
    assert_eq!(row["pending"], false);
    assert_eq!(s.triple(X, C), (2, 2, 2));

    assert_eq!(s.hdm_seq(C), 3);
    assert!(no_notices(&s, X));
    assert_eq!(s.cursor(X, C).unwrap(), row);
    assert_eq!(s.triple(W, C), (1, 2, 3));
}

#[test]
fn s037_unwatch_a_spawn_edge() {
    let s = Server::family();
    let r = s.tool(W, "sessions_unwatch", json!({"sessionKey": C}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["unwatched"], true, "{}", r.body);
    let row = s.cursor(W, C).expect("muted row");
    assert_eq!(row["muted"], true);
    assert_eq!(s.triple(W, C), (1, 1, 1));

    assert_eq!(s.hdm_seq(C), 2);
    assert!(no_notices(&s, W));
    assert_eq!(s.cursor(W, C).unwrap(), row);

    let r = s.watch(W, C);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.triple(W, C), (2, 2, 2));
    let row = s.cursor(W, C).unwrap();
    assert_eq!(row["muted"], false);
    assert_eq!(row["origin"], "watch");
    assert_eq!(s.hdm_seq(C), 3);
    assert_eq!(s.notice_texts(W), vec![nt(C, 2)]);
}

#[test]
fn s038_unwatch_without_a_watch() {
    let s = Server::family();
    s.create(X);
    let r = s.tool(X, "sessions_unwatch", json!({"sessionKey": C}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"status": "ok", "sessionKey": C, "agentId": "main", "unwatched": false})
    );
    assert_eq!(watches(&s, X), Vec::<Value>::new());

    // An already muted pair (W's spawn edge after a first unwatch).
    let first = s.tool(W, "sessions_unwatch", json!({"sessionKey": C}));
    assert_eq!(first.body["unwatched"], true, "{}", first.body);
    let row = s.cursor(W, C).unwrap();
    let second = s.tool(W, "sessions_unwatch", json!({"sessionKey": C}));
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.body["unwatched"], false, "{}", second.body);
    assert_eq!(s.cursor(W, C).unwrap(), row);
}

/// Polls C's transcript until the `user` turn with `text` appears; returns its runId.
fn run_id_of_turn(s: &Server, key: &str, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(t) = turns(s, key).iter().find(|t| t["text"] == text) {
            return t["runId"].as_str().expect("turn runId").to_string();
        }
        assert!(Instant::now() < deadline, "message {text:?} never stored");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn s039_waiting_for_a_reply() {
    let s = Server::family();
    s.create(X);

    // A reply while the send waits.
    std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            send(
                &s,
                X,
                json!({"sessionKey": C, "message": "ping", "timeoutSeconds": 5}),
            )
        });
        let run = run_id_of_turn(&s, C, "ping");
        // The reply comes while the send waits for it (the waiter is registered), not by a
        // clock: the answer must then be the reply, not the 5 s timeout.
        let deadline = Instant::now() + Duration::from_secs(20);
        // Summed over the gateways: the waiter is on the one the send reached.
        while s.metric_sum("aware_reply_waiters ") != Some(1.0) {
            assert!(Instant::now() < deadline, "the send never waited");
            std::thread::sleep(Duration::from_millis(10));
        }
        let t = s.post(
            &format!("{}/turns", sp(C)),
            json!({"role": "assistant", "text": "done", "runId": run}),
        );
        assert_eq!(t.status, 201, "{}", t.body);
        let r = h.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["status"], "ok", "{}", r.body);
        assert_eq!(r.body["reply"], "done");
        assert_eq!(r.body["runId"], run.as_str());
        assert_eq!(r.body["sessionKey"], C);
    });

    // No reply: the scenario's own 5 s deadline and message (a real-time wait by design,
    // docs/api.md §3.1), answered no earlier than the deadline.
    let started = Instant::now();
    let r = send(
        &s,
        X,
        json!({"sessionKey": C, "message": "ping2", "timeoutSeconds": 5}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "answered before the deadline"
    );
    let run = r.body["runId"].as_str().unwrap().to_string();
    assert_eq!(
        r.body,
        json!({"runId": run, "status": "timeout", "error": "no reply within 5 s",
               "sentBeforeError": true, "sessionKey": C})
    );

    // The run with that runId ends `error` before any reply.
    std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            send(
                &s,
                X,
                json!({"sessionKey": C, "message": "ping3", "timeoutSeconds": 5}),
            )
        });
        let run = run_id_of_turn(&s, C, "ping3");
        start_run(&s, C, &run);
        let e = end_run(&s, C, &run, "error");
        assert_eq!(e.status, 200, "{}", e.body);
        let r = h.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body,
            json!({"runId": run, "status": "error",
                   "error": "target run ended with outcome error",
                   "sentBeforeError": true, "sessionKey": C})
        );
    });
}

#[test]
fn s040_message_and_spawn_wakes() {
    let s = Server::family();
    s.create(X);
    let c_wakes = Wakes::subscribe(&s, "?session=agent:main:subagent:c1", None);
    let all = Wakes::subscribe(&s, "", None);

    let r = send(
        &s,
        X,
        json!({"sessionKey": C, "message": "hi", "timeoutSeconds": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let run = r.body["runId"].as_str().unwrap().to_string();
    let got = c_wakes.settle();
    assert_eq!(got.len(), 1, "{got:?}");
    let w = &got[0];
    assert_eq!(w["sessionKey"], C);
    assert_eq!(w["agentId"], "main");
    assert_eq!(w["reason"], "message");
    assert_eq!(w["runId"], run.as_str());
    assert_eq!(w["from"], X);
    assert!(w.get("targets").is_none(), "{w}");
    assert_eq!(w["at"], T0);

    let sp_ = s.tool(W, "sessions_spawn", json!({"task": "t"}));
    assert_eq!(sp_.status, 200, "{}", sp_.body);
    let child = sp_.body["childSessionKey"].as_str().unwrap().to_string();
    let spawn_run = sp_.body["runId"].as_str().unwrap().to_string();
    let got = all.settle();
    let spawn_wakes: Vec<&Value> = got.iter().filter(|w| w["reason"] == "spawn").collect();
    assert_eq!(spawn_wakes.len(), 1, "{got:?}");
    let w = spawn_wakes[0];
    assert_eq!(w["sessionKey"], child.as_str());
    assert_eq!(w["runId"], spawn_run.as_str());
    assert_eq!(w["from"], W);
    assert!(w.get("targets").is_none(), "{w}");
}
