//! `aware init gemini`: Gemini CLI's project settings (`.gemini/settings.json`: the hook on
//! every event it acts on, and the `aware` MCP server) and the hook trust entry in
//! `~/.gemini/trusted_hooks.json` (checked against Gemini CLI 0.61.0); with `--global`, the
//! user's `~/.gemini/settings.json` instead, whose hooks need no trust entry.
//!
//! Gemini CLI fingerprints a project's hooks by `<name>:<command>` and warns before it runs one
//! that `~/.gemini/trusted_hooks.json` does not list under the project's root (then trusts it
//! itself). Init lists exactly the one hook it installs, so the user is warned of anything else
//! a repository adds. Gemini reads a project's `.gemini/settings.json` (hooks and MCP servers)
//! only in a trusted folder (`~/.gemini/trustedFolders.json`); trusting one is the user's
//! decision (the project's own settings then start programs too), so init only says so, unless
//! `--trust-project` asks it to.

use super::dropped::{dropped, flat, report, Dropped};
use super::files::{Change, Scope};
use super::setup::{
    is_aware_hook, pretty, project_dir, read_json, replace_hooks, shell_quote, Common, Setup,
};
use super::usage::UsageError;
use crate::context::Conn;
use anyhow::Result;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The events the hook is installed on, each with the same command; the hook reads the event
/// from its input. Left out: `SessionEnd` (the hook has nothing to do there) and `PreCompress`
/// (Gemini CLI 0.61.0 fires it before every check whether to compress, also when it compresses
/// nothing, so it cannot record a compaction).
pub const EVENTS: [&str; 4] = ["SessionStart", "BeforeAgent", "AfterTool", "AfterAgent"];

/// The hook's `name`: part of its trust key, and what `/hooks disable aware` names.
pub const HOOK_NAME: &str = "aware";

/// Milliseconds Gemini CLI gives one hook run (its unit); the hook's own deadline
/// (`--timeout-ms`, 3 s) ends it well before.
const HOOK_TIMEOUT_MS: u64 = 10_000;

#[derive(clap::Args, Debug)]
pub struct GeminiArgs {
    /// Project directory [default: the current directory].
    #[arg(long, value_name = "DIR", conflicts_with = "global")]
    pub project: Option<PathBuf>,
    /// Write the hooks and the MCP server to Gemini CLI's own settings.json ($GEMINI_CLI_HOME,
    /// default ~/.gemini), for every project, instead of the project's .gemini/.
    #[arg(long)]
    pub global: bool,
    /// Also trust the project's folder in ~/.gemini/trustedFolders.json (Gemini reads a
    /// project's .gemini/settings.json only in a trusted folder), after listing the other hooks
    /// and MCP servers its settings declare, which the trust lets Gemini start.
    #[arg(long, conflicts_with = "global")]
    pub trust_project: bool,
    #[command(flatten)]
    pub common: Common,
}

/// `$GEMINI_CLI_HOME/.gemini` (Gemini CLI's own override of the home), else `~/.gemini`.
pub fn gemini_dir() -> Result<PathBuf, crate::home::HomeError> {
    if let Some(h) = std::env::var_os("GEMINI_CLI_HOME").filter(|v| !v.is_empty()) {
        let h = PathBuf::from(h);
        if !h.is_absolute() {
            return Err(crate::home::HomeError::new(format!(
                "GEMINI_CLI_HOME is a relative path ({}); set it to an absolute one",
                h.display()
            )));
        }
        return Ok(h.join(".gemini"));
    }
    Ok(crate::home::home_dir()?.join(".gemini"))
}

/// `trustedFolders.json`: `$GEMINI_CLI_TRUSTED_FOLDERS_PATH` when set (as Gemini reads it),
/// else in the Gemini directory.
fn trusted_folders_path(dir: &Path) -> PathBuf {
    match std::env::var_os("GEMINI_CLI_TRUSTED_FOLDERS_PATH").filter(|v| !v.is_empty()) {
        Some(p) if Path::new(&p).is_absolute() => PathBuf::from(p),
        _ => dir.join("trustedFolders.json"),
    }
}

