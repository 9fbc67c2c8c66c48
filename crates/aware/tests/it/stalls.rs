//! Stuck or slow outside I/O must not stall the API, and answers stay bounded in memory
//! (decision D4): webhooks on an async client with a per-agent in-flight cap, reply waiters
//! woken by the writer and capped, `/health` that sees a stalled writer, paged transcripts and
//! drain/pending limits. Each test runs a real `aware serve` on loopback.

use crate::common::*;
use serde_json::{json, Value};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The documented default of `[agents.NAME.wake_webhook] max_in_flight`.
const DEFAULT_WEBHOOK_IN_FLIGHT: usize = 4;

/// A webhook receiver that accepts connections, reads what arrives and never answers.
struct Hanging {
    port: u16,
    accepted: Arc<Mutex<Vec<TcpStream>>>,
}

impl Hanging {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let a2 = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let mut reader = stream.try_clone().unwrap();
                a2.lock().unwrap().push(stream);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        Hanging { port, accepted }
    }

    fn connections(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }
}

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    cond()
}

/// `Threads:` of /proc/PID/status.
fn threads(s: &Server) -> usize {
    let pid = s.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Threads line")
}

fn key(i: usize) -> String {
    format!("agent:main:t{i}")
}

#[test]
fn a_hanging_webhook_receiver_holds_a_bounded_number_of_deliveries_and_threads() {
    let hook = Hanging::start();
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[agents.main.wake_webhook]\nurl = \"http://127.0.0.1:{}/hook\"\ntimeout_ms = 120000\nmax_attempts = 1\n",
        hook.port
    ));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    // More wakes than the thread bound below: one blocking thread per delivery cannot pass.
    let n = cores + 64;
    s.create(X);
    for i in 0..n {
        s.create(&key(i));
    }
    for i in 0..n {
        // One `message` wake for agent `main` per send, each to its own session.
        let r = s.tool(
            X,
            "sessions_send",
            json!({"sessionKey": key(i), "message": "go", "timeoutSeconds": 0}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // Every wake is either being delivered (at most the cap) or waiting in the agent's queue.
    let accounted = wait_until(Duration::from_secs(20), || {
        let in_flight = s.metric("aware_wake_webhook_in_flight ").unwrap_or(-1.0);
        let queued = s.metric("aware_wake_webhook_queued ").unwrap_or(-1.0);
        in_flight == DEFAULT_WEBHOOK_IN_FLIGHT as f64
            && queued == (n - DEFAULT_WEBHOOK_IN_FLIGHT) as f64
    });
    assert!(
        accounted,
        "in flight {:?}, queued {:?}, receiver connections {}, threads {}",
        s.metric("aware_wake_webhook_in_flight "),
        s.metric("aware_wake_webhook_queued "),
        hook.connections(),
        threads(&s)
    );
    // The API keeps answering while the receiver hangs.
    for _ in 0..20 {
        let r = s.get(&format!("/v1/sessions/{}", seg(X)));
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(hook.connections() <= DEFAULT_WEBHOOK_IN_FLIGHT);
    let t = threads(&s);
    assert!(
        t <= cores + 32,
        "{t} threads with {n} hanging deliveries on {cores} cores"
    );
}

#[test]
fn newer_wakes_for_one_session_replace_the_queued_one() {
    let hook = Hanging::start();
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[agents.main.wake_webhook]\nurl = \"http://127.0.0.1:{}/hook\"\ntimeout_ms = 120000\nmax_attempts = 1\nmax_in_flight = 1\n",
        hook.port
    ));
    s.create(X);
    s.create(&key(0));
    s.create(&key(1));
    // The first wake takes the only slot; the next ones for t1 wait, newest kept.
    for k in [key(0), key(1), key(1), key(1)] {
        let r = s.tool(
            X,
            "sessions_send",
            json!({"sessionKey": k, "message": "go", "timeoutSeconds": 0}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(wait_until(Duration::from_secs(10), || {
        s.metric("aware_wake_webhook_coalesced_total ") == Some(2.0)
    }));
    assert_eq!(s.metric("aware_wake_webhook_in_flight "), Some(1.0));
    assert_eq!(s.metric("aware_wake_webhook_queued "), Some(1.0));
    // The counter moves before the log line reaches the test's log reader.
    assert!(
        wait_until(Duration::from_secs(10), || s
            .logs()
            .contains("wake_webhook_coalesced")),
        "{}",
        s.logs()
    );
}

/// The run id of the `sessions_send` message that reached `target` (its inter-session turn).
fn sent_run_id(s: &Server, target: &str) -> Option<String> {
    let r = s.get(&format!("/v1/sessions/{}/turns", seg(target)));
    r.body["turns"]
        .as_array()?
        .iter()
        .rev()
        .find(|t| t["role"] == "user")
        .and_then(|t| t["runId"].as_str().map(str::to_string))
}

#[test]
fn reply_waiters_get_the_reply_and_those_over_the_cap_are_refused() {
    let s = Arc::new(Server::with_config(&format!(
        "{DEFAULT_CONFIG}[limits]\nmax_reply_waiters = 2\n"
    )));
    s.create(X);
    let targets = ["agent:main:a", "agent:main:b", "agent:main:c"];
    for t in targets {
        s.create(t);
    }
    let waiters: Vec<_> = targets[..2]
        .iter()
        .map(|t| {
            let (s, t) = (s.clone(), t.to_string());
            std::thread::spawn(move || {
                s.tool(
                    X,
                    "sessions_send",
                    json!({"sessionKey": t, "message": "ping", "timeoutSeconds": 120}),
                )
            })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(20), || s.metric("aware_reply_waiters ")
            == Some(2.0)),
        "waiters: {:?}",
        s.metric("aware_reply_waiters ")
    );
    // A third waiter is over the cap: refused before anything is sent.
    let r = s.tool(
        X,
        "sessions_send",
        json!({"sessionKey": targets[2], "message": "ping", "timeoutSeconds": 120}),
    );
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.code(), "too_many_waiters");
    assert!(r.message().contains("max_reply_waiters"), "{}", r.message());
    assert_eq!(
        sent_run_id(&s, targets[2]),
        None,
        "the refused send went out"
    );
    // A send that does not wait is not a waiter.
    let r = s.tool(
        X,
        "sessions_send",
        json!({"sessionKey": targets[2], "message": "fire and forget", "timeoutSeconds": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);

    // Replies wake their waiters: one by an assistant turn, one by the run ending in error.
    let run_a = sent_run_id(&s, targets[0]).expect("message reached a");
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(targets[0])),
        json!({"role": "assistant", "text": "pong from a", "runId": run_a}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let run_b = sent_run_id(&s, targets[1]).expect("message reached b");
    let r = s.post(
        &format!("/v1/sessions/{}/runs", seg(targets[1])),
        json!({"runId": run_b}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/runs/{run_b}/end", seg(targets[1])),
        json!({"outcome": "error"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let answers: Vec<Value> = waiters
        .into_iter()
        .map(|w| {
            let r = w.join().unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            r.body
        })
        .collect();
    assert_eq!(answers[0]["status"], "ok", "{}", answers[0]);
    assert_eq!(answers[0]["reply"], "pong from a");
    assert_eq!(answers[0]["runId"], run_a.as_str());
    assert_eq!(answers[1]["status"], "error", "{}", answers[1]);
    assert_eq!(answers[1]["error"], "target run ended with outcome error");
    assert_eq!(s.metric("aware_reply_waiters "), Some(0.0));
}

#[test]
fn health_reports_a_stalled_writer_and_recovers() {
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[limits]\nhealth_deadline_ms = 200\n"
    ));
    s.create(W);
    let r = s.post("/v1/admin/faults", json!({"stallWriter": true}));
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.get("/health");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["status"], "stalled", "{}", r.body);
    assert_eq!(r.body["stalled"], json!(["writer"]), "{}", r.body);
    // A second probe while the first is still stuck answers at once with the same verdict.
    let r = s.get("/health");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["stalled"], json!(["writer"]), "{}", r.body);
    // Reads still answer.
    assert_eq!(s.get(&format!("/v1/sessions/{}", seg(W))).status, 200);
    let r = s.post("/v1/admin/faults", json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(wait_until(Duration::from_secs(10), || s
        .get("/health")
        .status
        == 200));
    assert_eq!(s.get("/health").body["status"], "ok");
}

#[test]
fn history_and_turns_page_in_sql_and_cap_the_answer() {
    let s = Server::start();
    s.create(W);
    let big = "x".repeat(256 * 1024 - 16);
    for i in 0..20 {
        let r = s.post(
            &format!("/v1/sessions/{}/turns", seg(W)),
            json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "text": format!("{i}:{big}")}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
    }
    for i in 20..25 {
        let r = s.post(
            &format!("/v1/sessions/{}/turns", seg(W)),
            json!({"role": if i == 24 { "tool" } else { "user" }, "text": format!("small {i}")}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // The newest visible message (the tool turn is left out).
    let r = s.tool(W, "sessions_history", json!({"sessionKey": W, "limit": 1}));
    assert_eq!(r.status, 200, "{}", r.body);
    let m = r.body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 1, "{}", r.body);
    assert_eq!(m[0]["index"], 23);
    assert_eq!(m[0]["text"], "small 23");
    assert_eq!(r.body["totalMessages"], 25);
    assert_eq!(r.body["hasMore"], false);
    let r = s.tool(
        W,
        "sessions_history",
        json!({"sessionKey": W, "limit": 1, "includeTools": true}),
    );
    assert_eq!(r.body["messages"][0]["text"], "small 24", "{}", r.body);
    // From an offset: one message, and where the next page starts.
    let r = s.tool(
        W,
        "sessions_history",
        json!({"sessionKey": W, "limit": 2, "offset": 21}),
    );
    let m = r.body["messages"].as_array().unwrap();
    assert_eq!(
        m.iter().map(|x| x["text"].clone()).collect::<Vec<_>>(),
        vec![json!("small 21"), json!("small 22")]
    );
    assert_eq!(r.body["hasMore"], true);
    assert_eq!(r.body["nextOffset"], 23);

    let r = s.get(&format!("/v1/sessions/{}/turns?limit=1", seg(W)));
    let t = r.body["turns"].as_array().unwrap();
    assert_eq!(t.len(), 1);
    assert!(t[0]["text"].as_str().unwrap().starts_with("0:"));
    assert_eq!(r.body["hasMore"], true);
    assert_eq!(r.body["truncated"], false);
    // 20 turns of 256 KiB are over the 4 MiB answer cap: the page stops early and says so.
    let r = s.get(&format!("/v1/sessions/{}/turns?limit=500", seg(W)));
    let t = r.body["turns"].as_array().unwrap();
    assert!(t.len() < 20 && !t.is_empty(), "{} turns", t.len());
    assert_eq!(r.body["truncated"], true);
    assert_eq!(r.body["hasMore"], true);
    let last = t.last().unwrap()["index"].as_i64().unwrap();
    let r = s.get(&format!(
        "/v1/sessions/{}/turns?limit=500&after={last}",
        seg(W)
    ));
    assert_eq!(
        r.body["turns"][0]["index"],
        last + 1,
        "the next page follows on"
    );
}

#[test]
fn drain_and_pending_with_a_limit_take_the_first_items_and_leave_the_rest() {
    let s = Server::start();
    s.create(W);
    s.create_child(C, W);
    s.create_child(D, W);
    for i in 0..3 {
        let r = s.post(
            &format!("/v1/sessions/{}/system-events", seg(W)),
            json!({"text": format!("line {i}")}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let c_seq = s.hdm_seq(C);
    let d_seq = s.hdm_seq(D);
    assert!(c_seq < d_seq);
    let d_before = s.triple(W, D);
    assert_eq!(d_before.1, d_seq, "D's notice is pending");

    let peek = s
        .get(&format!("/v1/sessions/{}/pending?limit=4", seg(W)))
        .body;
    assert_eq!(peek["systemEvents"].as_array().unwrap().len(), 3, "{peek}");
    assert_eq!(peek["notices"].as_array().unwrap().len(), 1, "{peek}");
    assert_eq!(peek["hasMore"], true);

    let first = s
        .post(&format!("/v1/sessions/{}/drain?limit=4", seg(W)), json!({}))
        .body;
    let texts: Vec<_> = first["systemEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["line 0", "line 1", "line 2"], "{first}");
    let notices = first["notices"].as_array().unwrap();
    assert_eq!(notices.len(), 1, "{first}");
    assert_eq!(notices[0]["targetSessionKey"], C, "oldest notified first");
    assert_eq!(first["hasMore"], true);
    assert_eq!(first["prompt"].as_str().unwrap().lines().count(), 4);
    // Only what was returned is acknowledged: D's notice stays pending as it was.
    assert_eq!(s.cursor(W, C).unwrap()["pending"], false);
    assert_eq!(s.triple(W, D), d_before);

    let second = s
        .post(
            &format!("/v1/sessions/{}/drain", seg(W)),
            json!({"limit": 10}),
        )
        .body;
    assert_eq!(second["systemEvents"], json!([]), "{second}");
    assert_eq!(second["notices"][0]["targetSessionKey"], D, "{second}");
    assert_eq!(second["notices"].as_array().unwrap().len(), 1);
    assert!(second.get("hasMore").is_none_or(|v| v == false));
    assert_eq!(s.drain(W)["prompt"], "");

    for bad in ["0", "10001", "x"] {
        let r = s.get(&format!("/v1/sessions/{}/pending?limit={bad}", seg(W)));
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert!(r.message().contains("limit"), "{}", r.message());
    }
}

/// One server-sent event: its `event:` name and its `data:` joined.
fn next_event(r: &mut impl std::io::BufRead) -> Option<(String, String)> {
    let (mut name, mut data) = (String::new(), String::new());
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            if !name.is_empty() || !data.is_empty() {
                return Some((name, data));
            }
        } else if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
}

/// A wake stream whose client stops reading falls behind; once more than `[wakes]
/// stream_buffer` wakes went by, the oldest are gone, and the stream says so with
/// `event: lagged` and how many it missed, then goes on with the wakes it still has. Every wake
/// is either sent or counted as missed. (A wake lists the watcher's pending targets: here at
/// least 100 long keys, about 50 KB, so the sockets' buffers fill after about a hundred.)
#[test]
fn a_wake_stream_that_falls_behind_is_told_how_many_wakes_it_missed() {
    const BUFFER: usize = 8;
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[wakes]\ncoalesce_secs = 0\nstream_buffer = {BUFFER}\n"
    ));
    let watcher = "agent:main:main";
    s.create(watcher);
    let long = "x".repeat(400);
    let targets: Vec<String> = (0..100)
        .map(|i| format!("agent:main:t{i}-{long}"))
        .collect();
    for t in &targets {
        s.create(t);
        assert_eq!(s.watch(watcher, t).status, 200);
        s.hdm(t);
    }
    // The last target is the fence: it has nothing pending until the end, so the first wake
    // that lists it is the last wake of the test.
    let fence = "agent:main:fence";
    s.create(fence);
    assert_eq!(s.watch(watcher, fence).status, 200);

    let mut stream = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    use std::io::Write;
    write!(
        stream,
        "GET /v1/wakes?session={} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        seg(watcher)
    )
    .unwrap();
    let mut reader = std::io::BufReader::new(stream);
    // The catch-up wake shows the stream subscribed; from here on the client reads nothing.
    let (name, _) = next_event(&mut reader).expect("the catch-up wake");
    assert_eq!(name, "wake");

    let delivered = || {
        s.metric("aware_wakes_delivered_total{channel=\"sse\"}")
            .unwrap_or(0.0) as usize
    };
    let mut posted = 0;
    // A turn on a new target opens one notice, which wakes the watcher once (no coalescing);
    // the wake is in the buffer when the turn is answered. Once the stream has taken more than
    // the buffer holds (plus a margin for a stream task not scheduled yet) fewer than the wakes
    // posted, the oldest are gone.
    while posted <= delivered() + BUFFER + 50 {
        assert!(posted < 2000, "the stream never fell behind");
        for _ in 0..10 {
            let t = format!("agent:main:n{posted}-{long}");
            s.create(&t);
            assert_eq!(s.watch(watcher, &t).status, 200);
            s.hdm(&t);
            posted += 1;
        }
    }
    s.hdm(fence);
    posted += 1;

    // Wakes the stream took before it fell behind sit in the sockets' buffers: read first.
    let (mut before, mut after, mut missed, mut lagged_events) = (0u64, 0u64, 0u64, 0);
    loop {
        let (name, data) = next_event(&mut reader).expect("the stream ended before the fence");
        let v: Value = serde_json::from_str(&data).unwrap();
        match name.as_str() {
            "lagged" => {
                assert!(v["missed"].as_u64().unwrap() >= 1, "{v}");
                assert!(v["reason"].as_str().unwrap().contains("reconnect"), "{v}");
                missed += v["missed"].as_u64().unwrap();
                lagged_events += 1;
            }
            "wake" => {
                if lagged_events == 0 {
                    before += 1;
                } else {
                    after += 1;
                }
                let listed = v["targets"].as_array().unwrap();
                if listed.iter().any(|t| t["sessionKey"] == fence) {
                    break;
                }
            }
            other => panic!("unexpected event {other:?}: {data}"),
        }
    }
    eprintln!("{posted} wakes: {before} sent before the lag, {missed} missed, {after} after");
    assert_eq!(lagged_events, 1, "one lag, told once");
    assert_eq!(
        before + missed + after,
        posted as u64,
        "every wake sent or counted as missed ({before} before the lag, {missed} missed, {after} after)"
    );
    // After the lag come the wakes the buffer still held, the fence's the last of them.
    assert!(
        (1..=BUFFER as u64).contains(&after),
        "{after} wakes after the lag"
    );
}
