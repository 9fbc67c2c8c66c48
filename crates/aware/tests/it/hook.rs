//! `aware hook`, the Claude Code `UserPromptSubmit` hook (03 §8): scenarios S111 and S112, plus
//! bad input and slow or absent gateways. The binary is fed the JSON Claude Code sends on stdin.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The S111/S112 input.
const INPUT: &str = r#"{"hook_event_name":"UserPromptSubmit","session_id":"0b7c2a4e-5d6f-4a8b-9c0d-1e2f3a4b5c6d","prompt":"fix the bug"}"#;
/// `agent:main:claude:` + sha256 hex of the S111 `session_id` (S112).
pub(crate) const CLAUDE_KEY: &str =
    "agent:main:claude:5eeb30d272634929ba01f98fd47fd4f114387b26516060195702b36c5ef42975";

/// What Claude Code really sends: the S111 input plus the fields the hook ignores.
pub(crate) fn claude_input(event: &str) -> String {
    json!({
        "session_id": "0b7c2a4e-5d6f-4a8b-9c0d-1e2f3a4b5c6d",
        "transcript_path": "/home/u/.claude/projects/-work/0b7c2a4e-5d6f-4a8b-9c0d-1e2f3a4b5c6d.jsonl",
        "cwd": "/work",
        "permission_mode": "default",
        "hook_event_name": event,
        "prompt": "fix the bug",
    })
    .to_string()
}

pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) elapsed: Duration,
}

impl Run {
    /// Exit 0, nothing on stdout, exactly one warning line on stderr (03 §8 step 5).
    pub(crate) fn assert_failed_quietly(&self) {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        assert_eq!(self.stdout, "", "stdout must stay empty");
        assert_eq!(
            self.stderr.lines().count(),
            1,
            "exactly one stderr line: {:?}",
            self.stderr
        );
        assert!(self.stderr.ends_with('\n'), "{:?}", self.stderr);
    }

    /// A prompt the gateway could not take: exit 0, one warning line, and the outage told to
    /// the human once, as Claude Code shows a hook's `systemMessage` (the state is new per run).
    pub(crate) fn assert_prompt_kept(&self) {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        assert_eq!(self.stderr.lines().count(), 1, "{:?}", self.stderr);
        assert!(self.stderr.contains("it is kept"), "{:?}", self.stderr);
        let v: serde_json::Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("{e}: {:?}", self.stdout));
        assert!(
            v["systemMessage"]
                .as_str()
                .is_some_and(|m| m.contains("is not answering")),
            "{v}"
        );
    }

    /// Exit 0 and nothing on either stream.
    pub(crate) fn assert_silent(&self) {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        assert_eq!(self.stdout, "");
        assert_eq!(self.stderr, "");
    }
}

/// Runs `aware hook --url URL ARGS…` with `input` on stdin; kills it after 30 s.
pub(crate) fn hook(url: &str, args: &[&str], input: impl Into<Vec<u8>>) -> Run {
    hook_with(url, args, input.into(), true)
}

/// Like [`hook`]; with `close_stdin` false, stdin stays open after the input until the hook
/// has exited (or been killed at 30 s), so its end of input can never come.
pub(crate) fn hook_with(url: &str, args: &[&str], input: Vec<u8>, close_stdin: bool) -> Run {
    let start = Instant::now();
    // The hook's state (its spool of what a down gateway could not take) per run, never the
    // user's own.
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .arg("hook")
        .env("XDG_STATE_HOME", state.path())
        // The spec's exact prompt; the reconcile preview has its own tests (preview.rs).
        .env("AWARE_PREVIEW_BYTES", "0")
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("AWARE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_SESSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start aware hook");
    let mut stdin = child.stdin.take().unwrap();
    // The hook may stop reading early (oversized input): a broken pipe here is expected.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
        // Handed back to be dropped only after the exit when stdin must stay open.
        (!close_stdin).then_some(stdin)
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = start + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("aware hook did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    drop(writer.join());
    Run {
        code: status.code(),
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
        elapsed,
    }
}

pub(crate) fn turns(s: &Server, key: &str) -> Vec<Value> {
    let r = s.get(&format!("/v1/sessions/{}/turns", seg(key)));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["turns"].as_array().unwrap().clone()
}

/// A loopback URL where nothing listens.
pub(crate) fn dead_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

/// The hook's turn as S111 states it.
fn assert_hook_turn(t: &Value) {
    assert_eq!(t["role"], "user", "{t}");
    assert_eq!(t["text"], "fix the bug", "{t}");
    assert_eq!(t["actorType"], "human", "{t}");
    assert_eq!(t["provenance"]["kind"], "human", "{t}");
    assert_eq!(t["channel"], "claude-code", "{t}");
    assert_eq!(t["origin"], "hook", "{t}");
}

#[test]
fn s111_hook_prints_notices_and_records_the_prompt() {
    let s = Server::family();
    s.hdm(C);
    let r = hook(&s.base, &["--session", W], INPUT);
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("System: [2026-01-01T00:00:00.000Z] {}\n", nt(C, 1))
    );
    assert_eq!(r.stderr, "");
    let t = turns(&s, W);
    assert_eq!(t.len(), 1);
    assert_hook_turn(t.last().unwrap());
    assert_eq!(s.triple(W, C), (2, 2, 2));

    // Drained: the next prompt is recorded and prints nothing.
    let r = hook(&s.base, &["--session", W], claude_input("UserPromptSubmit"));
    r.assert_silent();
    assert_eq!(turns(&s, W).len(), 2);
    assert_eq!(s.triple(W, C), (2, 2, 2));
}

