//! `aware init codex`: Codex CLI's MCP server (`[mcp_servers.aware]` in `config.toml`), its
//! hooks (`hooks.json`), and the trust entries Codex requires before it runs a hook it did not
//! write itself (without them it skips the hooks silently).
//!
//! Codex trusts one hook handler at a time: `[hooks.state."<hooks.json>:<event>:<group>:<handler>"]`
//! in `$CODEX_HOME/config.toml` with `trusted_hash = "sha256:<hex>"`, the SHA-256 of the compact,
//! key-sorted JSON of the handler's identity (checked against Codex 0.169.0: a wrong digit and
//! the hook is skipped). Init trusts exactly the handlers it writes, nothing else of a project.
//!
//! A project's `.codex/` is read by Codex only in a trusted project. Trusting a project is the
//! user's decision (it also lets the project's own `.codex/config.toml` start programs), so init
//! only says so, unless `--trust-project` asks it to.

use super::dropped::{dropped, flat, report, toml_json, Dropped};
use super::files::{self, Change, Scope};
use super::setup::{pretty, project_dir, read_json, replace_hooks, shell_quote, Common, Setup};
use super::usage::UsageError;
use crate::context::Conn;
use anyhow::{bail, Result};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use toml_edit::{DocumentMut, Item, Table};

/// The events the hook is installed on, with Codex's own label for each (used in trust keys).
pub const EVENTS: [(&str, &str); 7] = [
    ("SessionStart", "session_start"),
    ("UserPromptSubmit", "user_prompt_submit"),
    ("PostToolUse", "post_tool_use"),
    ("Stop", "stop"),
    ("SubagentStart", "subagent_start"),
    ("SubagentStop", "subagent_stop"),
    ("PreCompact", "pre_compact"),
];

/// Seconds Codex gives one hook run (the hook's own deadline, 3 s, ends it well before).
const HOOK_TIMEOUT_SECS: u64 = 10;
/// Default of `--wake-secs`.
const WAKE_SECS: u64 = 3600;

#[derive(clap::Args, Debug)]
pub struct CodexArgs {
    /// Project directory [default: the current directory].
    #[arg(long, value_name = "DIR", conflicts_with = "global")]
    pub project: Option<PathBuf>,
    /// Write to Codex's own config.toml and hooks.json ($CODEX_HOME, default ~/.codex), for
    /// every project, instead of the project's .codex/.
    #[arg(long)]
    pub global: bool,
    /// Also mark the project as trusted in $CODEX_HOME/config.toml (Codex reads a project's
    /// .codex/ only in a trusted project), after listing the other MCP servers its
    /// .codex/config.toml declares, which the trust lets Codex start.
    #[arg(long, conflicts_with = "global")]
    pub trust_project: bool,
    /// Do not install the waiting Stop hook (async) that wakes an idle session when a notice or
    /// a message arrives (it starts a turn with `codex queue`).
    #[arg(long)]
    pub no_wake: bool,
    /// How long the waiting hook waits after each stop before it gives up silently, from 1 to
    /// 604800 seconds (a week).
    #[arg(long, default_value_t = WAKE_SECS, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=crate::hook::MAX_WAIT_SECS))]
    pub wake_secs: u64,
    #[command(flatten)]
    pub common: Common,
}

/// `$CODEX_HOME`, else `~/.codex`; never a relative path (a relative one would put the trust
/// entries into whatever directory init runs in, a repository).
pub fn codex_home() -> Result<PathBuf, crate::home::HomeError> {
    if let Some(h) = std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        let h = PathBuf::from(h);
        if !h.is_absolute() {
            return Err(crate::home::HomeError::new(format!(
                "CODEX_HOME is a relative path ({}); set it to an absolute one",
                h.display()
            )));
        }
        return Ok(h);
    }
    Ok(crate::home::home_dir()?.join(".codex"))
}

