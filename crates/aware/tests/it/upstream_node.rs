//! Group P of the scenarios (04 upstream), paired nodes: S144–S146 end to end. A real
//! `aware node serve` serves a temporary Claude root R2; a real `aware serve --test-clock` lists it
//! as `[[nodes]] id = "laptop"` with `[monitor] enabled = true`, and adopts and monitors its
//! threads over HTTP.
//!
//! The monitor ticks while `POST /v1/admin/clock` moves the clock (the request returns after the
//! tick), so `tick n` is deterministic.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aware_testkit::transcript::{
    assistant_row_with as assistant_row, initial_transcript_fixed as initial_transcript, line,
    node_source16, sha256_hex, user_row_with as user_row, THREAD_T as T,
};
/// `agent:main:claude:` + sha256 hex of `"node:laptop" + "\0" + T` (S144).
const NA: &str =
    "agent:main:claude:140eae5ade16053d451ec68047fabaea6b71aaaac0232d673187efff3a4752ad";
const HOST: &str = "node:laptop";
const NODE_TOKEN: &str = "node-token-0123456789";

/// A running `aware node serve` on a loopback port.
struct Node {
    child: Option<Child>,
    port: u16,
    logs: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Node {
    /// A node serving Claude root `root` and no Codex catalog.
    fn start(root: &Path, token: Option<&str>) -> Node {
        Self::start_with(root, None, token)
    }

    fn start_with(root: &Path, codex_home: Option<&Path>, token: Option<&str>) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let mut cmd = Command::new(bin());
        cmd.args([
            "node",
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--node-id",
            "laptop",
        ])
        .arg("--port-file")
        .arg(&port_file)
        .arg("--claude-root")
        .arg(root)
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_NODE_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(t) = token {
            cmd.arg("--token").arg(t);
        }
        match codex_home {
            Some(home) => cmd.arg("--codex-home").arg(home),
            None => cmd.arg("--no-codex"),
        };
        let mut child = cmd.spawn().expect("start aware node serve");
        let logs = Arc::new(Mutex::new(String::new()));
        let (stderr, l2) = (child.stderr.take().unwrap(), logs.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut l) = l2.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse().ok())
            {
                break port;
            }
            assert!(Instant::now() < deadline, "node did not start: {logs:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let node = Node {
            child: Some(child),
            port,
            logs,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while node.get("/health", None).0 != 200 {
            assert!(Instant::now() < deadline, "node not healthy");
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut req = ureq::get(&format!("{}{path}", self.url())).timeout(Duration::from_secs(20));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        match req.call() {
            Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
            Err(_) => (0, Value::Null),
        }
    }

    /// SIGTERM, and waits for the exit.
    fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The gateway configuration: the monitor on, an empty local root, and node `laptop`.
fn config(node_url: &str, token: &str) -> String {
    format!(
        "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n[monitor]\nenabled = true\n\
         [claude]\nroot = \"/nonexistent/aware-upstream-node-test\"\n\
         [[nodes]]\nid = \"laptop\"\nurl = {node_url:?}\ntoken = {token:?}\n"
    )
}

/// The paired-node world: root R2 with `R2/p1/T.jsonl`, the node serving it with token `nt`,
/// the gateway configured with it, and X.
struct Up {
    s: Server,
    node: Node,
    _root: tempfile::TempDir,
    file: PathBuf,
}

impl Up {
    fn new() -> Self {
        Self::with_transcript(&initial_transcript())
    }

    fn with_transcript(text: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("p1").join(format!("{T}.jsonl"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        let node = Node::start(root.path(), Some(NODE_TOKEN));
        let s = Server::with_config(&config(&node.url(), NODE_TOKEN));
        s.create(X);
        Up {
            s,
            node,
            _root: root,
            file,
        }
    }

    /// Given a node-adopted session NA watched by X.
    fn adopted_and_watched(text: &str) -> Self {
        let u = Self::with_transcript(text);
        let r = u.adopt();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["linked"], true, "{}", r.body);
        let w = u.s.watch(X, NA);
        assert!(w.status == 200 || w.status == 201, "{}", w.body);
        u
    }

    fn adopt_thread(&self, thread: &str) -> Resp {
        self.s.post(
            "/v1/catalog/continue",
            json!({"catalogId":"claude","hostId":HOST,"threadId":thread}),
        )
    }

    fn adopt(&self) -> Resp {
        self.adopt_thread(T)
    }

    /// tick n: T0 + 15 s + (n − 1) × 60 s.
    fn tick(&mut self, n: i64) {
        self.s.set_clock(T0 + 15_000 + (n - 1) * 60_000);
    }

    fn append(&self, rows: &[Value]) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.file)
            .unwrap();
        for r in rows {
            f.write_all(line(r).as_bytes()).unwrap();
        }
    }

    fn upstream(&self) -> Value {
        let r = self.s.get(&format!("/v1/sessions/{}", seg(NA)));
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["upstream"].clone()
    }

    fn marker(&self) -> Value {
        self.upstream()["marker"].clone()
    }

    fn events(&self) -> Vec<Value> {
        self.s.status(X, NA, 0)["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .clone()
    }

    fn of_kind(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["kind"] == kind)
            .collect()
    }

    fn stored(&self, seq: i64) -> (Option<String>, Option<String>) {
        let row = first_row(
            &self.s,
            &format!(
                "SELECT dedupe_key, payload_json FROM session_state_events WHERE sequence = {seq}"
            ),
        );
        (
            row["dedupe_key"].as_str().map(str::to_string),
            row["payload_json"].as_str().map(str::to_string),
        )
    }

    fn links(&self) -> i64 {
        first_row(&self.s, "SELECT COUNT(*) AS n FROM session_upstream_links")["n"]
            .as_i64()
            .unwrap()
    }
}

/// The first row of a query on the set's store (the SQLite file, or its PostgreSQL database),
/// as a JSON object by column name.
fn first_row(s: &Server, sql: &str) -> Value {
    if let Some(url) = &s.store_url {
        let mut c = aware_store_pg::postgres::Client::connect(url, aware_store_pg::postgres::NoTls)
            .unwrap();
        let text: String = c
            .query_one(
                &format!("SELECT to_jsonb(q)::text FROM ({sql}) q LIMIT 1"),
                &[],
            )
            .unwrap()
            .get(0);
        return serde_json::from_str(&text).unwrap();
    }
    let db = rusqlite::Connection::open_with_flags(
        s.db_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut stmt = db.prepare(sql).unwrap();
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    stmt.query_row([], |r| {
        let mut o = serde_json::Map::new();
        for (i, n) in names.iter().enumerate() {
            let v = match r.get::<_, rusqlite::types::Value>(i)? {
                rusqlite::types::Value::Null => Value::Null,
                rusqlite::types::Value::Integer(x) => json!(x),
                rusqlite::types::Value::Real(x) => json!(x),
                rusqlite::types::Value::Text(t) => json!(t),
                rusqlite::types::Value::Blob(b) => json!(b),
            };
            o.insert(n.clone(), v);
        }
        Ok(Value::Object(o))
    })
    .unwrap()
}

fn turns(s: &Server, key: &str) -> Vec<Value> {
    let r = s.get(&format!("/v1/sessions/{}/turns", seg(key)));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["turns"].as_array().unwrap().clone()
}

/// A stand-in node that answers every request with `body` (a node that sends items without
/// uuids, which `aware node serve` never does).
fn fake_node(body: Value) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = body.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}")
}