#[test]
fn s112_hook_defaults_to_the_adoption_key_with_created_via_hook() {
    let s = Server::start();
    let r = hook(&s.base, &[], INPUT);
    r.assert_silent();
    let got = s.get(&format!("/v1/sessions/{}", seg(CLAUDE_KEY)));
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["createdVia"], "hook");
    assert_eq!(got.body["agentId"], "main");
    let t = turns(&s, CLAUDE_KEY);
    assert_eq!(t.len(), 1);
    assert_hook_turn(&t[0]);

    // The same thread again: same session, one more turn, no second session.
    let r = hook(&s.base, &[], claude_input("UserPromptSubmit"));
    r.assert_silent();
    assert_eq!(turns(&s, CLAUDE_KEY).len(), 2);
    assert_eq!(
        s.get("/v1/sessions").body["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // --agent picks the agent of the derived key.
    let r = hook(&s.base, &["--agent", "ops"], INPUT);
    r.assert_silent();
    let ops = CLAUDE_KEY.replace("agent:main:", "agent:ops:");
    let got = s.get(&format!("/v1/sessions/{}", seg(&ops)));
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["agentId"], "ops");
    assert_eq!(got.body["createdVia"], "hook");
    assert_eq!(turns(&s, &ops).len(), 1);
}

#[test]
fn s112_hook_creation_is_announced_via_hook() {
    let s = Server::with_config("notify_on_create = true\n[retention]\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n");
    s.create(W);
    hook(&s.base, &[], INPUT).assert_silent();
    let prompt = s.drain(W)["prompt"].as_str().unwrap().to_string();
    assert_eq!(
        prompt,
        format!(
            "System: [2026-01-01T00:00:00.000Z] New session \"{CLAUDE_KEY}\" created via hook."
        )
    );
}

#[test]
fn s112_other_events_print_and_record_nothing() {
    let s = Server::family();
    s.hdm(C);
    // (SessionStart, PostToolUse, Stop, … act since decision D27: hook_events.rs.)
    for event in [
        "PreToolUse",
        "userpromptsubmit",
        "Notification",
        "SessionEnd",
        // Claude Code 2.1.332's permission gate for a skill's shell command: nothing to hand
        // over, and printing nothing lets the command run.
        "PreSkillShellCommand",
    ] {
        hook(&s.base, &["--session", W], claude_input(event)).assert_silent();
        hook(&s.base, &[], claude_input(event)).assert_silent();
    }
    assert!(turns(&s, W).is_empty());
    assert_eq!(
        s.get(&format!("/v1/sessions/{}", seg(CLAUDE_KEY))).status,
        404
    );
    // Nothing was drained either.
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
}

#[test]
fn s112_gateway_down_exits_0_with_one_warning_within_the_timeout() {
    let r = hook(&dead_url(), &["--timeout-ms", "2000"], INPUT);
    r.assert_prompt_kept();
    assert!(r.elapsed < Duration::from_millis(2000), "{:?}", r.elapsed);
    let r = hook(&dead_url(), &["--session", W], INPUT);
    r.assert_prompt_kept();
    assert!(r.elapsed < Duration::from_millis(3000), "{:?}", r.elapsed);
}