pub fn run(args: CodexArgs, outer: &Conn) -> Result<()> {
    let project = project_dir(args.project.as_ref())?;
    let setup = Setup::new(&args.common, &project, outer)?;
    let home = codex_home().map_err(|e| UsageError(e.to_string()))?;
    let user_config = home.join("config.toml");
    let (dir, scope) = if args.global {
        (home.clone(), Scope::User)
    } else {
        (project.join(".codex"), Scope::Project(project.clone()))
    };
    let hooks_path = dir.join("hooks.json");
    let config_path = dir.join("config.toml");

    // hooks.json: the hook on every event, one group each, and on Stop the waiting hook.
    let cmd = setup.command(&["hook", "--cli", "codex"]);
    let wait_cmd = setup.command(&[
        "hook",
        "--cli",
        "codex",
        "--wait",
        "--wait-secs",
        &args.wake_secs.to_string(),
    ]);
    let wait = (!args.no_wake).then_some(&wait_cmd);
    let (old_hooks, mut hooks_doc) = read_json(&hooks_path, &scope)?;
    let trusted = install_hooks(&mut hooks_doc, &hooks_path, &cmd, wait, args.wake_secs)
        .map_err(|m| UsageError(format!("{}: {m}; fix or move it", hooks_path.display())))?;

    // config.toml of the project (or the global one): the MCP server.
    let (old_config, mut config) = read_toml(&config_path, &scope)?;
    let gone = set_mcp(&mut config, &setup.exe, &setup.mcp_args(), !args.global)
        .map_err(|m| UsageError(format!("{}: {m}; fix or move it", config_path.display())))?;
    for line in report(&config_path, "mcp_servers.aware", &gone) {
        crate::client::out(&line);
    }
    let (others, settings) = (other_servers(&config), other_settings(&config));

    // $CODEX_HOME/config.toml: the trust entries (and the project's trust when asked). With
    // --global it is the same file as above.
    let same = config_path == user_config;
    let (old_user, mut user) = if same {
        (None, DocumentMut::new())
    } else {
        read_toml(&user_config, &Scope::User)?
    };
    let trust_doc = if same { &mut config } else { &mut user };
    for (key, hash) in &trusted {
        set_trust(trust_doc, key, hash)
            .map_err(|m| UsageError(format!("{}: {m}; fix or move it", user_config.display())))?;
    }
    let project_trusted = args.global || is_trusted(trust_doc, &project);
    if args.trust_project && !project_trusted {
        // Trusting lets the project's own config start programs: say which, before the trust
        // is written (a dry run says it too).
        say_what_trust_allows(&project, &others, &settings);
        set_project_trust(trust_doc, &project)
            .map_err(|m| UsageError(format!("{}: {m}; fix or move it", user_config.display())))?;
    }

    let mut changes = vec![
        Change {
            path: hooks_path,
            old: old_hooks,
            new: pretty(&hooks_doc),
            scope: scope.clone(),
        },
        Change {
            path: config_path,
            old: old_config,
            new: config.to_string(),
            scope,
        },
    ];
    if !same {
        changes.push(Change {
            path: user_config,
            old: old_user,
            new: user.to_string(),
            scope: Scope::User,
        });
    }
    if !args.common.dry_run {
        crate::client::out(&format!("hook command: {cmd}"));
        if let Some(w) = wait {
            crate::client::out(&format!("waiting hook (Stop, async): {w}"));
        }
    }
    setup.finish(&changes, args.common.dry_run, "start Codex in the project")?;
    if !project_trusted && !args.trust_project {
        crate::client::out(&format!(
            "note: Codex reads {}/.codex/ only when the project is trusted; trust it in Codex \
             (or run again with --trust-project)",
            project.display()
        ));
    }
    Ok(())
}

/// aware's handlers on every event of [`EVENTS`] in the hooks.json document `doc` at `path`;
/// returns the trust entry (key, hash) of each.
fn install_hooks(
    doc: &mut serde_json::Value,
    path: &Path,
    cmd: &str,
    wait: Option<&String>,
    wake_secs: u64,
) -> Result<Vec<(String, String)>, String> {
    let hooks = doc
        .as_object_mut()
        .and_then(|o| {
            o.entry("hooks")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        })
        .ok_or("\"hooks\" is not an object")?;
    let mut trusted = Vec::new();
    for (event, label) in EVENTS {
        let ours = handlers(event, cmd, wait, wake_secs);
        let n = ours.len();
        replace_hooks(hooks, event, ours.iter().map(Handler::json).collect())?;
        // replace_hooks appends ours last, one group each.
        let first = hooks[event]
            .as_array()
            .map_or(0, |g| g.len())
            .saturating_sub(n);
        for (i, h) in ours.iter().enumerate() {
            let key = format!("{}:{label}:{}:0", path.display(), first + i);
            trusted.push((key, trust_hash(label, h.command, h.timeout, h.is_async)));
        }
    }
    Ok(trusted)
}

/// One command handler aware installs.
struct Handler<'a> {
    command: &'a str,
    timeout: u64,
    /// Codex does not await it: it keeps running after the turn ended (the waiting hook).
    is_async: bool,
}

impl Handler<'_> {
    fn json(&self) -> serde_json::Value {
        let mut h = json!({"type": "command", "command": self.command, "timeout": self.timeout});
        if self.is_async {
            h["async"] = true.into();
        }
        h
    }
}

