//! `aware init gemini` and `aware hook --cli gemini` against a real gateway: the files init
//! writes for Gemini CLI (hooks, MCP server, hook trust, folder trust when asked), and the hook
//! fed the JSON Gemini CLI 0.61.0 sends (`BeforeAgent`, `AfterTool`, `AfterAgent`), answered
//! in the shape it reads. The real CLI runs in agent_clis/gemini.rs.

use crate::common::*;
use crate::hook::{hook, turns, Run};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

const KEY: &str = "agent:main:project:demo";
const SID: &str = "0b8e4b52-7a51-4d1c-9d43-3f3c2b1a0e77";

/// Gemini CLI's hook input: the base fields of every event, then the event's own.
fn input(event: &str, extra: Value) -> String {
    let mut v = json!({"session_id": SID, "cwd": "/work", "hook_event_name": event,
        "transcript_path": "/nonexistent/session.jsonl", "timestamp": "2026-01-01T00:00:00.000Z"});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v.to_string()
}

fn gemini(s: &Server, event: &str, extra: Value) -> Run {
    hook(
        &s.base,
        &["--session", W, "--cli", "gemini"],
        input(event, extra),
    )
}

/// The one JSON answer on stdout.
fn answer(r: &Run) -> Value {
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON answer ({e}): {:?}", r.stdout))
}

fn line(n: i64) -> String {
    format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, n))
}

#[test]
fn gemini_before_agent_records_the_prompt_and_after_tool_hands_notices_over_once() {
    let s = Server::family();
    s.hdm(C);
    let v = answer(&gemini(&s, "BeforeAgent", json!({"prompt": "fix the bug"})));
    assert_eq!(
        v,
        json!({"hookSpecificOutput": {"hookEventName": "BeforeAgent",
                                      "additionalContext": line(1)}})
    );
    let t = turns(&s, W);
    assert_eq!(t.len(), 1);
    assert_eq!(
        (&t[0]["text"], &t[0]["channel"], &t[0]["provenance"]["kind"]),
        (&json!("fix the bug"), &json!("gemini-cli"), &json!("human"))
    );
    // Nothing pending: silent.
    let tool = json!({"tool_name": "run_shell_command", "tool_input": {"command": "ls"},
                      "tool_response": {"llmContent": "a\n"}});
    gemini(&s, "AfterTool", tool.clone()).assert_silent();
    s.hdm(C);
    let v = answer(&gemini(&s, "AfterTool", tool.clone()));
    assert_eq!(
        v,
        json!({"hookSpecificOutput": {"hookEventName": "AfterTool",
                                      "additionalContext": line(2)}})
    );
    gemini(&s, "AfterTool", tool).assert_silent();
    assert!(s.notice_texts(W).is_empty());
}

#[test]
fn gemini_after_agent_blocks_once_and_its_reason_is_no_human_turn() {
    let s = Server::family();
    s.hdm(C);
    let stop = |active: bool| {
        gemini(
            &s,
            "AfterAgent",
            json!({"prompt": "fix the bug", "prompt_response": "[no response text]",
                   "stop_hook_active": active}),
        )
    };
    // Continuing because of a stop hook: let go, nothing drained.
    stop(true).assert_silent();
    let v = answer(&stop(false));
    assert_eq!(v, json!({"decision": "block", "reason": line(1)}));
    // Gemini CLI sends the reason as a new prompt and runs BeforeAgent on it: drained for,
    // never recorded.
    s.hdm(C);
    let v = answer(&gemini(&s, "BeforeAgent", json!({ "prompt": line(1) })));
    assert_eq!(v["hookSpecificOutput"]["additionalContext"], line(2));
    assert!(turns(&s, W).is_empty(), "{:?}", turns(&s, W));
    stop(true).assert_silent();
    stop(false).assert_silent();
}

