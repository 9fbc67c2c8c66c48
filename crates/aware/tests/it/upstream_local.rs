//! Group P of the scenarios (04 upstream), the local Claude Code provider: adoption, the catalog,
//! and the monitor over real transcript files in a temporary `[claude] root`, black-box over
//! HTTP against a real `aware serve --test-clock` with `[monitor] enabled = true`.
//!
//! The monitor ticks while `POST /v1/admin/clock` moves the clock (the request returns after the
//! tick), so `tick n` is deterministic.

use crate::common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use aware_testkit::transcript::{THREAD_T as T, *};
/// `agent:main:claude:` + sha256 hex of T.
const A: &str =
    "agent:main:claude:5eeb30d272634929ba01f98fd47fd4f114387b26516060195702b36c5ef42975";
const MIB: usize = 1_048_576;

fn config(root: &Path) -> String {
    format!(
        "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n[monitor]\nenabled = true\n[claude]\nroot = {:?}\n",
        root.to_str().unwrap()
    )
}

/// The upstream world: a server with the monitor on, root R, the file `R/p1/T.jsonl` (3 rows,
/// size B0), and X.
struct Up {
    s: Server,
    _root: tempfile::TempDir,
    file: PathBuf,
    b0: u64,
    /// Engine time the monitor started at (T0, or the restart time).
    started: i64,
}

impl Up {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("p1").join(format!("{T}.jsonl"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, initial_transcript()).unwrap();
        let b0 = std::fs::metadata(&file).unwrap().len();
        let s = Server::with_config(&config(root.path()));
        s.create(X);
        Up {
            s,
            _root: root,
            file,
            b0,
            started: T0,
        }
    }

    /// Given adopt and X watching A.
    fn adopted_and_watched() -> Self {
        let u = Self::new();
        let r = u.adopt();
        assert_eq!(r.status, 200, "{}", r.body);
        let w = u.s.watch(X, A);
        assert!(w.status == 200 || w.status == 201, "{}", w.body);
        assert_eq!(u.s.triple(X, A), (1, 1, 1));
        u
    }

    fn adopt_thread(&self, thread: &str) -> Resp {
        self.s.post(
            "/v1/catalog/continue",
            json!({"catalogId":"claude","hostId":"gateway:local","threadId":thread}),
        )
    }

    fn adopt(&self) -> Resp {
        self.adopt_thread(T)
    }

    /// tick n: T0 (or the restart time) + 15 s + (n − 1) × 60 s.
    fn tick(&mut self, n: i64) {
        let at = self.started + 15_000 + (n - 1) * 60_000;
        self.s.set_clock(at);
    }

