//! Load run (decision D1): a bounded loopback run of mixed traffic against a real `aware serve`
//! (wall clock, default durability), then a privacy scan.
//!
//! Setup: a parent, 32 children spawned under it (spawn edges), a coordinator that watches every
//! child and 8 watcher sessions. Then 32 client threads, each until the deadline or
//! [`MAX_REQUESTS_PER_CLIENT`], mix human turns (each text carries a unique marker), drains,
//! `session_status` with `changesSince`, `sessions_list`, goal changes and registrations, plus a
//! few requests that must be refused (turn on a missing session, self-watch). Every answer must
//! be 2xx or the expected 4xx; no 5xx, no transport error. The run prints the request counts,
//! p50/p99 per kind and the server's RSS (`VmRSS`) at start and end, and asserts the end RSS is at
//! most 64 MB above the start.
//!
//! Privacy: afterwards, no marker (nor the marker prefix) may appear in any
//! `session_state_events` row, in the server log (run at debug level for aware's crates) or in
//! `/metrics`; the markers must be in the transcript (`turns`), which proves they were sent.
//!
//! `AWARE_LOAD_SECS` sets the duration (default 10 s, CI); the full run against the release
//! server is `cargo build --release -p aware && AWARE_LOAD_SECS=60
//! AWARE_LOAD_BIN=$PWD/target/release/aware cargo test -p aware --test it load:: -- --nocapture`
//! (an absolute path: the test runs in crates/aware).

use crate::common::{bin, rusqlite, seg, DEFAULT_CONFIG};
use aware_testkit::rng::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;
const CHILDREN: usize = 32;
const WATCHERS: usize = 8;
const MAX_REQUESTS_PER_CLIENT: usize = 50_000;
const RSS_BOUND_KB: u64 = 64 * 1024;
const MARK: &str = "zqxloadmark";
const PARENT: &str = "agent:main:main";
const COORD: &str = "agent:main:coord";

fn child(i: usize) -> String {
    format!("agent:main:subagent:load{i}")
}
fn watcher(i: usize) -> String {
    format!("agent:main:watcher{i}")
}