#[test]
fn slow_gateway_is_abandoned_at_the_timeout() {
    // Accepts connections and never answers.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", l.local_addr().unwrap().port());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming() {
            held.push(c);
        }
    });
    let timeout = 800;
    let r = hook(
        &url,
        &["--session", W, "--timeout-ms", &timeout.to_string()],
        INPUT,
    );
    // The request's own timeout (the deadline less a margin) usually ends first, and the
    // prompt is then kept; a hook that reaches the deadline itself gives up with its warning.
    // Either is correct here: this test is about when the hook ends.
    if r.stdout.is_empty() {
        r.assert_failed_quietly();
    } else {
        r.assert_prompt_kept();
    }
    assert!(
        r.elapsed < Duration::from_millis(timeout + 700),
        "took {:?} with --timeout-ms {timeout}",
        r.elapsed
    );
    assert!(
        r.elapsed >= Duration::from_millis(timeout / 2),
        "gave up early: {:?}",
        r.elapsed
    );
}

#[test]
fn stdin_that_never_closes_is_abandoned_at_the_timeout() {
    let s = Server::family();
    // Claude Code closes stdin after the object; if it did not, the hook could not know the
    // input is complete. It must still end at the deadline and record nothing.
    let r = hook_with(
        &s.base,
        &["--session", W, "--timeout-ms", "600"],
        INPUT.as_bytes().to_vec(),
        false,
    );
    r.assert_failed_quietly();
    // The deadline ended it (the input never ends, so nothing else can), and on time.
    assert_eq!(
        r.stderr,
        "aware hook: warning: gave up after 600 ms (--timeout-ms)\n"
    );
    assert!(r.elapsed < Duration::from_millis(1300), "{:?}", r.elapsed);
    assert!(turns(&s, W).is_empty());
}

#[test]
fn malformed_json_is_warned_and_records_nothing() {
    let s = Server::family();
    s.hdm(C);
    for bad in [
        "",
        "{",
        r#"{"hook_event_name":"UserPromptSubmit","prompt":"x""#,
        "not json",
        "{} trailing",
        "\u{feff}{}",
    ] {
        hook(&s.base, &["--session", W], bad).assert_failed_quietly();
    }
    hook(&s.base, &["--session", W], vec![0xff, 0xfe, b'{']).assert_failed_quietly();
    assert!(turns(&s, W).is_empty());
    assert_eq!(
        s.notice_texts(W),
        vec![nt(C, 1)],
        "bad input must not drain"
    );
}

#[test]
fn non_object_input_is_warned_and_records_nothing() {
    let s = Server::family();
    for bad in [
        r#"["UserPromptSubmit"]"#,
        r#""UserPromptSubmit""#,
        "null",
        "42",
        "true",
    ] {
        hook(&s.base, &["--session", W], bad).assert_failed_quietly();
    }
    assert!(turns(&s, W).is_empty());
}

#[test]
fn oversized_input_is_warned_and_records_nothing() {
    let s = Server::family();
    s.hdm(C);
    let big = json!({
        "hook_event_name": "UserPromptSubmit",
        "session_id": "x",
        "prompt": "a".repeat(1 << 20),
    })
    .to_string();
    assert!(big.len() > 1 << 20);
    hook(&s.base, &["--session", W], big).assert_failed_quietly();
    assert!(turns(&s, W).is_empty());
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
}

/// Decision D13: a prompt the gateway refuses (over the 256 KiB turn limit, 413) is one warning,
/// and the notices waiting for the session are still printed (and so drained).
#[test]
fn refused_prompt_still_prints_pending_notices() {
    let s = Server::family();
    s.hdm(C);
    let long = json!({
        "hook_event_name": "UserPromptSubmit",
        "session_id": "x",
        "prompt": "a".repeat(300_000),
    })
    .to_string();
    let run = hook(&s.base, &["--session", W], long);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!("System: [2026-01-01T00:00:00.000Z] {}\n", nt(C, 1))
    );
    assert_eq!(run.stderr.lines().count(), 1, "{:?}", run.stderr);
    assert!(run.stderr.contains("payload_too_large"), "{}", run.stderr);
    assert!(turns(&s, W).is_empty());
    assert!(s.notice_texts(W).is_empty());
}