// --- S144 ---------------------------------------------------------------------------------------

#[test]
fn s144_paired_node_adoption() {
    let u = Up::new();
    let r = u.adopt();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"sessionKey":NA,"agentId":"main","created":true,"linked":true})
    );
    assert_eq!(
        u.upstream(),
        json!({"catalogId":"claude","hostId":HOST,"threadId":T,"linked":true,
            "marker":{"uuid":"u-thanks"}})
    );
    let r = u.s.get(&format!("/v1/sessions/{}", seg(NA)));
    assert_eq!(r.body["kind"], "adopted");
    assert_eq!(r.body["createdVia"], "adoption");
    let t = turns(&u.s, NA);
    let texts: Vec<&str> = t.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["hi", "hello", "thanks"]);
    assert!(t.iter().all(|t| t["origin"] == "import"), "{t:?}");
    let ev = u.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["kind"], "adopted");
    let (dedupe, payload) = u.stored(1);
    assert_eq!(dedupe.as_deref(), Some(format!("adopted:{NA}").as_str()));
    let payload: Value = serde_json::from_str(&payload.unwrap()).unwrap();
    assert_eq!(payload, json!({"catalogId":"claude","hostId":HOST}));
    let link_ref = first_row(&u.s, "SELECT upstream_ref_json FROM session_upstream_links");
    let link_ref: Value =
        serde_json::from_str(link_ref["upstream_ref_json"].as_str().unwrap()).unwrap();
    assert_eq!(link_ref, json!({"nodeId":"laptop","threadId":T}));

    // Re-continuing keeps the marker, even after the thread grew.
    u.append(&[user_row("u-more", "more", "2026-01-01T00:00:10.000Z")]);
    let r = u.adopt();
    assert_eq!(
        r.body,
        json!({"sessionKey":NA,"agentId":"main","created":false,"linked":true})
    );
    assert_eq!(u.marker(), json!({"uuid":"u-thanks"}));
    assert_eq!(u.of_kind("adopted").len(), 1);

    // The catalog of the node, with the gateway's host id.
    let r = u.s.get("/v1/catalog?hostId=node:laptop");
    assert_eq!(r.status, 200, "{}", r.body);
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", r.body);
    assert_eq!(items[0]["threadId"], T);
    assert_eq!(items[0]["hostId"], HOST);
    assert_eq!(items[0]["catalogId"], "claude");
    assert_eq!(items[0]["title"], "hi");
    assert_eq!(items[0]["adoptedSessionKey"], NA);
    assert_eq!(
        items[0]["sizeBytes"],
        std::fs::metadata(&u.file).unwrap().len()
    );

    // An unknown thread on the node.
    let r = u.adopt_thread("0b7c2a4e-5d6f-4a8b-9c0d-000000000000");
    assert_eq!(
        (r.status, r.code()),
        (404, "thread_not_found"),
        "{}",
        r.body
    );
}