/// aware's handlers of one event: the hook, and on Stop the waiting hook too (unless `wait` is
/// None, which also removes one installed before).
fn handlers<'a>(
    event: &str,
    cmd: &'a str,
    wait: Option<&'a String>,
    wake_secs: u64,
) -> Vec<Handler<'a>> {
    let mut ours = vec![Handler {
        command: cmd,
        timeout: HOOK_TIMEOUT_SECS,
        is_async: false,
    }];
    if let (Some(w), "Stop") = (wait, event) {
        // Codex runs it in the background after the turn; it wakes the session itself (`codex
        // queue`). Its own --wait-secs ends it first; Codex's timeout is only a backstop.
        ours.push(Handler {
            command: w,
            timeout: wake_secs + 60,
            is_async: true,
        });
    }
    ours
}

/// `sha256:<hex>` of the compact, key-sorted JSON Codex hashes for one command handler alone in
/// its group (no matcher). `is_async` is the handler's `async` (false when absent).
pub fn trust_hash(label: &str, command: &str, timeout: u64, is_async: bool) -> String {
    // Keys in sorted order by construction (serde_json here keeps insertion order).
    let identity = json!({
        "event_name": label,
        "hooks": [{"async": is_async, "command": command, "timeout": timeout, "type": "command"}],
    });
    let digest = Sha256::digest(identity.to_string().as_bytes());
    format!("sha256:{}", aware_core::hex::lower(&digest))
}

fn read_toml(path: &Path, scope: &Scope) -> Result<(Option<String>, DocumentMut)> {
    match files::read(path, scope)? {
        Some(text) => match text.parse::<DocumentMut>() {
            Ok(doc) => Ok((Some(text), doc)),
            Err(e) => bail!(UsageError(format!(
                "{} is not valid TOML ({}); nothing was written, fix it and run again",
                path.display(),
                e.to_string().trim()
            ))),
        },
        None => Ok((None, DocumentMut::new())),
    }
}

/// The sub-table `name` of `parent`, created implicit (no header of its own) when missing.
fn table<'a>(parent: &'a mut Table, name: &str) -> Result<&'a mut Table, String> {
    let item = parent.entry(name).or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    item.as_table_mut().ok_or(format!(
        "\"{name}\" is not a table (write it as [{name}] sections)"
    ))
}

/// `[mcp_servers.aware]`: command and args. `whole` (a project's file) writes the whole table
/// and returns the keys of the former one that were dropped ([`dropped`]); otherwise (the
/// user's own `$CODEX_HOME/config.toml`) the table's other keys, e.g. the user's `env`, are kept.
fn set_mcp(
    doc: &mut DocumentMut,
    exe: &str,
    args: &[String],
    whole: bool,
) -> Result<Vec<Dropped>, String> {
    let servers = table(doc.as_table_mut(), "mcp_servers")?;
    let mut gone = Vec::new();
    if whole {
        if let Some(old) = servers.remove("aware") {
            gone = dropped(&toml_json(&old), &["command", "args"]);
        }
    }
    let aware = servers
        .entry("aware")
        .or_insert_with(|| Item::Table(Table::new()));
    let aware = aware
        .as_table_mut()
        .ok_or("\"mcp_servers.aware\" is not a table")?;
    aware["command"] = toml_edit::value(exe);
    let mut list = toml_edit::Array::new();
    for a in args {
        list.push(a.as_str());
    }
    aware["args"] = toml_edit::value(list);
    Ok(gone)
}

/// The lines of [`other_servers`] under a heading (or that there are none), then the names of
/// the project config's other top-level settings: a trusted project's `.codex/config.toml` acts
/// with all of them (e.g. `notify` runs a program, a model provider's `base_url` receives the
/// conversation), and init writes none of them.
fn say_what_trust_allows(project: &Path, others: &[String], settings: &[String]) {
    if others.is_empty() {
        crate::client::out(&format!(
            "trusting {}: its .codex/config.toml declares no MCP server but aware",
            project.display()
        ));
    } else {
        crate::client::out(&format!(
            "trusting {} lets Codex start the MCP servers its .codex/config.toml declares \
             (check them):",
            project.display()
        ));
        for line in others {
            crate::client::out(line);
        }
    }
    if !settings.is_empty() {
        crate::client::out(&flat(&format!(
            "  its .codex/config.toml also sets (check them too): {}",
            settings.join(", ")
        )));
    }
}

/// The top-level keys of `doc` other than `mcp_servers`.
fn other_settings(doc: &DocumentMut) -> Vec<String> {
    doc.iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| k != "mcp_servers")
        .collect()
}

