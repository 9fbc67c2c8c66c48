//! Decision D27: `aware hook` on every event that lets a running agent hear a change before it acts
//! (SessionStart, PostToolUse, Stop, subagents, compaction), Codex's answer format, the waiting
//! hook that wakes an idle session, and `aware init` for both CLIs. The binary is fed the JSON
//! the CLIs send (fields as the pinned CLIs write them); the real CLIs run in agent_clis.rs.

use crate::common::*;
use crate::hook::{dead_url, hook, turns, Run};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SID: &str = "ddc20e11-5c86-4bc2-b2b5-4e1b7a069b09";

fn input(event: &str, extra: Value) -> String {
    let mut v = json!({"session_id": SID, "transcript_path": "/nonexistent/t.jsonl",
                       "cwd": "/work", "hook_event_name": event});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v.to_string()
}

fn context_of(r: &Run) -> String {
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON answer ({e}): {:?}", r.stdout));
    v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_else(|| panic!("no additionalContext: {v}"))
        .to_string()
}

fn line(n: i64) -> String {
    format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, n))
}

#[test]
fn post_tool_use_hands_a_pending_notice_over_once() {
    let s = Server::family();
    // Nothing pending: silent, one request.
    hook(
        &s.base,
        &["--session", W],
        input("PostToolUse", json!({"tool_name": "Bash"})),
    )
    .assert_silent();
    s.hdm(C);
    let r = hook(
        &s.base,
        &["--session", W],
        input("PostToolUse", json!({"tool_name": "Bash"})),
    );
    assert_eq!(context_of(&r), line(1));
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PostToolUse");
    // Acknowledged: never shown again.
    hook(&s.base, &["--session", W], input("PostToolUse", json!({}))).assert_silent();
    assert!(s.notice_texts(W).is_empty());
    assert_eq!(s.triple(W, C), (2, 2, 2));
}

#[test]
fn session_start_creates_the_session_and_hands_notices_over() {
    let s = Server::family();
    let key = "agent:main:project:fresh";
    hook(
        &s.base,
        &["--session", key],
        input("SessionStart", json!({"source": "startup"})),
    )
    .assert_silent();
    let got = s.get(&format!("/v1/sessions/{}", seg(key)));
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["createdVia"], "hook");
    s.hdm(C);
    let r = hook(
        &s.base,
        &["--session", W],
        input("SessionStart", json!({"source": "resume"})),
    );
    assert_eq!(context_of(&r), line(1));
}