pub fn run(args: GeminiArgs, outer: &Conn) -> Result<()> {
    let project = project_dir(args.project.as_ref())?;
    let setup = Setup::new(&args.common, &project, outer)?;
    let dir = gemini_dir().map_err(|e| UsageError(e.to_string()))?;
    let (settings_path, scope) = if args.global {
        (dir.join("settings.json"), Scope::User)
    } else {
        (
            project.join(".gemini").join("settings.json"),
            Scope::Project(project.clone()),
        )
    };
    let (old_settings, mut settings) = read_json(&settings_path, &scope)?;
    let cmd = setup.command(&["hook", "--cli", "gemini"]);
    let (other_hooks, other_servers) = (others_hooks(&settings, &cmd), others_servers(&settings));
    merge_hooks(&mut settings, &cmd).map_err(fix(&settings_path))?;
    let gone = merge_mcp(&mut settings, &setup.exe, &setup.mcp_args(), !args.global)
        .map_err(fix(&settings_path))?;
    for line in report(&settings_path, "mcpServers.aware", &gone) {
        crate::client::out(&line);
    }
    if settings["hooksConfig"]["enabled"] == json!(false) {
        crate::client::out(&format!(
            "note: {} turns hooks off (hooksConfig.enabled: false); aware's hook runs only \
             when they are on",
            settings_path.display()
        ));
    }
    let mut changes = vec![Change {
        path: settings_path,
        old: old_settings,
        new: pretty(&settings),
        scope,
    }];

    // Only a project's hooks are fingerprinted: the user's own settings need no trust key.
    if !args.global {
        let hooks_path = dir.join("trusted_hooks.json");
        let (old_trusted, mut trusted) = read_json(&hooks_path, &Scope::User)?;
        trust_hook(&mut trusted, &project, &cmd).map_err(fix(&hooks_path))?;
        changes.push(Change {
            path: hooks_path,
            old: old_trusted,
            new: pretty(&trusted),
            scope: Scope::User,
        });
    }

    let folders_path = trusted_folders_path(&dir);
    let (old_folders, mut folders) = read_json(&folders_path, &Scope::User)?;
    let project_trusted = is_trusted(&folders, &project);
    if args.trust_project && !project_trusted {
        say_what_trust_allows(&project, &other_hooks, &other_servers);
        folders
            .as_object_mut()
            .ok_or("not a JSON object".to_string())
            .map_err(fix(&folders_path))?
            .insert(
                project.to_string_lossy().into_owned(),
                "TRUST_FOLDER".into(),
            );
        changes.push(Change {
            path: folders_path,
            old: old_folders,
            new: pretty(&folders),
            scope: Scope::User,
        });
    }
    if !args.common.dry_run {
        crate::client::out(&format!("hook command: {cmd}"));
    }
    let next = if args.global {
        "start Gemini CLI in a project"
    } else {
        "start Gemini CLI in the project"
    };
    setup.finish(&changes, args.common.dry_run, next)?;
    if args.global {
        // Gemini CLI 0.61.0 loads every hook, the user's too, only in a trusted folder.
        crate::client::out(
            "note: Gemini CLI runs hooks, these too, only in a trusted folder; trust each \
             project when Gemini asks",
        );
    } else if !project_trusted && !args.trust_project {
        crate::client::out(&format!(
            "note: Gemini CLI reads {}/.gemini/settings.json (hooks, MCP servers) only in a \
             trusted folder; trust it when Gemini asks (or run again with --trust-project)",
            project.display()
        ));
    }
    Ok(())
}

/// The error of a file init will not rewrite as it is.
fn fix(p: &Path) -> impl Fn(String) -> UsageError + '_ {
    move |m| UsageError(format!("{}: {m}; fix or move it", p.display()))
}

