//! The metric families and stable log events of 03 §12 that an operator alerts on (decision D32):
//! each one driven against a real `aware serve --test-clock` and asserted by its exact change.
//! Counters are read as deltas between two scrapes; log lines are read as JSON
//! (`--log-format json`) and counted up to a marker line, so "exactly one" is judged after
//! every earlier line has arrived, never after a pause.

use crate::common::*;
use crate::metrics::Scrape;
use aware_testkit::server::try_request;
use aware_testkit::transcript::{THREAD_T as T, *};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A server whose log lines are JSON objects.
fn json_server(config: &str) -> Server {
    Server::with_args(config, &["--log-format", "json"])
}

/// The session the log marker events are recorded on (an agent of its own, so nothing the
/// tests watch sees it).
const FENCE: &str = "agent:fence:log";

/// Every log line up to a fresh marker line, parsed. The marker is an event whose payload has a
/// field no kind allows: the append logs `payload_field_dropped` naming that field. The log
/// keeps its order, so once the marker's line is in, every line logged before the request is.
fn logs_fenced(s: &Server) -> Vec<Value> {
    static N: AtomicU64 = AtomicU64::new(0);
    let tag = format!("fence_{}", N.fetch_add(1, Ordering::Relaxed));
    let r = s.post("/v1/sessions", json!({"key": FENCE}));
    assert!([200, 201].contains(&r.status), "{}", r.body);
    let r = s.post(
        "/v1/admin/events",
        json!({"sessionKey": FENCE, "kind": "human_direct_message", "actorType": "human",
               "payload": {tag.clone(): 1}}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lines: Vec<Value> = s
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if let Some(i) = lines.iter().position(|l| {
            l["fields"]["event"] == "payload_field_dropped" && l["fields"]["field"] == tag.as_str()
        }) {
            return lines[..i].to_vec();
        }
        assert!(
            Instant::now() < deadline,
            "no marker line {tag} in:\n{}",
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `fields` of every line (up to a marker) whose `event` is `event`.
fn logged(s: &Server, event: &str) -> Vec<Value> {
    logs_fenced(s)
        .into_iter()
        .filter(|l| l["fields"]["event"] == event)
        .map(|l| {
            assert_eq!(l["level"], "WARN", "{event} is a warning: {l}");
            l["fields"].clone()
        })
        .collect()
}

/// `after − before` of one series.
fn delta(before: &Scrape, after: &Scrape, series: &str) -> f64 {
    after.must(series) - before.must(series)
}

fn faults(s: &Server, body: Value) {
    let r = s.post("/v1/admin/faults", body);
    assert_eq!(r.status, 200, "faults: {}", r.body);
}

fn admin_event(s: &Server, key: &str, dedupe: &str) -> Resp {
    s.post(
        "/v1/admin/events",
        json!({"sessionKey": key, "kind": "human_direct_message", "actorType": "human",
               "dedupeKey": dedupe}),
    )
}

#[test]
fn commit_seconds_counts_every_commit() {
    let s = Server::start();
    let before = Scrape::take(&s);
    assert_eq!(before.kind("aware_commit_seconds"), Some("histogram"));
    // Three writes one after the other: one op, one commit each.
    for key in [W, X, C] {
        s.create(key);
    }
    let after = Scrape::take(&s);
    assert_eq!(delta(&before, &after, "aware_commits_total"), 3.0);
    assert_eq!(delta(&before, &after, "aware_commit_seconds_count"), 3.0);
    assert_eq!(delta(&before, &after, "aware_group_commit_ops_count"), 3.0);
    let count = after.must("aware_commit_seconds_count");
    assert_eq!(count, after.must("aware_commits_total"));
    assert_eq!(
        after.must("aware_commit_seconds_bucket{le=\"+Inf\"}"),
        count
    );
    // Cumulative buckets: never falling, at most the count.
    let buckets: Vec<f64> = after
        .0
        .lines()
        .filter(|l| l.starts_with("aware_commit_seconds_bucket{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(buckets.len(), 9, "{buckets:?}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    // The sum grows by the commits' time: an fsync'd SQLite commit takes more than 0 µs.
    assert!(delta(&before, &after, "aware_commit_seconds_sum") > 0.0);
}

#[test]
fn notices_opened_acked_and_followed_up() {
    let s = Server::family();
    let m0 = Scrape::take(&s);
    s.hdm(C);
    let m1 = Scrape::take(&s);
    assert_eq!(delta(&m0, &m1, "aware_notices_opened_total"), 1.0);
    assert_eq!(
        delta(
            &m0,
            &m1,
            "aware_wakes_requested_total{reason=\"session-state\"}"
        ),
        1.0
    );
    // A second change while the notice is open moves `material` only: no new notice, no wake.
    s.hdm(C);
    let m2 = Scrape::take(&s);
    assert_eq!(delta(&m1, &m2, "aware_notices_opened_total"), 0.0);
    assert_eq!(
        delta(
            &m1,
            &m2,
            "aware_wakes_requested_total{reason=\"session-state\"}"
        ),
        0.0
    );
    assert_eq!(m2.must("aware_pending_notices"), 1.0);
    // The drain acks the notice at sequence 1 (not 2), so a follow-up opens at once and asks for
    // a wake of its own (02 §9).
    let d = s.drain(W);
    assert_eq!(d["notices"].as_array().map(Vec::len), Some(1), "{d}");
    let m3 = Scrape::take(&s);
    assert_eq!(delta(&m2, &m3, "aware_notices_acked_total"), 1.0);
    assert_eq!(delta(&m2, &m3, "aware_notice_followups_total"), 1.0);
    assert_eq!(delta(&m2, &m3, "aware_notices_opened_total"), 0.0);
    assert_eq!(
        delta(
            &m2,
            &m3,
            "aware_wakes_requested_total{reason=\"session-state\"}"
        ),
        1.0
    );
    assert_eq!(m3.must("aware_pending_notices"), 1.0);
    // Draining the follow-up, which covers everything: acked, nothing follows.
    let d = s.drain(W);
    assert_eq!(d["notices"].as_array().map(Vec::len), Some(1), "{d}");
    let m4 = Scrape::take(&s);
    assert_eq!(delta(&m3, &m4, "aware_notices_acked_total"), 1.0);
    assert_eq!(delta(&m3, &m4, "aware_notice_followups_total"), 0.0);
    assert_eq!(m4.must("aware_pending_notices"), 0.0);
    // An empty drain acks nothing.
    s.drain(W);
    let m5 = Scrape::take(&s);
    assert_eq!(delta(&m4, &m5, "aware_notices_acked_total"), 0.0);
}

#[test]
fn wakes_requested_by_reason() {
    let s = Server::family();
    s.create(X);
    s.create_child(D, W);
    let reasons = ["session-state", "message", "spawn"];
    let of = |m: &Scrape| {
        reasons.map(|r| m.must(&format!("aware_wakes_requested_total{{reason=\"{r}\"}}")))
    };
    let step = |before: &Scrape, want: [f64; 3], what: &str| {
        let after = Scrape::take(&s);
        let (a, b) = (of(&after), of(before));
        let got = [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
        assert_eq!(got, want, "{what}: (session-state, message, spawn)");
        after
    };
    let m = Scrape::take(&s);
    // A notice for W (agent-qualified, not a subagent): one session-state request.
    s.hdm(C);
    let m = step(&m, [1.0, 0.0, 0.0], "a notice for W");
    // A notice for the subagent C (watching D) opens, but a subagent is never woken (02 §10).
    let r = s.watch(C, D);
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    let opened = m.must("aware_notices_opened_total");
    s.hdm(D);
    let m = step(&m, [1.0, 0.0, 0.0], "a notice for W and one for C");
    assert_eq!(m.must("aware_notices_opened_total") - opened, 2.0);
    // sessions_send: one message wake for the target.
    let r = s.tool(
        W,
        "sessions_send",
        json!({"sessionKey": X, "message": "ping", "timeoutSeconds": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let m = step(&m, [0.0, 1.0, 0.0], "sessions_send");
    // sessions_spawn: one spawn wake for the child.
    let r = s.tool(X, "sessions_spawn", json!({"task": "research"}));
    assert_eq!(r.status, 200, "{}", r.body);
    step(&m, [0.0, 0.0, 1.0], "sessions_spawn");
}

#[test]
fn dedupe_hits_and_a_dedupe_key_collision() {
    let s = json_server(DEFAULT_CONFIG);
    s.create(C);
    s.create(D);
    let m0 = Scrape::take(&s);
    let first = admin_event(&s, C, "k1");
    assert_eq!(first.status, 201, "{}", first.body);
    let m1 = Scrape::take(&s);
    assert_eq!(delta(&m0, &m1, "aware_event_dedupe_hits_total"), 0.0);
    // The same key on the same stream: answered by the existing event.
    let again = admin_event(&s, C, "k1");
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["deduped"], true);
    assert_eq!(again.body["event"], first.body["event"]);
    let m2 = Scrape::take(&s);
    assert_eq!(delta(&m1, &m2, "aware_event_dedupe_hits_total"), 1.0);
    assert_eq!(
        delta(
            &m1,
            &m2,
            "aware_events_appended_total{kind=\"human_direct_message\"}"
        ),
        0.0
    );
    assert!(logged(&s, "dedupe_key_collision").is_empty());
    // The same key on another stream: still a hit (keys are global), and the warning.
    let m2 = Scrape::take(&s);
    let other = admin_event(&s, D, "k1");
    assert_eq!(other.status, 200, "{}", other.body);
    assert_eq!(other.body["deduped"], true);
    assert_eq!(other.body["event"], first.body["event"]);
    let m3 = Scrape::take(&s);
    assert_eq!(delta(&m2, &m3, "aware_event_dedupe_hits_total"), 1.0);
    let lines = logged(&s, "dedupe_key_collision");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["dedupe_key"], "k1", "{lines:?}");
    // Nothing was appended to D's stream.
    assert_eq!(s.status(C, D, 0)["stateVersion"], 0);
}

#[test]
fn read_failures_count_each_degraded_read() {
    let s = json_server(DEFAULT_CONFIG);
    s.create(W);
    s.create_child(C, W);
    s.hdm(C);
    let whole = s.status(W, C, 0)["stateVersion"].clone();
    assert!(whole.as_i64().is_some_and(|v| v > 0), "{whole}");
    let before = logged(&s, "read_failed").len();
    let m0 = Scrape::take(&s);
    faults(&s, json!({"failReads": true}));
    let st = s.status(W, C, 0);
    faults(&s, json!({}));
    assert_eq!(st["stateVersion"], 0, "degraded: {st}");
    let m1 = Scrape::take(&s);
    let lines = logged(&s, "read_failed");
    let reads: Vec<&str> = lines[before..]
        .iter()
        .filter_map(|l| l["read"].as_str())
        .collect();
    // session_status with changesSince reads the head and the page: two failed reads, each
    // counted once and logged once.
    assert_eq!(reads, ["version", "listSince"]);
    assert_eq!(delta(&m0, &m1, "aware_read_failures_total"), 2.0);
    // Cleared, the same read is whole again and counts nothing.
    assert_eq!(s.status(W, C, 0)["stateVersion"], whole);
    assert_eq!(
        delta(&m1, &Scrape::take(&s), "aware_read_failures_total"),
        0.0
    );
}

/// Retention: three days of age, five rows of cap, cursors that expire after 30 days.
const RETENTION: &str = "notify_on_create = false\n[retention]\nmax_age_days = 3\nmax_rows = 5\n\
    cursor_expiry_days = 30\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n";

#[test]
fn prune_deleted_by_cap_and_age_and_cursors_expired() {
    let mut s = Server::with_config(RETENTION);
    s.create(W);
    s.create(X);
    let r = s.watch(X, W);
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    for _ in 0..8 {
        s.hdm(W);
    }
    // W's stream is the whole log (X's is empty): eight events.
    let held = s.seqs(W, 0);
    assert_eq!((held.len(), s.seqs(X, 0).len()), (8, 0));
    let m0 = Scrape::take(&s);
    // The cap keeps the five newest.
    let p = s.prune();
    assert_eq!(
        p,
        json!({"deletedByAge": 0, "deletedByCap": 3, "expiredCursors": 0,
               "expiredSystemEvents": 0, "batches": 1})
    );
    let m1 = Scrape::take(&s);
    assert_eq!(
        delta(&m0, &m1, "aware_prune_deleted_total{reason=\"cap\"}"),
        3.0
    );
    assert_eq!(
        delta(&m0, &m1, "aware_prune_deleted_total{reason=\"age\"}"),
        0.0
    );
    assert_eq!(delta(&m0, &m1, "aware_cursors_expired_total"), 0.0);
    assert_eq!(s.seqs(W, 0), held[3..]);
    // Four days on: every event is past its age; the cursor (updated at T0) is not 30 days old.
    s.set_clock(T0 + 4 * DAY);
    let p = s.prune();
    assert_eq!(
        p,
        json!({"deletedByAge": 5, "deletedByCap": 0, "expiredCursors": 0,
               "expiredSystemEvents": 0, "batches": 1})
    );
    let m2 = Scrape::take(&s);
    assert_eq!(
        delta(&m1, &m2, "aware_prune_deleted_total{reason=\"age\"}"),
        5.0
    );
    assert_eq!(
        delta(&m1, &m2, "aware_prune_deleted_total{reason=\"cap\"}"),
        0.0
    );
    assert_eq!(delta(&m1, &m2, "aware_cursors_expired_total"), 0.0);
    // 31 days on: X's cursor on W expires; no event is left to delete.
    s.set_clock(T0 + 31 * DAY);
    let p = s.prune();
    assert_eq!(
        p,
        json!({"deletedByAge": 0, "deletedByCap": 0, "expiredCursors": 1,
               "expiredSystemEvents": 0, "batches": 0})
    );
    let m3 = Scrape::take(&s);
    assert_eq!(delta(&m2, &m3, "aware_cursors_expired_total"), 1.0);
    assert_eq!(
        delta(&m2, &m3, "aware_prune_deleted_total{reason=\"age\"}"),
        0.0
    );
    assert!(s.cursor(X, W).is_none());
}

#[test]
fn prune_failed_is_logged_and_the_next_pass_does_the_work() {
    let mut s = json_server(
        RETENTION
            .replace("max_rows = 5", "max_rows = 50000")
            .as_str(),
    );
    s.create(W);
    s.create(X);
    // A turn records an event only on a watched session.
    let r = s.watch(X, W);
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    for _ in 0..7 {
        s.hdm(W);
    }
    s.set_clock(T0 + 4 * DAY);
    let m0 = Scrape::take(&s);
    // The pass's first commit fails: the pass ends there and reports what it did (nothing).
    faults(&s, json!({"failCommits": 1}));
    let p = s.prune();
    assert_eq!(
        p,
        json!({"deletedByAge": 0, "deletedByCap": 0, "expiredCursors": 0,
               "expiredSystemEvents": 0, "batches": 0})
    );
    let m1 = Scrape::take(&s);
    assert_eq!(
        delta(&m0, &m1, "aware_prune_deleted_total{reason=\"age\"}"),
        0.0
    );
    assert_eq!(delta(&m0, &m1, "aware_prune_batches_total"), 0.0);
    assert_eq!(s.seqs(W, 0).len(), 7);
    let lines = logged(&s, "prune_failed");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0]["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{lines:?}"
    );
    // The next pass (the fault was used up) deletes, and logs no second failure. The log
    // markers were recorded after the clock move, so they are not old enough to go.
    let m1 = Scrape::take(&s);
    let p = s.prune();
    assert_eq!(p["deletedByAge"], 7, "{p}");
    let m2 = Scrape::take(&s);
    assert_eq!(
        delta(&m1, &m2, "aware_prune_deleted_total{reason=\"age\"}"),
        7.0
    );
    assert!(s.seqs(W, 0).is_empty());
    assert_eq!(logged(&s, "prune_failed").len(), 1);
}

// The upstream monitor (04 §7), over a real transcript in a temporary Claude root.

/// The adopted key of thread T.
fn a_key() -> String {
    key_of(T)
}

struct Up {
    s: Server,
    _root: tempfile::TempDir,
    file: PathBuf,
}

impl Up {
    /// The monitor on (`extra` lines added to `[monitor]`), T adopted and watched by X.
    fn start(extra: &str) -> Up {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("p1").join(format!("{T}.jsonl"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, initial_transcript()).unwrap();
        let config = format!(
            "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n\
             [monitor]\nenabled = true\n{extra}[claude]\nroot = {:?}\n",
            root.path().to_str().unwrap()
        );
        let s = json_server(&config);
        s.create(X);
        let r = s.post(
            "/v1/catalog/continue",
            json!({"catalogId":"claude","hostId":"gateway:local","threadId":T}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let w = s.watch(X, &a_key());
        assert!(w.status == 200 || w.status == 201, "{}", w.body);
        Up {
            s,
            _root: root,
            file,
        }
    }

    /// The engine time of tick `n`: T0 + 15 s + (n − 1) × 60 s.
    fn at(n: i64) -> i64 {
        T0 + 15_000 + (n - 1) * 60_000
    }

    fn tick(&mut self, n: i64) {
        self.s.set_clock(Self::at(n));
    }

    fn human(&self, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.file)
            .unwrap();
        f.write_all(line(&user_row(text, "2026-01-01T00:00:10.000Z")).as_bytes())
            .unwrap();
    }

    fn kinds(&self) -> Vec<String> {
        self.s.status(X, &a_key(), 0)["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_string())
            .collect()
    }

    fn db(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(self.s.db_path()).unwrap();
        c.busy_timeout(Duration::from_secs(10)).unwrap();
        c
    }
}

const MONITOR: [&str; 5] = [
    "aware_monitor_ticks_total",
    "aware_monitor_ticks_skipped_total",
    "aware_monitor_provider_timeouts_total",
    "aware_upstream_human_turns_total",
    "aware_upstream_missing_total",
];

/// The monitor's five counters, in the order of [`MONITOR`].
fn monitor(s: &Server) -> [f64; 5] {
    let m = Scrape::take(s);
    MONITOR.map(|f| m.must(f))
}

#[test]
fn upstream_human_turns_and_missing() {
    let mut u = Up::start("");
    assert_eq!(monitor(&u.s), [0.0; 5]);
    u.human("one");
    u.tick(1);
    assert_eq!(monitor(&u.s), [1.0, 0.0, 0.0, 1.0, 0.0]);
    // Three prompts between two ticks: one event, three turns.
    for t in ["two", "three", "four"] {
        u.human(t);
    }
    u.tick(2);
    assert_eq!(monitor(&u.s), [2.0, 0.0, 0.0, 4.0, 0.0]);
    // Nothing new: the tick counts, nothing else does.
    u.tick(3);
    assert_eq!(monitor(&u.s), [3.0, 0.0, 0.0, 4.0, 0.0]);
    // The transcript goes away: the third miss in a row records upstream_missing, once.
    std::fs::remove_file(&u.file).unwrap();
    u.tick(4);
    u.tick(5);
    assert_eq!(monitor(&u.s), [5.0, 0.0, 0.0, 4.0, 0.0]);
    u.tick(6);
    assert_eq!(monitor(&u.s), [6.0, 0.0, 0.0, 4.0, 1.0]);
    assert_eq!(
        u.kinds(),
        [
            "adopted",
            "human_direct_message",
            "human_direct_message",
            "upstream_missing"
        ]
    );
    // The link is gone, so nothing is probed any more.
    u.tick(7);
    assert_eq!(monitor(&u.s), [7.0, 0.0, 0.0, 4.0, 1.0]);
}

#[test]
fn a_provider_that_does_not_answer_times_out_with_upstream_check_timeout() {
    let mut u = Up::start("provider_timeout_secs = 1\n");
    u.human("while the provider hangs");
    faults(&u.s, json!({"stallProviderChecks": true}));
    let calls = Scrape::take(&u.s).must("aware_provider_call_timeouts_total");
    // The clock move answers once the tick is over: after the 1 s deadline ran out.
    u.tick(1);
    assert_eq!(monitor(&u.s), [1.0, 0.0, 1.0, 0.0, 0.0]);
    let m = Scrape::take(&u.s);
    assert_eq!(m.must("aware_provider_call_timeouts_total") - calls, 1.0);
    let lines = logged(&u.s, "upstream_check_timeout");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["host"], "gateway:local", "{lines:?}");
    // The whole batch is no outcome: nothing recorded, the marker stays.
    assert_eq!(u.kinds(), ["adopted"]);
    // Released, the held check answers late; its answer is thrown away, and the next tick
    // reads the prompt itself.
    faults(&u.s, json!({}));
    u.tick(2);
    assert_eq!(monitor(&u.s), [2.0, 0.0, 1.0, 1.0, 0.0]);
    assert_eq!(u.kinds(), ["adopted", "human_direct_message"]);
    assert_eq!(logged(&u.s, "upstream_check_timeout").len(), 1);
}

#[test]
fn a_tick_due_while_the_previous_one_runs_is_skipped() {
    let mut u = Up::start("");
    u.human("during the held tick");
    faults(&u.s, json!({"stallProviderChecks": true}));
    // Tick 1 from another thread: it holds in the provider check (the default 45 s deadline
    // is far away) until the fault is cleared.
    let base = u.s.base.clone();
    let first = std::thread::spawn(move || {
        let body = json!({"now": Up::at(1)}).to_string();
        try_request(&base, None, "POST", "/v1/admin/clock", &[], Some(&body))
            .map(|r| (r.status, r.body))
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = Scrape::take(&u.s);
        if m.must("aware_monitor_ticks_total") == 1.0
            && m.must("aware_provider_calls_running") == 1.0
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tick 1 never reached its check:\n{}",
            m.0
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Tick 2 falls due while tick 1 runs: skipped and counted, and its clock move answers.
    u.tick(2);
    assert_eq!(monitor(&u.s), [1.0, 1.0, 0.0, 0.0, 0.0]);
    faults(&u.s, json!({}));
    let (status, body) = first.join().unwrap().expect("tick 1's clock move");
    assert_eq!(status, 200, "{body}");
    // Tick 1's check answered in time: the prompt is recorded once.
    assert_eq!(monitor(&u.s), [1.0, 1.0, 0.0, 1.0, 0.0]);
    assert_eq!(u.kinds(), ["adopted", "human_direct_message"]);
    // The cadence goes on: tick 3 runs.
    u.tick(3);
    assert_eq!(monitor(&u.s), [2.0, 1.0, 0.0, 1.0, 0.0]);
}

#[test]
fn a_failing_provider_logs_upstream_check_failed_and_keeps_the_streak() {
    let mut u = Up::start("");
    std::fs::remove_file(&u.file).unwrap();
    u.tick(1);
    u.tick(2);
    // Two misses so far. A failed check is no outcome for anyone and breaks no streak (04 §7:
    // "next provider"), so the third miss after it still records upstream_missing.
    faults(&u.s, json!({"failProviderChecks": true}));
    u.tick(3);
    let lines = logged(&u.s, "upstream_check_failed");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["host"], "gateway:local", "{lines:?}");
    assert!(
        lines[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("injected provider failure")),
        "{lines:?}"
    );
    assert_eq!(monitor(&u.s), [3.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(u.kinds(), ["adopted"]);
    faults(&u.s, json!({}));
    u.tick(4);
    assert_eq!(monitor(&u.s), [4.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(u.kinds(), ["adopted", "upstream_missing"]);
    assert_eq!(logged(&u.s, "upstream_check_failed").len(), 1);
}

#[test]
fn a_session_key_linked_under_two_agents_is_skipped_with_upstream_link_ambiguous() {
    let mut u = Up::start("");
    let a = a_key();
    // Damaged data (04 §4: aware's own keys embed their agent, so only a bad write or an
    // outside edit makes this): the same key linked and watched under a second agent.
    let db = u.db();
    db.execute(
        "INSERT INTO session_upstream_links SELECT session_key, 'ops', catalog_id, host_id, \
         thread_id, upstream_kind, upstream_ref_json, last_marker_json, last_scanned_at, \
         created_at, updated_at FROM session_upstream_links WHERE session_key = ?1",
        [&a],
    )
    .unwrap();
    db.execute(
        "INSERT INTO session_watch_cursors SELECT 'agent:ops:main', target_session_key, 'ops', \
         last_seen_sequence, notified_sequence, material_sequence, muted, origin, \
         notice_opened_at, created_at, updated_at FROM session_watch_cursors \
         WHERE target_session_key = ?1",
        [&a],
    )
    .unwrap();
    u.human("not looked at");
    u.tick(1);
    // One warning per skipped link row, both naming the key; nothing probed.
    let lines = logged(&u.s, "upstream_link_ambiguous");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l["session"] == a.as_str()),
        "{lines:?}"
    );
    assert_eq!(monitor(&u.s), [1.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(u.kinds(), ["adopted"]);
    // Repaired, the link is probed again and the prompt is recorded.
    db.execute(
        "DELETE FROM session_upstream_links WHERE agent_id = 'ops'",
        [],
    )
    .unwrap();
    u.tick(2);
    assert_eq!(monitor(&u.s), [2.0, 0.0, 0.0, 1.0, 0.0]);
    assert_eq!(u.kinds(), ["adopted", "human_direct_message"]);
    assert_eq!(logged(&u.s, "upstream_link_ambiguous").len(), 2);
}
