//! The web console's routes (`/ui/`, `/v1/console/*`): bad input, visibility, auth, paging and
//! the change hint, against a real `aware serve --test-clock`.

use crate::common::*;
use aware_store::{Store, StoreExt};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::time::Duration;

fn vis_config() -> String {
    format!("{DEFAULT_CONFIG}[agents.ops]\nvisible_agents = [\"main\"]\n")
}

#[test]
fn console_routes_refuse_bad_input_with_what_is_accepted() {
    let s = Server::family();
    let cases: &[(&str, u16, &str, &str)] = &[
        (
            "/v1/console/sessions?sort=bogus",
            400,
            "invalid_argument",
            "sort must be one of",
        ),
        (
            "/v1/console/sessions?limit=0",
            400,
            "invalid_argument",
            "between 1 and 500",
        ),
        (
            "/v1/console/sessions?limit=501",
            400,
            "invalid_argument",
            "between 1 and 500",
        ),
        (
            "/v1/console/sessions?offset=-1",
            400,
            "invalid_argument",
            "offset must be",
        ),
        (
            "/v1/console/sessions?kind=robot",
            400,
            "invalid_argument",
            "kind must be one of",
        ),
        (
            "/v1/console/sessions?agent=Not%20An%20Agent",
            400,
            "invalid_argument",
            "agent must match",
        ),
        (
            "/v1/console/sessions?colour=red",
            400,
            "invalid_argument",
            "colour",
        ),
        (
            "/v1/console/graph?depth=0",
            400,
            "invalid_argument",
            "depth must be",
        ),
        (
            "/v1/console/graph?depth=7",
            400,
            "invalid_argument",
            "depth must be",
        ),
        (
            "/v1/console/graph?focus=a%01b",
            400,
            "invalid_session_key",
            "",
        ),
        (
            "/v1/console/graph?focus=agent%3Amain%3Anope",
            404,
            "session_not_found",
            "nope",
        ),
        (
            "/v1/console/sessions/agent%3Amain%3Anope",
            404,
            "session_not_found",
            "nope",
        ),
        ("/v1/console/sessions/a%01b", 400, "invalid_session_key", ""),
        (
            "/v1/console/sessions/%zz",
            400,
            "invalid_session_key",
            "percent",
        ),
        ("/v1/console/overview?x=1", 400, "invalid_argument", "x"),
        ("/v1/console/events?x=1", 400, "invalid_argument", "x"),
        (
            "/ui/nothing-here.js",
            404,
            "not_found",
            "/ui/nothing-here.js",
        ),
    ];
    let c_path = format!("/v1/console/sessions/{}?before=0", seg(C));
    let mut all: Vec<(&str, u16, &str, &str)> = cases.to_vec();
    all.push((&c_path, 400, "invalid_argument", "before must be"));
    for (path, status, code, needle) in all {
        let r = s.get(path);
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(r.code(), code, "{path}: {}", r.body);
        assert!(r.message().contains(needle), "{path}: {}", r.message());
    }
    let r = s.post("/v1/console/sessions", json!({}));
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
}

#[test]
fn session_table_pages_sorts_filters_and_counts_pending() {
    let s = Server::family();
    for k in ["agent:main:b", "agent:main:a", "agent:ops:main"] {
        s.create(k);
    }
    s.hdm(C);
    let r = s.get("/v1/console/sessions?sort=key&limit=2&offset=1");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 5);
    let keys: Vec<&str> = r.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["agent:main:b", "agent:main:main"]);
    let r = s.get("/v1/console/sessions?sort=-pendingAsTarget&limit=1");
    assert_eq!(r.body["sessions"][0]["key"], C);
    assert_eq!(r.body["sessions"][0]["pendingAsTarget"], 1);
    assert_eq!(
        r.body["sessions"][0]["lastEventKind"],
        "human_direct_message"
    );
    assert_eq!(r.body["sessions"][0]["humanRecent"], true);
    let r = s.get("/v1/console/sessions?agent=ops");
    assert_eq!(r.body["total"], 1);
    let r = s.get("/v1/console/sessions?q=SUBAGENT&kind=subagent");
    assert_eq!(r.body["total"], 1);
    assert_eq!(r.body["sessions"][0]["key"], C);
}

