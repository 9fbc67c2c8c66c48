//! Acceptance scenarios of groups F to J (05-scenarios.md, S41–S83), black-box over HTTP against a
//! real `aware serve --test-clock`. Scenarios marked (engine) (S42, S83) are not covered here.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Small helpers local to this file.

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn ctx(s: &str) -> String {
    format!("session-state:{}", hex(s))
}

fn config_with(extra: &str) -> String {
    format!("{DEFAULT_CONFIG}{extra}")
}

/// The default configuration, but with `notify_on_create = true`.
fn notify_config() -> String {
    DEFAULT_CONFIG.replace("notify_on_create = false", "notify_on_create = true")
}

/// Texts of the notices of a drain / pending answer.
fn texts(answer: &Value) -> Vec<String> {
    answer["notices"]
        .as_array()
        .unwrap_or_else(|| panic!("no notices array in {answer}"))
        .iter()
        .map(|n| n["text"].as_str().unwrap().to_string())
        .collect()
}

fn event_seqs(status: &Value) -> Vec<i64> {
    status["stateChanges"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events in {status}"))
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect()
}

fn status_of(s: &Server, key: &str, since: i64) -> Value {
    s.status(W, key, since)
}

fn post_turn(s: &Server, key: &str, body: Value) -> Resp {
    s.post(&format!("/v1/sessions/{}/turns", seg(key)), body)
}

fn compaction(s: &Server, key: &str, op: &str) -> Resp {
    s.post(
        &format!("/v1/sessions/{}/compaction", seg(key)),
        json!({ "operationId": op }),
    )
}

fn system_event(s: &Server, key: &str, body: Value) -> Resp {
    s.post(&format!("/v1/sessions/{}/system-events", seg(key)), body)
}

fn ack(s: &Server, key: &str, body: Value) -> Resp {
    s.post(&format!("/v1/sessions/{}/ack", seg(key)), body)
}

/// A wake object without its per-process `id` (checked separately).
fn without_id(w: &Value) -> Value {
    let mut w = w.clone();
    if let Some(o) = w.as_object_mut() {
        o.remove("id");
    }
    w
}

/// Waits (up to 10 s) until at least `n` wakes arrived, then settles and returns them all.
fn await_wakes(wakes: &Wakes, n: usize) -> Vec<Value> {
    wait_until(Duration::from_secs(10), || {
        wakes.received.lock().unwrap().len() >= n
    });
    wakes.settle()
}

/// Polls `cond` every 50 ms until it holds or `timeout` passes; returns the final value of `cond`.
fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A raw SSE subscription that keeps every line (to check `event:` / `id:` framing) and reports
/// the HTTP status of the answer.
struct RawSse {
    status: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl RawSse {
    fn open(server: &Server, query: &str, caller: Option<&str>) -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = lines.clone();
        let url = format!("{}/v1/wakes{}", server.base, query);
        let caller = caller.map(seg);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(10))
                .timeout_read(Duration::from_secs(300))
                .build();
            let mut req = agent.get(&url);
            if let Some(c) = caller {
                req = req.set("X-Aware-Session", &c);
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(code, r)) => {
                    let mut text = String::new();
                    let _ = r.into_reader().take(1 << 20).read_to_string(&mut text);
                    l2.lock().unwrap().push(text);
                    let _ = tx.send(code);
                    return;
                }
                Err(_) => {
                    let _ = tx.send(0);
                    return;
                }
            };
            let _ = tx.send(resp.status());
            for line in BufReader::new(resp.into_reader())
                .lines()
                .map_while(Result::ok)
            {
                l2.lock().unwrap().push(line);
            }
        });
        // The server subscribes before it answers, so once the status is here nothing is missed;
        // an error body is stored before the status is reported.
        let status = rx.recv_timeout(Duration::from_secs(10)).unwrap_or(0);
        RawSse { status, lines }
    }

    /// An error answer's body.
    fn error_body(&self) -> Vec<String> {
        assert_ne!(self.status, 200, "not an error answer");
        self.lines.lock().unwrap().clone()
    }

    /// The stream's lines up to a marker wake sent through `fence` (a subscription with the
    /// same filter), with the marker events left out, so every wake caused earlier is in.
    fn lines(&self, fence: &Wakes) -> Vec<String> {
        let (_, run) = fence.fence();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let lines = self.lines.lock().unwrap().clone();
            if let Some(at) = lines.iter().position(|l| l.contains(&run)) {
                // Drop every marker event: its `event:` / `id:` / `data:` lines and blank line.
                let mut out: Vec<String> = Vec::new();
                let mut block: Vec<String> = Vec::new();
                for l in lines[..=at].iter().chain(std::iter::once(&String::new())) {
                    if l.is_empty() {
                        if !block.is_empty()
                            && !block.iter().any(|b| b.contains("aware-test-fence"))
                        {
                            out.append(&mut block);
                            out.push(String::new());
                        }
                        block.clear();
                    } else {
                        block.push(l.clone());
                    }
                }
                return out;
            }
            assert!(Instant::now() < deadline, "marker never arrived: {lines:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// One request seen by the webhook receiver.
#[derive(Clone, Debug)]
struct HookHit {
    at: Instant,
    path: String,
    authorization: Option<String>,
    content_type: Option<String>,
    body: String,
}

/// A tiny HTTP receiver on 127.0.0.1 answering scripted statuses (the last one repeats).
struct Receiver {
    port: u16,
    hits: Arc<Mutex<Vec<HookHit>>>,
}

impl Receiver {
    fn start(script: Vec<u16>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(Mutex::new(Vec::new()));
        let h2 = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let Some(hit) = read_request(&mut stream) else {
                    continue;
                };
                let n = {
                    let mut g = h2.lock().unwrap();
                    g.push(hit);
                    g.len()
                };
                let code = script[(n - 1).min(script.len() - 1)];
                let reply = format!(
                    "HTTP/1.1 {code} Scripted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.write_all(reply.as_bytes());
                let _ = stream.flush();
            }
        });
        Receiver { port, hits }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn hits(&self) -> Vec<HookHit> {
        self.hits.lock().unwrap().clone()
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<HookHit> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next()?.to_string();
    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
    let mut authorization = None;
    let mut content_type = None;
    let mut content_length = None;
    let mut chunked = false;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim().to_string();
            match k.trim().to_ascii_lowercase().as_str() {
                "authorization" => authorization = Some(v),
                "content-type" => content_type = Some(v),
                "content-length" => content_length = v.parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
                _ => {}
            }
        }
    }
    let mut rest = buf[header_end..].to_vec();
    let body = if let Some(len) = content_length {
        while rest.len() < len {
            let n = stream.read(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&chunk[..n]);
        }
        rest.truncate(len);
        rest
    } else if chunked {
        while !rest.windows(5).any(|w| w == b"0\r\n\r\n") {
            let n = stream.read(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&chunk[..n]);
        }
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(p) = rest[i..].windows(2).position(|w| w == b"\r\n") {
            let size_line = String::from_utf8_lossy(&rest[i..i + p]).to_string();
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("0").trim(), 16)
                .unwrap_or(0);
            i += p + 2;
            if size == 0 || i + size > rest.len() {
                break;
            }
            out.extend_from_slice(&rest[i..i + size]);
            i += size + 2;
        }
        out
    } else {
        Vec::new()
    };
    Some(HookHit {
        at: Instant::now(),
        path,
        authorization,
        content_type,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

/// Sends `count` compactions `op-<from>`.. on `key` from four threads (group commit keeps this
/// reasonably fast); every answer must be 201.
fn bulk_compactions(s: &Server, key: &str, from: usize, count: usize) {
    let threads = 4;
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                let mut i = t;
                while i < count {
                    let r = compaction(s, key, &format!("op-{}", from + i));
                    assert_eq!(r.status, 201, "compaction {}: {}", from + i, r.body);
                    i += threads;
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// F. Notices, context keys, drain and ack

#[test]
fn s041_exact_notice() {
    let s = Server::family();
    s.hdm(C);
    let p = s.pending(W);
    assert_eq!(
        p["notices"],
        json!([{"targetSessionKey": C, "targetAgentId": "main", "lastSeen": 1,
            "contextKey": "session-state:6167656e743a6d61696e3a7375626167656e743a6331",
            "openedAt": 1767225600000i64, "text": nt(C, 1)}])
    );
    assert_eq!(p["notices"][0]["text"].as_str().unwrap().len(), 147);
}

#[test]
fn s043_drain_acks() {
    let mut s = Server::family();
    assert_eq!(s.hdm_seq(C), 2);
    let d = s.drain(W);
    assert_eq!(texts(&d), vec![nt(C, 1)]);
    assert_eq!(d["pendingAfter"], 0);
    assert_eq!(
        d["prompt"],
        format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, 1))
    );
    assert_eq!(s.triple(W, C), (2, 2, 2));

    let d2 = s.drain(W);
    assert_eq!(d2["systemEvents"], json!([]));
    assert_eq!(d2["notices"], json!([]));
    assert_eq!(d2["pendingAfter"], 0);
    assert_eq!(d2["prompt"], "");
    assert_eq!(d2["sessionKey"], W);
    assert_eq!(d2["agentId"], "main");

    // Log-only events never reopen anything.
    let r = s.post(
        &format!("/v1/sessions/{}/runs", seg(C)),
        json!({"runId": "r1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/runs/r1/end", seg(C)),
        json!({"outcome": "ok"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["event"]["kind"], "run_completed");
    let r = compaction(&s, C, "op-1");
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["kind"], "compacted");

    let p = s.pending(W);
    assert_eq!(p["notices"], json!([]));
    assert_eq!(p["pendingAfter"], 0);
    assert_eq!(s.triple(W, C), (2, 2, 2));

    s.restart();
    let p = s.pending(W);
    assert_eq!(p["notices"], json!([]), "after restart: {p}");
    assert_eq!(p["prompt"], "");

    let r = s.post(
        &format!("/v1/sessions/{}/drain", seg("agent:main:unknown")),
        json!({}),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.code(), "session_not_found");
}

#[test]
fn s044_exactly_one_follow_up_for_interleaved_work() {
    let mut s = Server::family();
    assert_eq!(s.hdm_seq(C), 2);
    s.set_clock(T0 + 1000);
    assert_eq!(s.hdm_seq(C), 3);
    s.set_clock(T0 + 2000);

    let d = s.drain(W);
    assert_eq!(texts(&d), vec![nt(C, 1)]);
    assert_eq!(d["pendingAfter"], 1);
    assert_eq!(s.triple(W, C), (2, 3, 3));
    let p = s.pending(W);
    assert_eq!(texts(&p), vec![nt(C, 2)]);
    assert_eq!(p["notices"][0]["openedAt"], T0 + 2000);
    assert_eq!(p["notices"][0]["lastSeen"], 2);

    let d = s.drain(W);
    assert_eq!(texts(&d), vec![nt(C, 2)]);
    assert_eq!(d["pendingAfter"], 0);
    assert_eq!(s.triple(W, C), (3, 3, 3));

    let d = s.drain(W);
    assert_eq!(d["notices"], json!([]));
    assert_eq!(d["systemEvents"], json!([]));
    assert_eq!(d["pendingAfter"], 0);
    assert_eq!(d["prompt"], "");
}

#[test]
fn s045_twenty_changes_drain_in_two_steps() {
    let s = Server::family();
    for i in 0..20 {
        assert_eq!(s.hdm_seq(C), 2 + i);
    }
    let d = s.drain(W);
    assert_eq!(texts(&d), vec![nt(C, 1)]);
    assert_eq!(s.triple(W, C), (2, 21, 21));
    let d = s.drain(W);
    assert_eq!(texts(&d), vec![nt(C, 2)]);
    assert_eq!(s.triple(W, C), (21, 21, 21));
    let d = s.drain(W);
    assert_eq!(d["notices"], json!([]));
    assert_eq!(d["pendingAfter"], 0);
}

#[test]
fn s046_peek_does_not_ack() {
    let s = Server::family();
    s.hdm(C);
    let p1 = s.pending(W);
    let p2 = s.pending(W);
    assert_eq!(texts(&p1), vec![nt(C, 1)]);
    assert_eq!(p1["notices"], p2["notices"]);
    assert_eq!(p1["pendingAfter"], 1);
    assert_eq!(p2["pendingAfter"], 1);
    assert_eq!(s.triple(W, C), (1, 2, 2));
}

#[test]
fn s047_explicit_ack() {
    let s = Server::family();
    s.hdm(C);
    assert_eq!(s.triple(W, C), (1, 2, 2));
    let ck = s.pending(W)["notices"][0]["contextKey"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(ck, ctx(C));

    let r = ack(
        &s,
        W,
        json!({"notices": [{"contextKey": "session-state:ff"}, {"contextKey": ck, "lastSeen": 0}]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"acked": 0, "followUps": 0, "ignored": ["session-state:ff", ck], "removedSystemEvents": 0})
    );
    assert_eq!(s.triple(W, C), (1, 2, 2));

    let r = ack(
        &s,
        W,
        json!({"notices": [{"contextKey": ck, "lastSeen": 1}]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["acked"], 1, "{}", r.body);
    assert_eq!(r.body["followUps"], 0, "{}", r.body);
    assert_eq!(s.triple(W, C), (2, 2, 2));
    assert_eq!(s.pending(W)["notices"], json!([]));

    let r = ack(
        &s,
        W,
        json!({"notices": [{"contextKey": ck, "lastSeen": 1}]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["acked"], 0, "{}", r.body);
    assert_eq!(s.triple(W, C), (2, 2, 2));
}

#[test]
fn s048_duplicate_targets_ack_once() {
    let s = Server::family();
    assert_eq!(s.hdm_seq(C), 2);
    assert_eq!(s.hdm_seq(C), 3);
    let r = ack(
        &s,
        W,
        json!({"notices": [{"contextKey": ctx(C)}, {"contextKey": ctx(C)}]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["acked"], 1, "{}", r.body);
    assert_eq!(r.body["followUps"], 1, "{}", r.body);
    assert_eq!(r.body["ignored"], json!([]), "{}", r.body);
    assert_eq!(s.triple(W, C), (2, 3, 3));
}

#[test]
fn s049_notices_survive_a_crash() {
    let mut s = Server::family();
    s.hdm(C);
    s.kill9_restart();
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
}

#[test]
fn s050_no_cap_and_a_stable_order() {
    let s = Server::start();
    s.create(W);
    let keys: Vec<String> = (1..=25)
        .map(|k| format!("agent:main:subagent:c{k:02}"))
        .collect();
    for k in &keys {
        s.create_child(k, W);
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(s.hdm_seq(k), 26 + i as i64);
    }
    let d = s.drain(W);
    let expected: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| nt(k, i as i64 + 1))
        .collect();
    assert_eq!(texts(&d), expected);
    let order: Vec<&str> = d["notices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["targetSessionKey"].as_str().unwrap())
        .collect();
    assert_eq!(order, keys.iter().map(|k| k.as_str()).collect::<Vec<_>>());
    assert_eq!(d["pendingAfter"], 0);
    assert_eq!(s.drain(W)["notices"], json!([]));

    // Order is by notified sequence first, not by key.
    let s = Server::family();
    s.create_child(D, W);
    assert_eq!(s.hdm_seq(D), 3);
    assert_eq!(s.hdm_seq(C), 4);
    assert_eq!(s.notice_texts(W), vec![nt(D, 2), nt(C, 1)]);
}

#[test]
fn s051_concurrent_drains_split_the_work() {
    let s = Server::family();
    s.hdm(C);
    let (a, b) = std::thread::scope(|scope| {
        let h1 = scope.spawn(|| s.drain(W));
        let h2 = scope.spawn(|| s.drain(W));
        (h1.join().unwrap(), h2.join().unwrap())
    });
    let na = texts(&a);
    let nb = texts(&b);
    assert_eq!(na.len() + nb.len(), 1, "a = {a}, b = {b}");
    let all: Vec<String> = na.into_iter().chain(nb).collect();
    assert_eq!(all, vec![nt(C, 1)]);
    assert_eq!(s.triple(W, C), (2, 2, 2));
}

// ---------------------------------------------------------------------------------------------
// G. System-event FIFO

#[test]
fn s052_session_created_line() {
    let s = Server::with_config(&notify_config());
    // A session created while W does not exist gets no line; W's own creation adds none.
    s.create("agent:main:early");
    s.create(W);
    assert_eq!(s.pending(W)["systemEvents"], json!([]));

    let wakes = Wakes::subscribe(&s, "", None);
    s.create(X);
    let p = s.pending(W);
    let evs = p["systemEvents"].as_array().unwrap().clone();
    assert_eq!(evs.len(), 1, "{p}");
    assert!(evs[0]["id"].is_i64(), "{p}");
    let mut e = evs[0].clone();
    e.as_object_mut().unwrap().remove("id");
    assert_eq!(
        e,
        json!({"text": "New session \"agent:main:coord\" created via api.",
            "contextKey": "session-created:6167656e743a6d61696e3a636f6f7264",
            "enqueuedAt": T0})
    );
    assert_eq!(
        wakes.settle(),
        Vec::<Value>::new(),
        "no wake for a system event"
    );

    let d = s.drain(W);
    assert_eq!(d["systemEvents"], json!(evs));
    assert_eq!(s.pending(W)["systemEvents"], json!([]));

    // No line for a child of W, nor for a session created as W.
    s.create_child(C, W);
    let r = s.post_as(W, "/v1/sessions", json!({"key": "agent:main:side"}));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(s.pending(W)["systemEvents"], json!([]));
    assert_eq!(wakes.settle(), Vec::<Value>::new());
}

#[test]
fn s053_cap_of_20() {
    let s = Server::start();
    s.create(W);
    for i in 1..=25 {
        let r = system_event(&s, W, json!({"text": format!("e{i}")}));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let d = s.drain(W);
    let got: Vec<&str> = d["systemEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    let want: Vec<String> = (6..=25).map(|i| format!("e{i}")).collect();
    assert_eq!(got, want);
}

#[test]
fn s054_fifo_dedupe() {
    let s = Server::start();
    s.create(W);
    let bodies = [
        json!({"text": "ping", "contextKey": "cron:a"}),
        json!({"text": "ping", "contextKey": "cron:a"}),
        json!({"text": "ping", "contextKey": "CRON:A "}),
        json!({"text": "ping", "contextKey": "cron:b"}),
        json!({"text": "ping"}),
        json!({"text": "ping"}),
    ];
    let expected = [201, 200, 200, 201, 201, 200];
    for (b, want) in bodies.iter().zip(expected) {
        let r = system_event(&s, W, b.clone());
        assert_eq!(r.status, want, "{b}: {}", r.body);
        if want == 200 {
            assert_eq!(r.body["deduped"], true, "{b}: {}", r.body);
        } else {
            assert!(r.body["id"].is_i64(), "{b}: {}", r.body);
        }
    }
    let d = s.drain(W);
    let evs = d["systemEvents"].as_array().unwrap();
    assert_eq!(evs.len(), 3, "{d}");
    assert_eq!(evs[0]["contextKey"], "cron:a");
    assert_eq!(evs[1]["contextKey"], "cron:b");
    assert!(evs[2].get("contextKey").is_none(), "{d}");
}

#[test]
fn s055_fifo_is_durable_reset_clears_it_input_is_checked() {
    let mut s = Server::start();
    s.create(W);
    assert_eq!(system_event(&s, W, json!({"text": "x"})).status, 201);
    s.restart();
    let d = s.drain(W);
    let got: Vec<&str> = d["systemEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec!["x"]);

    assert_eq!(system_event(&s, W, json!({"text": "y"})).status, 201);
    let r = s.post(&format!("/v1/sessions/{}/reset", seg(W)), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let d = s.drain(W);
    assert_eq!(d["systemEvents"], json!([]));
    assert_eq!(d["prompt"], "");

    for body in [
        json!({"text": "z", "contextKey": "session-state:6162"}),
        json!({"text": "   "}),
        json!({"text": "a".repeat(4001)}),
    ] {
        let r = system_event(&s, W, body.clone());
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.code(), "invalid_argument", "{}", r.body);
    }
    // The limit itself is accepted.
    assert_eq!(
        system_event(&s, W, json!({"text": "a".repeat(4000)})).status,
        201
    );
}

#[test]
fn s056_prompt_rendering() {
    let mut s = Server::with_config(&notify_config());
    s.create(W);
    s.create_child(C, W);
    s.create(X);
    s.set_clock(T0 + 1000);
    s.hdm(C);
    let d = s.drain(W);
    assert_eq!(
        d["prompt"],
        format!(
            "System: [2026-01-01T00:00:00.000Z] New session \"agent:main:coord\" created via api.\nSystem: [2026-01-01T00:00:01.000Z] {}",
            nt(C, 1)
        )
    );

    let s = Server::start();
    s.create(W);
    assert_eq!(system_event(&s, W, json!({"text": "a\nb"})).status, 201);
    let d = s.drain(W);
    assert_eq!(
        d["prompt"],
        "System: [2026-01-01T00:00:00.000Z] a\nSystem: b"
    );
}

// ---------------------------------------------------------------------------------------------
// H. Wakes

#[test]
fn s057_wake_on_opening() {
    let s = Server::family();
    let raw = RawSse::open(&s, "?session=agent:main:main", None);
    assert_eq!(raw.status, 200);
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    s.hdm(C);
    let got = await_wakes(&wakes, 1);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0]["id"].is_i64(), "{}", got[0]);
    assert_eq!(
        without_id(&got[0]),
        json!({"sessionKey": W, "agentId": "main", "reason": "session-state",
            "targets": [{"sessionKey": C, "agentId": "main"}], "at": 1767225600000i64})
    );

    // SSE framing: `event: wake`, `id: <id>`, `data: <wake object>`.
    let lines = raw.lines(&wakes);
    let data_idx: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("data:"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(data_idx.len(), 1, "{lines:?}");
    let data: Value =
        serde_json::from_str(lines[data_idx[0]].trim_start_matches("data:").trim()).unwrap();
    assert_eq!(data["reason"], "session-state");
    let id = data["id"].as_i64().unwrap();
    let framing: Vec<&str> = lines[..data_idx[0]]
        .iter()
        .rev()
        .take_while(|l| !l.is_empty())
        .map(|l| l.as_str())
        .collect();
    assert!(
        framing.iter().any(|l| l.trim() == "event: wake"),
        "{lines:?}"
    );
    assert!(
        framing.iter().any(|l| l.trim() == format!("id: {id}")),
        "{lines:?}"
    );
}

#[test]
fn s058_subagent_watchers_are_not_woken() {
    let s = Server::start();
    s.create(W);
    s.create_child(N, W);
    s.create_child(E, N);
    let wakes = Wakes::subscribe(&s, "", None);
    assert_eq!(s.hdm_seq(E), 3);
    assert_eq!(s.notice_texts(N), vec![nt(E, 2)]);
    assert_eq!(wakes.settle(), Vec::<Value>::new());
}

#[test]
fn s059_coalescing_window() {
    let mut s = Server::family();
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    s.hdm(C);
    let got = await_wakes(&wakes, 1);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["at"], T0);

    s.set_clock(T0 + 1000);
    assert_eq!(texts(&s.drain(W)), vec![nt(C, 1)]);
    s.set_clock(T0 + 5000);
    s.hdm(C);
    assert_eq!(wakes.settle().len(), 1, "no wake at T0+5 s");
    s.set_clock(T0 + 19_000);
    assert_eq!(wakes.settle().len(), 1, "no wake at T0+19 s");
    s.set_clock(T0 + 20_000);
    let got = await_wakes(&wakes, 2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        without_id(&got[1]),
        json!({"sessionKey": W, "agentId": "main", "reason": "session-state",
            "targets": [{"sessionKey": C, "agentId": "main"}], "at": T0 + 20_000})
    );
    assert_eq!(s.metric("aware_wakes_coalesced_total "), Some(1.0));

    // If W drains before the merged delivery, nothing is sent.
    let mut s = Server::family();
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    s.hdm(C);
    assert_eq!(await_wakes(&wakes, 1).len(), 1);
    s.set_clock(T0 + 1000);
    s.drain(W);
    s.set_clock(T0 + 5000);
    s.hdm(C);
    s.set_clock(T0 + 10_000);
    assert_eq!(texts(&s.drain(W)), vec![nt(C, 2)]);
    s.set_clock(T0 + 20_000);
    s.set_clock(T0 + 21_000);
    let got = await_wakes(&wakes, 2);
    assert_eq!(got.len(), 1, "{got:?}");
}

#[test]
fn s060_quiet_periods_and_configuration() {
    let mut s = Server::family();
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    s.hdm(C);
    assert_eq!(await_wakes(&wakes, 1).len(), 1);
    s.set_clock(T0 + 1000);
    s.drain(W);
    s.set_clock(T0 + 25_000);
    s.hdm(C);
    let got = await_wakes(&wakes, 2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["at"], T0 + 25_000);
    assert_eq!(got[1]["reason"], "session-state");

    let mut s = Server::with_config(&config_with("[wakes]\ncoalesce_secs = 0\n"));
    s.create(W);
    s.create_child(C, W);
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    s.hdm(C);
    assert_eq!(await_wakes(&wakes, 1).len(), 1);
    s.set_clock(T0 + 1000);
    s.drain(W);
    s.set_clock(T0 + 5000);
    s.hdm(C);
    let got = await_wakes(&wakes, 2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["at"], T0 + 5000);
    assert_eq!(
        got[1]["targets"],
        json!([{"sessionKey": C, "agentId": "main"}])
    );
}

#[test]
fn s061_follow_ups_request_a_wake() {
    let mut s = Server::family();
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    s.hdm(C);
    assert_eq!(await_wakes(&wakes, 1).len(), 1);
    s.set_clock(T0 + 1000);
    s.hdm(C);
    s.set_clock(T0 + 2000);
    let d = s.drain(W);
    assert_eq!(d["pendingAfter"], 1);
    assert_eq!(wakes.settle().len(), 1, "no wake at T0+2 s");
    s.set_clock(T0 + 19_999);
    assert_eq!(wakes.settle().len(), 1, "no wake before T0+20 s");
    s.set_clock(T0 + 20_000);
    let got = await_wakes(&wakes, 2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        without_id(&got[1]),
        json!({"sessionKey": W, "agentId": "main", "reason": "session-state",
            "targets": [{"sessionKey": C, "agentId": "main"}], "at": T0 + 20_000})
    );
}

#[test]
fn s062_catch_up_on_connect_and_filters() {
    let s = Server::family();
    s.create(X);
    s.hdm(C);
    let wakes = Wakes::subscribe(&s, "?session=agent:main:main", None);
    let got = await_wakes(&wakes, 1);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["reason"], "session-state");
    assert_eq!(got[0]["sessionKey"], W);
    assert_eq!(got[0]["agentId"], "main");
    assert_eq!(
        got[0]["targets"],
        json!([{"sessionKey": C, "agentId": "main"}])
    );

    let ops = Wakes::subscribe(&s, "?agent=ops", None);
    assert_eq!(ops.settle(), Vec::<Value>::new());

    let forbidden = RawSse::open(&s, "?agent=ops", Some(X));
    assert_eq!(forbidden.status, 403, "{:?}", forbidden.error_body());
    let body: Value = serde_json::from_str(&forbidden.error_body()[0]).unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
}

/// Starts a family server whose main agent posts wakes to `recv`.
fn webhook_server(recv: &Receiver) -> Server {
    let s = Server::with_config(&config_with(&format!(
        "[agents.main.wake_webhook]\nurl = \"{}\"\nsecret = \"s3cret\"\n",
        recv.url()
    )));
    s.create(W);
    s.create_child(C, W);
    s
}

#[test]
fn s063_webhook_delivery() {
    // The three receivers run side by side; the "always 500" one takes ~15 s of real back-off.
    let flaky = Receiver::start(vec![500, 200]);
    let broken = Receiver::start(vec![500]);
    let refusing = Receiver::start(vec![400]);
    let s1 = webhook_server(&flaky);
    let s2 = webhook_server(&broken);
    let s3 = webhook_server(&refusing);
    s1.hdm(C);
    s2.hdm(C);
    s3.hdm(C);

    // Metrics and logs are summed over every gateway of a set: each process counts and logs what
    // it delivered, and a wake's webhook goes from the gateway that produced it, once.

    // 500 then 200: two identical POSTs with the secret, one webhook delivery.
    assert!(
        wait_until(Duration::from_secs(10), || flaky.hits().len() >= 2),
        "hits: {:?}",
        flaky.hits()
    );
    assert!(
        wait_until(Duration::from_secs(5), || s1
            .metric_sum("aware_wakes_delivered_total{channel=\"webhook\"}")
            == Some(1.0)),
        "metric: {:?}",
        s1.metric_sum("aware_wakes_delivered_total{channel=\"webhook\"}")
    );
    let hits = flaky.hits();
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(hits[0].body, hits[1].body);
    for h in &hits {
        assert_eq!(h.path, "/hook");
        assert_eq!(h.authorization.as_deref(), Some("Bearer s3cret"));
        assert!(
            h.content_type
                .as_deref()
                .unwrap_or("")
                .starts_with("application/json"),
            "{h:?}"
        );
    }
    let wake: Value = serde_json::from_str(&hits[0].body).unwrap();
    assert!(wake["id"].is_i64(), "{wake}");
    assert_eq!(
        without_id(&wake),
        json!({"sessionKey": W, "agentId": "main", "reason": "session-state",
            "targets": [{"sessionKey": C, "agentId": "main"}], "at": T0})
    );
    let gap = hits[1].at.duration_since(hits[0].at);
    assert!(gap >= Duration::from_millis(800), "retry after {gap:?}");

    // 400: one attempt only (a retry would come after 1 s).
    assert!(wait_until(Duration::from_secs(5), || !refusing
        .hits()
        .is_empty()));

    // Always 500: exactly five attempts (back-off 1 + 2 + 4 + 8 s), a warning, the notice stays.
    assert!(
        wait_until(Duration::from_secs(40), || broken.hits().len() >= 5),
        "hits: {}",
        broken.hits().len()
    );
    assert!(
        wait_until(Duration::from_secs(10), || s2
            .all_logs()
            .contains("wake_webhook_failed")),
        "logs: {}",
        s2.all_logs()
    );
    let hits = broken.hits();
    assert_eq!(hits.len(), 5);
    let span = hits[4].at.duration_since(hits[0].at);
    assert!(
        span >= Duration::from_millis(14_000) && span < Duration::from_secs(30),
        "attempts spread over {span:?}"
    );
    assert!(hits.iter().all(|h| h.body == hits[0].body));
    assert_eq!(s2.notice_texts(W), vec![nt(C, 1)]);
    assert_eq!(
        s2.metric_sum("aware_wakes_delivered_total{channel=\"webhook\"}"),
        Some(0.0)
    );
    assert!(
        s2.metric_sum("aware_wake_webhook_failures_total")
            .unwrap_or(0.0)
            >= 1.0
    );

    assert_eq!(refusing.hits().len(), 1, "a 400 is not retried");
    assert_eq!(s3.notice_texts(W), vec![nt(C, 1)]);
}

// ---------------------------------------------------------------------------------------------
// I. Reconciliation

#[test]
fn s064_state_version_always_state_changes_on_request() {
    let s = Server::family();
    let r = s.tool(W, "session_status", json!({"sessionKey": C}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["ok"], true);
    assert_eq!(r.body["stateVersion"], 1);
    assert!(r.body.get("stateChanges").is_none(), "{}", r.body);
    let text = r.body["statusText"].as_str().unwrap();
    assert!(text.contains("State version: 1"), "{text}");
    assert!(!text.contains("Session state changes:"), "{text}");
}

#[test]
fn s065_compact_events() {
    let s = Server::family();
    let r = post_turn(
        &s,
        C,
        json!({"role": "user", "text": "hello", "channel": "telegram",
            "provenance": {"kind": "human", "humanId": "alice"}}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 2);
    let r = s.post(
        &format!("/v1/sessions/{}/runs", seg(C)),
        json!({"runId": "r1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/runs/r1/end", seg(C)),
        json!({"outcome": "timeout"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 3);
    let r = compaction(&s, C, "op-1");
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 4);
    let r = s.post(
        "/v1/admin/events",
        json!({"sessionKey": C, "kind": "adopted", "actorType": "system",
            "payload": {"catalogId": "claude", "hostId": "gateway:local"}}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 5);

    let st = status_of(&s, C, 0);
    let t0 = 1767225600000i64;
    assert_eq!(
        st["stateChanges"]["events"],
        json!([
            {"sequence":1,"kind":"child_spawned","actorType":"system","occurredAt":t0,"summary":"child session spawned"},
            {"sequence":2,"kind":"human_direct_message","actorType":"human","actorId":"alice","occurredAt":t0,"summary":"human message via telegram"},
            {"sequence":3,"kind":"run_failed","actorType":"system","runId":"r1","occurredAt":t0,"summary":"child run timed out","payload":{"outcome":"timeout"}},
            {"sequence":4,"kind":"compacted","actorType":"system","occurredAt":t0,"summary":"session compacted"},
            {"sequence":5,"kind":"adopted","actorType":"system","occurredAt":t0,"summary":"adopted from unknown"}
        ])
    );
    assert_eq!(st["stateChanges"]["truncated"], false);
    assert_eq!(st["stateChanges"]["earliestAvailableSequence"], 1);
    assert_eq!(st["stateChanges"]["historyGap"], false);
    for e in st["stateChanges"]["events"].as_array().unwrap() {
        for k in ["sessionKey", "sessionId", "agentId", "catalogId", "hostId"] {
            assert!(e.get(k).is_none(), "{k} in {e}");
        }
    }
}

#[test]
fn s066_paging_and_the_head() {
    let s = Server::family();
    for i in 0..250 {
        assert_eq!(s.hdm_seq(C), 2 + i);
    }
    let st = status_of(&s, C, 1);
    assert_eq!(event_seqs(&st), (2..=201).collect::<Vec<i64>>());
    assert_eq!(st["stateChanges"]["truncated"], true);
    let st = status_of(&s, C, 201);
    assert_eq!(event_seqs(&st), (202..=251).collect::<Vec<i64>>());
    assert_eq!(st["stateChanges"]["truncated"], false);
    for since in [251, 1_000_000_000_000] {
        let st = status_of(&s, C, since);
        assert_eq!(event_seqs(&st), Vec::<i64>::new());
        assert_eq!(st["stateChanges"]["truncated"], false);
        assert_eq!(st["stateChanges"]["historyGap"], false);
        assert_eq!(st["stateVersion"], 251);
    }
}

#[test]
fn s067_the_limit_parameter() {
    let s = Server::family();
    for _ in 0..250 {
        s.hdm(C);
    }
    let r = s.tool(
        W,
        "session_status",
        json!({"sessionKey": C, "changesSince": 1, "limit": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(event_seqs(&r.body), vec![2, 3]);
    assert_eq!(r.body["stateChanges"]["truncated"], true);

    for bad in [json!(0), json!(201), json!(-1), json!(2.5), json!("2")] {
        let r = s.tool(
            W,
            "session_status",
            json!({"sessionKey": C, "changesSince": 1, "limit": bad}),
        );
        assert_eq!(r.status, 400, "limit {bad}: {}", r.body);
        assert_eq!(r.code(), "invalid_argument", "limit {bad}: {}", r.body);
        assert_eq!(
            r.message(),
            "limit must be an integer between 1 and 200",
            "limit {bad}"
        );
    }
    let r = s.tool(W, "session_status", json!({"sessionKey": C, "limit": 2}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.code(), "invalid_argument");
    assert_eq!(r.message(), "limit requires changesSince");
}

#[test]

fn s068_strict_changes_since() {
    let s = Server::family();
    for bad in [json!(-1), json!(1.5), json!("3"), json!(true), Value::Null] {
        let r = s.tool(
            W,
            "session_status",
            json!({"sessionKey": C, "changesSince": bad}),
        );
        assert_eq!(r.status, 400, "changesSince {bad}: {}", r.body);
        assert_eq!(r.code(), "invalid_argument", "changesSince {bad}");
        assert_eq!(
            r.message(),
            "changesSince must be a non-negative integer",
            "changesSince {bad}"
        );
    }
    let st = status_of(&s, C, 0);
    assert_eq!(event_seqs(&st), vec![1]);
}

#[test]
fn s069_reconciliation_never_moves_cursors() {
    let s = Server::family();
    s.hdm(C);
    assert_eq!(s.triple(W, C), (1, 2, 2));
    let before = s.pending(W);
    let st = s.status(W, C, 1);
    assert_eq!(event_seqs(&st), vec![2]);
    assert_eq!(s.triple(W, C), (1, 2, 2));
    let after = s.pending(W);
    assert_eq!(before, after);
    assert_eq!(texts(&after), vec![nt(C, 1)]);
}

#[test]
fn s070_earliest_available_sequence_and_sparse_numbers() {
    let mut s = Server::family();
    s.create_child(D, W);
    assert_eq!(s.hdm_seq(C), 3);
    assert_eq!(s.hdm_seq(D), 4);
    assert_eq!(s.hdm_seq(C), 5);

    let st = status_of(&s, C, 3);
    assert_eq!(event_seqs(&st), vec![5]);
    assert_eq!(st["stateChanges"]["earliestAvailableSequence"], 1);
    let st = status_of(&s, C, 1);
    assert_eq!(event_seqs(&st), vec![3, 5]);
    assert_eq!(st["stateChanges"]["historyGap"], false);

    let st = status_of(&s, W, 0);
    assert_eq!(st["stateVersion"], 0);
    assert_eq!(st["stateChanges"]["earliestAvailableSequence"], 0);
    assert_eq!(event_seqs(&st), Vec::<i64>::new());

    s.set_clock(T0 + 30 * DAY + 1);
    s.prune();
    let st = status_of(&s, C, 0);
    assert_eq!(event_seqs(&st), Vec::<i64>::new());
    assert_eq!(st["stateChanges"]["earliestAvailableSequence"], 6);
    assert_eq!(st["stateChanges"]["historyGap"], true);
    assert_eq!(st["stateVersion"], 5);
}

#[test]
fn s071_exact_history_gap_after_age_pruning() {
    let mut s = Server::family();
    assert_eq!(s.hdm_seq(C), 2);
    s.set_clock(T0 + 30 * DAY + 1);
    assert_eq!(s.hdm_seq(C), 3);
    s.prune();
    for since in [0, 1] {
        let st = status_of(&s, C, since);
        assert_eq!(event_seqs(&st), vec![3], "since {since}");
        assert_eq!(st["stateChanges"]["historyGap"], true, "since {since}");
    }
    let st = status_of(&s, C, 2);
    assert_eq!(event_seqs(&st), vec![3]);
    assert_eq!(st["stateChanges"]["historyGap"], false);
    assert_eq!(st["stateVersion"], 3);
    assert_eq!(st["stateChanges"]["earliestAvailableSequence"], 3);
}

#[test]
fn s072_the_status_text_mirrors_the_result() {
    let s = Server::family();
    s.hdm(C);
    let st = status_of(&s, C, 0);
    let text = st["statusText"].as_str().unwrap();
    let marker = "Session state changes:\n```json\n";
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("no marker in {text}"))
        + marker.len();
    let rest = &text[start..];
    let end = rest
        .find("\n```")
        .unwrap_or_else(|| panic!("unterminated block in {text}"));
    let block: Value = serde_json::from_str(&rest[..end]).unwrap();
    assert_eq!(
        block,
        json!({"stateVersion": st["stateVersion"], "stateChanges": st["stateChanges"]})
    );
    // 2-space pretty JSON.
    assert_eq!(
        &rest[..end],
        serde_json::to_string_pretty(
            &json!({"stateVersion": st["stateVersion"], "stateChanges": st["stateChanges"]})
        )
        .unwrap()
    );
    let session_id = st["sessionId"].as_str().unwrap();
    assert!(!session_id.is_empty());
    assert!(!text.contains(session_id), "{text}");
    assert!(!text.contains("\"agentId\""), "{text}");
    assert!(text.starts_with(&format!(
        "Session {C} (agent main, kind subagent)\nStatus: idle\nParent: {W}\nState version: 2\n\nSession state changes:\n"
    )), "{text}");
}

#[test]
fn s073_sessions_list_shows_versions_only_when_positive() {
    let s = Server::family();
    let r = s.tool(W, "sessions_list", json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["count"], 2, "{}", r.body);
    let rows = r.body["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let w = rows.iter().find(|x| x["key"] == W).unwrap();
    let c = rows.iter().find(|x| x["key"] == C).unwrap();
    assert!(w.get("stateVersion").is_none(), "{w}");
    assert_eq!(c["stateVersion"], 1, "{c}");
}

fn two_globals(config: &str) -> Server {
    let s = Server::with_config(config);
    s.create(W);
    s.create(X);
    s.create(O);
    let r = s.post("/v1/sessions", json!({"key": "global", "agentId": "main"}));
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.post("/v1/sessions", json!({"key": "global", "agentId": "ops"}));
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/watches", seg(X)),
        json!({"target": "global", "targetAgentId": "main"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/watches", seg(O)),
        json!({"target": "global", "targetAgentId": "ops"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let hello = json!({"role": "user", "text": "hello", "channel": "telegram"});
    let r = s.post("/v1/sessions/global/turns?agentId=main", hello.clone());
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 1, "{}", r.body);
    let r = s.post("/v1/sessions/global/turns?agentId=ops", hello);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["event"]["sequence"], 2, "{}", r.body);
    s
}

#[test]
fn s074_bare_references_resolve_per_agent() {
    let s = two_globals(DEFAULT_CONFIG);
    let r = s.tool(X, "session_status", json!({"sessionKey": "global"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["agentId"], "main");
    assert_eq!(r.body["sessionKey"], "global");
    assert_eq!(r.body["stateVersion"], 1);
    let r = s.tool(
        X,
        "session_status",
        json!({"sessionKey": "global", "agentId": "ops"}),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "forbidden");

    let s = two_globals(&config_with("[agents.main]\nvisible_agents = [\"ops\"]\n"));
    let r = s.tool(
        X,
        "session_status",
        json!({"sessionKey": "global", "agentId": "ops"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["agentId"], "ops");
    assert_eq!(r.body["stateVersion"], 2);
}

#[test]
fn s075_sessions_history() {
    let s = Server::family();
    s.hdm(C);
    for body in [
        json!({"role": "assistant", "text": "a".repeat(5000)}),
        json!({"role": "tool", "text": "out"}),
    ] {
        let r = post_turn(&s, C, body);
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let r = s.tool(W, "sessions_history", json!({"sessionKey": C}));
    assert_eq!(r.status, 200, "{}", r.body);
    let msgs = r.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "{}", r.body);
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[0]["text"], "hello");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["text"], format!("{}…[truncated]", "a".repeat(4000)));
    assert_eq!(r.body["totalMessages"], 3);
    assert_eq!(r.body["sessionKey"], C);
    assert_eq!(r.body["agentId"], "main");

    let r = s.tool(
        W,
        "sessions_history",
        json!({"sessionKey": C, "includeTools": true}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let msgs = r.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{}", r.body);
    assert_eq!(msgs[2]["role"], "tool");
    assert_eq!(msgs[2]["text"], "out");
    assert_eq!(msgs[2]["index"], 2);

    let r = s.tool(
        W,
        "sessions_history",
        json!({"sessionKey": C, "offset": 0, "limit": 1}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let msgs = r.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{}", r.body);
    assert_eq!(msgs[0]["index"], 0);
    assert_eq!(msgs[0]["text"], "hello");
    assert_eq!(r.body["hasMore"], true);
    assert_eq!(r.body["nextOffset"], 1);
}

// ---------------------------------------------------------------------------------------------
// J. Retention

#[test]
fn s076_heads_survive_pruning() {
    let mut s = Server::family();
    assert_eq!(s.hdm_seq(C), 2);
    s.set_clock(T0 + 30 * DAY + 1);
    let p = s.prune();
    assert_eq!(p["deletedByAge"], 2, "{p}");
    assert_eq!(p["deletedByCap"], 0, "{p}");
    let st = status_of(&s, C, 0);
    assert_eq!(event_seqs(&st), Vec::<i64>::new());
    assert_eq!(st["stateChanges"]["historyGap"], true);
    assert_eq!(st["stateChanges"]["earliestAvailableSequence"], 3);
    assert_eq!(st["stateVersion"], 2);
    assert_eq!(
        s.get(&format!("/v1/sessions/{}", seg(C))).body["stateVersion"],
        2
    );
    assert_eq!(s.hdm_seq(C), 3);
}

#[test]
fn s077_row_cap_with_exact_per_stream_watermarks() {
    let s = Server::with_config(
        &DEFAULT_CONFIG.replace("[retention]\n", "[retention]\nmax_rows = 100\n"),
    );
    s.create(W);
    s.create_child(C, W);
    s.create_child(D, W);
    for i in 0..74 {
        assert_eq!(s.hdm_seq(C), 3 + i);
    }
    for i in 0..74 {
        assert_eq!(s.hdm_seq(D), 77 + i);
    }
    let p = s.prune();
    assert_eq!(p["deletedByCap"], 50, "{p}");
    assert_eq!(p["deletedByAge"], 0, "{p}");

    assert_eq!(
        event_seqs(&status_of(&s, C, 0)),
        (51..=76).collect::<Vec<i64>>()
    );
    assert_eq!(
        event_seqs(&status_of(&s, D, 0)),
        (77..=150).collect::<Vec<i64>>()
    );
    let gap =
        |key: &str, since: i64| status_of(&s, key, since)["stateChanges"]["historyGap"].clone();
    assert_eq!(gap(C, 49), true);
    assert_eq!(gap(C, 50), false);
    assert_eq!(gap(D, 1), true);
    assert_eq!(gap(D, 2), false);
    assert_eq!(status_of(&s, C, 0)["stateVersion"], 76);
    assert_eq!(status_of(&s, D, 0)["stateVersion"], 150);
    assert_eq!(s.hdm_seq(C), 151);
}

#[test]
fn s078_pruning_in_bounded_batches() {
    let mut s = Server::family();
    bulk_compactions(&s, C, 1, 5500);
    assert_eq!(status_of(&s, C, 0)["stateVersion"], 5501);
    // Summed over the gateways: the one the prune request reached counts its batches.
    let before = s.metric_sum("aware_prune_batches_total ").unwrap_or(0.0);
    s.set_clock(T0 + 31 * DAY);
    let p = s.prune();
    assert_eq!(p["deletedByAge"], 5501, "{p}");
    assert_eq!(p["batches"], 6, "{p}");
    let after = s.metric_sum("aware_prune_batches_total ").unwrap_or(0.0);
    assert_eq!(after - before, 6.0);
}

#[test]
fn s079_writers_are_not_blocked_by_a_prune() {
    let mut s = Server::family();
    bulk_compactions(&s, C, 1, 20_000);
    s.set_clock(T0 + 31 * DAY);
    let before = s.metric("aware_prune_batches_total ").unwrap_or(0.0);
    let (prune_done, prune_body, hdm_done) = std::thread::scope(|scope| {
        let s = &s;
        let pruner = scope.spawn(move || {
            let r = s.post("/v1/admin/prune", json!({}));
            (Instant::now(), r)
        });
        // The writer arrives once the prune has committed its first batch (the metric counts
        // batches as they commit), so the prune is provably under way; an hdm answered before
        // the prune's answer then overlapped it.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let done = s.metric("aware_prune_batches_total ").unwrap_or(0.0) - before;
            if done >= 1.0 {
                assert!(done < 21.0, "the whole prune ran before the writer arrived");
                break;
            }
            assert!(Instant::now() < deadline, "the prune never started");
        }
        let seq = s.hdm_seq(C);
        let hdm_done = Instant::now();
        assert_eq!(seq, 20_002);
        let (prune_done, r) = pruner.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        (prune_done, r.body, hdm_done)
    });
    assert_eq!(prune_body["batches"], 21, "{prune_body}");
    assert_eq!(prune_body["deletedByAge"], 20_001, "{prune_body}");
    assert!(
        hdm_done < prune_done,
        "the hdm answer arrived {:?} after the prune answer",
        hdm_done.duration_since(prune_done)
    );
}

#[test]
fn s080_pruning_runs_at_start_up_and_on_the_timer_never_on_append() {
    let mut s = Server::with_config(&DEFAULT_CONFIG.replace(
        "[retention]\nprune_interval_secs = 31536000\n",
        "[retention]\nmax_rows = 100\nprune_interval_secs = 3600\n",
    ));
    s.create(W);
    s.create_child(C, W);
    for _ in 0..149 {
        s.hdm(C);
    }
    assert_eq!(event_seqs(&status_of(&s, C, 0)).len(), 150);
    s.set_clock(T0 + 3_600_000);
    assert_eq!(
        event_seqs(&status_of(&s, C, 0)),
        (51..=150).collect::<Vec<i64>>()
    );

    let mut s = Server::with_config(
        &DEFAULT_CONFIG.replace("[retention]\n", "[retention]\nmax_rows = 150\n"),
    );
    s.create(W);
    s.create_child(C, W);
    for _ in 0..149 {
        s.hdm(C);
    }
    assert_eq!(event_seqs(&status_of(&s, C, 0)).len(), 150);
    std::fs::write(
        s.data_dir().join("config.toml"),
        DEFAULT_CONFIG.replace("[retention]\n", "[retention]\nmax_rows = 100\n"),
    )
    .unwrap();
    s.restart();
    assert_eq!(
        event_seqs(&status_of(&s, C, 0)),
        (51..=150).collect::<Vec<i64>>()
    );
}

#[test]
fn s081_cursor_and_fifo_expiry() {
    let mut s = Server::family();
    s.hdm(C);
    assert_eq!(s.triple(W, C), (1, 2, 2));
    assert_eq!(system_event(&s, W, json!({"text": "remember"})).status, 201);
    s.create(X);
    s.set_clock(T0 + 10 * DAY);
    let r = s.watch(X, C);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.triple(X, C), (2, 2, 2));

    s.set_clock(T0 + 30 * DAY + 1);
    let p = s.prune();
    assert_eq!(p["expiredCursors"], 1, "{p}");
    assert_eq!(p["expiredSystemEvents"], 1, "{p}");
    assert!(s.cursor(W, C).is_none());
    assert_eq!(s.triple(X, C), (2, 2, 2));
    assert_eq!(s.pending(W)["systemEvents"], json!([]));

    assert_eq!(s.hdm_seq(C), 3);
    assert_eq!(s.triple(W, C), (0, 3, 3));
    assert_eq!(s.cursor(W, C).unwrap()["origin"], "parent");
    assert_eq!(s.notice_texts(W), vec![nt(C, 0)]);
    assert_eq!(s.notice_texts(X), vec![nt(C, 2)]);
}

#[test]
fn s082_muted_rows_do_not_expire() {
    let mut s = Server::family();
    let r = s.tool(W, "sessions_unwatch", json!({"sessionKey": C}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["unwatched"], true);
    s.set_clock(T0 + 31 * DAY);
    let p = s.prune();
    assert_eq!(p["expiredCursors"], 0, "{p}");
    s.hdm(C);
    let c = s.cursor(W, C).expect("muted row still exists");
    assert_eq!(c["muted"], true, "{c}");
    assert_eq!(s.triple(W, C), (1, 1, 1));
    assert_eq!(s.pending(W)["notices"], json!([]));
}