#[test]
fn s144_a_node_item_without_uuid_declines_the_link() {
    let url = fake_node(json!({"items": [
        {"type": "queueOperation", "operation": "enqueue", "content": "typed while busy"},
        {"uuid": "u-1", "type": "userMessage", "content": "hello"}
    ]}));
    let s = Server::with_config(&config(&url, NODE_TOKEN));
    let r = s.post(
        "/v1/catalog/continue",
        json!({"catalogId":"claude","hostId":HOST,"threadId":T}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"sessionKey":NA,"agentId":"main","created":true,"linked":false})
    );
    let links = first_row(&s, "SELECT COUNT(*) AS n FROM session_upstream_links")["n"]
        .as_i64()
        .unwrap();
    assert_eq!(links, 0, "no link exists");
    let sess = s.get(&format!("/v1/sessions/{}", seg(NA))).body;
    assert_eq!(sess["upstream"]["linked"], false, "{sess}");
    assert!(sess["upstream"].get("marker").is_none(), "{sess}");
}

#[test]
fn s144_a_real_node_gives_uuid_less_rows_a_row_id() {
    // `aware node serve` gives every item a uuid (04 §2.2): a newest row without one (a queue
    // operation) is `row:` + 32 hex of SHA-256 of the line, so the link is seeded.
    let queue = json!({"type":"queue-operation","operation":"enqueue","content":"later",
        "timestamp":"2025-12-31T23:00:03.000Z"});
    let mut text = initial_transcript();
    text.push_str(&line(&queue));
    let u = Up::with_transcript(&text);
    let r = u.adopt();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["linked"], true, "{}", r.body);
    let row_id = format!("row:{}", &sha256_hex(queue.to_string().as_bytes())[..32]);
    assert_eq!(u.marker(), json!({ "uuid": row_id }));
}

#[test]
fn s144_an_empty_thread_baselines_null_and_reports_its_first_prompt() {
    let mut u = Up::with_transcript("");
    let r = u.adopt();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["linked"], true, "{}", r.body);
    assert_eq!(u.marker(), json!({"uuid": null}));
    let w = u.s.watch(X, NA);
    assert!(w.status == 200 || w.status == 201, "{}", w.body);
    u.tick(1);
    assert_eq!(u.of_kind("human_direct_message").len(), 0);
    u.append(&[user_row("u-1", "first", "2026-01-01T00:00:20.000Z")]);
    u.tick(2);
    let hdm = u.of_kind("human_direct_message");
    assert_eq!(hdm.len(), 1, "{:?}", u.events());
    assert_eq!(hdm[0]["occurredAt"], T0 + 20_000);
    assert_eq!(u.marker(), json!({"uuid": "u-1"}));
}

// --- S145 ---------------------------------------------------------------------------------------