/// The hook on every event of [`EVENTS`] (aware's former entries replaced, the others kept).
fn merge_hooks(settings: &mut Value, cmd: &str) -> Result<(), String> {
    let hooks = settings
        .as_object_mut()
        .ok_or("not a JSON object")?
        .entry("hooks")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("\"hooks\" is not an object")?;
    for event in EVENTS {
        let ours = json!({"type": "command", "name": HOOK_NAME, "command": cmd,
                          "timeout": HOOK_TIMEOUT_MS});
        replace_hooks(hooks, event, vec![ours])?;
    }
    Ok(())
}

/// Sets `mcpServers.aware` to this binary and its arguments, keeping the other servers. `whole`
/// (a project's file) writes the whole entry and returns the keys of a former one that were
/// dropped ([`dropped`]: a repository's `env`, `cwd`, `trust` or URL under the name the user
/// trusts); otherwise (the user's own settings) the entry's other keys, e.g. the user's `env`
/// or `trust`, are kept.
fn merge_mcp(
    settings: &mut Value,
    exe: &str,
    args: &[String],
    whole: bool,
) -> Result<Vec<Dropped>, String> {
    let servers = settings
        .as_object_mut()
        .ok_or("not a JSON object")?
        .entry("mcpServers")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("\"mcpServers\" is not an object")?;
    if !whole {
        let entry = servers
            .entry("aware")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or("\"mcpServers.aware\" is not an object")?;
        entry.insert("command".into(), exe.into());
        entry.insert("args".into(), json!(args));
        return Ok(Vec::new());
    }
    let old = servers.insert("aware".into(), json!({"command": exe, "args": args}));
    Ok(old
        .map(|o| dropped(&o, &["command", "args"]))
        .unwrap_or_default())
}

/// `trusted_hooks.json` lists `<name>:<command>` per project root: aware's former keys there
/// are replaced by the one of `cmd`; every other key stays.
fn trust_hook(trusted: &mut Value, project: &Path, cmd: &str) -> Result<(), String> {
    let root = trusted.as_object_mut().ok_or("not a JSON object")?;
    let list = root
        .entry(project.to_string_lossy().into_owned())
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or("the project's entry is not an array")?;
    let prefix = format!("{HOOK_NAME}:");
    list.retain(|k| {
        !k.as_str()
            .and_then(|k| k.strip_prefix(&prefix))
            .is_some_and(is_aware_hook)
    });
    list.push(json!(format!("{prefix}{cmd}")));
    Ok(())
}

/// Whether Gemini CLI's `trustedFolders.json` trusts `project` (false when it cannot be read).
pub fn folder_trusted(project: &Path) -> bool {
    let Ok(dir) = gemini_dir() else {
        return false;
    };
    let folders = std::fs::read_to_string(trusted_folders_path(&dir))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or_default();
    is_trusted(&folders, project)
}

/// Whether `trustedFolders.json` trusts `project`: the longest rule that covers it decides
/// (`TRUST_FOLDER` covers the folder and below, `TRUST_PARENT` its parent and below,
/// `DO_NOT_TRUST` refuses), as Gemini CLI 0.61.0 reads it.
fn is_trusted(folders: &Value, project: &Path) -> bool {
    let Some(rules) = folders.as_object() else {
        return false;
    };
    let mut best: Option<(usize, &str)> = None;
    for (path, level) in rules {
        let Some(level) = level.as_str() else {
            continue;
        };
        let rule = Path::new(path);
        let covered = match level {
            "TRUST_PARENT" => rule.parent().is_some_and(|p| project.starts_with(p)),
            _ => project.starts_with(rule),
        };
        if covered && best.is_none_or(|(len, _)| path.len() > len) {
            best = Some((path.len(), level));
        }
    }
    matches!(best, Some((_, "TRUST_FOLDER" | "TRUST_PARENT")))
}

/// `  <Event>: <command>` for each hook of the project's settings that is not aware's.
fn others_hooks(settings: &Value, ours: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (event, groups) in settings["hooks"].as_object().into_iter().flatten() {
        for g in groups.as_array().into_iter().flatten() {
            for h in g["hooks"].as_array().into_iter().flatten() {
                let c = h["command"].as_str().unwrap_or("(no command)");
                if c != ours && !is_aware_hook(c) {
                    out.push(flat(&format!("  hook {event}: {c}")));
                }
            }
        }
    }
    out
}

