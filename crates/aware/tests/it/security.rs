//! Security checks, black box (03 §5.2, §5.3, 01 §7, 02 §10): no public bind without a token;
//! the token on every route but `/health`; visibility on every route, every tool and the wake
//! stream; and a privacy scan — no message text in any event, summary, log line or metric.

use crate::common::*;
use serde_json::{json, Value};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Status and `WWW-Authenticate` of a request whose body is never read (so `GET /v1/wakes`
/// answers as soon as its headers are in).
fn head_of(
    s: &Server,
    method: &str,
    path: &str,
    auth: Option<&str>,
    caller: Option<&str>,
    body: Option<&str>,
) -> (u16, Option<String>, Value) {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .timeout_read(Duration::from_secs(30))
        .build();
    let mut r = agent.request(method, &format!("{}{}", s.base, path));
    if let Some(a) = auth {
        r = r.set("Authorization", a);
    }
    if let Some(c) = caller {
        r = r.set("X-Aware-Session", &seg(c));
    }
    let result = match body {
        Some(b) => r.set("Content-Type", "application/json").send_string(b),
        None => r.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {path}: {e}"),
    };
    let status = resp.status();
    let www = resp.header("WWW-Authenticate").map(str::to_string);
    let is_stream = resp
        .header("Content-Type")
        .unwrap_or("")
        .starts_with("text/event-stream");
    let body = if is_stream {
        Value::Null
    } else {
        let mut text = String::new();
        let _ = resp.into_reader().take(1 << 20).read_to_string(&mut text);
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, www, body)
}

fn wait_exit(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Runs `aware serve` with `args` (and `env`) and expects the bind refusal.
fn expect_refusal(config: &str, args: &[&str], env: &[(&str, &str)], shown: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_DATA_DIR")
        .env_remove("AWARE_BIND")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let Some(status) = wait_exit(&mut child, Duration::from_secs(20)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{args:?} {env:?}: a public bind without a token did not exit");
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{args:?} {env:?}: {err}");
    assert!(
        err.contains(&format!(
            "refusing to listen on {shown} without a bearer token (set --token or AWARE_TOKEN)"
        )),
        "{args:?} {env:?}: {err}"
    );
    assert!(
        !dir.path().join("state.db").exists(),
        "{args:?}: the store was opened before the refusal"
    );
}

#[test]
fn a_public_bind_without_a_token_is_refused_whatever_the_source() {
    // Flag, every kind of non-loopback address (also ones this host does not have).
    for bind in [
        "0.0.0.0:0",
        "[::]:0",
        "192.0.2.10:7420",
        "10.1.2.3:0",
        "[2001:db8::1]:7420",
    ] {
        expect_refusal(DEFAULT_CONFIG, &["--bind", bind], &[], bind);
    }
    // Config file and environment.
    let cfg = format!("bind = \"0.0.0.0:0\"\n{DEFAULT_CONFIG}");
    expect_refusal(&cfg, &[], &[], "0.0.0.0:0");
    expect_refusal(
        DEFAULT_CONFIG,
        &[],
        &[("AWARE_BIND", "0.0.0.0:0")],
        "0.0.0.0:0",
    );
    // An empty token is no token.
    expect_refusal(
        DEFAULT_CONFIG,
        &["--bind", "0.0.0.0:0", "--token", ""],
        &[],
        "0.0.0.0:0",
    );
    expect_refusal(
        DEFAULT_CONFIG,
        &["--bind", "0.0.0.0:0"],
        &[("AWARE_TOKEN", "")],
        "0.0.0.0:0",
    );
    let cfg = format!("token = \"\"\n{DEFAULT_CONFIG}");
    expect_refusal(&cfg, &["--bind", "0.0.0.0:0"], &[], "0.0.0.0:0");
}

const TOKEN: &str = "s3cr3t-t0ken-4c9e";

/// Every route of 03 §5.4 (method, path, body), on sessions that exist.
fn route_table() -> Vec<(&'static str, String, Option<String>)> {
    let w = seg(W);
    let c = seg(C);
    let mut routes: Vec<(&'static str, String, Option<String>)> = vec![
        ("GET", "/metrics".into(), None),
        ("GET", "/v1/sessions".into(), None),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({"key": "agent:main:new"}).to_string()),
        ),
        ("GET", format!("/v1/sessions/{c}"), None),
        ("GET", format!("/v1/sessions/{c}/turns"), None),
        (
            "POST",
            format!("/v1/sessions/{c}/turns"),
            Some(json!({"role": "user", "text": "hi"}).to_string()),
        ),
        ("POST", format!("/v1/sessions/{w}/drain"), Some("{}".into())),
        ("GET", format!("/v1/sessions/{w}/pending"), None),
        ("POST", format!("/v1/sessions/{w}/ack"), Some("{}".into())),
        (
            "POST",
            format!("/v1/sessions/{w}/system-events"),
            Some(json!({"text": "line"}).to_string()),
        ),
        (
            "PUT",
            format!("/v1/sessions/{c}/goal"),
            Some(json!({"text": "g"}).to_string()),
        ),
        ("DELETE", format!("/v1/sessions/{c}/goal"), None),
        (
            "POST",
            format!("/v1/sessions/{c}/runs"),
            Some(json!({"runId": "r1"}).to_string()),
        ),
        (
            "POST",
            format!("/v1/sessions/{c}/runs/r1/end"),
            Some(json!({"outcome": "ok"}).to_string()),
        ),
        (
            "POST",
            format!("/v1/sessions/{c}/compaction"),
            Some(json!({"operationId": "op1"}).to_string()),
        ),
        ("GET", format!("/v1/sessions/{w}/watches"), None),
        ("GET", format!("/v1/sessions/{c}/watchers"), None),
        (
            "POST",
            format!("/v1/sessions/{w}/watches"),
            Some(json!({"target": C}).to_string()),
        ),
        ("DELETE", format!("/v1/sessions/{w}/watches/{c}"), None),
        ("GET", "/v1/catalog".into(), None),
        (
            "POST",
            "/v1/catalog/continue".into(),
            Some(
                json!({"catalogId": "claude", "hostId": "gateway:local", "threadId": "t"})
                    .to_string(),
            ),
        ),
        ("GET", "/v1/wakes".into(), None),
        ("GET", "/v1/tools".into(), None),
        (
            "POST",
            "/v1/admin/clock".into(),
            Some(json!({"advanceMs": 1}).to_string()),
        ),
        ("POST", "/v1/admin/prune".into(), Some("{}".into())),
        (
            "POST",
            "/v1/admin/events".into(),
            Some(json!({"sessionKey": C, "kind": "compacted", "actorType": "system"}).to_string()),
        ),
        ("POST", "/v1/admin/faults".into(), Some("{}".into())),
        ("POST", format!("/v1/sessions/{c}/reset"), Some("{}".into())),
        (
            "DELETE",
            format!("/v1/sessions/{}", seg("agent:main:new")),
            None,
        ),
        // Unknown routes and wrong methods are refused before they are matched.
        ("GET", "/v1/nope".into(), None),
        ("PATCH", "/v1/sessions".into(), None),
    ];
    for tool in [
        "session_status",
        "sessions_list",
        "sessions_history",
        "sessions_send",
        "sessions_spawn",
        "sessions_unwatch",
    ] {
        let args = match tool {
            "sessions_history" | "sessions_unwatch" => json!({"sessionKey": C}),
            "sessions_send" => json!({"sessionKey": C, "message": "m", "timeoutSeconds": 0}),
            "sessions_spawn" => json!({"task": "t"}),
            _ => json!({}),
        };
        routes.insert(
            routes.len() - 6,
            ("POST", format!("/v1/tools/{tool}"), Some(args.to_string())),
        );
    }
    routes
}

#[test]
fn the_token_is_needed_on_every_route_but_health() {
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--token", TOKEN]);
    s.token = None; // headers by hand
    let good = format!("Bearer {TOKEN}");
    let ok = |m: &str, p: &str, b: Option<&str>| {
        let (st, _, body) = head_of(&s, m, p, Some(&good), None, b);
        assert!((200..300).contains(&st), "{m} {p}: {st} {body}");
    };
    ok("POST", "/v1/sessions", Some(&json!({"key": W}).to_string()));
    ok(
        "POST",
        "/v1/sessions",
        Some(&json!({"key": C, "parentSessionKey": W}).to_string()),
    );
    let health_before = head_of(&s, "GET", "/health", None, None, None);
    assert_eq!(health_before.0, 200, "/health needs no token");
    let bad = [
        None,
        Some("Bearer wrong".to_string()),
        Some(format!("Bearer {TOKEN}x")),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        Some(TOKEN.to_string()),
        Some(format!("Basic {TOKEN}")),
        Some("Bearer ".to_string()),
    ];
    let routes = route_table();
    let mut checked = 0;
    for (method, path, body) in &routes {
        // Three of these are wrong bearer tokens, which the gateway counts per peer (20, then
        // one back per 200 ms of its clock): the test clock earns them back before each route,
        // so every answer here is the 401 this test is about (the limit has its own test,
        // gateway_boundaries.rs). The clock is back where it was before the checks below.
        let (st, _, moved) = head_of(
            &s,
            "POST",
            "/v1/admin/clock",
            Some(&good),
            None,
            Some(r#"{"advanceMs":600}"#),
        );
        assert_eq!(st, 200, "{moved}");
        for auth in &bad {
            let (status, www, answer) =
                head_of(&s, method, path, auth.as_deref(), Some(W), body.as_deref());
            assert_eq!(status, 401, "{method} {path} with {auth:?}: {answer}");
            assert_eq!(answer["error"]["code"], "unauthorized", "{method} {path}");
            assert_eq!(www.as_deref(), Some("Bearer"), "{method} {path}");
            checked += 1;
        }
    }
    // /health never asks, whatever is sent.
    for auth in &bad {
        let (status, _, body) = head_of(&s, "GET", "/health", auth.as_deref(), None, None);
        assert_eq!(status, 200, "{body}");
    }
    // Nothing of the refused requests happened: no session created, reset or deleted, no
    // turn, no goal, the test clock did not move (but for the test's own advances).
    let (_, _, list) = head_of(&s, "GET", "/v1/sessions", Some(&good), None, None);
    let keys: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "{list}");
    let (_, _, turns) = head_of(
        &s,
        "GET",
        &format!("/v1/sessions/{}/turns", seg(C)),
        Some(&good),
        None,
        None,
    );
    assert_eq!(turns["turns"], json!([]));
    let (_, _, c) = head_of(
        &s,
        "GET",
        &format!("/v1/sessions/{}", seg(C)),
        Some(&good),
        None,
        None,
    );
    assert!(c.get("goal").is_none(), "{c}");
    let health = head_of(&s, "GET", "/health", None, None, None);
    // (Moved only by the test's own advances, 600 ms per route.)
    assert_eq!(
        health.2["now"].as_i64().unwrap(),
        health_before.2["now"].as_i64().unwrap() + 600 * routes.len() as i64
    );

    // With the token every route answers (whatever its own outcome), none with 401.
    for (method, path, body) in &routes {
        let caller = if path.starts_with("/v1/tools/") {
            Some(W)
        } else {
            None
        };
        let (status, _, answer) = head_of(&s, method, path, Some(&good), caller, body.as_deref());
        assert_ne!(status, 401, "{method} {path}: {answer}");
        assert!(
            status < 500 || answer["error"]["code"] == "node_unavailable",
            "{method} {path}: {status} {answer}"
        );
    }
    eprintln!(
        "{checked} unauthorized requests over {} routes refused",
        routes.len()
    );
}

fn visibility_config(claude_root: &std::path::Path) -> String {
    format!(
        "{DEFAULT_CONFIG}[wakes]\ncoalesce_secs = 0\n[agents.ops]\nvisible_agents = [\"main\"]\n[claude]\nroot = \"{}\"\n",
        claude_root.display()
    )
}

const OC: &str = "agent:ops:subagent:o1";

fn assert_forbidden(r: &Resp, what: &str) {
    assert_eq!(r.status, 403, "{what}: {}", r.body);
    assert_eq!(r.code(), "forbidden", "{what}: {}", r.body);
}

#[test]
fn a_caller_never_reaches_an_invisible_agent() {
    let claude = tempfile::tempdir().unwrap();
    let s = Server::with_config(&visibility_config(claude.path()));
    s.create(W);
    s.create_child(C, W);
    s.create(O);
    s.create_child(OC, O);
    s.hdm(OC); // O: a pending notice on its child
    s.post(
        &format!("/v1/sessions/{}/system-events", seg(O)),
        json!({"text": "ops line"}),
    );
    let o_before = (
        s.get(&format!("/v1/sessions/{}", seg(O))).body,
        s.pending(O),
        s.get(&format!("/v1/sessions/{}/watches", seg(O))).body,
        s.get(&format!("/v1/sessions/{}/turns", seg(O))).body,
    );
    let o = seg(O);
    let oc = seg(OC);
    let w = seg(W);

    // Every session route on O, as W.
    let routes: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("/v1/sessions/{o}"), None),
        ("DELETE", format!("/v1/sessions/{o}"), None),
        ("POST", format!("/v1/sessions/{o}/reset"), Some(json!({}))),
        ("GET", format!("/v1/sessions/{o}/turns"), None),
        (
            "POST",
            format!("/v1/sessions/{o}/turns"),
            Some(json!({"role": "user", "text": "x"})),
        ),
        ("POST", format!("/v1/sessions/{o}/drain"), Some(json!({}))),
        ("GET", format!("/v1/sessions/{o}/pending"), None),
        (
            "POST",
            format!("/v1/sessions/{o}/ack"),
            Some(json!({"notices": [{"contextKey": format!("session-state:{}", hex(OC))}]})),
        ),
        (
            "POST",
            format!("/v1/sessions/{o}/system-events"),
            Some(json!({"text": "x"})),
        ),
        (
            "PUT",
            format!("/v1/sessions/{o}/goal"),
            Some(json!({"text": "x"})),
        ),
        ("DELETE", format!("/v1/sessions/{o}/goal"), None),
        ("POST", format!("/v1/sessions/{o}/runs"), Some(json!({}))),
        (
            "POST",
            format!("/v1/sessions/{oc}/runs/r1/end"),
            Some(json!({"outcome": "ok"})),
        ),
        (
            "POST",
            format!("/v1/sessions/{o}/compaction"),
            Some(json!({"operationId": "op"})),
        ),
        ("GET", format!("/v1/sessions/{o}/watches"), None),
        ("GET", format!("/v1/sessions/{oc}/watchers"), None),
        (
            "POST",
            format!("/v1/sessions/{o}/watches"),
            Some(json!({"target": OC})),
        ),
        ("DELETE", format!("/v1/sessions/{o}/watches/{oc}"), None),
        // W's own routes pointing at ops sessions.
        (
            "POST",
            format!("/v1/sessions/{w}/watches"),
            Some(json!({"target": O})),
        ),
        ("DELETE", format!("/v1/sessions/{w}/watches/{o}"), None),
        ("GET", "/v1/sessions?agentId=ops".into(), None),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({"key": "agent:ops:new"})),
        ),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({"key": "main", "agentId": "ops"})),
        ),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({"key": "agent:main:kid", "parentSessionKey": O})),
        ),
        (
            "POST",
            "/v1/catalog/continue".into(),
            Some(
                json!({"catalogId": "claude", "hostId": "gateway:local", "threadId": "t", "agentId": "ops"}),
            ),
        ),
        // Tools.
        (
            "POST",
            "/v1/tools/session_status".into(),
            Some(json!({"sessionKey": O})),
        ),
        (
            "POST",
            "/v1/tools/session_status".into(),
            Some(json!({"sessionKey": "main", "agentId": "ops"})),
        ),
        (
            "POST",
            "/v1/tools/session_status".into(),
            Some(json!({"sessionKey": O, "changesSince": 0})),
        ),
        (
            "POST",
            "/v1/tools/sessions_history".into(),
            Some(json!({"sessionKey": OC})),
        ),
        (
            "POST",
            "/v1/tools/sessions_send".into(),
            Some(json!({"sessionKey": O, "message": "x", "timeoutSeconds": 0, "watch": true})),
        ),
        (
            "POST",
            "/v1/tools/sessions_send".into(),
            Some(json!({"label": "any", "agentId": "ops", "message": "x", "timeoutSeconds": 0})),
        ),
        (
            "POST",
            "/v1/tools/sessions_unwatch".into(),
            Some(json!({"sessionKey": OC})),
        ),
        (
            "POST",
            "/v1/tools/sessions_spawn".into(),
            Some(json!({"task": "x", "agentId": "ops"})),
        ),
        (
            "POST",
            "/v1/tools/sessions_list".into(),
            Some(json!({"agentId": "ops"})),
        ),
    ];
    for (method, path, body) in &routes {
        let r = s.request(
            method,
            path,
            Some(W),
            body.as_ref().map(|b| b.to_string()).as_deref(),
        );
        assert_forbidden(&r, &format!("{method} {path}"));
        if path.starts_with("/v1/sessions/") && r.message().contains("belongs to agent") {
            assert!(
                r.message().contains("which agent \"main\" may not access"),
                "{}",
                r.message()
            );
        }
    }
    // Nothing about O changed: not deleted, reset, written, drained or acked.
    let o_after = (
        s.get(&format!("/v1/sessions/{}", seg(O))).body,
        s.pending(O),
        s.get(&format!("/v1/sessions/{}/watches", seg(O))).body,
        s.get(&format!("/v1/sessions/{}/turns", seg(O))).body,
    );
    assert_eq!(o_after, o_before);
    assert_eq!(s.notice_texts(O).len(), 1, "O's notice is still pending");

    // Lists silently leave ops out.
    let list = s.request("GET", "/v1/sessions", Some(W), None);
    assert_eq!(list.status, 200);
    let keys: Vec<&str> = list.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.iter().all(|k| k.starts_with("agent:main:")),
        "{keys:?}"
    );
    let tl = s.tool(W, "sessions_list", json!({}));
    assert_eq!(tl.status, 200);
    assert!(
        tl.body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["agentId"] == "main"),
        "{}",
        tl.body
    );
    // Visibility is one-way: ops lists main.
    assert_eq!(
        s.request("GET", &format!("/v1/sessions/{w}"), Some(O), None)
            .status,
        200
    );
    assert_eq!(
        s.tool(O, "session_status", json!({"sessionKey": W})).status,
        200
    );

    // The wake stream: an explicit filter on ops is refused; an unfiltered stream of W (and
    // one filtered on O's session) never carries an ops wake, neither at catch-up nor live.
    let r = head_of(&s, "GET", "/v1/wakes?agent=ops", None, Some(W), None);
    assert_eq!(r.0, 403, "{}", r.2);
    assert_eq!(r.2["error"]["code"], "forbidden");
    let operator = Wakes::subscribe(&s, "", None);
    let mine = Wakes::subscribe(&s, "", Some(W));
    let on_o = head_of(
        &s,
        "GET",
        &format!("/v1/wakes?session={o}"),
        None,
        Some(W),
        None,
    );
    eprintln!("GET /v1/wakes?session=<ops key> as W: {}", on_o.0);
    assert!(on_o.0 == 200 || on_o.0 == 403, "{:?}", on_o.2);
    let on_o = (on_o.0 == 200).then(|| Wakes::subscribe(&s, &format!("?session={o}"), Some(W)));
    // Live ops wakes of every reason: session-state (O), message (O), spawn (an ops child).
    s.drain(O);
    s.hdm(OC);
    let r = s.tool(
        OC,
        "sessions_send",
        json!({"sessionKey": O, "message": "m", "timeoutSeconds": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.tool(O, "sessions_spawn", json!({"task": "t"}));
    assert_eq!(r.status, 200, "{}", r.body);
    // And one of W's own, as the sync point.
    s.hdm(C);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !mine.settle().iter().any(|w| w["sessionKey"] == W) {
        assert!(Instant::now() < deadline, "W's wake never came");
    }
    let seen_by_operator = operator.settle();
    for reason in ["session-state", "message", "spawn"] {
        assert!(
            seen_by_operator
                .iter()
                .any(|w| w["agentId"] == "ops" && w["reason"] == reason),
            "the operator saw no ops {reason} wake: {seen_by_operator:?}"
        );
    }
    let leaked: Vec<Value> = mine
        .settle()
        .into_iter()
        .chain(on_o.map(|x| x.settle()).unwrap_or_default())
        .filter(|w| {
            w["agentId"] != "main" || !w["sessionKey"].as_str().unwrap().starts_with("agent:main:")
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "ops wakes reached agent main: {leaked:?}"
    );
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

const MARK: &str = "PRIVMARK";

/// Every cell of every row of a table, as text.
/// Every row of `table` as one line of text, from the set's store: `state.db` on SQLite, the
/// set's database on PostgreSQL (each row cast to text, every column in it).
fn table_text(s: &Server, table: &str) -> Vec<String> {
    if let Some(url) = &s.store_url {
        let mut c = aware_store_pg::postgres::Client::connect(url, aware_store_pg::postgres::NoTls)
            .unwrap();
        return c
            .query(&format!("SELECT t::text FROM {table} t"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect();
    }
    let db = s.db_path();
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        let mut cells = Vec::new();
        for i in 0..n {
            let v: rusqlite::types::Value = r.get(i)?;
            cells.push(format!("{v:?}"));
        }
        Ok(cells.join("|"))
    })
    .unwrap()
    .collect::<Result<Vec<_>, _>>()
    .unwrap()
}

#[test]
fn no_message_text_in_events_summaries_logs_or_metrics() {
    let config = format!("{DEFAULT_CONFIG}[wakes]\ncoalesce_secs = 0\n");
    privacy_scan(Server::with_args(&config, &["--log-level", "trace"]));
}

/// The same scan on a PostgreSQL store (one gateway: the log fence reads its log), whatever the
/// environment asks for: the rows, logs and metrics of the other backend keep the promise too.
#[test]
fn no_message_text_in_events_summaries_logs_or_metrics_on_postgresql() {
    let config = format!("{DEFAULT_CONFIG}[wakes]\ncoalesce_secs = 0\n");
    privacy_scan(Server::with_options(ServerOptions {
        config,
        args: vec!["--log-level".into(), "trace".into()],
        gateways: 1,
        store: StoreChoice::Postgres,
        pick: Pick::First,
    }));
}

fn privacy_scan(s: Server) {
    let wakes = Wakes::subscribe(&s, "", None);
    s.create(W);
    s.create_child(C, W);
    s.create(X);
    let c = seg(C);
    let w = seg(W);
    let mark = |what: &str| format!("{MARK}-{what}-\u{e9}\u{2603} and more text");
    let mut sent = 0;
    let mut post = |r: Resp, expect: u16| {
        assert_eq!(r.status, expect, "{}", r.body);
        sent += 1;
    };
    // Human turns (with a channel and a human id), an assistant and a tool turn.
    post(
        s.post(
            &format!("/v1/sessions/{c}/turns"),
            json!({"role": "user", "text": mark("human"), "channel": "telegram",
                   "provenance": {"kind": "human", "humanId": "alice"}}),
        ),
        201,
    );
    post(
        s.post(
            &format!("/v1/sessions/{c}/turns"),
            json!({"role": "assistant", "text": mark("assistant")}),
        ),
        201,
    );
    post(
        s.post(
            &format!("/v1/sessions/{c}/turns"),
            json!({"role": "tool", "text": mark("tool")}),
        ),
        201,
    );
    post(
        s.post(
            &format!("/v1/sessions/{c}/turns"),
            json!({"role": "user", "text": mark("internal"), "provenance": {"kind": "internal_system"}}),
        ),
        201,
    );
    // Goals: by an operator, by a caller, then completed.
    post(
        s.put(
            &format!("/v1/sessions/{c}/goal"),
            json!({"text": mark("goal")}),
        ),
        200,
    );
    post(
        s.request(
            "PUT",
            &format!("/v1/sessions/{c}/goal"),
            Some(W),
            Some(&json!({"text": mark("goal2"), "status": "complete"}).to_string()),
        ),
        200,
    );
    // Sends and spawns through the tools.
    post(
        s.tool(
            W,
            "sessions_send",
            json!({"sessionKey": C, "message": mark("send"), "timeoutSeconds": 0, "watch": true}),
        ),
        200,
    );
    post(
        s.tool(
            X,
            "sessions_send",
            json!({"sessionKey": W, "message": mark("send2"), "timeoutSeconds": 0}),
        ),
        200,
    );
    let sp = s.tool(
        W,
        "sessions_spawn",
        json!({"task": mark("task"), "label": "helper"}),
    );
    let child = sp.body["childSessionKey"].as_str().unwrap().to_string();
    post(sp, 200);
    // A compaction summary, a system event, a run ending in error.
    post(
        s.post(
            &format!("/v1/sessions/{c}/compaction"),
            json!({"operationId": "op1", "summary": mark("compaction")}),
        ),
        201,
    );
    post(
        s.post(
            &format!("/v1/sessions/{w}/system-events"),
            json!({"text": mark("fifo")}),
        ),
        201,
    );
    post(
        s.post(&format!("/v1/sessions/{c}/runs"), json!({"runId": "r1"})),
        201,
    );
    post(
        s.post(
            &format!("/v1/sessions/{c}/runs/r1/end"),
            json!({"outcome": "error"}),
        ),
        200,
    );
    // Refused requests carrying text: a bad field, a too-large text, an unknown path and query.
    post(
        s.post(
            &format!("/v1/sessions/{c}/turns"),
            json!({"role": "user", "text": mark("bad"), "colour": mark("field")}),
        ),
        400,
    );
    let huge = format!("{}{}", mark("huge"), "x".repeat(300 * 1024));
    post(
        s.post(
            &format!("/v1/sessions/{c}/turns"),
            json!({"role": "user", "text": huge}),
        ),
        413,
    );
    post(s.get(&format!("/v1/{MARK}-path")), 404);
    post(s.get(&format!("/v1/sessions?label={MARK}-query")), 200);
    // Failure paths that log about a marked turn: a failed append (`record_failed`) and a
    // failed read (`read_failed`).
    post(
        s.post("/v1/admin/faults", json!({"failAppends": true})),
        200,
    );
    post(
        s.post(
            &format!("/v1/sessions/{c}/turns"),
            json!({"role": "user", "text": mark("unrecorded"), "channel": "sms"}),
        ),
        201,
    );
    post(s.post("/v1/admin/faults", json!({"failReads": true})), 200);
    post(
        s.tool(
            W,
            "session_status",
            json!({"sessionKey": C, "changesSince": 0}),
        ),
        200,
    );
    post(s.post("/v1/admin/faults", json!({})), 200);
    // Drains render prompts (they may carry the FIFO text); then reconcile.
    s.drain(W);
    let status = s.status(W, C, 0);
    let child_status = s.status(W, &child, 0);

    // The positive control: the texts are stored where they belong (turns, goal, FIFO).
    let turns = table_text(&s, "turns").join("\n");
    for what in ["human", "assistant", "tool", "send", "task", "compaction"] {
        assert!(turns.contains(&mark(what)), "turn text {what} not stored");
    }

    // 1. No event row, in any column, carries a marker.
    for table in [
        "session_state_events",
        "session_state_heads",
        "session_watch_cursors",
        "runs",
    ] {
        let rows = table_text(&s, table);
        assert!(!rows.is_empty() || table == "runs", "{table} is empty");
        for row in rows {
            assert!(!row.contains(MARK), "{table}: {row}");
        }
    }
    // 2. No summary or compact event shown to agents.
    // (`session_status` shows the goal itself by design, 03 §6.2; the delta must not.)
    for st in [&status, &child_status] {
        let text = st["stateChanges"].to_string();
        assert!(!text.contains(MARK), "{text}");
        assert!(!st["stateChanges"]["events"].as_array().unwrap().is_empty());
    }
    // 3. No wake.
    let seen = wakes.settle();
    assert!(!seen.is_empty());
    assert!(!Value::Array(seen).to_string().contains(MARK));
    // 4. No metric, no label.
    let metrics = s.get("/metrics").body.as_str().unwrap().to_string();
    assert!(metrics.contains("aware_http_requests_total"), "{metrics}");
    for line in metrics.lines() {
        assert!(!line.contains(MARK), "metric line: {line}");
    }
    // 5. No log line, at every level (trace). A last failed append on a session of its own is
    // the log marker: log lines keep their order, so once its line is in, every earlier one is.
    const LOG_FENCE: &str = "agent:main:subagent:logfence";
    s.create_child(LOG_FENCE, W);
    post(
        s.post("/v1/admin/faults", json!({"failAppends": true})),
        200,
    );
    s.hdm(LOG_FENCE);
    post(s.post("/v1/admin/faults", json!({})), 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !s.logs().contains(&format!("stream={LOG_FENCE}")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no marker line: {}",
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let logs = s.logs();
    for warning in ["record_failed", "read_failed"] {
        assert!(logs.contains(warning), "no {warning} warning: {logs}");
    }
    for line in logs.lines() {
        assert!(!line.contains(MARK), "log line: {line}");
    }
    eprintln!(
        "privacy: {sent} requests with marked text; scanned {} event rows, {} metric lines, {} log lines",
        table_text(&s, "session_state_events").len(),
        metrics.lines().count(),
        logs.lines().count()
    );
}