#[test]
fn s145_paired_node_window_and_a_burst_past_50_items() {
    let first = line(&user_row("item-1", "first", "2025-12-31T23:00:00.000Z"));
    let mut u = Up::adopted_and_watched(&first);
    assert_eq!(u.marker(), json!({"uuid":"item-1"}));
    assert_eq!(u.events().len(), 1);

    // Items (newest first): agentMessage item-3, userMessage item-2 "native prompt" at T0+5 s,
    // userMessage item-1.
    u.append(&[
        user_row("item-2", "native prompt", "2026-01-01T00:00:05.000Z"),
        assistant_row("item-3", "on it"),
    ]);
    u.tick(1);
    let ev = u.events();
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[1]["kind"], "human_direct_message");
    assert_eq!(ev[1]["actorType"], "human");
    assert_eq!(ev[1]["summary"], "human message via claude");
    assert_eq!(ev[1]["occurredAt"], T0 + 5_000);
    assert!(ev[1].get("payload").is_none(), "{}", ev[1]);
    assert_eq!(u.marker(), json!({"uuid":"item-3"}));
    let seq = ev[1]["sequence"].as_i64().unwrap();
    assert_eq!(
        u.stored(seq).0.as_deref(),
        Some(format!("upstream:{NA}:{}:item-3", node_source16("laptop", T)).as_str())
    );
    assert_eq!(u.s.notice_texts(X), vec![nt(NA, 1)]);

    // User rows flagged sidechain, meta or task-notification are not counted; the marker moves.
    let mut side = user_row("item-4", "side", "2026-01-01T00:01:00.000Z");
    side["isSidechain"] = json!(true);
    let mut meta = user_row("item-5", "meta", "2026-01-01T00:01:00.000Z");
    meta["isMeta"] = json!(true);
    let mut note = user_row("item-6", "done", "2026-01-01T00:01:00.000Z");
    note["origin"] = json!({"kind": "task-notification"});
    u.append(&[side, meta, note]);
    u.tick(2);
    assert_eq!(u.events().len(), 2, "{:?}", u.events());
    assert_eq!(u.marker(), json!({"uuid":"item-6"}));

    // 60 new rows after the marker: all are classified (decision D24 pages past the 50 newest of
    // 04 §10), one event of 60 turns, and the marker becomes the newest uuid.
    let burst: Vec<Value> = (1..=60)
        .map(|i| {
            user_row(
                &format!("burst-{i}"),
                &format!("burst prompt {i}"),
                &format!("2026-01-01T00:01:{:02}.000Z", i - 1),
            )
        })
        .collect();
    u.append(&burst);
    u.tick(3);
    let hdm = u.of_kind("human_direct_message");
    assert_eq!(hdm.len(), 2, "{:?}", u.events());
    assert_eq!(hdm[1]["payload"], json!({"turns": 60}));
    assert_eq!(hdm[1]["occurredAt"], T0 + 119_000);
    assert_eq!(u.marker(), json!({"uuid":"burst-60"}));

    // Nothing new: nothing recorded, the marker stays.
    u.tick(4);
    assert_eq!(u.of_kind("human_direct_message").len(), 2);
    assert_eq!(u.marker(), json!({"uuid":"burst-60"}));
}

// --- S146 ---------------------------------------------------------------------------------------

#[test]
fn s146_a_deleted_node_thread_becomes_upstream_missing() {
    // Decision D25 supersedes 04 §10 step 2: the node answers a definitive 404 `thread_not_found`,
    // and three in a row give `upstream_missing`, as for a deleted local file.
    let mut u = Up::adopted_and_watched(&initial_transcript());
    std::fs::remove_file(&u.file).unwrap();
    let (status, body) = u.node.get(
        &format!("/v1/node/claude/threads/{T}/items"),
        Some(NODE_TOKEN),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("thread_not_found")),
        "{body}"
    );
    u.tick(1);
    u.tick(2);
    assert!(u.of_kind("upstream_missing").is_empty(), "{:?}", u.events());
    assert_eq!(u.links(), 1);
    u.tick(3);
    let missing = u.of_kind("upstream_missing");
    assert_eq!(missing.len(), 1, "{:?}", u.events());
    assert_eq!(missing[0]["payload"], json!({"channel": "claude"}));
    assert_eq!(u.upstream()["linked"], false);
    assert_eq!(u.links(), 0);
    u.tick(4);
    assert_eq!(u.of_kind("upstream_missing").len(), 1, "recorded once");
}

