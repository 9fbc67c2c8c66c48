//! The local Codex CLI provider (`catalogId = "codex"`), black-box over HTTP against a real
//! `aware serve --test-clock` with `[monitor] enabled = true` and `[codex] home` pointing at a
//! temporary `$CODEX_HOME`: catalog, adoption with history, and the monitor over rollout rows.

use crate::common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The thread of the adopted rollout, and an older one.
const ID: &str = "019b7f94-51b4-7593-922e-ba12b5b73b52";
const OLD: &str = "019a93b9-f380-7600-98ff-940e6b99603c";

use aware_testkit::transcript::{key_of, line};

fn meta(id: &str) -> Value {
    json!({"timestamp":"2026-01-02T16:39:45.332Z","type":"session_meta","payload":{
        "id":id,"timestamp":"2026-01-02T16:39:45.332Z","cwd":"/repos/demo","originator":"codex_cli_rs",
        "cli_version":"0.77.0","source":"cli"}})
}

fn user_item(text: &str) -> Value {
    json!({"timestamp":"2026-01-02T16:39:46.000Z","type":"response_item","payload":{
        "type":"message","role":"user","content":[{"type":"input_text","text":text}]}})
}

/// A typed prompt as Codex writes it: the response item and its `user_message` event.
fn typed(text: &str, ts: &str) -> String {
    let mut item = user_item(text);
    item["timestamp"] = json!(ts);
    let event = json!({"timestamp":ts,"type":"event_msg","payload":{"type":"user_message",
        "message":text,"images":[]}});
    line(&item) + &line(&event)
}

fn assistant(text: &str) -> String {
    line(
        &json!({"timestamp":"2026-01-02T16:39:50.000Z","type":"response_item","payload":{
        "type":"message","role":"assistant","content":[{"type":"output_text","text":text}]}}),
    )
}