/// Gemini CLI fires `PreCompress` before every check whether to compress, so it marks no
/// compaction; neither it nor an event the hook does not act on drains or records anything.
#[test]
fn gemini_pre_compress_and_other_events_record_and_drain_nothing() {
    let s = Server::family();
    s.hdm(C);
    for event in [
        "PreCompress",
        "BeforeModel",
        "AfterModel",
        "BeforeTool",
        "Notification",
        "SessionEnd",
    ] {
        gemini(&s, event, json!({"trigger": "auto"})).assert_silent();
    }
    assert_eq!(s.notice_texts(W).len(), 1, "nothing was drained");
    let st = s.status(C, W, 0);
    assert!(
        !st["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "compacted"),
        "{st}"
    );
}

fn init_cmd(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    for v in [
        "AWARE_URL",
        "AWARE_TOKEN",
        "AWARE_SESSION",
        "GEMINI_CLI_HOME",
        "GEMINI_CLI_TRUSTED_FOLDERS_PATH",
    ] {
        c.env_remove(v);
    }
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", "/nonexistent-aware-test-config")
        .args(args);
    c
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn init_gemini_writes_hooks_server_and_hook_trust_and_never_clobbers() {
    let s = Server::family();
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let p = std::fs::canonicalize(project.path()).unwrap();
    let ps = p.to_str().unwrap().to_string();
    std::fs::create_dir(p.join(".gemini")).unwrap();
    std::fs::write(
        p.join(".gemini/settings.json"),
        json!({"model": {"name": "gemini-2.5-pro"},
               "hooks": {"AfterTool": [{"matcher": "write_.*",
                   "hooks": [{"type": "command", "command": "./lint.sh"}]}]},
               "mcpServers": {"other": {"command": "o"},
                   "aware": {"command": "old", "env": {"LD_PRELOAD": "/x.so"}, "trust": true}}})
        .to_string(),
    )
    .unwrap();
    let args = [
        "init",
        "gemini",
        "--project",
        &ps,
        "--url",
        &s.base,
        "--session",
        KEY,
    ];
    let exe = std::fs::canonicalize(bin()).unwrap();
    let command = format!(
        "{} hook --cli gemini --session {KEY} --url {}",
        exe.display(),
        s.base
    );

    let dry = init_cmd(home.path(), &[&args[..], &["--dry-run"]].concat())
        .output()
        .unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    assert!(
        !home.path().join(".gemini").exists(),
        "a dry run writes nothing"
    );

    let out = init_cmd(home.path(), &args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("dropped mcpServers.aware.env.LD_PRELOAD"),
        "{said}"
    );
    assert!(said.contains("--trust-project"), "{said}");

    let settings = read_json(&p.join(".gemini/settings.json"));
    assert_eq!(settings["model"]["name"], "gemini-2.5-pro");
    for event in ["SessionStart", "BeforeAgent", "AfterTool", "AfterAgent"] {
        let groups = settings["hooks"][event].as_array().unwrap();
        assert_eq!(
            groups.last().unwrap()["hooks"],
            json!([{"type": "command", "name": "aware", "command": command,
                    "timeout": 10000}]),
            "{event}"
        );
    }
    assert_eq!(settings["hooks"]["AfterTool"][0]["matcher"], "write_.*");
    assert!(settings["hooks"].get("PreCompress").is_none());
    assert_eq!(
        settings["mcpServers"]["aware"],
        json!({"command": exe, "args": ["mcp", "--session", KEY, "--url", s.base]})
    );
    assert_eq!(settings["mcpServers"]["other"]["command"], "o");
    let trusted = read_json(&home.path().join(".gemini/trusted_hooks.json"));
    assert_eq!(trusted, json!({ &ps: [format!("aware:{command}")] }));
    assert!(
        !home.path().join(".gemini/trustedFolders.json").exists(),
        "the folder is not trusted unasked"
    );

    let again = init_cmd(home.path(), &args).output().unwrap();
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(
        text(&again).matches("unchanged").count(),
        2,
        "{}",
        text(&again)
    );

    let trust = init_cmd(home.path(), &[&args[..], &["--trust-project"]].concat())
        .output()
        .unwrap();
    assert_eq!(trust.status.code(), Some(0), "{}", text(&trust));
    let said = text(&trust);
    assert!(said.contains("MCP server other: o"), "{said}");
    assert!(said.contains("hook AfterTool: ./lint.sh"), "{said}");
    assert_eq!(
        read_json(&home.path().join(".gemini/trustedFolders.json")),
        json!({ &ps: "TRUST_FOLDER" })
    );
    let after = init_cmd(home.path(), &args).output().unwrap();
    assert!(
        !text(&after).contains("--trust-project"),
        "{}",
        text(&after)
    );
    // doctor reads the same files: the hooks are there and trusted, the folder too; a hook
    // removed by hand is a failure with the fix.
    let doctor = || {
        init_cmd(home.path(), &["doctor", "--url", &s.base, "--project", &ps])
            .output()
            .unwrap()
    };
    let said = text(&doctor());
    assert!(said.contains("Gemini CLI hooks in"), "{said}");
    assert!(!said.contains("trusted_hooks.json does not list"), "{said}");
    assert!(!said.contains("only in a trusted folder"), "{said}");
    let mut settings = read_json(&p.join(".gemini/settings.json"));
    settings["hooks"]
        .as_object_mut()
        .unwrap()
        .remove("AfterTool");
    std::fs::write(p.join(".gemini/settings.json"), settings.to_string()).unwrap();
    let broken = doctor();
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    assert!(
        text(&broken).contains("has no aware hook on AfterTool"),
        "{}",
        text(&broken)
    );
}

/// Gemini CLI has no hook that wakes an idle session: a waiting hook for it is an argument
/// error (exit 1, said on stderr), never a waiter that would take notices nobody reads.
#[test]
fn gemini_waiting_hook_is_refused_as_an_argument_error() {
    let s = Server::family();
    s.hdm(C);
    let r = hook(
        &s.base,
        &[
            "--session",
            W,
            "--cli",
            "gemini",
            "--wait",
            "--wait-secs",
            "1",
        ],
        input("AfterAgent", json!({})),
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("--wait does not work with --cli gemini"),
        "{}",
        r.stderr
    );
    assert_eq!(s.notice_texts(W).len(), 1, "nothing was drained");
}

/// `--global` writes the user's `~/.gemini/settings.json` (the hooks, and the MCP server's
/// command and arguments, the user's other keys of that entry kept) and no trust key: only a
/// project's hooks are fingerprinted.
#[test]
fn init_gemini_global_writes_the_users_settings_and_keeps_their_keys() {
    let s = Server::family();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let dir = home.path().join(".gemini");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("settings.json"),
        json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
               "mcpServers": {"aware": {"command": "old", "trust": true,
                                        "env": {"AWARE_TOKEN_FILE": "/x"}}}})
        .to_string(),
    )
    .unwrap();
    let out = init_cmd(
        home.path(),
        &[
            "init",
            "gemini",
            "--global",
            "--url",
            &s.base,
            "--session",
            KEY,
        ],
    )
    .current_dir(cwd.path())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("only in a trusted folder"),
        "{}",
        text(&out)
    );
    let settings = read_json(&dir.join("settings.json"));
    assert_eq!(
        settings["security"]["auth"]["selectedType"],
        "gemini-api-key"
    );
    let exe = std::fs::canonicalize(bin()).unwrap();
    assert_eq!(
        settings["mcpServers"]["aware"],
        json!({"command": exe, "args": ["mcp", "--session", KEY, "--url", s.base],
               "trust": true, "env": {"AWARE_TOKEN_FILE": "/x"}})
    );
    for event in ["SessionStart", "BeforeAgent", "AfterTool", "AfterAgent"] {
        assert!(
            settings["hooks"][event][0]["hooks"][0]["command"]
                .as_str()
                .is_some_and(|c| c.contains(" hook --cli gemini ")),
            "{event}: {settings}"
        );
    }
    assert!(!dir.join("trusted_hooks.json").exists());
    assert!(!cwd.path().join(".gemini").exists());
    let refused = init_cmd(
        home.path(),
        &["init", "gemini", "--global", "--trust-project"],
    )
    .output()
    .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
}