#[test]
fn s146_an_unreachable_node_or_unreadable_root_is_never_missing() {
    let mut u = Up::adopted_and_watched(&initial_transcript());
    let marker = u.marker();

    // The node's whole root is gone (unmounted, renamed): an error, not a deletion.
    let root = u.file.parent().unwrap().parent().unwrap().to_path_buf();
    let moved = root.with_extension("moved");
    std::fs::rename(&root, &moved).unwrap();
    for n in 1..=4 {
        u.tick(n);
    }
    assert!(u.of_kind("upstream_missing").is_empty(), "{:?}", u.events());
    assert_eq!(u.marker(), marker);
    std::fs::rename(&moved, &root).unwrap();

    // The node is stopped: 5 more ticks, still nothing.
    assert_eq!(u.node.stop(), Some(0), "SIGTERM stops the node cleanly");
    for n in 5..=9 {
        u.tick(n);
    }
    assert!(u.of_kind("upstream_missing").is_empty(), "{:?}", u.events());
    assert_eq!(u.upstream()["linked"], true);
    assert_eq!(u.marker(), marker);
    assert_eq!(u.links(), 1);

    // Adoption needs the node: a stopped node is 502 node_unavailable.
    let r = u.adopt_thread("0b7c2a4e-5d6f-4a8b-9c0d-000000000001");
    assert_eq!(
        (r.status, r.code()),
        (502, "node_unavailable"),
        "{}",
        r.body
    );
    let r = u.s.get("/v1/catalog?hostId=node:laptop");
    assert_eq!(
        (r.status, r.code()),
        (502, "node_unavailable"),
        "{}",
        r.body
    );
}

/// Threads of process `pid` (`/proc/PID/status`).
fn threads_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

#[test]
fn a_hanging_node_does_not_grow_the_gateways_threads() {
    // Decision D5: the node accepts connections and never answers (SIGSTOP keeps its listening
    // socket, so the kernel still accepts). With a 1 s provider deadline the monitor ticks many
    // times; each node call must end and free its slot instead of leaving a thread behind.
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("p1").join(format!("{T}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, initial_transcript()).unwrap();
    let node = Node::start(root.path(), Some(NODE_TOKEN));
    let cfg = config(&node.url(), NODE_TOKEN).replace(
        "enabled = true\n",
        "enabled = true\nprovider_timeout_secs = 1\n",
    );
    let mut s = Server::with_config(&cfg);
    s.create(X);
    let r = s.post(
        "/v1/catalog/continue",
        json!({"catalogId":"claude","hostId":HOST,"threadId":T}),
    );
    assert_eq!(
        (r.status, &r.body["linked"]),
        (200, &json!(true)),
        "{}",
        r.body
    );
    let w = s.watch(X, NA);
    assert!(w.status == 200 || w.status == 201, "{}", w.body);
    let node_pid = node.child.as_ref().unwrap().id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &node_pid])
        .status()
        .unwrap()
        .success());

    let pid = s.child.as_ref().unwrap().id();
    let tick = |s: &mut Server, n: i64| s.set_clock(T0 + 15_000 + (n - 1) * 60_000);
    tick(&mut s, 1);
    tick(&mut s, 2);
    let before = threads_of(pid);
    for n in 3..=16 {
        tick(&mut s, n);
        let r = s.get(&format!("/v1/sessions/{}", seg(NA)));
        assert_eq!(r.status, 200, "the API keeps answering: {}", r.body);
    }
    let after = threads_of(pid);
    let _ = Command::new("kill").args(["-CONT", &node_pid]).status();
    assert!(
        after <= before + 2,
        "threads grew from {before} to {after} over 14 ticks against a hanging node"
    );
    assert_eq!(s.get("/health").status, 200);
    // Summed over the gateways: on a cluster only the leader's monitor calls the node.
    let running = s.metric_sum("aware_provider_calls_running").unwrap();
    assert!(
        running <= 2.0,
        "at most the cap of calls in flight: {running}"
    );
}

