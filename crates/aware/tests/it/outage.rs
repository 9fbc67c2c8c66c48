//! Nothing lost while the gateway is down (`aware hook`'s spool), black box: prompts typed during
//! an outage are kept, replayed once and in order when the gateway answers again, and the human
//! is told of the outage once.

use crate::common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `aware hook --session W` with `input`, its state under `state`; (stdout, stderr).
fn hook(base: &str, state: &Path, input: Value) -> (String, String) {
    let mut child = Command::new(bin())
        .args([
            "hook",
            "--url",
            base,
            "--session",
            W,
            "--timeout-ms",
            "2000",
        ])
        .env_remove("AWARE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_SESSION")
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn prompt(text: &str) -> Value {
    json!({"session_id": "s-1", "hook_event_name": "UserPromptSubmit", "prompt": text})
}

fn user_turns(s: &Server) -> Vec<String> {
    s.get(&format!("/v1/sessions/{}/turns", seg(W))).body["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] == "user")
        .map(|t| t["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn prompts_typed_while_the_gateway_is_down_are_recorded_once_in_order_when_it_is_back() {
    let port = free_port();
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--bind", &format!("127.0.0.1:{port}")]);
    s.create(W);
    let state = tempfile::tempdir().unwrap();
    let (out, _) = hook(&s.base, state.path(), prompt("before"));
    assert_eq!(out, "");
    s.stop();
    // The first hook that finds the gateway down says so, where Claude Code shows it; the next
    // one does not repeat it.
    let (out, _) = hook(&s.base, state.path(), prompt("first while down"));
    let shown: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let msg = shown["systemMessage"].as_str().unwrap();
    assert!(
        msg.contains("is not answering") && msg.contains("aware serve"),
        "{msg}"
    );
    let (out, _) = hook(&s.base, state.path(), prompt("second while down"));
    assert_eq!(out, "", "the outage was told twice");
    s.restart();
    assert_eq!(s.port, port);
    // The next hook run, whatever its event, records what was kept, then does its own work.
    let (out, err) = hook(
        &s.base,
        state.path(),
        json!({"session_id": "s-1", "hook_event_name": "PostToolUse", "tool_name": "Bash"}),
    );
    assert_eq!(out, "", "{err}");
    assert_eq!(
        user_turns(&s),
        ["before", "first while down", "second while down"]
    );
    // Replayed once: another run finds nothing kept.
    hook(
        &s.base,
        state.path(),
        json!({"session_id": "s-1", "hook_event_name": "PostToolUse", "tool_name": "Bash"}),
    );
    assert_eq!(user_turns(&s).len(), 3);
    // A new outage is told again.
    s.stop();
    let (out, _) = hook(&s.base, state.path(), prompt("third"));
    assert!(out.contains("systemMessage"), "{out}");
}

#[test]
fn a_subagent_and_a_compaction_while_the_gateway_is_down_are_recorded_when_it_is_back() {
    let port = free_port();
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--bind", &format!("127.0.0.1:{port}")]);
    s.create(W);
    let state = tempfile::tempdir().unwrap();
    s.stop();
    let sub = |event: &str| {
        json!({"session_id": "s-1", "hook_event_name": event, "agent_id": "a1",
               "agent_type": "general-purpose", "stop_hook_active": false})
    };
    for input in [
        sub("SubagentStart"),
        sub("SubagentStop"),
        json!({"session_id": "s-1", "hook_event_name": "PreCompact", "trigger": "manual"}),
    ] {
        let (out, err) = hook(&s.base, state.path(), input);
        assert_eq!(out, "");
        assert!(err.contains("it is kept"), "{err}");
    }
    s.restart();
    hook(
        &s.base,
        state.path(),
        json!({"session_id": "s-1", "hook_event_name": "PostToolUse", "tool_name": "Bash"}),
    );
    let child = "agent:main:subagent:claude-a1";
    let r = s.get(&format!("/v1/sessions/{}", seg(child)));
    assert_eq!(
        r.status, 200,
        "the subagent's session was not created: {}",
        r.body
    );
    assert_eq!(r.body["parentSessionKey"], W, "{}", r.body);
    // Its run started and ended: `run_completed` is in its log.
    let st = s.tool(
        W,
        "session_status",
        json!({"sessionKey": child, "changesSince": 0}),
    );
    let kinds: Vec<&str> = st.body["stateChanges"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"run_completed"), "{}", st.body);
    let turns = s.get(&format!("/v1/sessions/{}/turns", seg(W))).body;
    let compactions = turns["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] == "compaction")
        .count();
    assert_eq!(compactions, 1, "{turns}");
}
