//! `aware hook --cli codex --wait`, the waiting hook that wakes an idle Codex session: it hands
//! the drained text over with `codex queue --thread <session_id> --message <text>` (a `codex`
//! stand-in on PATH records what it was given), the queued prompt is no human turn when it comes
//! back through `UserPromptSubmit`, and a failed `codex queue` puts the text back on the
//! session's queue. The real Codex runs in agent_clis.rs (`codex_wake`).

use crate::common::*;
use crate::hook::{turns, Run};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SID: &str = "01a24678-3b9e-7bb3-9814-659b47a1338e";

/// A temp dir with the state directory and a `codex` stand-in in `bin/` that writes its
/// arguments (NUL-separated) to `args`, prints `stderr` there and exits with `code`.
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new(code: i32, stderr: &str) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let script = bin.join("codex");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nprintf '%s\\0' \"$@\" > '{}'\necho '{stderr}' >&2\nexit {code}\n",
                dir.path().join("args").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        Fake { dir }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The arguments `codex` was run with (empty when it was not run).
    fn args(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("args"))
            .unwrap_or_default()
            .split('\0')
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn marks_left(&self) -> usize {
        std::fs::read_dir(self.state().join("aware/codex-queued"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// `aware hook --url URL --session W --cli codex ARGS…` with `input`, this state
    /// directory and the stand-in first on PATH; killed (failing the test) after 30 s.
    fn hook(&self, url: &str, args: &[&str], input: &str) -> Run {
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let start = Instant::now();
        let mut child = Command::new(bin())
            .args(["hook", "--url", url, "--session", W, "--cli", "codex"])
            .args(args)
            // The spec's exact prompt; the reconcile preview has its own tests (preview.rs).
            .env("AWARE_PREVIEW_BYTES", "0")
            .env_remove("AWARE_URL")
            .env_remove("AWARE_TOKEN")
            .env_remove("AWARE_SESSION")
            .env_remove("CODEX_MANAGED_PACKAGE_ROOT")
            .env("PATH", path)
            .env("XDG_STATE_HOME", self.state())
            // Claude Code's, inherited by a Codex started inside it: the Codex waiter does not
            // answer to it (a Claude Code waiter would refuse to wait: no such ancestor).
            .env("CLAUDE_PID", "2147483646")
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
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("aware hook {args:?} did not end within 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let (mut stdout, mut stderr) = (String::new(), String::new());
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        Run {
            code: status.code(),
            stdout,
            stderr,
            elapsed: start.elapsed(),
        }
    }
}

fn input(event: &str, extra: Value) -> String {
    let mut v = json!({"session_id": SID, "cwd": "/work", "hook_event_name": event});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v.to_string()
}

fn user_turns(s: &Server) -> Vec<Value> {
    turns(s, W)
        .into_iter()
        .filter(|t| t["role"] == "user")
        .collect()
}

/// The drain's line for notice `n` of C.
fn line(n: i64) -> String {
    format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, n))
}

fn pending_prompt(s: &Server) -> String {
    s.pending(W)["prompt"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_codex_waiter_queues_the_notice_on_its_thread_and_the_queued_prompt_is_no_human_turn() {
    let s = Server::family();
    let fake = Fake::new(0, "Queued message m1 for thread t1.");
    // Pending before the waiter starts: it drains on connect.
    s.hdm(C);
    let r = fake.hook(&s.base, &["--wait"], &input("Stop", json!({})));
    r.assert_silent();
    let args = fake.args();
    assert_eq!(args.len(), 5, "{args:?}");
    assert_eq!(
        args[..4],
        ["queue", "--thread", SID, "--message"],
        "{args:?}"
    );
    let queued = args[4].clone();
    assert!(queued.contains(&nt(C, 1)), "{queued}");
    assert!(s.notice_texts(W).is_empty(), "acknowledged by the drain");
    assert_eq!(fake.marks_left(), 1);

    // Codex runs the queued turn's UserPromptSubmit with that text: no human turn, and what
    // is pending by then is still handed over.
    s.hdm(C);
    let prompt = input("UserPromptSubmit", json!({"prompt": queued}));
    let r = fake.hook(&s.base, &[], &prompt);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let answer: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default();
    assert!(context.contains(&nt(C, 2)), "{}", r.stdout);
    assert!(user_turns(&s).is_empty(), "{:?}", user_turns(&s));
    assert_eq!(fake.marks_left(), 0);
    // The mark is used once: the same text typed again is a human turn.
    let r = fake.hook(&s.base, &[], &prompt);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(user_turns(&s).len(), 1);
    assert_eq!(user_turns(&s)[0]["provenance"]["kind"], "human");
}

#[test]
fn a_failed_codex_queue_puts_the_text_back_on_the_sessions_queue_with_a_warning() {
    let s = Server::family();
    let fake = Fake::new(1, "Error: no thread t1");
    s.hdm(C);
    let r = fake.hook(&s.base, &["--wait"], &input("Stop", json!({})));
    r.assert_failed_quietly();
    assert!(r.stderr.contains("`codex queue` failed"), "{}", r.stderr);
    assert!(r.stderr.contains("Error: no thread t1"), "{}", r.stderr);
    assert!(r.stderr.contains("queued again"), "{}", r.stderr);
    assert_eq!(fake.args()[0], "queue");
    // The next hand-over carries the text; no mark stays behind for a turn that never came.
    assert_eq!(pending_prompt(&s).trim(), line(1), "{}", s.pending(W));
    assert_eq!(fake.marks_left(), 0);
}

#[test]
fn the_codex_waiter_without_a_thread_drains_nothing() {
    let s = Server::family();
    let fake = Fake::new(0, "");
    s.hdm(C);
    let no_thread = json!({"hook_event_name": "Stop", "cwd": "/work"}).to_string();
    let r = fake.hook(&s.base, &["--wait"], &no_thread);
    r.assert_failed_quietly();
    assert!(r.stderr.contains("no session_id"), "{}", r.stderr);
    assert!(fake.args().is_empty());
    assert_eq!(s.notice_texts(W).len(), 1);
}