#[test]
fn s146_a_wrong_node_token_is_node_unavailable() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("p1").join(format!("{T}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, initial_transcript()).unwrap();
    let node = Node::start(root.path(), Some(NODE_TOKEN));
    let s = Server::with_config(&config(&node.url(), "wrong"));
    let r = s.get("/v1/catalog?hostId=node:laptop");
    assert_eq!(
        (r.status, r.code()),
        (502, "node_unavailable"),
        "{}",
        r.body
    );
    let r = s.post(
        "/v1/catalog/continue",
        json!({"catalogId":"claude","hostId":HOST,"threadId":T}),
    );
    assert_eq!(
        (r.status, r.code()),
        (502, "node_unavailable"),
        "{}",
        r.body
    );

    // The node itself: health is open, everything else needs the token.
    assert_eq!(
        node.get("/health", None),
        (200, json!({"status":"ok","nodeId":"laptop"}))
    );
    let (status, body) = node.get("/v1/node/claude/threads", Some("wrong"));
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("unauthorized"))
    );
    let (status, body) = node.get(
        &format!("/v1/node/claude/threads/{T}/items?limit=2"),
        Some(NODE_TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let uuids: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, ["u-thanks", "a-hello"]);
    // Written before the node answered anything, but read on another thread: waited for.
    let logs = || node.logs.lock().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !logs().contains("listening on 127.0.0.1:") {
        assert!(Instant::now() < deadline, "no listening line: {}", logs());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn s146_a_public_bind_needs_a_token() {
    let out = Command::new(bin())
        .args(["node", "serve", "--bind", "0.0.0.0:7421"])
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_NODE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:7421 without a bearer token"),
        "{stderr}"
    );

    // With a token a public address starts. Of at least 16 bytes, as the gateway's (decision D35:
    // a shorter one is refused off loopback, node_edge_and_roles.rs).
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let mut child = Command::new(bin())
        .args([
            "node",
            "serve",
            "--bind",
            "0.0.0.0:0",
            "--token",
            "node-token-0123456789",
            // Plain HTTP with a token off loopback is an explicit choice (tls.rs has TLS).
            "--allow-plaintext-tokens",
        ])
        .arg("--port-file")
        .arg(&port_file)
        .arg("--claude-root")
        .arg(dir.path())
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_NODE_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "node did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let health = ureq::get(&format!("http://127.0.0.1:{port}/health"))
        .call()
        .map(|r| r.status());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(health.ok(), Some(200));
}

#[test]
fn five_hundred_prompts_between_two_ticks_are_all_counted() {
    let first = line(&user_row("item-1", "first", "2025-12-31T23:00:00.000Z"));
    let mut u = Up::adopted_and_watched(&first);
    u.tick(1);
    let burst: Vec<Value> = (1..=500)
        .map(|i| {
            user_row(
                &format!("p-{i}"),
                &format!("typed prompt {i}"),
                "2026-01-01T00:01:00.000Z",
            )
        })
        .collect();
    u.append(&burst);
    u.tick(2);
    let hdm = u.of_kind("human_direct_message");
    assert_eq!(hdm.len(), 1, "{:?}", u.events());
    assert_eq!(hdm[0]["payload"], json!({"turns": 500}));
    assert_eq!(u.marker(), json!({"uuid": "p-500"}));

    // The v1 request is still answered: the newest 50, newest first.
    let (status, body) = u.node.get(
        &format!("/v1/node/claude/threads/{T}/items?limit=50"),
        Some(NODE_TOKEN),
    );
    assert_eq!(status, 200);
    assert_eq!(body["items"].as_array().unwrap().len(), 50);
    assert_eq!(body["items"][0]["uuid"], "p-500");
    // A page: after a uuid, oldest first, with `more`.
    let (status, body) = u.node.get(
        &format!("/v1/node/claude/threads/{T}/items?after=p-10&limit=3"),
        Some(NODE_TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let uuids: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, ["p-11", "p-12", "p-13"]);
    assert_eq!(
        (body["more"].clone(), body["found"].clone()),
        (json!(true), json!(true))
    );
    let (_, body) = u.node.get(
        &format!("/v1/node/claude/threads/{T}/items?after=p-499"),
        Some(NODE_TOKEN),
    );
    assert_eq!(body["items"][0]["uuid"], "p-500");
    assert_eq!(body["more"], false);
    let (_, body) = u.node.get(
        &format!("/v1/node/claude/threads/{T}/items?after=&limit=1"),
        Some(NODE_TOKEN),
    );
    assert_eq!(
        body["items"][0]["uuid"], "item-1",
        "empty after: from the start"
    );
    let (_, body) = u.node.get(
        &format!("/v1/node/claude/threads/{T}/items?after=gone&limit=1"),
        Some(NODE_TOKEN),
    );
    assert_eq!(body["found"], false);
}

#[test]
fn a_node_serves_nothing_outside_its_root() {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("p1");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join(format!("{T}.jsonl")), initial_transcript()).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.jsonl");
    std::fs::write(
        &secret,
        line(&user_row(
            "s-1",
            "secret prompt",
            "2026-01-01T00:00:01.000Z",
        )),
    )
    .unwrap();
    let linked = "0b7c2a4e-5d6f-4a8b-9c0d-00000000000f";
    std::os::unix::fs::symlink(&secret, project.join(format!("{linked}.jsonl"))).unwrap();
    let node = Node::start(root.path(), Some(NODE_TOKEN));

    let (status, body) = node.get("/v1/node/claude/threads", Some(NODE_TOKEN));
    assert_eq!(status, 200, "{body}");
    let ids: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["threadId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [T], "{body}");
    for path in [
        format!("/v1/node/claude/threads/{linked}/items"),
        format!("/v1/node/claude/threads/{linked}/items?after="),
    ] {
        let (status, body) = node.get(&path, Some(NODE_TOKEN));
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (404, Some("thread_not_found")),
            "{path}: {body}"
        );
        assert!(!body.to_string().contains("secret prompt"));
    }
}

// --- Codex threads on a paired node (decision D26) -----------------------------------------------

/// The vendored Codex 0.130.0 rollout (13 rows; one typed prompt on line 6, its response-item
/// twin on line 5, an assistant message on line 10).
const CODEX_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../aware-upstream/tests/fixtures/codex/scribe-rollout-transcript.jsonl"
);
const CODEX_THREAD: &str = "019e2b97-a47a-7e42-b8a3-c4364f6098d9";

