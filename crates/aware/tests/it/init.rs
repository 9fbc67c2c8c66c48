//! Issue 12: `aware init claude-code` and `aware doctor` against a real gateway, and the
//! acceptance run: the hook and the MCP server started with exactly the written configs.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "agent:main:project:demo";

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    for v in ["AWARE_URL", "AWARE_TOKEN", "AWARE_SESSION", "AWARE_TIMEOUT"] {
        c.env_remove(v);
    }
    c.env("XDG_CONFIG_HOME", "/nonexistent-aware-test-config");
    c.args(args);
    c
}

fn run(args: &[&str]) -> Output {
    cmd(args).output().expect("run aware")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn init(s: &Server, project: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "init",
        "claude-code",
        "--project",
        project.to_str().unwrap(),
        "--url",
        &s.base,
        "--session",
        KEY,
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn exe() -> String {
    std::fs::canonicalize(bin())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn init_writes_both_configs_with_the_absolute_path_and_creates_the_session() {
    let s = Server::family();
    let project = tempfile::tempdir().unwrap();
    let out = init(&s, project.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("created") && said.contains("settings.json"),
        "{said}"
    );
    assert!(said.contains(&format!("session {KEY} is ready")), "{said}");

    let settings = read_json(&project.path().join(".claude/settings.json"));
    let command = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(command.starts_with(&exe()), "{command}");
    assert!(
        command.contains(&format!("hook --session {KEY}")),
        "{command}"
    );
    let mcp = read_json(&project.path().join(".mcp.json"));
    assert_eq!(mcp["mcpServers"]["aware"]["command"], exe());
    assert_eq!(
        mcp["mcpServers"]["aware"]["args"],
        json!(["mcp", "--session", KEY, "--url", s.base])
    );
    assert_eq!(s.get(&format!("/v1/sessions/{}", seg(KEY))).status, 200);

    // A second run changes nothing.
    let out = init(&s, project.path(), &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout).matches("unchanged").count(), 2);
}

#[test]
fn init_merges_and_never_clobbers() {
    let s = Server::family();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".claude")).unwrap();
    let settings_path = project.path().join(".claude/settings.json");
    std::fs::write(
        &settings_path,
        json!({"model": "opus", "hooks": {"UserPromptSubmit": [
            {"hooks": [{"type": "command", "command": "echo mine"}]},
            {"hooks": [{"type": "command", "command": "aware hook --session old"}]}]}})
        .to_string(),
    )
    .unwrap();
    let mcp_path = project.path().join(".mcp.json");
    std::fs::write(
        &mcp_path,
        json!({"mcpServers": {"other": {"command": "other-server"}}}).to_string(),
    )
    .unwrap();

    // Dry run: a diff, nothing written.
    let before = std::fs::read_to_string(&settings_path).unwrap();
    let out = init(&s, project.path(), &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let diff = text(&out.stdout);
    assert!(
        diff.contains("+++ ") && diff.contains(&format!("+      \"command\": \"{}\"", exe())),
        "{diff}"
    );
    assert_eq!(std::fs::read_to_string(&settings_path).unwrap(), before);
    assert_eq!(s.get(&format!("/v1/sessions/{}", seg(KEY))).status, 404);

    let out = init(&s, project.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let settings = read_json(&settings_path);
    assert_eq!(settings["model"], "opus");
    let groups = settings["hooks"]["UserPromptSubmit"].as_array().unwrap();
    assert_eq!(
        groups.len(),
        2,
        "the old aware hook is replaced, not doubled"
    );
    assert_eq!(groups[0]["hooks"][0]["command"], "echo mine");
    assert!(groups[1]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .contains(KEY));
    let mcp = read_json(&mcp_path);
    assert_eq!(mcp["mcpServers"]["other"]["command"], "other-server");
    assert_eq!(mcp["mcpServers"]["aware"]["command"], exe());

    // A file that is not JSON is left alone: exit 2, nothing written.
    std::fs::write(&mcp_path, "{ broken").unwrap();
    let out = init(&s, project.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(".mcp.json"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&mcp_path).unwrap(), "{ broken");
}

#[test]
fn doctor_checks_a_project_and_names_the_fix() {
    let s = Server::family();
    let project = tempfile::tempdir().unwrap();
    let p = project.path().to_str().unwrap();
    let out = run(&["doctor", "--url", &s.base, "--project", p]);
    let said = text(&out.stdout);
    assert!(said.contains("ok    gateway answers"), "{said}");
    assert!(said.contains("aware init claude-code"), "{said}");
    assert_eq!(init(&s, project.path(), &[]).status.code(), Some(0));
    let out = run(&["doctor", "--url", &s.base, "--project", p]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("ok    session {KEY} exists")),
        "{said}"
    );
    // The gateway gone: a failure with the fix, exit 1.
    let out = run(&["doctor", "--url", "http://127.0.0.1:9", "--project", p]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("fix: start it with `aware serve`"));
}

/// The acceptance run of issue 12: after `aware init claude-code`, Claude Code's hook call and its
/// MCP server start use exactly the written command lines.
#[test]
fn written_configs_work_as_claude_code_runs_them() {
    let s = Server::family();
    let project = tempfile::tempdir().unwrap();
    assert_eq!(init(&s, project.path(), &[]).status.code(), Some(0));
    // The project's session watches C, and a human steps into C.
    assert_eq!(s.watch(KEY, C).status, 200);
    s.hdm(C);

    // Claude Code runs the hook command through the shell with the hook JSON on stdin.
    let settings = read_json(&project.path().join(".claude/settings.json"));
    let command = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    let mut hook = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(project.path())
        .env_remove("AWARE_URL")
        .env_remove("AWARE_SESSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    hook.stdin
        .take()
        .unwrap()
        .write_all(
            json!({"session_id": "abc", "hook_event_name": "UserPromptSubmit",
                   "prompt": "what changed?", "cwd": project.path()})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
    let out = hook.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&nt(C, 1)),
        "{}",
        text(&out.stdout)
    );

    // Claude Code starts the MCP server with command and args from .mcp.json.
    let mcp = read_json(&project.path().join(".mcp.json"));
    let server = &mcp["mcpServers"]["aware"];
    let args: Vec<String> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let mut child = Command::new(server["command"].as_str().unwrap())
        .args(&args)
        .current_dir(project.path())
        .env_remove("AWARE_URL")
        .env_remove("AWARE_SESSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let ask =
        |stdin: &mut std::process::ChildStdin, id: i64, method: &str, params: Value| -> Value {
            writeln!(
                stdin,
                "{}",
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            )
            .unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let v: Value = serde_json::from_str(&rx.recv_timeout(left).unwrap()).unwrap();
                if v["id"] == id {
                    return v;
                }
            }
        };
    ask(
        &mut stdin,
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "claude-code-sim", "version": "0"}}),
    );
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let r = ask(
        &mut stdin,
        2,
        "tools/call",
        json!({"name": "session_status", "arguments": {"sessionKey": C, "changesSince": 1}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["sessionKey"], C, "{r}");
    let _ = child.kill();
    let _ = child.wait();
}
