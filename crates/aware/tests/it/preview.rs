//! The reconcile preview (`aware_engine`'s `preview`), black box: what a hook hands the model
//! next to a notice (the delta in one read: who, how, the human's words), within its budget,
//! with the notice line itself unchanged.

use crate::common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

/// `aware hook --session W` on a PostToolUse, with `AWARE_PREVIEW_BYTES` as given (unset: the
/// default); returns the `additionalContext` it printed.
fn post_tool_use(base: &str, preview_bytes: Option<&str>) -> String {
    let mut c = Command::new(bin());
    c.args(["hook", "--url", base, "--session", W])
        .env_remove("AWARE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_SESSION")
        .env_remove("AWARE_PREVIEW_BYTES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(b) = preview_bytes {
        c.env("AWARE_PREVIEW_BYTES", b);
    }
    let mut child = c.spawn().unwrap();
    let input = json!({"session_id": "s-1", "hook_event_name": "PostToolUse", "tool_name": "Bash"});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The line after the notices that names the tools as Claude Code and Codex show them.
const TOOLS: &str = "System: (In this session the tools are mcp__aware__session_status for the \
                     exact delta and mcp__aware__sessions_history for the words.)";

fn human_turn(s: &Server, text: &str) -> i64 {
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(C)),
        json!({"role": "user", "text": text, "channel": "slack"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["event"]["sequence"].as_i64().unwrap()
}

#[test]
fn the_hook_shows_who_changed_what_next_to_the_notice_once() {
    let s = Server::family();
    let seq = human_turn(&s, "use the staging database");
    let peeked = s.pending(W)["prompt"].as_str().unwrap().to_string();
    let shown = post_tool_use(&s.base, None);
    assert_eq!(
        shown,
        format!(
            "{peeked}\nSystem: #{seq} human_direct_message by human via slack: \"use the \
             staging database\"\n{TOOLS}"
        )
    );
    // The notice line itself is the spec's, byte for byte; handed over once.
    assert!(shown.starts_with(&format!(
        "System: [2026-01-01T00:00:00.000Z] {}",
        nt(C, seq - 1)
    )));
    assert_eq!(s.pending(W)["prompt"], "");
}

#[test]
fn a_delta_longer_than_the_budget_ends_with_where_to_read_the_rest() {
    let s = Server::family();
    let first = human_turn(&s, "one");
    for t in ["two", "three", "four"] {
        human_turn(&s, t);
    }
    let shown = post_tool_use(&s.base, Some("120"));
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[1],
        format!("System: #{first} human_direct_message by human via slack: \"one\"")
    );
    // The pointer names the tool as the CLI shows it, and the tools line closes the hand-over.
    assert_eq!(
        lines[lines.len() - 2],
        format!(
            "System: … 2 more: mcp__aware__session_status sessionKey \"{C}\" changesSince {}",
            first + 1
        ),
        "{shown}"
    );
    assert_eq!(lines.last().copied(), Some(TOOLS), "{shown}");
    assert_eq!(lines.len(), 5, "{shown}");
}

#[test]
fn a_drain_that_asks_gets_the_preview_beside_the_unchanged_notice() {
    let s = Server::family();
    let seq = human_turn(&s, "hi");
    let r = s.post(
        &format!("/v1/sessions/{}/drain", seg(W)),
        json!({"previewBytes": 1024}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let n = &r.body["notices"][0];
    assert_eq!(n["text"], nt(C, seq - 1));
    assert_eq!(
        n["preview"],
        format!("#{seq} human_direct_message by human via slack: \"hi\"")
    );
    // Off when not asked (the spec's answer) and refused out of range.
    human_turn(&s, "again");
    let r = s.post(&format!("/v1/sessions/{}/drain", seg(W)), json!({}));
    assert!(r.body["notices"][0].get("preview").is_none(), "{}", r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/drain", seg(W)),
        json!({"previewBytes": 100000}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.message().contains("previewBytes"), "{}", r.body);
}

#[test]
fn a_drain_refuses_a_tool_prefix_that_is_not_a_tool_name_prefix() {
    let s = Server::family();
    for bad in ["MCP__", "mcp aware", "x".repeat(33).as_str(), "a\"b"] {
        let r = s.post(
            &format!("/v1/sessions/{}/drain", seg(W)),
            json!({"previewBytes": 1024, "toolPrefix": bad}),
        );
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
        assert!(r.message().contains("toolPrefix"), "{}", r.body);
    }
}