/// `row:` + the first 32 hex digits of SHA-256 of a rollout line (without its `\n`).
fn row_id(line: &str) -> String {
    format!("row:{}", &sha256_hex(line.as_bytes())[..32])
}

#[test]
fn a_codex_thread_on_a_node_is_adopted_monitored_and_goes_missing() {
    let home = tempfile::tempdir().unwrap();
    let day = home.path().join("sessions/2026/05/15");
    std::fs::create_dir_all(&day).unwrap();
    let file = day.join(format!("rollout-2026-05-15T12-24-44-{CODEX_THREAD}.jsonl"));
    let fixture = std::fs::read_to_string(CODEX_FIXTURE).unwrap();
    std::fs::write(&file, &fixture).unwrap();
    let claude_root = tempfile::tempdir().unwrap();
    let node = Node::start_with(claude_root.path(), Some(home.path()), Some(NODE_TOKEN));
    // No local Codex on the gateway: the codex catalog exists through the node alone.
    let mut s = Server::with_config(&format!(
        "{}[codex]\nenabled = false\n",
        config(&node.url(), NODE_TOKEN)
    ));
    s.create(X);
    let key = format!(
        "agent:main:claude:{}",
        sha256_hex(format!("{HOST}\0{CODEX_THREAD}").as_bytes())
    );

    // The node's Codex catalog through the gateway.
    let r = s.get("/v1/catalog?catalogId=codex&hostId=node:laptop");
    assert_eq!(r.status, 200, "{}", r.body);
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", r.body);
    assert_eq!(items[0]["threadId"], CODEX_THREAD);
    assert_eq!(items[0]["catalogId"], "codex");
    assert_eq!(items[0]["hostId"], HOST);
    assert_eq!(
        items[0]["title"],
        "Analyze this project and make feedback and suggestion how to improve it or in ca"
    );
    assert_eq!(items[0]["cwd"], "/tmp/scribe-codex-fixture/Projects/scribe");

    // Adoption: the typed prompt and the assistant message are the history; the marker is the
    // newest item, the assistant message of line 10 (tool calls and events give no item).
    let r = s.post(
        "/v1/catalog/continue",
        json!({"catalogId":"codex","hostId":HOST,"threadId":CODEX_THREAD}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"sessionKey":key,"agentId":"main","created":true,"linked":true})
    );
    let lines: Vec<&str> = fixture.lines().collect();
    let upstream = s.get(&format!("/v1/sessions/{}", seg(&key))).body["upstream"].clone();
    assert_eq!(
        upstream,
        json!({"catalogId":"codex","hostId":HOST,"threadId":CODEX_THREAD,"linked":true,
            "marker":{"uuid": row_id(lines[9])}})
    );
    let t = turns(&s, &key);
    let got: Vec<(&str, &str)> = t
        .iter()
        .map(|t| (t["role"].as_str().unwrap(), t["text"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("user", "Analyze this project and make feedback and suggestion how to improve it or in case you find back report it"),
            ("assistant", "I\u{2019}m treating this as a code review of the repository: first I\u{2019}ll map the project structure, entry points, and test surface, then I\u{2019}ll read the core modules for correctness, risks, and improvement opportunities."),
        ]
    );
    let row = first_row(
        &s,
        "SELECT upstream_kind, upstream_ref_json FROM session_upstream_links",
    );
    let (kind, link_ref) = (
        row["upstream_kind"].as_str().unwrap().to_string(),
        row["upstream_ref_json"].as_str().unwrap().to_string(),
    );
    assert_eq!(kind, "codex-cli");
    assert_eq!(
        serde_json::from_str::<Value>(&link_ref).unwrap(),
        json!({"nodeId":"laptop","threadId":CODEX_THREAD})
    );
    let w = s.watch(X, &key);
    assert!(w.status == 200 || w.status == 201, "{}", w.body);
    let hdm = |s: &Server| -> Vec<Value> {
        s.status(X, &key, 0)["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "human_direct_message")
            .cloned()
            .collect()
    };
    s.set_clock(T0 + 15_000);
    assert!(hdm(&s).is_empty());

    // A typed prompt as Codex writes it: injected environment context, the response-item twin
    // and the prompt event. Counted exactly once.
    let typed = [
        r#"{"timestamp":"2026-01-01T00:00:20.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/tmp</cwd>\n</environment_context>"}]}}"#,
        r#"{"timestamp":"2026-01-01T00:00:20.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"also check the tests"}]}}"#,
        r#"{"timestamp":"2026-01-01T00:00:20.000Z","type":"event_msg","payload":{"type":"user_message","message":"also check the tests","images":[]}}"#,
        r#"{"timestamp":"2026-01-01T00:00:21.000Z","type":"event_msg","payload":{"type":"token_count","info":null}}"#,
    ];
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    for l in typed {
        writeln!(f, "{l}").unwrap();
    }
    drop(f);
    s.set_clock(T0 + 75_000);
    let ev = hdm(&s);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["summary"], "human message via codex");
    assert_eq!(ev[0]["occurredAt"], T0 + 20_000);
    assert!(ev[0].get("payload").is_none(), "one turn: {}", ev[0]);
    let marker = s.get(&format!("/v1/sessions/{}", seg(&key))).body["upstream"]["marker"].clone();
    assert_eq!(marker, json!({"uuid": row_id(typed[2])}));
    assert_eq!(s.notice_texts(X), vec![nt(&key, 1)]);
    s.set_clock(T0 + 135_000);
    assert_eq!(hdm(&s).len(), 1, "counted once");

    // 250 typed prompts (each with its twin) between two ticks: more than one page of items,
    // all counted in one event.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    let mut last = String::new();
    for i in 1..=250 {
        let twin = format!(
            r#"{{"timestamp":"2026-01-01T00:02:30.000Z","type":"response_item","payload":{{"type":"message","role":"user","content":[{{"type":"input_text","text":"burst {i}"}}]}}}}"#
        );
        last = format!(
            r#"{{"timestamp":"2026-01-01T00:02:30.000Z","type":"event_msg","payload":{{"type":"user_message","message":"burst {i}","images":[]}}}}"#
        );
        writeln!(f, "{twin}\n{last}").unwrap();
    }
    drop(f);
    s.set_clock(T0 + 195_000);
    let ev = hdm(&s);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[1]["payload"], json!({"turns": 250}));
    let marker = s.get(&format!("/v1/sessions/{}", seg(&key))).body["upstream"]["marker"].clone();
    assert_eq!(marker, json!({"uuid": row_id(&last)}));

    // The rollout is deleted: the node answers `thread_not_found`, three ticks make it missing.
    std::fs::remove_file(&file).unwrap();
    let (status, body) = node.get(
        &format!("/v1/node/codex/threads/{CODEX_THREAD}/items?after="),
        Some(NODE_TOKEN),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("thread_not_found")),
        "{body}"
    );
    let missing = |s: &Server| -> Vec<Value> {
        s.status(X, &key, 0)["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "upstream_missing")
            .cloned()
            .collect()
    };
    for n in 0..2 {
        s.set_clock(T0 + 255_000 + n * 60_000);
        assert!(missing(&s).is_empty());
    }
    s.set_clock(T0 + 375_000);
    let m = missing(&s);
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0]["payload"], json!({"channel": "codex"}));
}