#[test]
fn parallel_post_tool_use_hooks_show_a_notice_once() {
    let s = Server::family();
    s.hdm(C);
    let runs: Vec<Run> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let base = s.base.clone();
                sc.spawn(move || {
                    hook(
                        &base,
                        &["--session", W],
                        input("PostToolUse", json!({"tool_use_id": format!("t{i}")})),
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let shown: Vec<&Run> = runs.iter().filter(|r| !r.stdout.is_empty()).collect();
    assert_eq!(shown.len(), 1, "exactly one hook shows the notice");
    assert_eq!(context_of(shown[0]), line(1));
    for r in &runs {
        assert_eq!(r.code, Some(0));
        assert_eq!(r.stderr, "", "{}", r.stderr);
    }
}

#[test]
fn stop_blocks_once_with_the_notice_and_never_loops() {
    let s = Server::family();
    hook(
        &s.base,
        &["--session", W],
        input("Stop", json!({"stop_hook_active": false})),
    )
    .assert_silent();
    s.hdm(C);
    // Already continuing because of a stop hook: no block, nothing drained.
    hook(
        &s.base,
        &["--session", W],
        input("Stop", json!({"stop_hook_active": true})),
    )
    .assert_silent();
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    let r = hook(
        &s.base,
        &["--session", W],
        input("Stop", json!({"stop_hook_active": false})),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v, json!({"decision": "block", "reason": line(1)}));
    assert!(s.notice_texts(W).is_empty());
    // The second stop lets it go.
    hook(
        &s.base,
        &["--session", W],
        input("Stop", json!({"stop_hook_active": false})),
    )
    .assert_silent();
}

#[test]
fn no_event_fails_or_blocks_when_the_gateway_is_down() {
    let dead = dead_url();
    for (event, extra) in [
        ("SessionStart", json!({"source": "startup"})),
        ("PostToolUse", json!({})),
        ("Stop", json!({"stop_hook_active": false})),
        (
            "SubagentStart",
            json!({"agent_id": "a1", "agent_type": "general-purpose"}),
        ),
        (
            "SubagentStop",
            json!({"agent_id": "a1", "agent_type": "general-purpose"}),
        ),
        ("PreCompact", json!({"trigger": "manual"})),
    ] {
        let r = hook(
            &dead,
            &["--session", W, "--timeout-ms", "2000"],
            input(event, extra),
        );
        r.assert_failed_quietly();
        assert!(
            r.stderr.contains("gateway unavailable"),
            "{event}: {}",
            r.stderr
        );
    }
}

#[test]
fn a_native_subagent_becomes_a_child_session_with_its_run() {
    let s = Server::family();
    let sub = json!({"agent_id": "acd35e59534e43b6b", "agent_type": "general-purpose"});
    hook(
        &s.base,
        &["--session", W],
        input("SubagentStart", sub.clone()),
    )
    .assert_silent();
    let child = "agent:main:subagent:claude-acd35e59534e43b6b";
    let got = s.get(&format!("/v1/sessions/{}", seg(child)));
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["parentSessionKey"], W);
    assert_eq!(got.body["status"], "running");
    let mut stop = sub.clone();
    stop["stop_hook_active"] = json!(false);
    stop["last_assistant_message"] = json!("done");
    hook(
        &s.base,
        &["--session", W],
        input("SubagentStop", stop.clone()),
    )
    .assert_silent();
    // A repeated stop is harmless.
    hook(&s.base, &["--session", W], input("SubagentStop", stop)).assert_silent();
    let st = s.status(W, child, 0);
    assert_eq!(st["status"], "idle", "{st}");
    let kinds: Vec<&str> = st["stateChanges"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["child_spawned", "run_completed"], "{st}");
    // The parent's cursor on the child was seeded (02 §4): it watches it now.
    assert!(s.cursor(W, child).is_some());
}

#[test]
fn a_compactions_forked_summariser_is_no_subagent() {
    let s = Server::family();
    let fork =
        json!({"agent_id": "a01aae97858e78a9a", "agent_type": "", "stop_hook_active": false});
    hook(&s.base, &["--session", W], input("SubagentStop", fork)).assert_silent();
    let child = "agent:main:subagent:claude-a01aae97858e78a9a";
    assert_eq!(s.get(&format!("/v1/sessions/{}", seg(child))).status, 404);
}

#[test]
fn pre_compact_records_compacted_once_per_compaction() {
    let s = Server::family();
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.jsonl");
    std::fs::write(&t, "{}\n").unwrap();
    let pre = |s: &Server| {
        hook(
            &s.base,
            &["--session", W],
            input(
                "PreCompact",
                json!({"trigger": "manual", "transcript_path": t}),
            ),
        )
        .assert_silent()
    };
    pre(&s);
    pre(&s); // the same compaction delivered twice
    std::fs::write(&t, "{}\n{}\n").unwrap();
    pre(&s); // a later one
    let st = s.status(C, W, 0);
    let compacted = st["stateChanges"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "compacted")
        .count();
    assert_eq!(compacted, 2, "{st}");
}

#[test]
fn a_background_task_notification_is_no_human_turn() {
    let s = Server::family();
    s.hdm(C);
    let prompt = "<task-notification>\n<status>completed</status>\n</task-notification>";
    let r = hook(
        &s.base,
        &["--session", W],
        input("UserPromptSubmit", json!({"prompt": prompt})),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, format!("{}\n", line(1)));
    assert!(turns(&s, W).is_empty());
}

#[test]
fn codex_prompts_are_recorded_and_answered_as_json() {
    let s = Server::family();
    s.hdm(C);
    let r = hook(
        &s.base,
        &["--session", W, "--cli", "codex"],
        input(
            "UserPromptSubmit",
            json!({"prompt": "fix the bug", "turn_id": "t1", "model": "gpt-5"}),
        ),
    );
    assert_eq!(context_of(&r), line(1));
    let t = turns(&s, W);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["channel"], "codex");
    assert_eq!(t[0]["provenance"]["kind"], "human");
}

// ---- the waiting hook -------------------------------------------------------------------

fn spawn_waiter(url: &str, state: &Path, extra: &[&str]) -> Child {
    let mut child = Command::new(bin())
        .args(["hook", "--url", url, "--session", W, "--wait"])
        .args(extra)
        // The spec's exact prompt; the reconcile preview has its own tests (preview.rs).
        .env("AWARE_PREVIEW_BYTES", "0")
        .env_remove("AWARE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_SESSION")
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start aware hook --wait");
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(input("Stop", json!({"stop_hook_active": false})).as_bytes())
        .unwrap();
    drop(stdin);
    child
}

/// Waits for the exit (killing it after `limit`, which fails the test).
fn finish(mut child: Child, limit: Duration) -> Run {
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("aware hook --wait did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
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

/// The pid the session's waiter slot names, once it names `pid`.
fn wait_for_slot(state: &Path, pid: u32) {
    let dir = state.join("aware/waiters");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(&dir)
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                // The record is `<pid> <start time>`.
                std::fs::read_to_string(e.path())
                    .is_ok_and(|p| p.split_whitespace().next() == Some(&pid.to_string()))
            });
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waiter {pid} never took its slot"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_waiting_hook_wakes_with_the_notice_and_acknowledges_it() {
    let s = Server::family();
    let state = tempfile::tempdir().unwrap();
    let w = spawn_waiter(&s.base, state.path(), &[]);
    wait_for_slot(state.path(), w.id());
    s.hdm(C);
    let r = finish(w, Duration::from_secs(30));
    assert_eq!(r.code, Some(2), "stderr: {}", r.stderr);
    assert_eq!(r.stderr, format!("{}\n", line(1)));
    assert_eq!(r.stdout, "");
    assert!(s.notice_texts(W).is_empty());
    // A notice already pending when it starts is delivered at once (catch-up).
    s.hdm(C);
    let r = finish(
        spawn_waiter(&s.base, state.path(), &[]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(2), "stderr: {}", r.stderr);
    assert!(r.stderr.contains(&nt(C, 2)), "{}", r.stderr);
}

#[test]
fn a_new_waiter_replaces_the_old_one_which_exits_quietly() {
    let s = Server::family();
    let state = tempfile::tempdir().unwrap();
    let old = spawn_waiter(&s.base, state.path(), &[]);
    wait_for_slot(state.path(), old.id());
    let new = spawn_waiter(&s.base, state.path(), &[]);
    let r = finish(old, Duration::from_secs(30));
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (Some(0), "", "")
    );
    wait_for_slot(state.path(), new.id());
    s.hdm(C);
    let r = finish(new, Duration::from_secs(30));
    assert_eq!(r.code, Some(2), "stderr: {}", r.stderr);
}

#[test]
fn the_waiting_hook_gives_up_silently() {
    let s = Server::family();
    let state = tempfile::tempdir().unwrap();
    let r = finish(
        spawn_waiter(&s.base, state.path(), &["--wait-secs", "1"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (Some(0), "", "")
    );
    // With the gateway down too.
    let r = finish(
        spawn_waiter(&dead_url(), state.path(), &["--wait-secs", "1"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (Some(0), "", "")
    );
}

#[test]
fn input_from_inside_a_subagent_is_not_the_sessions() {
    let s = Server::family();
    s.hdm(C);
    let sub = json!({"agent_id": "019a-sub", "agent_type": "default", "turn_id": "t2"});
    let mut prompt = sub.clone();
    prompt["prompt"] = json!("Say what you see.");
    for (event, extra) in [
        ("UserPromptSubmit", prompt),
        ("PostToolUse", sub.clone()),
        ("Stop", sub),
    ] {
        hook(
            &s.base,
            &["--session", W, "--cli", "codex"],
            input(event, extra),
        )
        .assert_silent();
    }
    assert!(
        turns(&s, W).is_empty(),
        "the subagent's task is no human turn"
    );
    assert_eq!(
        s.notice_texts(W),
        vec![nt(C, 1)],
        "the manager's notice stays its own"
    );
}

#[test]
fn the_waiting_hook_does_nothing_in_an_unattended_claude_code() {
    let s = Server::family();
    s.hdm(C);
    let state = tempfile::tempdir().unwrap();
    let mut c = Command::new(bin());
    c.args(["hook", "--url", &s.base, "--session", W, "--wait"])
        .env("CLAUDE_CODE_SESSION_ATTENDED", "0")
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let _ = child
        .stdin
        .take()
        .unwrap()
        .write_all(input("Stop", json!({})).as_bytes());
    let r = finish(child, Duration::from_secs(30));
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (Some(0), "", "")
    );
    assert_eq!(
        s.notice_texts(W),
        vec![nt(C, 1)],
        "left pending for the next prompt"
    );
}

/// Claude Code's PostToolBatch (once per batch of parallel tool calls) hands over like
/// PostToolUse, answering under its own event name; `--event` with an event the hook does not
/// act on (a CLI's newer one) does nothing, whatever the input says.
#[test]
fn post_tool_batch_hands_a_notice_over_and_unknown_events_do_nothing() {
    let s = Server::family();
    s.hdm(C);
    let batch = json!({"tool_calls": [
        {"tool_name": "Bash", "tool_input": {"command": "echo one"}, "tool_use_id": "a",
         "tool_response": "one"},
        {"tool_name": "Bash", "tool_input": {"command": "echo two"}, "tool_use_id": "b",
         "tool_response": "two"}]});
    for forced in [
        &["--event", "PreSkillShellCommand"][..],
        &["--event", "Elicitation"],
    ] {
        let mut args = vec!["--session", W];
        args.extend_from_slice(forced);
        hook(&s.base, &args, input("PostToolBatch", batch.clone())).assert_silent();
    }
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)], "nothing drained");
    let r = hook(&s.base, &["--session", W], input("PostToolBatch", batch));
    assert_eq!(context_of(&r), line(1));
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PostToolBatch");
    assert!(s.notice_texts(W).is_empty());
}