/// `  <name>: <command and arguments>` (or `url …`) for each MCP server of the project's
/// settings but aware's, with the names of its `env`.
fn others_servers(settings: &Value) -> Vec<String> {
    let empty = Map::new();
    let servers = settings["mcpServers"].as_object().unwrap_or(&empty);
    servers
        .iter()
        .filter(|(name, _)| name.as_str() != "aware")
        .map(|(name, v)| {
            let what = match (
                v["command"].as_str(),
                v["url"].as_str(),
                v["httpUrl"].as_str(),
            ) {
                (Some(c), _, _) => std::iter::once(c.to_string())
                    .chain(
                        v["args"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string)),
                    )
                    .map(|w| shell_quote(&w))
                    .collect::<Vec<_>>()
                    .join(" "),
                (None, Some(u), _) | (None, None, Some(u)) => {
                    format!("url {}", super::setup::redact(u))
                }
                (None, None, None) => "(no command)".into(),
            };
            let env = v["env"]
                .as_object()
                .map(|e| {
                    let names: Vec<&str> = e.keys().map(String::as_str).collect();
                    format!(" (env: {})", names.join(", "))
                })
                .unwrap_or_default();
            flat(&format!("  MCP server {name}: {what}{env}"))
        })
        .collect()
}

/// Says what trusting the folder lets Gemini start, before the trust is written (a dry run says
/// it too).
fn say_what_trust_allows(project: &Path, hooks: &[String], servers: &[String]) {
    if hooks.is_empty() && servers.is_empty() {
        crate::client::out(&format!(
            "trusting {}: its .gemini/settings.json declares no hook or MCP server but aware's",
            project.display()
        ));
        return;
    }
    crate::client::out(&format!(
        "trusting {} lets Gemini CLI run what its .gemini/settings.json declares (check them):",
        project.display()
    ));
    for line in hooks.iter().chain(servers) {
        crate::client::out(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_replaces_only_its_own_hooks_and_trust_key() {
        let mut s = json!({"hooks": {"AfterTool": [
            {"matcher": "write_.*", "hooks": [{"type": "command", "command": "echo mine"}]},
            {"hooks": [{"type": "command", "name": "aware", "command": "/old/aware hook --cli gemini"}]}]}});
        merge_hooks(&mut s, "/x/aware hook --cli gemini --session k").unwrap();
        let once = s.clone();
        merge_hooks(&mut s, "/x/aware hook --cli gemini --session k").unwrap();
        assert_eq!(s, once);
        let after = s["hooks"]["AfterTool"].as_array().unwrap();
        assert_eq!(after.len(), 2);
        assert_eq!(after[0]["matcher"], "write_.*");
        assert_eq!(after[1]["hooks"][0]["timeout"], 10_000);
        for e in EVENTS {
            assert!(s["hooks"][e].is_array(), "{e}");
        }
        let mut t = json!({"/p": ["other:echo x", "aware:/old/aware hook --cli gemini"]});
        trust_hook(&mut t, Path::new("/p"), "/x/aware hook --cli gemini").unwrap();
        assert_eq!(
            t["/p"],
            json!(["other:echo x", "aware:/x/aware hook --cli gemini"])
        );
    }

    #[test]
    fn folder_trust_is_the_longest_rule_that_covers_the_project() {
        let p = Path::new("/home/me/src/app");
        assert!(!is_trusted(&json!({}), p));
        assert!(is_trusted(&json!({"/home/me/src/app": "TRUST_FOLDER"}), p));
        assert!(is_trusted(&json!({"/home/me": "TRUST_FOLDER"}), p));
        assert!(is_trusted(&json!({"/home/me/src/x": "TRUST_PARENT"}), p));
        assert!(!is_trusted(
            &json!({"/home/me": "TRUST_FOLDER", "/home/me/src": "DO_NOT_TRUST"}),
            p
        ));
        assert!(!is_trusted(
            &json!({"/home/me/src/application": "TRUST_FOLDER"}),
            p
        ));
    }
}