/// Decision D13: `aware hook --help` prints the usage and exits 0; an unknown flag exits 1 (Claude
/// Code shows it without blocking the prompt) instead of silently turning the hook off.
#[test]
fn hook_help_and_argument_errors() {
    let out = Command::new(bin())
        .args(["hook", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: aware hook"), "{help}");
    assert!(help.contains("--timeout-ms"), "{help}");
    for args in [
        vec!["hook", "--bogus"],
        vec!["hook", "--timeout-ms", "soon"],
        vec!["hook", "--event", "Post Tool Use"],
        vec!["hook", "--event", ""],
    ] {
        let out = Command::new(bin())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("error:"));
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn missing_or_mistyped_fields_are_warned_and_record_nothing() {
    let s = Server::family();
    s.hdm(C);
    for bad in [
        json!({"session_id": "s", "prompt": "p"}),
        json!({"hook_event_name": 7, "session_id": "s", "prompt": "p"}),
        json!({"hook_event_name": "UserPromptSubmit", "session_id": "s"}),
        json!({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": null}),
        json!({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": ["p"]}),
    ] {
        hook(&s.base, &["--session", W], bad.to_string()).assert_failed_quietly();
    }
    // Without --session the session_id is needed to derive the key.
    for bad in [
        json!({"hook_event_name": "UserPromptSubmit", "prompt": "p"}),
        json!({"hook_event_name": "UserPromptSubmit", "session_id": "", "prompt": "p"}),
        json!({"hook_event_name": "UserPromptSubmit", "session_id": 5, "prompt": "p"}),
    ] {
        hook(&s.base, &[], bad.to_string()).assert_failed_quietly();
    }
    assert!(turns(&s, W).is_empty());
    assert_eq!(
        s.get("/v1/sessions").body["sessions"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);

    // With --session, session_id is not needed: exactly one turn, and the notice is printed.
    let r = hook(
        &s.base,
        &["--session", W],
        r#"{"hook_event_name":"UserPromptSubmit","prompt":"fix the bug"}"#,
    );
    assert_eq!(r.code, Some(0));
    assert_eq!(
        r.stdout,
        format!("System: [2026-01-01T00:00:00.000Z] {}\n", nt(C, 1))
    );
    assert_eq!(turns(&s, W).len(), 1);
}

#[test]
fn bare_session_with_agent_is_created_for_that_agent() {
    let s = Server::start();
    hook(&s.base, &["--session", "global", "--agent", "ops"], INPUT).assert_silent();
    let got = s.get("/v1/sessions/global?agentId=ops");
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["createdVia"], "hook");
    let t = s.get("/v1/sessions/global/turns?agentId=ops").body["turns"].clone();
    assert_eq!(t.as_array().unwrap().len(), 1);
    assert_hook_turn(&t[0]);
    assert_eq!(s.get("/v1/sessions/global?agentId=main").status, 404);
}

#[test]
fn token_is_sent_and_a_refusal_is_one_warning() {
    let s = Server::with_args(DEFAULT_CONFIG, &["--token", "sekret-0123456789"]);
    s.create(W);
    hook(
        &s.base,
        &["--session", W, "--token", "sekret-0123456789"],
        INPUT,
    )
    .assert_silent();
    assert_eq!(turns(&s, W).len(), 1);
    let r = hook(&s.base, &["--session", W], INPUT);
    r.assert_failed_quietly();
    assert!(r.stderr.contains("unauthorized"), "{}", r.stderr);
    assert_eq!(turns(&s, W).len(), 1);
}

#[test]
fn create_route_accepts_only_hook_as_created_via() {
    let s = Server::start();
    let r = s.post(
        "/v1/sessions",
        json!({"key": "agent:main:h", "createdVia": "hook"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["session"]["createdVia"], "hook");
    for bad in [json!("api"), json!("adoption"), json!(1), json!(null)] {
        let r = s.post(
            "/v1/sessions",
            json!({"key": "agent:main:h2", "createdVia": bad}),
        );
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.code(), "invalid_argument");
    }
    assert_eq!(s.get("/v1/sessions/agent:main:h2").status, 404);
    assert_eq!(
        s.post("/v1/sessions", json!({"key": "agent:main:h3"})).body["session"]["createdVia"],
        "api"
    );
}
