//! `aware init claude-code`: `.claude/settings.json` (the hook on every event it acts on, and
//! the waiting hook that wakes an idle session) and `.mcp.json` (the MCP server).

use super::dropped::{dropped, flat, report, Dropped};
use super::files::{Change, Scope};
use super::setup::{pretty, project_dir, read_json, replace_hooks, Common, Setup};
use super::usage::UsageError;
use crate::context::Conn;
use anyhow::Result;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The events the hook is installed on, each with the same command; the hook reads the event
/// from its input. (`SessionEnd` is left out: the hook has nothing to do there.) The mid-run
/// hand-over is on `PostToolBatch`: one hook run and one drain per batch of parallel tool calls,
/// where `PostToolUse` ran one per call, and its context reaches the same next model request.
pub const EVENTS: [&str; 7] = [
    "SessionStart",
    "UserPromptSubmit",
    "PostToolBatch",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
];

/// The event an earlier `aware init` installed the mid-run hand-over on; a re-run moves it.
pub const SUPERSEDED: &str = "PostToolUse";

/// Seconds Claude Code gives one hook run; the hook's own deadline (`--timeout-ms`, 3 s) ends it
/// well before.
const HOOK_TIMEOUT_SECS: u64 = 10;
/// Default of `--wake-secs`.
const WAKE_SECS: u64 = 3600;

#[derive(clap::Args, Debug)]
pub struct ClaudeCodeArgs {
    /// Project directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
    /// Do not install the waiting Stop hook that wakes an idle session when a notice arrives.
    #[arg(long)]
    pub no_wake: bool,
    /// How long the waiting hook waits after each stop before it gives up silently, from 1 to
    /// 604800 seconds (a week).
    #[arg(long, default_value_t = WAKE_SECS, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=crate::hook::MAX_WAIT_SECS))]
    pub wake_secs: u64,
}

pub fn run(args: ClaudeCodeArgs, outer: &Conn) -> Result<()> {
    let project = project_dir(args.project.as_ref())?;
    let setup = Setup::new(&args.common, &project, outer)?;
    let scope = Scope::Project(project.clone());

    let settings_path = project.join(".claude").join("settings.json");
    let (old_settings, mut settings) = read_json(&settings_path, &scope)?;
    if let Some(line) = env_note(&settings_path, &settings) {
        crate::client::out(&line);
    }
    let hook_cmd = setup.command(&["hook"]);
    let wait_cmd = setup.command(&["hook", "--wait", "--wait-secs", &args.wake_secs.to_string()]);
    merge_hooks(
        &mut settings,
        &hook_cmd,
        (!args.no_wake).then_some(&wait_cmd),
        args.wake_secs,
    )
    .map_err(|m| UsageError(format!("{}: {m}; fix or move it", settings_path.display())))?;

    let mcp_path = project.join(".mcp.json");
    let (old_mcp, mut mcp) = read_json(&mcp_path, &scope)?;
    let gone = merge_mcp(&mut mcp, &setup.exe, &setup.mcp_args())
        .map_err(|m| UsageError(format!("{}: {m}; fix or move it", mcp_path.display())))?;
    for line in report(&mcp_path, "mcpServers.aware", &gone) {
        crate::client::out(&line);
    }

    let changes = [
        Change {
            path: settings_path,
            old: old_settings,
            new: pretty(&settings),
            scope: scope.clone(),
        },
        Change {
            path: mcp_path,
            old: old_mcp,
            new: pretty(&mcp),
            scope,
        },
    ];
    if !args.common.dry_run {
        crate::client::out(&format!("hook command: {hook_cmd}"));
        if !args.no_wake {
            crate::client::out(&format!("waiting hook (Stop, async): {wait_cmd}"));
        }
    }
    setup.finish(
        &changes,
        args.common.dry_run,
        "(re)start Claude Code in the project and approve the \"aware\" MCP server",
    )
}

/// A note naming the variables the project's settings set with `env`: Claude Code gives them
/// to every hook and MCP server it starts in the project, aware's included (init writes
/// `--url` into every command so an `AWARE_URL` there redirects nothing, but an `LD_PRELOAD`
/// runs inside them). They are
/// the project's own settings, so init keeps them, and says so; values are not shown.
fn env_note(path: &std::path::Path, settings: &Value) -> Option<String> {
    let env = settings.get("env")?.as_object().filter(|e| !e.is_empty())?;
    let names: Vec<String> = env.keys().map(|k| flat(k)).collect();
    Some(format!(
        "note: {} sets env for every hook and MCP server Claude Code starts here, aware's \
         included: {} (kept; check them)",
        path.display(),
        names.join(", ")
    ))
}