    fn append_to(&self, file: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn append(&self, text: &str) {
        self.append_to(&self.file, text);
    }

    /// U(text) with the default timestamp.
    fn u(&self, text: &str) {
        self.u_at(text, "2026-01-01T00:00:10.000Z");
    }

    fn u_at(&self, text: &str, ts: &str) {
        self.append(&line(&user_row(text, ts)));
    }

    fn size(&self) -> u64 {
        std::fs::metadata(&self.file).unwrap().len()
    }

    fn session_of(&self, key: &str) -> Value {
        let r = self.s.get(&format!("/v1/sessions/{}", seg(key)));
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    fn session(&self) -> Value {
        self.session_of(A)
    }

    fn upstream(&self) -> Value {
        self.session()["upstream"].clone()
    }

    fn marker_of(&self, key: &str) -> Value {
        self.session_of(key)["upstream"]["marker"].clone()
    }

    fn marker(&self) -> Value {
        self.marker_of(A)
    }

    fn offset(&self) -> u64 {
        self.marker()["offset"]
            .as_u64()
            .unwrap_or_else(|| panic!("no offset marker: {}", self.upstream()))
    }

    fn linked(&self) -> bool {
        self.upstream()["linked"].as_bool().unwrap()
    }

    fn events_of(&self, key: &str) -> Vec<Value> {
        self.s.status(X, key, 0)["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .clone()
    }

    fn events(&self) -> Vec<Value> {
        self.events_of(A)
    }

    fn of_kind(&self, key: &str, kind: &str) -> Vec<Value> {
        self.events_of(key)
            .into_iter()
            .filter(|e| e["kind"] == kind)
            .collect()
    }

    fn hdms(&self) -> Vec<Value> {
        self.of_kind(A, "human_direct_message")
    }

    fn missing(&self) -> Vec<Value> {
        self.of_kind(A, "upstream_missing")
    }

    /// `(dedupe_key, payload_json)` of the stored event with this sequence, from the set's
    /// store (SQLite file or PostgreSQL database).
    fn stored(&self, seq: i64) -> (Option<String>, Option<String>) {
        const SQL: &str =
            "SELECT dedupe_key, payload_json FROM session_state_events WHERE sequence = ";
        match &self.s.store_url {
            Some(url) => {
                let mut c = pg(url);
                let r = c.query_one(&format!("{SQL}$1"), &[&seq]).unwrap();
                (r.get(0), r.get(1))
            }
            None => sqlite(&self.s)
                .query_row(&format!("{SQL}?1"), [seq], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap(),
        }
    }

    /// A `SELECT COUNT(*) …` (the same SQL on both stores).
    fn count(&self, sql: &str) -> i64 {
        match &self.s.store_url {
            Some(url) => pg(url).query_one(sql, &[]).unwrap().get(0),
            None => sqlite(&self.s).query_row(sql, [], |r| r.get(0)).unwrap(),
        }
    }

    /// Every gateway's fault plan (a request may reach any of them).
    fn faults(&self, body: Value) {
        self.s.set_faults(&body);
    }

    fn start_run(&self, run: &str) {
        let r = self.s.post(
            &format!("/v1/sessions/{}/runs", seg(A)),
            json!({"runId": run}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
    }

    fn end_run(&self, run: &str) {
        let r = self.s.post(
            &format!("/v1/sessions/{}/runs/{}/end", seg(A), seg(run)),
            json!({"outcome": "ok"}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }

    fn delete_file(&self) {
        std::fs::remove_file(&self.file).unwrap();
    }

    fn restore_file(&self, bytes: &[u8]) {
        std::fs::write(&self.file, bytes).unwrap();
    }

    /// The expected dedupe key of a `human_direct_message` whose new offset is `offset`.
    fn hdm_key(&self, offset: u64) -> String {
        format!("upstream:{A}:{}:{offset}", local_source16(&self.file, T))
    }

    /// Asserts the `upstream-missing:<A>:<sourceKey16>:<digits>` shape of a stored key.
    fn assert_missing_key(&self, seq: i64, src16: &str) {
        let key = self.stored(seq).0.expect("dedupe key");
        let rest = key
            .strip_prefix(&format!("upstream-missing:{A}:"))
            .unwrap_or_else(|| panic!("{key}"));
        let (hex, digits) = rest.split_once(':').unwrap_or_else(|| panic!("{key}"));
        assert_eq!(hex, src16, "{key}");
        assert!(
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
            "{key}"
        );
    }
}

fn sqlite(s: &Server) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(s.db_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap()
}

fn pg(url: &str) -> aware_store_pg::postgres::Client {
    aware_store_pg::postgres::Client::connect(url, aware_store_pg::postgres::NoTls).unwrap()
}

/// Runs `aware hook --url URL` (no `--session`) with a `UserPromptSubmit` for `session_id` T.
fn hook_prompt(s: &Server, prompt: &str) {
    let input =
        json!({"hook_event_name":"UserPromptSubmit","session_id":T,"prompt":prompt}).to_string();
    let mut child = Command::new(bin())
        .arg("hook")
        .arg("--url")
        .arg(&s.base)
        .env_remove("AWARE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_SESSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start aware hook");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "the hook failed quietly"
    );
}

fn turns(s: &Server, key: &str) -> Vec<Value> {
    let r = s.get(&format!("/v1/sessions/{}/turns", seg(key)));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["turns"].as_array().unwrap().clone()
}

#[test]
fn s114_adoption() {
    let u = Up::new();
    let r = u.adopt();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"sessionKey":A,"agentId":"main","created":true,"linked":true})
    );
    let s = u.session();
    assert_eq!(s["kind"], "adopted");
    assert_eq!(s["createdVia"], "adoption");
    assert_eq!(
        s["upstream"],
        json!({"catalogId":"claude","hostId":"gateway:local","threadId":T,"linked":true,
            "marker":{"offset":u.b0}})
    );
    let t = turns(&u.s, A);
    let texts: Vec<&str> = t.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["hi", "hello", "thanks"]);
    assert!(t.iter().all(|t| t["origin"] == "import"), "{t:?}");
    let ev = u.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["sequence"], 1);
    assert_eq!(ev[0]["kind"], "adopted");
    assert_eq!(ev[0]["actorType"], "human");
    assert_eq!(ev[0]["summary"], "adopted from claude");
    assert!(ev[0].get("payload").is_none(), "{}", ev[0]);
    let (dedupe, payload) = u.stored(1);
    assert_eq!(dedupe.as_deref(), Some(format!("adopted:{A}").as_str()));
    let payload: Value = serde_json::from_str(&payload.expect("stored payload")).unwrap();
    assert_eq!(
        payload,
        json!({"catalogId":"claude","hostId":"gateway:local"})
    );
}

#[test]
fn s115_recontinue_keeps_scan_progress() {
    let mut u = Up::adopted_and_watched();
    u.u("more");
    u.tick(1);
    let b1 = u.size();
    assert!(b1 > u.b0);
    assert_eq!(u.marker(), json!({"offset": b1}));
    let scanned = u.upstream()["lastScannedAt"].clone();
    assert!(scanned.is_i64(), "{}", u.upstream());
    let r = u.adopt();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["created"], false);
    assert_eq!(r.body["linked"], true);
    let up = u.upstream();
    assert_eq!(up["marker"], json!({"offset": b1}));
    assert_eq!(up["lastScannedAt"], scanned);
    assert_eq!(u.of_kind(A, "adopted").len(), 1);
}

#[test]
fn s116_single_flight() {
    let u = Up::new();
    let answers: Vec<Resp> = std::thread::scope(|sc| {
        let a = sc.spawn(|| u.adopt());
        let b = sc.spawn(|| u.adopt());
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["sessionKey"], A);
    }
    let created: Vec<bool> = answers
        .iter()
        .map(|r| r.body["created"].as_bool().unwrap())
        .collect();
    assert!(created.contains(&true), "{created:?}");
    assert_eq!(
        u.count(&format!(
            "SELECT COUNT(*) FROM sessions WHERE session_key = '{A}'"
        )),
        1
    );
    assert_eq!(u.count("SELECT COUNT(*) FROM session_upstream_links"), 1);
    assert_eq!(
        u.count("SELECT COUNT(*) FROM session_state_events WHERE kind = 'adopted'"),
        1
    );
    // The history was imported once.
    assert_eq!(turns(&u.s, A).len(), 3);
}

#[test]
fn s117_continue_errors() {
    let u = Up::new();
    let post = |catalog: &str, host: &str, thread: &str| {
        u.s.post(
            "/v1/catalog/continue",
            json!({"catalogId":catalog,"hostId":host,"threadId":thread}),
        )
    };
    let r = post("nope", "gateway:local", T);
    assert_eq!(
        (r.status, r.code(), r.message()),
        (400, "unknown_catalog", "unknown session catalog: nope")
    );
    for host in ["mars", "node:ghost"] {
        let r = post("claude", host, T);
        assert_eq!(
            (r.status, r.code(), r.message()),
            (400, "invalid_host", "hostId is invalid"),
            "{host}"
        );
    }
    let r = post(
        "claude",
        "gateway:local",
        "9f9f9f9f-0000-4000-8000-000000000000",
    );
    assert_eq!(
        (r.status, r.code()),
        (404, "thread_not_found"),
        "{}",
        r.body
    );
    // Nothing was created by the failed calls.
    assert_eq!(
        u.count("SELECT COUNT(*) FROM sessions WHERE kind = 'adopted'"),
        0
    );
}

#[test]
fn s118_catalog_list() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p1");
    std::fs::create_dir_all(&dir).unwrap();
    let threads = [
        ("11111111-1111-4111-8111-111111111111", 3),
        ("22222222-2222-4222-8222-222222222222", 1),
        ("33333333-3333-4333-8333-333333333333", 2),
    ];
    let mut sizes = std::collections::HashMap::new();
    for (i, (t, hours)) in threads.iter().enumerate() {
        let path = dir.join(format!("{t}.jsonl"));
        let body = format!("{}{}", initial_transcript(), "\n".repeat(i));
        std::fs::write(&path, &body).unwrap();
        let mtime = SystemTime::UNIX_EPOCH + Duration::from_millis((T0 - hours * 3_600_000) as u64);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        sizes.insert(t.to_string(), body.len() as u64);
    }
    std::fs::write(dir.join("notes.jsonl"), initial_transcript()).unwrap();
    let s = Server::with_config(&config(root.path()));
    let list = |s: &Server| {
        let r = s.get("/v1/catalog");
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["items"].as_array().unwrap().clone()
    };
    let items = list(&s);
    let ids: Vec<&str> = items
        .iter()
        .map(|i| i["threadId"].as_str().unwrap())
        .collect();
    let (t1, t2, t3) = (threads[0].0, threads[1].0, threads[2].0);
    assert_eq!(ids, [t2, t3, t1], "newest first, notes.jsonl ignored");
    for (item, (t, hours)) in items.iter().zip([threads[1], threads[2], threads[0]]) {
        assert_eq!(item["catalogId"], "claude");
        assert_eq!(item["hostId"], "gateway:local");
        assert_eq!(item["sizeBytes"], sizes[t], "{item}");
        assert_eq!(item["updatedAt"], T0 - hours * 3_600_000, "{item}");
        assert!(item.get("adoptedSessionKey").is_none(), "{item}");
    }
    let r = s.post(
        "/v1/catalog/continue",
        json!({"catalogId":"claude","hostId":"gateway:local","threadId":t3}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let items = list(&s);
    for item in &items {
        if item["threadId"] == t3 {
            assert_eq!(item["adoptedSessionKey"], key_of(t3), "{item}");
        } else {
            assert!(item.get("adoptedSessionKey").is_none(), "{item}");
        }
    }
}

#[test]
fn s119_hook_session_becomes_adopted() {
    let u = Up::new();
    hook_prompt(&u.s, "fix the bug");
    assert_eq!(u.session()["createdVia"], "hook");
    assert_eq!(turns(&u.s, A).len(), 1);
    let r = u.adopt();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["created"], false);
    assert_eq!(r.body["sessionKey"], A);
    assert_eq!(u.session()["kind"], "adopted");
    let t = turns(&u.s, A);
    assert_eq!(t.len(), 1, "no turn imported: {t:?}");
    assert_eq!(t[0]["text"], "fix the bug");
    assert_eq!(u.of_kind(A, "adopted").len(), 1);
}

#[test]
fn s123_cadence() {
    let mut u = Up::adopted_and_watched();
    // Summed over the gateways: on a cluster only the leader ticks (the others count none).
    let ticks = |u: &Up| u.s.metric_sum("aware_monitor_ticks_total ").unwrap() as i64;
    assert_eq!(ticks(&u), 0);
    for sec in 1..=140 {
        u.s.set_clock(T0 + sec * 1000);
        let expected = [15, 75, 135].iter().filter(|t| **t <= sec).count() as i64;
        assert_eq!(ticks(&u), expected, "at T0+{sec} s");
    }
}

#[test]
fn s124_only_watched_idle_sessions_are_probed() {
    const T2: &str = "7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b";
    let mut u = Up::adopted_and_watched();
    let file2 = u.file.parent().unwrap().join(format!("{T2}.jsonl"));
    std::fs::write(&file2, initial_transcript()).unwrap();
    let b0_2 = std::fs::metadata(&file2).unwrap().len();
    let r = u.adopt_thread(T2);
    assert_eq!(r.status, 200, "{}", r.body);
    let a2 = key_of(T2);
    assert_eq!(r.body["sessionKey"], a2.as_str());
    let line_a = line(&user_row("a", "2026-01-01T00:00:10.000Z"));
    u.append(&line_a);
    u.append_to(&file2, &line_a);
    u.tick(1);
    assert_eq!(u.hdms().len(), 1);
    assert_eq!(u.marker_of(&a2), json!({"offset": b0_2}));
    assert!(u.of_kind(&a2, "human_direct_message").is_empty());

    u.start_run("r1");
    let marker = u.marker();
    let before = u.events().len();
    u.u("b");
    u.tick(2);
    assert_eq!(u.marker(), marker);
    assert_eq!(u.events().len(), before, "no event while a run is active");

    u.end_run("r1");
    u.tick(3);
    let hdms = u.hdms();
    assert_eq!(hdms.len(), 2);
    let seq = hdms[1]["sequence"].as_i64().unwrap();
    assert_eq!(u.stored(seq).0, Some(u.hdm_key(u.size())));
    assert_eq!(u.offset(), u.size());
    assert_eq!(u.marker_of(&a2), json!({"offset": b0_2}));
}

#[test]
fn s125_upstream_activity_is_recorded_once_and_notifies() {
    let mut u = Up::adopted_and_watched();
    u.u("please also add tests");
    let b1 = u.size();
    u.tick(1);
    let ev = u.events();
    assert_eq!(ev.len(), 2, "{ev:?}");
    let e = &ev[1];
    assert_eq!(e["sequence"], 2);
    assert_eq!(e["kind"], "human_direct_message");
    assert_eq!(e["actorType"], "human");
    assert_eq!(e["summary"], "human message via claude");
    assert_eq!(e["occurredAt"], T0 + 10_000);
    assert!(e.get("payload").is_none(), "{e}");
    let key = u.stored(2).0.unwrap();
    assert!(key.starts_with("upstream:agent:main:claude:5eeb"), "{key}");
    assert_eq!(key, u.hdm_key(b1));
    assert_eq!(u.marker(), json!({"offset": b1}));
    assert_eq!(u.s.notice_texts(X), vec![nt(A, 1)]);

    u.tick(2);
    assert_eq!(u.events().len(), 2, "tick 2 adds nothing");

    for text in ["one", "two", "three"] {
        u.u(text);
    }
    u.tick(3);
    let ev = u.events();
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert_eq!(ev[2]["kind"], "human_direct_message");
    assert_eq!(ev[2]["payload"], json!({"turns": 3}));
    assert_eq!(u.s.notice_texts(X), vec![nt(A, 1)]);

    u.u_at("old", "2025-12-30T00:00:00.000Z");
    u.tick(4);
    let ev = u.events();
    assert_eq!(ev.len(), 4, "{ev:?}");
    assert_eq!(ev[3]["kind"], "human_direct_message");
    assert_eq!(ev[3]["occurredAt"], T0 + 195_000 - 86_400_000);
}

#[test]
fn s126_self_echo() {
    let mut u = Up::adopted_and_watched();
    let r = u.s.tool(
        X,
        "sessions_send",
        json!({"sessionKey":A,"message":"run the tests","timeoutSeconds":0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    hook_prompt(&u.s, "fix it");
    let hook_hdms = u.hdms();
    assert_eq!(hook_hdms.len(), 1, "the hook's turn: {hook_hdms:?}");
    u.u(" run   the tests ");
    u.u("fix it");
    u.tick(1);
    let hdms = u.hdms();
    assert_eq!(hdms, hook_hdms, "the monitor records nothing");
    let seq = hdms[0]["sequence"].as_i64().unwrap();
    assert!(
        !u.stored(seq).0.unwrap_or_default().starts_with("upstream:"),
        "the one human_direct_message is the hook's"
    );
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

#[test]
fn s127_imported_history_is_no_echo_and_no_time_window() {
    let mut u = Up::adopted_and_watched();
    u.s.set_clock(T0 + 10_000);
    let r = u.s.tool(
        X,
        "sessions_send",
        json!({"sessionKey":A,"message":"run the tests","timeoutSeconds":0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    u.u("thanks");
    u.u_at("run the tests please", "2026-01-01T00:00:12.000Z");
    u.tick(1);
    let hdms = u.hdms();
    assert_eq!(hdms.len(), 1, "{hdms:?}");
    assert_eq!(hdms[0]["payload"], json!({"turns": 2}));
    assert_eq!(hdms[0]["occurredAt"], T0 + 12_000);
}

#[test]
fn s128_record_then_advance() {
    let mut u = Up::adopted_and_watched();
    u.faults(json!({"failAppends": true}));
    u.u("x");
    u.tick(1);
    assert!(u.hdms().is_empty());
    assert_eq!(u.marker(), json!({"offset": u.b0}));
    u.faults(json!({}));
    u.tick(2);
    assert_eq!(u.hdms().len(), 1);
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

/// 04 §7 activity step 6: when the record stands but the settle fails, the next tick scans the
/// same rows again and the dedupe key makes the retry idempotent.
#[test]
fn s128_a_failed_settle_is_retried_idempotently() {
    let mut u = Up::adopted_and_watched();
    u.faults(json!({"failLinkSettles": true}));
    u.u("x");
    u.tick(1);
    assert_eq!(u.hdms().len(), 1);
    assert_eq!(
        u.marker(),
        json!({"offset": u.b0}),
        "the marker did not move"
    );
    u.faults(json!({}));
    u.tick(2);
    assert_eq!(u.hdms().len(), 1, "deduped, not recorded twice");
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

#[test]
fn s130_three_misses_make_one_upstream_missing() {
    let mut u = Up::adopted_and_watched();
    let src16 = local_source16(&u.file, T);
    u.delete_file();
    u.tick(1);
    u.tick(2);
    assert_eq!(u.events().len(), 1, "nothing at ticks 1 and 2");
    assert!(u.linked());
    u.tick(3);
    let ev = u.events();
    assert_eq!(ev.len(), 2, "{ev:?}");
    let e = &ev[1];
    assert_eq!(e["sequence"], 2);
    assert_eq!(e["kind"], "upstream_missing");
    assert_eq!(e["actorType"], "system");
    assert_eq!(e["summary"], "upstream missing via claude");
    assert_eq!(e["payload"], json!({"channel": "claude"}));
    u.assert_missing_key(2, &src16);
    assert_eq!(u.upstream()["linked"], false);
    assert_eq!(u.s.notice_texts(X), vec![nt(A, 1)]);

    // Tick 4 probes nothing: the link is gone, so even new human rows are not looked at.
    let mut restored = initial_transcript();
    restored.push_str(&line(&user_row("anyone?", "2026-01-01T00:00:10.000Z")));
    u.restore_file(restored.as_bytes());
    u.tick(4);
    assert_eq!(u.events().len(), 2);
    assert_eq!(u.upstream()["linked"], false);
}

#[test]
fn s131_an_active_run_pauses_the_streak() {
    let mut u = Up::adopted_and_watched();
    u.delete_file();
    u.tick(1);
    u.tick(2);
    u.start_run("r1");
    u.tick(3);
    assert!(u.missing().is_empty());
    assert!(u.linked(), "the link is kept");
    u.end_run("r1");
    u.tick(4);
    assert_eq!(u.missing().len(), 1);
    assert!(!u.linked());
}

#[test]
fn s132_any_other_outcome_resets_the_streak() {
    let mut u = Up::adopted_and_watched();
    let bytes = std::fs::read(&u.file).unwrap();
    u.delete_file();
    u.tick(1);
    u.tick(2);
    u.restore_file(&bytes);
    u.tick(3);
    u.delete_file();
    u.tick(4);
    u.tick(5);
    assert_eq!(u.events().len(), 1, "no event through tick 5");
    assert!(u.linked());
    u.tick(6);
    assert_eq!(u.missing().len(), 1);
    assert!(!u.linked());
}

#[test]
fn s133_a_recontinue_restarts_the_streak() {
    let mut u = Up::adopted_and_watched();
    let bytes = std::fs::read(&u.file).unwrap();
    u.delete_file();
    u.tick(1);
    u.tick(2);
    u.restore_file(&bytes);
    let r = u.adopt();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["linked"], true);
    u.delete_file();
    u.tick(3);
    u.tick(4);
    assert!(u.missing().is_empty(), "ticks 3 and 4 record nothing");
    u.tick(5);
    assert_eq!(u.missing().len(), 1);
}

#[test]
fn s134_a_reset_restarts_the_streak() {
    let mut u = Up::adopted_and_watched();
    u.delete_file();
    u.tick(1);
    u.tick(2);
    let r =
        u.s.post(&format!("/v1/sessions/{}/reset", seg(A)), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(u.linked(), "a reset keeps the link");
    u.tick(3);
    u.tick(4);
    assert!(u.missing().is_empty(), "ticks 3 and 4 record nothing");
    u.tick(5);
    assert_eq!(u.missing().len(), 1);
}

#[test]
fn s135_a_failed_missing_record_is_retried() {
    let mut u = Up::adopted_and_watched();
    u.delete_file();
    u.tick(1);
    u.tick(2);
    u.faults(json!({"failAppends": true}));
    u.tick(3);
    assert!(u.missing().is_empty());
    assert!(u.linked(), "the link is kept");
    u.faults(json!({}));
    u.tick(4);
    assert_eq!(u.missing().len(), 1);
    assert!(!u.linked(), "the link is removed");
    assert_eq!(u.count("SELECT COUNT(*) FROM session_upstream_links"), 0);
}

#[test]
fn s136_streaks_do_not_survive_a_restart() {
    let mut u = Up::adopted_and_watched();
    u.delete_file();
    u.tick(1);
    u.tick(2);
    u.s.restart();
    u.started = u.s.now;
    u.tick(1);
    u.tick(2);
    assert!(u.missing().is_empty(), "the first two ticks record nothing");
    assert!(u.linked());
    u.tick(3);
    assert_eq!(u.missing().len(), 1);
}

#[test]
fn s139_row_classifier() {
    let mut u = Up::adopted_and_watched();
    let later = "2026-01-01T00:00:13.000Z";
    let user = |content: Value, extra: Value| {
        let mut v =
            json!({"type":"user","timestamp":later,"message":{"role":"user","content":content}});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        line(&v)
    };
    let mut lines = String::new();
    lines.push_str(&line(&assistant_row("assistant text")));
    lines.push_str(&user(
        json!([{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]),
        json!({}),
    ));
    lines.push_str(&user(json!("[Inter-session message] synthetic"), json!({})));
    lines.push_str(&user(json!("meta prompt"), json!({"isMeta": true})));
    lines.push_str(&user(json!("side prompt"), json!({"isSidechain": true})));
    lines.push_str(&user(
        json!("summary prompt"),
        json!({"isCompactSummary": true}),
    ));
    lines.push_str(&user(
        json!("task prompt"),
        json!({"origin": {"kind": "task-notification"}}),
    ));
    lines.push_str(&user(
        json!("  <task-notification>done</task-notification>"),
        json!({}),
    ));
    lines.push_str("not json\n");
    lines.push_str(&line(&user_row(
        "real upstream prompt",
        "2026-01-01T00:00:12.000Z",
    )));
    u.append(&lines);
    u.tick(1);
    let hdms = u.hdms();
    assert_eq!(hdms.len(), 1, "{hdms:?}");
    assert_eq!(hdms[0]["occurredAt"], T0 + 12_000);
    assert!(hdms[0].get("payload").is_none(), "{}", hdms[0]);
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

#[test]
fn s140_the_1_mib_window() {
    let mut u = Up::adopted_and_watched();
    assert_eq!(u.offset(), u.b0);
    u.append(&assistant_row_of(1_048_376));
    u.append(&user_row_of(
        "middle prompt",
        "2026-01-01T00:00:10.000Z",
        300,
    ));
    u.append(&assistant_row_of(524_288));
    u.tick(1);
    assert!(u.hdms().is_empty());
    assert_eq!(u.offset(), u.b0 + 1_048_376);
    u.tick(2);
    assert_eq!(u.hdms().len(), 1);
    assert_eq!(u.offset(), u.size());
}

#[test]
fn s141_oversized_rows_are_classified_and_partial_rows_wait() {
    // Decision D23 supersedes 04 §8 step 6: a row over the window is read on as a stream,
    // classified and consumed, so it no longer blocks the session for ever.
    let mut u = Up::adopted_and_watched();
    u.append(&assistant_row_of(2 * MIB));
    u.u("after");
    u.tick(1);
    assert_eq!(u.hdms().len(), 1, "{:?}", u.events());
    assert_eq!(u.marker(), json!({"offset": u.size()}));

    // An oversized row still being written (no newline yet) waits, whatever its size.
    let mut u = Up::adopted_and_watched();
    let big = user_row_of("pasted", "2026-01-01T00:00:10.000Z", 3 * MIB);
    u.append(big.trim_end_matches('\n'));
    for n in 1..=2 {
        u.tick(n);
        assert!(u.hdms().is_empty(), "tick {n}");
        assert_eq!(u.marker(), json!({"offset": u.b0}), "tick {n}");
    }
    u.append("\n");
    u.tick(3);
    assert_eq!(u.hdms().len(), 1, "{:?}", u.events());
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

#[test]
fn forty_mib_rows_count_once() {
    // A 40 MiB tool result followed by a typed prompt: exactly one human turn.
    let mut u = Up::adopted_and_watched();
    let result = json!({"type":"user","timestamp":"2026-01-01T00:00:09.000Z",
        "message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",
        "content":"log line\n".repeat(40 * MIB / 9)}]}});
    u.append(&line(&result));
    u.u_at("typed after the big result", "2026-01-01T00:00:10.000Z");
    u.tick(1);
    let hdms = u.hdms();
    assert_eq!(hdms.len(), 1, "{hdms:?}");
    assert!(hdms[0].get("payload").is_none(), "one turn: {}", hdms[0]);
    assert_eq!(hdms[0]["occurredAt"], T0 + 10_000);
    assert_eq!(u.marker(), json!({"offset": u.size()}));

    // A 40 MiB pasted prompt: one human turn.
    let mut u = Up::adopted_and_watched();
    u.append(&line(&user_row(
        &"pasted text ".repeat(40 * MIB / 12),
        "2026-01-01T00:00:11.000Z",
    )));
    u.tick(1);
    let hdms = u.hdms();
    assert_eq!(hdms.len(), 1, "{hdms:?}");
    assert!(hdms[0].get("payload").is_none(), "one turn: {}", hdms[0]);
    assert_eq!(hdms[0]["occurredAt"], T0 + 11_000);
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

#[test]
fn s141_a_row_still_being_written_waits() {
    let mut u = Up::adopted_and_watched();
    let row = line(&user_row("partial", "2026-01-01T00:00:10.000Z"));
    u.append(row.trim_end_matches('\n'));
    u.tick(1);
    assert!(u.hdms().is_empty());
    assert_eq!(u.marker(), json!({"offset": u.b0}));
    u.append("\n");
    u.tick(2);
    assert_eq!(u.hdms().len(), 1);
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

#[test]
fn s142_a_shrunk_file_rebases() {
    let mut u = Up::adopted_and_watched();
    u.append(&assistant_row_of(1_500));
    u.tick(1);
    let b1 = u.size();
    assert!(b1 > 1_200);
    assert_eq!(u.marker(), json!({"offset": b1}), "settled at B1");
    let before = u.events().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&u.file)
        .unwrap()
        .set_len(1_200)
        .unwrap();
    u.tick(2);
    assert_eq!(u.events().len(), before, "no event");
    assert_eq!(u.marker(), json!({"offset": 1_200}));
    // The marker moves before the log line reaches the test's log reader: wait for the line.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !u.s.logs().contains("claude_transcript_shrank") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        u.s.logs().contains("claude_transcript_shrank"),
        "{}",
        u.s.logs()
    );
    u.u("later");
    u.tick(3);
    let hdms = u.hdms();
    assert_eq!(hdms.len(), 1);
    let seq = hdms[0]["sequence"].as_i64().unwrap();
    assert_eq!(u.stored(seq).0, Some(u.hdm_key(u.size())));
    assert_eq!(u.marker(), json!({"offset": u.size()}));
}

#[test]
fn s143_no_growth_and_a_directory_counts_as_missing() {
    let mut u = Up::adopted_and_watched();
    // A tick without any append: no outcome.
    u.u("first");
    u.tick(1);
    let before = u.upstream();
    assert!(before["lastScannedAt"].is_i64(), "{before}");
    u.tick(2);
    assert_eq!(u.upstream(), before, "marker and lastScannedAt unchanged");
    assert_eq!(u.hdms().len(), 1);

    // A path that is a directory counts as missing.
    let src16 = local_source16(&u.file, T);
    u.delete_file();
    std::fs::create_dir(&u.file).unwrap();
    u.tick(3);
    u.tick(4);
    assert!(u.missing().is_empty());
    assert!(u.linked());
    u.tick(5);
    let missing = u.missing();
    assert_eq!(missing.len(), 1);
    u.assert_missing_key(missing[0]["sequence"].as_i64().unwrap(), &src16);
    assert!(!u.linked());
}

// --- files outside the root and FIFOs (decision D6) ----------------------------------------------

#[test]
fn a_symlink_out_of_the_root_is_neither_listed_nor_adopted() {
    let u = Up::new();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.jsonl");
    std::fs::write(
        &secret,
        line(&user_row("secret prompt", "2026-01-01T00:00:01.000Z")),
    )
    .unwrap();
    let linked = new_uuid();
    std::os::unix::fs::symlink(
        &secret,
        u.file.parent().unwrap().join(format!("{linked}.jsonl")),
    )
    .unwrap();
    let r = u.s.get("/v1/catalog");
    assert_eq!(r.status, 200, "{}", r.body);
    let ids: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["threadId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [T], "{}", r.body);
    assert!(!r.body.to_string().contains("secret prompt"));
    let r = u.adopt_thread(&linked);
    assert_eq!(
        (r.status, r.code()),
        (404, "thread_not_found"),
        "{}",
        r.body
    );
}

#[test]
fn a_fifo_in_place_of_an_adopted_transcript_is_missing() {
    let mut u = Up::adopted_and_watched();
    u.delete_file();
    let made = std::process::Command::new("mkfifo")
        .arg(&u.file)
        .status()
        .unwrap();
    assert!(made.success());
    // Each tick answers (a blocking open would hang it) and counts the FIFO as missing.
    for n in 1..=3 {
        u.tick(n);
    }
    assert_eq!(u.missing().len(), 1, "{:?}", u.events());
    assert!(!u.linked());
    assert_eq!(u.s.get("/health").status, 200);
}
