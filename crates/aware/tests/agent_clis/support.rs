//! What the real-CLI tests share: hook configs for each CLI (Codex's trust entries included),
//! a hook that dumps its stdin, and reading the dumps.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub use aware_testkit::agent_cli::*;
pub use aware_testkit::model_server::*;

/// Every hook event Claude Code 2.1.332 accepts in its settings (from its settings schema;
/// `PreSkillShellCommand` is new there).
pub const CLAUDE_EVENTS: &[&str] = &[
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "PreModelSwitch",
    "PostModelSwitch",
    "PermissionRequest",
    "PermissionDenied",
    "Setup",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "ConfigChange",
    "WorktreeCreate",
    "WorktreeRemove",
    "InstructionsLoaded",
    "CwdChanged",
    "FileChanged",
    "DirectoryAdded",
    "MessageDisplay",
    "PreSkillShellCommand",
];

/// Every hook event Codex CLI 0.171.0 (as 0.169.0) accepts in `hooks.json` (from its hook input
/// schemas).
pub const CODEX_EVENTS: &[&str] = &[
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "SessionStart",
    "SessionEnd",
    "UserPromptSubmit",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "Interrupt",
];

/// A hook script in `home.tmp` that writes its stdin to `<dir>/<Event>-<n>.json` and prints
/// nothing; returns (script, dir).
pub fn dump_hook(home: &AgentHome) -> (PathBuf, PathBuf) {
    let dir = home.tmp.join("hook-dumps");
    std::fs::create_dir_all(&dir).expect("dump dir");
    let script = home.tmp.join("dump-hook.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# $1 is the event name; mktemp keeps parallel hooks apart.\n\
             f=$(mktemp {:?}/\"$1\"-XXXXXX.json) && cat > \"$f\"\nexit 0\n",
            dir.to_string_lossy()
        ),
    )
    .expect("write the dump hook");
    make_executable(&script);
    (script, dir)
}

pub fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod +x");
}

/// The dumped payloads, parsed, in no particular order.
pub fn dumps(dir: &Path) -> Vec<Value> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(e.path()).expect("read a dump");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{} is not JSON ({err}): {text}", e.path().display()));
        all.push(v);
    }
    all
}

/// The payloads of one event.
pub fn of_event<'a>(all: &'a [Value], event: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|v| v["hook_event_name"] == event)
        .collect()
}

/// `<project>/.claude/settings.json` with one command hook per event: `command EVENT`.
pub fn claude_hooks(home: &AgentHome, events: &[&str], command: &Path) {
    let mut hooks = serde_json::Map::new();
    for e in events {
        hooks.insert(
            e.to_string(),
            json!([{"hooks": [{"type": "command",
                "command": format!("{} {e}", command.to_string_lossy())}]}]),
        );
    }
    let dir = home.project.join(".claude");
    std::fs::create_dir_all(&dir).expect(".claude");
    std::fs::write(
        dir.join("settings.json"),
        json!({"hooks": hooks}).to_string(),
    )
    .expect("write .claude/settings.json");
}

/// Codex's hook event label in trust keys: `PostToolUse` → `post_tool_use`.
pub fn codex_label(event: &str) -> String {
    let mut out = String::new();
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The `trusted_hash` Codex 0.171.0 (as 0.169.0) wants for a handler: SHA-256 of the
/// compact, key-sorted JSON of
/// `{"event_name", "matcher"?, "hooks": [{"type","command","timeout","async"}]}`.
pub fn codex_trust_hash(event: &str, matcher: Option<&str>, command: &str, timeout: u64) -> String {
    // serde_json's Map keeps insertion order here (preserve_order), so keys go in sorted.
    let mut handler = serde_json::Map::new();
    handler.insert("async".into(), json!(false));
    handler.insert("command".into(), json!(command));
    handler.insert("timeout".into(), json!(timeout));
    handler.insert("type".into(), json!("command"));
    let mut identity = serde_json::Map::new();
    identity.insert("event_name".into(), json!(codex_label(event)));
    identity.insert("hooks".into(), json!([handler]));
    if let Some(m) = matcher {
        identity.insert("matcher".into(), json!(m));
    }
    let text = Value::Object(identity).to_string();
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `<project>/.codex/hooks.json` with one command hook per event (`command EVENT`, no matcher,
/// default timeout) and its trust entries in `$HOME/.codex/config.toml` (with `bad_hash_for`
/// given a wrong hash, to show Codex skips it).
pub fn codex_hooks(home: &AgentHome, events: &[&str], command: &Path, bad_hash_for: Option<&str>) {
    let dir = home.project.join(".codex");
    std::fs::create_dir_all(&dir).expect(".codex");
    let hooks_json = dir.join("hooks.json");
    let mut hooks = serde_json::Map::new();
    let mut trust = String::new();
    for e in events {
        let cmd = format!("{} {e}", command.to_string_lossy());
        hooks.insert(
            e.to_string(),
            json!([{"hooks": [{"type": "command", "command": cmd}]}]),
        );
        let mut hash = codex_trust_hash(e, None, &cmd, 600);
        if bad_hash_for == Some(*e) {
            hash = format!("sha256:{}", "0".repeat(64));
        }
        trust.push_str(&format!(
            "\n[hooks.state.{:?}]\ntrusted_hash = {hash:?}\n",
            format!("{}:{}:0:0", hooks_json.to_string_lossy(), codex_label(e))
        ));
    }
    std::fs::write(&hooks_json, json!({"hooks": hooks}).to_string()).expect("write hooks.json");
    home.trust_codex();
    let config = home.home.join(".codex/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap_or_default();
    text.push_str(&trust);
    std::fs::write(&config, text).expect("write $HOME/.codex/config.toml");
}

/// Writes the captured payloads to `$AWARE_HOOK_PAYLOADS_DIR/<cli>/<name>.json` when that is
/// set (to refresh the facts the hook is written against); a no-op otherwise.
pub fn save_payloads(cli: &str, named: &[(String, &Value)]) {
    let Some(root) = std::env::var_os("AWARE_HOOK_PAYLOADS_DIR") else {
        return;
    };
    let dir = PathBuf::from(root).join(cli);
    std::fs::create_dir_all(&dir).expect("payload dir");
    for (name, v) in named {
        std::fs::write(
            dir.join(format!("{name}.json")),
            serde_json::to_string_pretty(v).expect("payload JSON"),
        )
        .expect("write a payload");
    }
}

/// The text of the tool result of call `id` in a request (Messages `tool_result` content, or
/// Responses `function_call_output` output).
pub fn tool_output(request: &Request, id: &str) -> String {
    for item in request.items() {
        if item["type"] == "function_call_output" && item["call_id"] == id {
            return text_of(&item["output"]);
        }
        for block in item["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" && block["tool_use_id"] == id {
                return text_of(&block["content"]);
            }
        }
    }
    panic!("no result of call {id} in request #{}", request.index)
}

pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}