/// `  <name>: <command and arguments>` (or `url <URL>`) for each MCP server of `doc` but
/// aware's: what a trusted project's `.codex/config.toml` lets Codex start.
fn other_servers(doc: &DocumentMut) -> Vec<String> {
    let Some(servers) = doc.get("mcp_servers").map(toml_json) else {
        return Vec::new();
    };
    let Some(servers) = servers.as_object() else {
        return Vec::new();
    };
    servers
        .iter()
        .filter(|(name, _)| name.as_str() != "aware")
        .map(|(name, v)| {
            let what = match (v["command"].as_str(), v["url"].as_str()) {
                (Some(c), _) => std::iter::once(c.to_string())
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
                (None, Some(u)) => format!("url {}", super::setup::redact(u)),
                (None, None) => "(no command)".into(),
            };
            let env = v["env"]
                .as_object()
                .map(|e| {
                    let names: Vec<&str> = e.keys().map(String::as_str).collect();
                    format!(" (env: {})", names.join(", "))
                })
                .unwrap_or_default();
            flat(&format!("  {name}: {what}{env}"))
        })
        .collect()
}

fn set_trust(doc: &mut DocumentMut, key: &str, hash: &str) -> Result<(), String> {
    let state = table(table(doc.as_table_mut(), "hooks")?, "state")?;
    let entry = state
        .entry(key)
        .or_insert_with(|| Item::Table(Table::new()));
    let entry = entry
        .as_table_mut()
        .ok_or(format!("\"hooks.state.{key}\" is not a table"))?;
    entry["trusted_hash"] = toml_edit::value(hash);
    Ok(())
}

fn is_trusted(doc: &DocumentMut, project: &Path) -> bool {
    doc.get("projects")
        .and_then(|p| p.get(project.to_string_lossy().as_ref()))
        .and_then(|p| p.get("trust_level"))
        .and_then(|t| t.as_str())
        == Some("trusted")
}

fn set_project_trust(doc: &mut DocumentMut, project: &Path) -> Result<(), String> {
    let projects = table(doc.as_table_mut(), "projects")?;
    let key = project.to_string_lossy();
    let entry = projects
        .entry(&key)
        .or_insert_with(|| Item::Table(Table::new()));
    let entry = entry
        .as_table_mut()
        .ok_or(format!("\"projects.{key}\" is not a table"))?;
    entry["trust_level"] = toml_edit::value("trusted");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example checked against Codex 0.169.0 (a handler without a timeout in
    /// hooks.json is hashed with Codex's default of 600 s).
    #[test]
    fn trust_hash_matches_what_codex_accepts() {
        assert_eq!(
            trust_hash(
                "post_tool_use",
                "/usr/local/bin/aware hook --session agent:main:main",
                600,
                false
            ),
            "sha256:e09e2aab6329d2e008db8814b85b0e3a135e48634593656b62f52cdc933db405"
        );
    }

    #[test]
    fn the_waiting_hook_is_trusted_as_async_and_a_rerun_replaces_it() {
        let path = Path::new("/p/.codex/hooks.json");
        let mut doc =
            json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "mine"}]}]}});
        let wait = "/x/aware hook --cli codex --wait".to_string();
        let trusted =
            install_hooks(&mut doc, path, "/x/aware hook --cli codex", Some(&wait), 60).unwrap();
        let again =
            install_hooks(&mut doc, path, "/x/aware hook --cli codex", Some(&wait), 60).unwrap();
        assert_eq!(trusted, again);
        let stop = doc["hooks"]["Stop"].as_array().unwrap();
        assert_eq!(stop.len(), 3);
        assert_eq!(stop[2]["hooks"][0]["async"], true);
        assert_eq!(stop[2]["hooks"][0]["timeout"], 120);
        assert_eq!(trusted.len(), EVENTS.len() + 1);
        let waiting = trusted
            .iter()
            .find(|(k, _)| k.ends_with(":stop:2:0"))
            .unwrap();
        assert_eq!(waiting.1, trust_hash("stop", &wait, 120, true));
        assert_ne!(waiting.1, trust_hash("stop", &wait, 120, false));
        let none = install_hooks(&mut doc, path, "/x/aware hook --cli codex", None, 60).unwrap();
        assert_eq!(none.len(), EVENTS.len());
        assert_eq!(doc["hooks"]["Stop"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn merging_keeps_the_users_keys_and_comments() {
        let mut doc: DocumentMut =
            "# mine\nmodel = \"o3\"\n\n[mcp_servers.aware]\nenv = { A = \"1\" }\n"
                .parse()
                .unwrap();
        set_mcp(&mut doc, "/x/aware", &["mcp".into()], false).unwrap();
        set_trust(&mut doc, "/p/.codex/hooks.json:stop:0:0", "sha256:ab").unwrap();
        let text = doc.to_string();
        assert!(text.starts_with("# mine\nmodel = \"o3\""), "{text}");
        assert!(text.contains("env = { A = \"1\" }"), "{text}");
        assert!(text.contains("command = \"/x/aware\""), "{text}");
        assert!(
            text.contains(
                "[hooks.state.\"/p/.codex/hooks.json:stop:0:0\"]\ntrusted_hash = \"sha256:ab\""
            ),
            "{text}"
        );
        assert!(!text.contains("[hooks]\n"), "{text}");
    }
}