/// Rows no human typed: tool call and output, re-sent context, an abort marker, token counts.
fn machine_rows() -> String {
    [
        json!({"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}","call_id":"c1"}}),
        json!({"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"README.md"}}),
        user_item("<environment_context>\n  <cwd>/repos/demo</cwd>\n</environment_context>"),
        user_item("# AGENTS.md instructions for /repos/demo\n\n<INSTRUCTIONS>\nbe brief\n</INSTRUCTIONS>"),
        user_item("<turn_aborted>\nThe user interrupted the previous turn.\n</turn_aborted>"),
        json!({"type":"event_msg","payload":{"type":"turn_aborted","reason":"interrupted"}}),
        json!({"type":"event_msg","payload":{"type":"token_count","info":null}}),
        json!({"type":"compacted","payload":{"message":"summary","replacement_history":[]}}),
    ]
    .iter()
    .map(line)
    .collect()
}

struct Up {
    s: Server,
    _home: tempfile::TempDir,
    _claude: tempfile::TempDir,
    file: PathBuf,
}

fn append(file: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

impl Up {
    fn new() -> Self {
        let home = tempfile::tempdir().unwrap();
        let claude = tempfile::tempdir().unwrap();
        let day = home.path().join("sessions/2026/01/02");
        std::fs::create_dir_all(&day).unwrap();
        let old = day.join(format!("rollout-2025-11-17T15-30-28-{OLD}.jsonl"));
        std::fs::write(
            &old,
            line(&meta(OLD)) + &typed("older work", "2025-11-17T21:30:29.000Z"),
        )
        .unwrap();
        let past = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_763_000_000);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let file = day.join(format!("rollout-2026-01-02T18-39-45-{ID}.jsonl"));
        let body = line(&meta(ID))
            + &machine_rows()
            + &typed("what is this repository about?", "2026-01-02T16:39:47.000Z")
            + &assistant("A session hub.");
        std::fs::write(&file, body).unwrap();
        let config = format!(
            "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n[monitor]\nenabled = true\n[claude]\nroot = {:?}\n[codex]\nhome = {:?}\n",
            claude.path().to_str().unwrap(),
            home.path().to_str().unwrap()
        );
        let s = Server::with_config(&config);
        s.create(X);
        Up {
            s,
            _home: home,
            _claude: claude,
            file,
        }
    }

    /// tick n of the monitor: T0 + 15 s + (n − 1) × 60 s.
    fn tick(&mut self, n: i64) {
        self.s.set_clock(T0 + 15_000 + (n - 1) * 60_000);
    }

    fn hdms(&self) -> Vec<Value> {
        self.s.status(X, &key_of(ID), 0)["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "human_direct_message")
            .cloned()
            .collect()
    }

    fn offset(&self) -> u64 {
        let r = self.s.get(&format!("/v1/sessions/{}", seg(&key_of(ID))));
        r.body["upstream"]["marker"]["offset"].as_u64().unwrap()
    }

    fn size(&self) -> u64 {
        std::fs::metadata(&self.file).unwrap().len()
    }
}

#[test]
fn catalog_lists_rollouts_newest_first_with_id_title_and_cwd() {
    let u = Up::new();
    let r = u.s.get("/v1/catalog?catalogId=codex&limit=1");
    assert_eq!(r.status, 200, "{}", r.body);
    let item = &r.body["items"][0];
    assert_eq!(item["catalogId"], "codex");
    assert_eq!(item["hostId"], "gateway:local");
    assert_eq!(item["threadId"], ID);
    assert_eq!(item["title"], "what is this repository about?");
    assert_eq!(item["cwd"], "/repos/demo");
    assert_eq!(item["sizeBytes"], u.size());
    let next = r.body["nextCursor"].as_str().expect("a second page");
    let r2 = u.s.get(&format!(
        "/v1/catalog?catalogId=codex&limit=1&cursor={next}"
    ));
    assert_eq!(r2.body["items"][0]["threadId"], OLD);
    assert_eq!(r2.body["items"][0]["title"], "older work");
    assert!(r2.body.get("nextCursor").is_none(), "{}", r2.body);
    // The Claude catalog does not list rollouts, and an unknown catalog is refused.
    let claude = u.s.get("/v1/catalog?catalogId=claude");
    assert_eq!(claude.body["items"], json!([]));
    let bad = u.s.get("/v1/catalog?catalogId=opencode");
    assert_eq!((bad.status, bad.code()), (400, "unknown_catalog"));
}

#[test]
fn adopted_rollout_gives_one_notice_per_typed_prompt_and_none_for_machine_rows() {
    let mut u = Up::new();
    let a = key_of(ID);
    let r = u.s.post(
        "/v1/catalog/continue",
        json!({"catalogId":"codex","hostId":"gateway:local","threadId":ID}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"sessionKey":a,"agentId":"main","created":true,"linked":true})
    );
    // The history: the typed prompt and the answer, nothing of the injected context.
    let t = u.s.get(&format!("/v1/sessions/{}/turns", seg(&a)));
    let texts: Vec<&str> = t.body["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["what is this repository about?", "A session hub."]);
    let s = u.s.get(&format!("/v1/sessions/{}", seg(&a)));
    assert_eq!(
        s.body["upstream"],
        json!({"catalogId":"codex","hostId":"gateway:local","threadId":ID,"linked":true,
            "marker":{"offset":u.size()}})
    );
    let w = u.s.watch(X, &a);
    assert!(w.status == 200 || w.status == 201, "{}", w.body);
    let before = u.s.triple(X, &a);

    // Machine rows only: the marker moves, no event, no notice.
    append(&u.file, &machine_rows());
    u.tick(1);
    assert_eq!(u.offset(), u.size());
    assert!(u.hdms().is_empty());
    assert_eq!(u.s.triple(X, &a), before);
    assert!(u.s.notice_texts(X).is_empty());

    // One typed prompt (written twice by Codex): exactly one notice.
    append(
        &u.file,
        &typed("now add a test", "2026-01-02T17:00:00.000Z"),
    );
    u.tick(2);
    let hdms = u.hdms();
    assert_eq!(hdms.len(), 1, "{hdms:?}");
    assert_eq!(hdms[0]["actorType"], "human", "{}", hdms[0]);
    assert_eq!(hdms[0]["summary"], "human message via codex");
    let notices = u.s.drain(X)["notices"].as_array().unwrap().clone();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["targetSessionKey"], a);

    // More machine rows: nothing new.
    append(&u.file, &machine_rows());
    u.tick(3);
    assert_eq!(u.hdms().len(), 1);
    assert!(u.s.notice_texts(X).is_empty());
    assert_eq!(u.offset(), u.size());
}

#[test]
fn codex_can_be_disabled() {
    let home = tempfile::tempdir().unwrap();
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[codex]\nenabled = false\nhome = {:?}\n",
        home.path().to_str().unwrap()
    ));
    let r = s.get("/v1/catalog?catalogId=codex");
    assert_eq!((r.status, r.code()), (400, "unknown_catalog"));
}