#[test]
fn a_node_started_with_no_codex_has_no_codex_routes() {
    // `--no-codex`: the Codex routes do not exist (404 `not_found`), which the client never takes
    // for a deletion (only `thread_not_found` is).
    let root = tempfile::tempdir().unwrap();
    let node = Node::start(root.path(), Some(NODE_TOKEN));
    let (status, body) = node.get(
        &format!("/v1/node/codex/threads/{CODEX_THREAD}/items"),
        Some(NODE_TOKEN),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (status, _) = node.get("/v1/node/codex/threads", None);
    assert_eq!(status, 401, "the token is checked first");
}

/// A node answering 302 to another host (here a real node that needs no token, which would
/// answer) is `node_unavailable`: the gateway follows no redirect of a node (SSRF).
#[test]
fn a_node_redirect_is_not_followed() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("p1").join(format!("{T}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, initial_transcript()).unwrap();
    let elsewhere = Node::start(root.path(), None);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let to = elsewhere.url();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 302 Found\r\nLocation: {to}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    let s = Server::with_config(&config(&format!("http://127.0.0.1:{port}"), ""));
    let r = s.get("/v1/catalog?hostId=node:laptop");
    assert_eq!(
        (r.status, r.code()),
        (502, "node_unavailable"),
        "{}",
        r.body
    );
}