struct Proc {
    child: Child,
    base: String,
    logs: Arc<Mutex<String>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn start(dir: &std::path::Path) -> Proc {
    std::fs::write(dir.join("config.toml"), DEFAULT_CONFIG).unwrap();
    let port_file = dir.join("port");
    // `AWARE_LOAD_BIN` runs another build of the server (e.g. target/release/aware).
    let exe = std::env::var("AWARE_LOAD_BIN").unwrap_or_else(|_| bin().to_string());
    let mut child = Command::new(exe)
        .arg("serve")
        .arg("--data-dir")
        .arg(dir)
        .arg("--bind")
        .arg("127.0.0.1:0")
        .arg("--port-file")
        .arg(&port_file)
        .arg("--log-level")
        .arg("info,aware=debug,aware_gateway=debug,aware_engine=debug,aware_store=debug")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_DATA_DIR")
        .env_remove("AWARE_BIND")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start aware serve");
    let logs = Arc::new(Mutex::new(String::new()));
    let l2 = logs.clone();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = l2.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let p = Proc {
        child,
        base: format!("http://127.0.0.1:{port}"),
        logs,
    };
    let agent = ureq::agent();
    while req(&agent, &p.base, "GET", "/health", None, None).0 != 200 {
        assert!(Instant::now() < deadline, "server not healthy");
        std::thread::sleep(Duration::from_millis(20));
    }
    p
}

/// One request; answers (status, body). Transport errors are status 0.
fn req(
    agent: &ureq::Agent,
    base: &str,
    method: &str,
    path: &str,
    caller: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut r = agent.request(method, &format!("{base}{path}"));
    if let Some(c) = caller {
        r = r.set("X-Aware-Session", &seg(c));
    }
    let result = match body {
        Some(b) => r
            .set("Content-Type", "application/json")
            .send_string(&b.to_string()),
        None => r.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return (0, json!(e.to_string())),
    };
    let status = resp.status();
    let mut text = String::new();
    let _ = resp.into_reader().take(16 << 20).read_to_string(&mut text);
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[derive(Default)]
struct Stats {
    /// kind → latencies in µs.
    lat: BTreeMap<&'static str, Vec<u64>>,
    /// (kind, status) → count.
    statuses: BTreeMap<(&'static str, u16), u64>,
    unexpected: Vec<String>,
}

fn pct(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1000.0
}

fn client(base: String, id: usize, deadline: Instant) -> Stats {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let mut rng = Rng(0xA5A5_0000 + id as u64);
    let mut st = Stats::default();
    let mut heads: BTreeMap<usize, i64> = BTreeMap::new();
    for n in 0..MAX_REQUESTS_PER_CLIENT {
        if Instant::now() >= deadline {
            break;
        }
        let c = rng.below(CHILDREN as u64) as usize;
        let roll = rng.below(100);
        // (kind, method, path, caller, body, expected statuses)
        let (kind, method, path, caller, body, ok): (
            &'static str,
            &str,
            String,
            Option<String>,
            Option<Value>,
            &[u16],
        ) = match roll {
            0..=39 => (
                "turn",
                "POST",
                format!("/v1/sessions/{}/turns", seg(&child(c))),
                None,
                Some(
                    json!({"role": "user", "text": format!("{MARK}-{id}-{n} please look"), "channel": "telegram"}),
                ),
                &[201],
            ),
            40..=41 => (
                "turn_missing",
                "POST",
                format!(
                    "/v1/sessions/{}/turns",
                    seg(&format!("agent:main:missing{id}"))
                ),
                None,
                Some(json!({"role": "user", "text": format!("{MARK}-{id}-{n}-missing")})),
                &[404],
            ),
            42..=54 => {
                let who = if rng.below(2) == 0 {
                    PARENT.to_string()
                } else {
                    COORD.to_string()
                };
                (
                    "drain",
                    "POST",
                    format!("/v1/sessions/{}/drain", seg(&who)),
                    None,
                    Some(json!({})),
                    &[200],
                )
            }
            55..=69 => {
                let since = heads.get(&c).map_or(0, |h| rng.below(*h as u64 + 1) as i64);
                (
                    "session_status",
                    "POST",
                    "/v1/tools/session_status".to_string(),
                    Some(COORD.to_string()),
                    Some(json!({"sessionKey": child(c), "changesSince": since})),
                    &[200],
                )
            }
            70..=77 => (
                "sessions_list",
                "POST",
                "/v1/tools/sessions_list".to_string(),
                Some(COORD.to_string()),
                Some(json!({"limit": 50})),
                &[200],
            ),
            78..=87 => {
                let as_watcher = rng.below(2) == 0;
                (
                    "goal",
                    "PUT",
                    format!("/v1/sessions/{}/goal", seg(&child(c))),
                    as_watcher.then(|| COORD.to_string()),
                    Some(json!({"text": format!("goal {}", rng.below(3)), "status": "active"})),
                    &[200],
                )
            }
            88..=97 => {
                let w = watcher(rng.below(WATCHERS as u64) as usize);
                (
                    "register",
                    "POST",
                    format!("/v1/sessions/{}/watches", seg(&w)),
                    None,
                    Some(json!({"target": child(c)})),
                    &[200],
                )
            }
            _ => (
                "register_self",
                "POST",
                format!("/v1/sessions/{}/watches", seg(&child(c))),
                None,
                Some(json!({"target": child(c)})),
                &[400],
            ),
        };
        let t0 = Instant::now();
        let (status, resp) = req(
            &agent,
            &base,
            method,
            &path,
            caller.as_deref(),
            body.as_ref(),
        );
        let us = t0.elapsed().as_micros() as u64;
        st.lat.entry(kind).or_default().push(us);
        *st.statuses.entry((kind, status)).or_default() += 1;
        if !ok.contains(&status) {
            st.unexpected
                .push(format!("{kind} {method} {path}: {status} {resp}"));
        }
        // A self-watch is 400 `invalid_argument` "a session cannot watch itself" (docs/api.md
        // §2.19), nothing else.
        if kind == "register_self"
            && (resp["error"]["code"] != "invalid_argument"
                || resp["error"]["message"] != "a session cannot watch itself")
        {
            st.unexpected
                .push(format!("{kind} {method} {path}: {status} {resp}"));
        }
        if kind == "session_status" && status == 200 {
            if let Some(v) = resp["stateVersion"].as_i64() {
                heads.insert(c, v);
            }
        }
    }
    st
}

#[test]
fn load_mixed_traffic() {
    let secs: u64 = std::env::var("AWARE_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let pid = server.child.id();
    let agent = ureq::agent();
    let base = server.base.clone();
    let post = |path: &str, body: Value| {
        let (s, b) = req(&agent, &base, "POST", path, None, Some(&body));
        assert!(s == 200 || s == 201, "setup {path}: {s} {b}");
        b
    };
    post("/v1/sessions", json!({"key": PARENT}));
    post("/v1/sessions", json!({"key": COORD}));
    for i in 0..CHILDREN {
        post(
            "/v1/sessions",
            json!({"key": child(i), "parentSessionKey": PARENT}),
        );
        post(
            &format!("/v1/sessions/{}/watches", seg(COORD)),
            json!({"target": child(i)}),
        );
    }
    for i in 0..WATCHERS {
        post("/v1/sessions", json!({"key": watcher(i)}));
    }
    let rss_start = rss_kb(pid);

    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let handles: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let base = base.clone();
            std::thread::spawn(move || client(base, id, deadline))
        })
        .collect();
    let mut all = Stats::default();
    for h in handles {
        let st = h.join().expect("client thread");
        for (k, v) in st.lat {
            all.lat.entry(k).or_default().extend(v);
        }
        for (k, v) in st.statuses {
            *all.statuses.entry(k).or_default() += v;
        }
        all.unexpected.extend(st.unexpected);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let rss_end = rss_kb(pid);

    let total: u64 = all.statuses.values().sum();
    println!(
        "load: {total} requests in {elapsed:.1} s ({:.0}/s), {CLIENTS} clients, {CHILDREN} children",
        total as f64 / elapsed
    );
    println!(
        "{:<16} {:>8} {:>10} {:>10} {:>10}",
        "kind", "count", "p50 ms", "p99 ms", "max ms"
    );
    for (k, v) in all.lat.iter_mut() {
        v.sort_unstable();
        println!(
            "{k:<16} {:>8} {:>10.2} {:>10.2} {:>10.2}",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 1.0)
        );
    }
    for ((k, s), n) in &all.statuses {
        println!("status {k:<16} {s} x{n}");
    }
    println!(
        "rss: start {} kB, end {} kB (delta {} kB)",
        rss_start,
        rss_end,
        rss_end as i64 - rss_start as i64
    );
    let fives: u64 = all
        .statuses
        .iter()
        .filter(|((_, s), _)| *s >= 500 || *s == 0)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(fives, 0, "5xx or transport errors: {:?}", all.statuses);
    assert!(
        all.unexpected.is_empty(),
        "{} unexpected answers, first: {:?}",
        all.unexpected.len(),
        &all.unexpected[..all.unexpected.len().min(5)]
    );
    assert!(rss_start > 0 && rss_end > 0, "VmRSS not readable");
    assert!(
        rss_end <= rss_start + RSS_BOUND_KB,
        "memory grew from {rss_start} kB to {rss_end} kB"
    );

    // Privacy: no marker in /metrics, the log or any event row.
    let (s, metrics) = req(&agent, &base, "GET", "/metrics", None, None);
    assert_eq!(s, 200);
    let metrics = metrics.as_str().unwrap_or("").to_string();
    assert!(!metrics.is_empty(), "empty /metrics");
    assert!(!metrics.contains(MARK), "a turn text reached /metrics");
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let mut server = server;
    let stop = Instant::now() + Duration::from_secs(20);
    while server.child.try_wait().ok().flatten().is_none() && Instant::now() < stop {
        std::thread::sleep(Duration::from_millis(20));
    }
    let logs = server.logs.lock().unwrap().clone();
    assert!(!logs.is_empty(), "no server log captured");
    assert!(!logs.contains(MARK), "a turn text reached the server log");
    let db = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
    let mut stmt = db.prepare("SELECT * FROM session_state_events").unwrap();
    let cols = stmt.column_count();
    let mut rows = stmt.query([]).unwrap();
    let mut events = 0u64;
    while let Some(row) = rows.next().unwrap() {
        events += 1;
        for i in 0..cols {
            let v: rusqlite::types::Value = row.get(i).unwrap();
            let text = match v {
                rusqlite::types::Value::Text(t) => t,
                rusqlite::types::Value::Blob(b) => String::from_utf8_lossy(&b).into_owned(),
                _ => continue,
            };
            assert!(
                !text.contains(MARK),
                "a turn text reached session_state_events: {text}"
            );
        }
    }
    let marked: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM turns WHERE text LIKE ?1",
            [format!("{MARK}-%")],
            |r| r.get(0),
        )
        .unwrap();
    let turns_ok = all.statuses.get(&("turn", 201)).copied().unwrap_or(0);
    assert_eq!(
        marked as u64, turns_ok,
        "every answered turn is in the transcript with its marker"
    );
    println!(
        "privacy: {marked} marked turns sent; 0 markers in {events} event rows, {} log bytes, {} metrics bytes",
        logs.len(),
        metrics.len()
    );
}