/// The hook on every event of [`EVENTS`], and on `Stop` the waiting hook too (unless `wait` is
/// None, which also removes one installed before).
fn merge_hooks(
    settings: &mut Value,
    cmd: &str,
    wait: Option<&String>,
    wake_secs: u64,
) -> Result<(), String> {
    let hooks = settings
        .as_object_mut()
        .ok_or("not a JSON object")?
        .entry("hooks")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("\"hooks\" is not an object")?;
    // Installed there before PostToolBatch took its place; the hook still acts on it.
    replace_hooks(hooks, SUPERSEDED, Vec::new())?;
    for event in EVENTS {
        let mut ours =
            vec![json!({"type": "command", "command": cmd, "timeout": HOOK_TIMEOUT_SECS})];
        if event == "Stop" {
            if let Some(w) = wait {
                // Claude Code runs it in the background and wakes the model when it exits 2.
                ours.push(json!({"type": "command", "command": w, "async": true,
                                 "asyncRewake": true, "timeout": wake_secs + 60}));
            }
        }
        replace_hooks(hooks, event, ours)?;
    }
    Ok(())
}

/// Sets `mcpServers.aware` to exactly this binary and its arguments, keeping the other servers;
/// returns the keys of a former `aware` entry that were dropped ([`dropped`]).
fn merge_mcp(mcp: &mut Value, exe: &str, args: &[String]) -> Result<Vec<Dropped>, String> {
    let servers = mcp
        .as_object_mut()
        .ok_or("not a JSON object")?
        .entry("mcpServers")
        .or_insert_with(|| json!({}));
    let servers = servers
        .as_object_mut()
        .ok_or("\"mcpServers\" is not an object")?;
    let ours = json!({"command": exe, "args": args});
    let old = servers.insert("aware".into(), ours);
    Ok(old
        .map(|o| dropped(&o, &["command", "args"]))
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An install from before PostToolBatch (aware on PostToolUse) moves: aware's PostToolUse
    /// entry goes, the user's own PostToolUse hooks stay.
    #[test]
    fn a_rerun_moves_the_mid_run_hand_over_to_post_tool_batch() {
        let mut s = json!({"hooks": {
            "PostToolUse": [
                {"hooks": [{"type": "command", "command": "/x/aware hook --session k"}]},
                {"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]}]}});
        merge_hooks(&mut s, "/x/aware hook --session k", None, 60).unwrap();
        assert_eq!(
            s["hooks"]["PostToolUse"],
            json!([{"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]}])
        );
        assert_eq!(
            s["hooks"]["PostToolBatch"][0]["hooks"][0]["command"],
            "/x/aware hook --session k"
        );
        let mut only_ours = json!({"hooks": {"PostToolUse": [
            {"hooks": [{"type": "command", "command": "/x/aware hook --session k"}]}]}});
        merge_hooks(&mut only_ours, "/x/aware hook --session k", None, 60).unwrap();
        assert!(
            only_ours["hooks"].get("PostToolUse").is_none(),
            "{only_ours}"
        );
    }

    #[test]
    fn a_rerun_replaces_only_its_own_entries() {
        let mut s = json!({"hooks": {"Stop": [
            {"hooks": [{"type": "command", "command": "echo mine"}]},
            {"hooks": [{"type": "command", "command": "/x/aware hook --session k"},
                       {"type": "command", "command": "echo shared"}]}]}});
        merge_hooks(
            &mut s,
            "/x/aware hook --session k",
            Some(&"/x/aware hook --wait".into()),
            60,
        )
        .unwrap();
        let once = s.clone();
        merge_hooks(
            &mut s,
            "/x/aware hook --session k",
            Some(&"/x/aware hook --wait".into()),
            60,
        )
        .unwrap();
        assert_eq!(s, once);
        let stop = s["hooks"]["Stop"].as_array().unwrap();
        assert_eq!(stop[0]["hooks"][0]["command"], "echo mine");
        assert_eq!(
            stop[1]["hooks"],
            json!([{"type": "command", "command": "echo shared"}])
        );
        assert_eq!(stop[3]["hooks"][0]["asyncRewake"], true);
        assert_eq!(stop.len(), 4);
        for e in EVENTS {
            assert!(s["hooks"][e].is_array(), "{e}");
        }
        merge_hooks(&mut s, "/x/aware hook --session k", None, 60).unwrap();
        assert_eq!(s["hooks"]["Stop"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn the_aware_server_is_written_whole_and_the_others_kept() {
        let mut m = json!({"mcpServers": {"other": {"command": "o", "env": {"A": "1"}},
            "aware": {"command": "old", "args": [], "env": {"LD_PRELOAD": "/x.so"}}}});
        let gone = merge_mcp(&mut m, "/x/aware", &["mcp".into()]).unwrap();
        assert_eq!(
            m["mcpServers"]["aware"],
            json!({"command": "/x/aware", "args": ["mcp"]})
        );
        assert_eq!(m["mcpServers"]["other"]["env"]["A"], "1");
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].key, "env.LD_PRELOAD");
    }
}