#[test]
fn session_page_and_graph_show_the_pending_edge_and_notice_text() {
    let s = Server::family();
    let seq = s.hdm_seq(C);
    let r = s.get(&format!("/v1/console/graph?focus={}", seg(W)));
    assert_eq!(r.status, 200, "{}", r.body);
    let edge = &r.body["edges"][0];
    let key = |i: &serde_json::Value| r.body["nodes"][i.as_u64().unwrap() as usize]["key"].clone();
    assert_eq!((key(&edge["from"]), key(&edge["to"])), (json!(W), json!(C)));
    assert_eq!(edge["pending"], true);
    assert_eq!(edge["kind"], "spawn");
    let r = s.get(&format!("/v1/console/sessions/{}", seg(W)));
    assert_eq!(r.status, 200, "{}", r.body);
    let text = r.body["notices"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(text, nt(C, seq - 1));
    assert_eq!(r.body["watches"][0]["pending"], true);
    let r = s.get(&format!("/v1/console/sessions/{}", seg(C)));
    assert_eq!(r.body["noticesOnIt"][0]["watcherSessionKey"], W);
    assert_eq!(r.body["timeline"]["events"][0]["sequence"], seq);
    assert_eq!(
        r.body["turns"][0]["text"], "hello",
        "an operator sees turn text"
    );
    s.drain(W);
    let r = s.get(&format!("/v1/console/graph?focus={}", seg(W)));
    assert_eq!(r.body["edges"][0]["pending"], false);
}

#[test]
fn console_routes_follow_visibility_and_hide_turn_text_from_sessions() {
    let s = Server::with_config(&vis_config());
    s.create(W);
    s.create_child(C, W);
    s.create(O);
    s.hdm(C);
    let as_main = |path: &str| s.request("GET", path, Some(W), None);
    let as_ops = |path: &str| s.request("GET", path, Some(O), None);
    let r = as_main("/v1/console/sessions");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["total"], 2,
        "main sees only its own agent: {}",
        r.body
    );
    let r = as_main("/v1/console/sessions?agent=ops");
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    let r = as_main(&format!("/v1/console/sessions/{}", seg(O)));
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    let r = as_main(&format!("/v1/console/graph?focus={}", seg(O)));
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    let r = as_main("/v1/console/graph");
    assert!(r.body["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["agentId"] == "main"));
    let r = as_main("/v1/console/overview");
    assert_eq!(r.body["sessions"], 2);
    assert!(r.body.get("pendingNotices").is_none());
    let r = as_ops("/v1/console/sessions");
    assert_eq!(r.body["total"], 3, "ops may see main: {}", r.body);
    // O (ops may see main) watches C: main's viewer may not see ops, so O's cursor and its
    // pending notice are left out of C's page for main, and shown to the operator.
    let w = s.watch(O, C);
    assert!(w.status == 200 || w.status == 201, "{}", w.body);
    s.hdm(C);
    let watcher_keys = |r: &Resp| -> Vec<String> {
        let keys = |list: &str| -> Vec<String> {
            r.body[list]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["watcherSessionKey"].as_str().unwrap().to_string())
                .collect()
        };
        let mut k = keys("watchers");
        k.extend(keys("noticesOnIt"));
        k
    };
    let r = as_main(&format!("/v1/console/sessions/{}", seg(C)));
    assert!(
        !watcher_keys(&r).contains(&O.to_string()),
        "main does not see ops' cursor or notice: {}",
        r.body
    );
    let r = s.get(&format!("/v1/console/sessions/{}", seg(C)));
    assert!(
        watcher_keys(&r).iter().filter(|k| *k == O).count() == 2,
        "{}",
        r.body
    );
    let r = as_ops(&format!("/v1/console/sessions/{}", seg(C)));
    assert_eq!(r.status, 200);
    assert_eq!(r.body["turnText"], false);
    assert!(r.body["turns"][0].get("text").is_none(), "{}", r.body);
    assert_eq!(r.body["turns"][0]["role"], "user");
}

#[test]
fn with_a_token_the_page_loads_but_the_console_api_needs_it() {
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--token", "tok-123-0123456789"]);
    let good = s.get("/v1/console/overview");
    assert_eq!(good.status, 200);
    s.token = Some("wrong".into());
    let r = s.get("/v1/console/sessions");
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    s.token = None;
    let r = s.get("/v1/console/overview");
    assert_eq!(r.status, 401);
    let r = s.get("/ui/");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(r.header("content-security-policy").is_some());
    let r = s.get("/ui/vendor/cytoscape.min.js");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
}

#[test]
fn the_events_stream_hints_at_each_change() {
    let s = Server::family();
    let agent = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_secs(30))
        .build();
    let resp = agent
        .get(&format!("{}/v1/console/events", s.base))
        .call()
        .unwrap();
    assert!(resp
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/event-stream"));
    let mut lines = BufReader::new(resp.into_reader()).lines();
    let mut next_event = || loop {
        let l = lines.next().unwrap().unwrap();
        if let Some(e) = l.strip_prefix("event: ") {
            return e.to_string();
        }
    };
    assert_eq!(next_event(), "hello");
    s.hdm(C);
    assert_eq!(next_event(), "change");
}

/// The session page shows an adopted session's link as the monitor sees it: its source file,
/// the misses in a row while the transcript is gone, and the threshold; the overview shows the
/// monitor's ticks and its next tick.
#[test]
fn session_page_shows_the_monitors_misses_and_the_overview_its_ticks() {
    let root = tempfile::tempdir().unwrap();
    let thread = "0b7c2a4e-5d6f-4a8b-9c0d-1e2f3a4b5c6d";
    let file = root.path().join("p1").join(format!("{thread}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let row = json!({"type":"user","uuid":"00000000-0000-4000-8000-000000000001",
        "timestamp":"2025-12-31T23:00:00.000Z","message":{"role":"user","content":"hi"}});
    std::fs::write(&file, format!("{row}\n")).unwrap();
    let config = format!(
        "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n[monitor]\nenabled = true\n[claude]\nroot = {:?}\n",
        root.path().to_str().unwrap()
    );
    let mut s = Server::with_config(&config);
    s.create(X);
    let r = s.post(
        "/v1/catalog/continue",
        json!({"catalogId":"claude","hostId":"gateway:local","threadId":thread}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let a = r.body["sessionKey"].as_str().unwrap().to_string();
    let w = s.watch(X, &a);
    assert!(w.status == 200 || w.status == 201, "{}", w.body);
    let page = |s: &Server| {
        let r = s.get(&format!("/v1/console/sessions/{}", seg(&a)));
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["session"]["upstream"].clone()
    };
    let up = page(&s);
    assert_eq!(
        (&up["monitored"], &up["misses"], &up["missingThreshold"]),
        (&json!(true), &json!(0), &json!(3)),
        "{up}"
    );
    let canonical = std::fs::canonicalize(&file).unwrap();
    assert_eq!(up["source"]["filePath"], canonical.to_str().unwrap());
    std::fs::remove_file(&file).unwrap();
    // Ticks at T0 + 15 s and then every 60 s (engine clock).
    s.set_clock(T0 + 15_000);
    assert_eq!(page(&s)["misses"], 1, "one miss counted");
    s.set_clock(T0 + 75_000);
    let up = page(&s);
    assert_eq!(up["misses"], 2, "{up}");
    let o = s.get("/v1/console/overview").body;
    assert_eq!(o["monitor"]["enabled"], true);
    assert_eq!(o["monitor"]["ticks"], 2, "{o}");
    assert_eq!(o["monitor"]["ticksSkipped"], 0);
    assert_eq!(o["monitor"]["nextTickAt"], T0 + 135_000);
    // The third miss records `upstream_missing` and unlinks: no streak is left to show.
    s.set_clock(T0 + 135_000);
    let up = page(&s);
    assert_eq!(up["linked"], false, "{up}");
    assert!(
        up.get("misses").is_none(),
        "an unlinked session has no streak: {up}"
    );
    assert_eq!(s.get("/v1/console/overview").body["monitor"]["missing"], 1);
}

/// Prints the p50 of each console route over HTTP at 10,000 sessions / 100,000 cursors (no
/// timing assertion), then checks the answers at that size. About 7 s in a debug build; the
/// figures with `cargo test --release -p aware --test it console:: -- --nocapture`.
#[test]
fn console_routes_timing_at_10k_sessions_100k_cursors() {
    use aware_core::{ActorType, CursorState, EventKind, Origin};
    use aware_store::{CursorRow, NewEvent, SessionRow};
    use aware_store_sqlite::{Durability, SqliteStore, StoreOptions};
    let mut s = Server::start();
    s.create(W);
    s.stop();
    let store =
        SqliteStore::open(StoreOptions::new(s.db_path()).durability(Durability::Normal)).unwrap();
    let n: i64 = 10_000;
    let key = |i: i64| format!("agent:main:subagent:s{i:05}");
    store
        .write(move |tx| {
            for i in 0..n {
                tx.insert_session(&SessionRow {
                    key: key(i),
                    agent_id: "main".into(),
                    session_id: format!("sid-{i}"),
                    kind: "subagent".into(),
                    label: None,
                    parent_key: Some(W.into()),
                    created_via: "api".into(),
                    active_run_id: None,
                    goal: None,
                    orphaned: false,
                    created_at: T0 + i,
                    updated_at: T0 + i,
                    upstream: None,
                })?;
                let seq = tx.insert_event(&NewEvent {
                    dedupe_key: None,
                    session_key: key(i),
                    session_id: None,
                    agent_id: "main".into(),
                    kind: EventKind::HumanDirectMessage,
                    actor_type: ActorType::Human,
                    actor_id: None,
                    run_id: None,
                    occurred_at: T0 + i,
                    summary: "human message".into(),
                    payload: None,
                })?;
                tx.upsert_head(&key(i), "main", seq, T0 + i)?;
                for j in 1..=10 {
                    let pending = j == 1;
                    tx.put_cursor(&CursorRow {
                        watcher: key(i),
                        target_key: key((i + j * 7) % n),
                        target_agent: "main".into(),
                        state: CursorState {
                            last_seen: 0,
                            notified: i64::from(pending),
                            material: i64::from(pending),
                            muted: false,
                            origin: Origin::Watch,
                            notice_opened_at: pending.then_some(T0),
                            updated_at: T0,
                        },
                        created_at: T0,
                    })?;
                }
            }
            Ok(())
        })
        .unwrap();
    store.close();
    drop(store);
    s.restart();
    let focus = seg(&key(4242));
    for path in [
        "/v1/console/sessions?limit=50".to_string(),
        "/v1/console/sessions?sort=-pendingAsTarget&limit=50&offset=100".to_string(),
        "/v1/console/sessions?q=s09&limit=50".to_string(),
        format!("/v1/console/sessions/{focus}"),
        "/v1/console/graph".to_string(),
        format!("/v1/console/graph?focus={focus}&depth=1"),
        format!("/v1/console/graph?focus={focus}&depth=2"),
        "/v1/console/overview".to_string(),
    ] {
        // Wall time of the request as a client sees it, JSON parsing included; the fastest
        // run is the better guess at the work itself on a shared machine.
        let mut bytes = 0;
        let mut t: Vec<Duration> = (0..21)
            .map(|_| {
                let start = std::time::Instant::now();
                let r = s.get(&path);
                let took = start.elapsed();
                assert_eq!(r.status, 200, "{path}: {}", r.body);
                bytes = r.body.to_string().len();
                took
            })
            .collect();
        t.sort();
        println!(
            "GET {path}: p50 {:.2?} (min {:.2?}), {bytes} bytes",
            t[10], t[0]
        );
    }
    // The timed answers at this size: W and its 10,000 children; one pending notice each way
    // on every child (only each watcher's first cursor is pending, on a target of its own);
    // `s09` matches s09000..=s09999; the focus's page and one-hop graph hold its ten watches.
    let page = s.get("/v1/console/sessions?limit=50").body;
    assert_eq!(page["total"], n + 1, "{}", page["total"]);
    assert_eq!(page["sessions"].as_array().map(Vec::len), Some(50));
    let page = s
        .get("/v1/console/sessions?sort=-pendingAsTarget&limit=50&offset=100")
        .body;
    for row in page["sessions"].as_array().unwrap() {
        assert_eq!(
            (&row["pendingAsTarget"], &row["pendingAsWatcher"]),
            (&json!(1), &json!(1)),
            "{row}"
        );
    }
    let page = s.get("/v1/console/sessions?q=s09&limit=50").body;
    assert_eq!(page["total"], 1_000);
    let one = s.get(&format!("/v1/console/sessions/{focus}")).body;
    assert_eq!(one["watches"].as_array().map(Vec::len), Some(10), "{one}");
    assert_eq!(one["notices"].as_array().map(Vec::len), Some(1), "{one}");
    let graph = s
        .get(&format!("/v1/console/graph?focus={focus}&depth=1"))
        .body;
    let edges_out = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| graph["nodes"][e["from"].as_u64().unwrap() as usize]["key"] == key(4242))
        .count();
    assert_eq!(edges_out, 10, "{graph}");
    assert_eq!(
        s.get("/v1/console/overview").body["sessions"],
        n + 1,
        "the overview counts every session"
    );
}
