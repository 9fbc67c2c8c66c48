//! `aware init claude-code`: one-step setup of a Claude Code project. Writes or merges the
//! project's `.claude/settings.json` (the `UserPromptSubmit` hook) and `.mcp.json` (the MCP
//! server) with this binary's absolute path, and creates the session on the gateway.
//!
//! Merging never clobbers: other keys, other hooks and other MCP servers are kept; an existing
//! aware hook entry (a command running `… hook` of an `aware` binary) is replaced in place, so a
//! second run changes nothing. A file that is not valid JSON is left alone and reported.

use crate::client::{out, Client, Failure};
use crate::context::{self, Conn, DEFAULT_URL};
use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand, Debug)]
pub enum InitCommand {
    /// Write the hook to .claude/settings.json and the MCP server to .mcp.json of a project,
    /// merging with what is there, and create the session.
    ClaudeCode(ClaudeCodeArgs),
}

#[derive(clap::Args, Debug)]
pub struct ClaudeCodeArgs {
    /// Project directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Session of the project, used by both the hook and the MCP server
    /// [default: agent:main:project:<directory name>].
    #[arg(long = "session", value_name = "KEY")]
    pub key: Option<String>,
    /// Show what would change (a diff per file) and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Gateway URL written into the configs and used to create the session
    /// [env: AWARE_URL] [default: http://127.0.0.1:7420].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Bearer token used to create the session (never written into the project) [env: AWARE_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
}

pub fn run(cmd: InitCommand, outer: &Conn) -> Result<()> {
    let InitCommand::ClaudeCode(args) = cmd;
    match claude_code(args, outer) {
        Ok(()) => Ok(()),
        Err(e) => match e.downcast::<UsageError>() {
            Ok(u) => Failure::Usage(u.0).exit(),
            Err(e) => Err(e),
        },
    }
}

#[derive(Debug)]
struct UsageError(String);
impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UsageError {}

/// `agent:main:project:<name>` with the directory name reduced to `[a-z0-9_-]`.
pub fn default_key(project: &Path) -> String {
    let name = project
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut rest: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    rest = rest.trim_matches('-').to_string();
    if rest.is_empty() {
        rest = "project".into();
    }
    format!("agent:main:project:{rest}")
}

/// Single-quotes a word for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=+@%,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Is this hook command one of ours (so a re-run replaces it instead of adding a second)?
fn is_aware_hook(cmd: &str) -> bool {
    let mut words = cmd.split_whitespace().filter(|w| !w.contains('='));
    let Some(prog) = words.next() else {
        return false;
    };
    let prog = prog.trim_matches(|c| c == '\'' || c == '"');
    let base = prog.rsplit('/').next().unwrap_or(prog);
    base == "aware" && cmd.split_whitespace().any(|w| w == "hook")
}

fn claude_code(args: ClaudeCodeArgs, outer: &Conn) -> Result<()> {
    let project = match &args.project {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let project = project.canonicalize().map_err(|e| {
        UsageError(format!(
            "--project {}: {e} (give an existing directory)",
            project.display()
        ))
    })?;
    if !project.is_dir() {
        bail!(UsageError(format!(
            "--project {} is not a directory",
            project.display()
        )));
    }
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot find the path of this aware binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let key = args.key.clone().unwrap_or_else(|| default_key(&project));
    let conn = Conn {
        url: args.url.clone(),
        token: args.token.clone(),
        session: None,
        agent: None,
    }
    .or(outer);
    let resolved = context::resolve(conn, None).map_err(|f| match f {
        Failure::Usage(m) | Failure::Server(m) | Failure::Unreachable(m) => UsageError(m),
    })?;
    let url = resolved.url.clone();
    let mut extra: Vec<String> = Vec::new();
    if url.trim_end_matches('/') != DEFAULT_URL {
        extra.push("--url".into());
        extra.push(url.clone());
    }

    // .claude/settings.json: the hook.
    let mut hook_words = vec![exe.clone(), "hook".into(), "--session".into(), key.clone()];
    hook_words.extend(extra.iter().cloned());
    let hook_cmd = hook_words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let settings_path = project.join(".claude").join("settings.json");
    let (old_settings, mut settings) = read_json(&settings_path)?;
    merge_hook(&mut settings, &hook_cmd)
        .map_err(|m| UsageError(format!("{}: {m}; fix or move it", settings_path.display())))?;

    // .mcp.json: the MCP server.
    let mcp_path = project.join(".mcp.json");
    let (old_mcp, mut mcp) = read_json(&mcp_path)?;
    let mut mcp_args = vec!["mcp".to_string(), "--session".into(), key.clone()];
    mcp_args.extend(extra.iter().cloned());
    merge_mcp(&mut mcp, &exe, &mcp_args)
        .map_err(|m| UsageError(format!("{}: {m}; fix or move it", mcp_path.display())))?;

    let new_settings = pretty(&settings);
    let new_mcp = pretty(&mcp);
    if args.dry_run {
        for (path, old, new) in [
            (&settings_path, &old_settings, &new_settings),
            (&mcp_path, &old_mcp, &new_mcp),
        ] {
            out(&diff(path, old.as_deref().unwrap_or(""), new));
        }
        out(&format!(
            "dry run: nothing written; the session {key} would be created at {url}"
        ));
        return Ok(());
    }
    for (path, old, new) in [
        (&settings_path, &old_settings, &new_settings),
        (&mcp_path, &old_mcp, &new_mcp),
    ] {
        let verb = match old {
            None => "created",
            Some(o) if o == new => "unchanged",
            Some(_) => "updated",
        };
        if verb != "unchanged" {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            write_atomic(path, new)?;
        }
        out(&format!("{verb} {}", path.display()));
    }
    out(&format!("hook command: {hook_cmd}"));
    out(&format!(
        "MCP server \"aware\": {} {}",
        shell_quote(&exe),
        mcp_args
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let has_token = resolved.token.is_some();
    let created = Client::new(resolved, false)
        .and_then(|c| c.call("POST", "/v1/sessions", Some(json!({"key": key}))));
    match created {
        Ok(_) => out(&format!("session {key} is ready at {url}")),
        Err(Failure::Server(m)) => out(&format!(
            "warning: could not create the session {key}: {m}; the hook and `aware mcp` create it on first use"
        )),
        Err(Failure::Unreachable(m)) | Err(Failure::Usage(m)) => out(&format!(
            "note: {m}\nthe session {key} will be created on first use, once `aware serve` runs"
        )),
    }
    if has_token {
        out("note: the token is not written into the project; export AWARE_TOKEN (or set token_file in ~/.config/aware/client.toml) where Claude Code runs");
    }
    out("next: start `aware serve` if it is not running, then (re)start Claude Code in the project and approve the \"aware\" MCP server; `aware doctor` checks the setup");
    Ok(())
}

/// The file's text (when it exists) and its parsed JSON (an empty object when missing).
fn read_json(path: &Path) -> Result<(Option<String>, Value)> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok((Some(text), json!({}))),
        Ok(text) => {
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                UsageError(format!(
                    "{} is not valid JSON ({e}); nothing was written, fix it and run again",
                    path.display()
                ))
            })?;
            if !v.is_object() {
                bail!(UsageError(format!(
                    "{} is not a JSON object; nothing was written",
                    path.display()
                )));
            }
            Ok((Some(text), v))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((None, json!({}))),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("json.aware-tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Adds (or replaces) the aware command in `hooks.UserPromptSubmit`.
fn merge_hook(settings: &mut Value, cmd: &str) -> Result<(), String> {
    let hooks = settings
        .as_object_mut()
        .ok_or("not a JSON object")?
        .entry("hooks")
        .or_insert_with(|| json!({}));
    let ups = hooks
        .as_object_mut()
        .ok_or("\"hooks\" is not an object")?
        .entry("UserPromptSubmit")
        .or_insert_with(|| json!([]));
    let groups = ups
        .as_array_mut()
        .ok_or("\"hooks.UserPromptSubmit\" is not an array")?;
    for g in groups.iter_mut() {
        if let Some(list) = g["hooks"].as_array_mut() {
            for h in list.iter_mut() {
                if h["command"].as_str().is_some_and(is_aware_hook) {
                    h["command"] = cmd.into();
                    return Ok(());
                }
            }
        }
    }
    groups.push(json!({"hooks": [{"type": "command", "command": cmd, "timeout": 10}]}));
    Ok(())
}

/// Sets `mcpServers.aware`, keeping the other servers and any `env` already given to aware.
fn merge_mcp(mcp: &mut Value, exe: &str, args: &[String]) -> Result<(), String> {
    let servers = mcp
        .as_object_mut()
        .ok_or("not a JSON object")?
        .entry("mcpServers")
        .or_insert_with(|| json!({}));
    let servers = servers
        .as_object_mut()
        .ok_or("\"mcpServers\" is not an object")?;
    let entry = servers.entry("aware").or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry["command"] = exe.into();
    entry["args"] = json!(args);
    Ok(())
}

/// A line diff (longest common subsequence; the files are small).
pub fn diff(path: &Path, old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut s = format!("--- {}\n+++ {}\n", path.display(), path.display());
    let (mut i, mut j) = (0, 0);
    let mut changed = false;
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            s.push_str(&format!(" {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            s.push_str(&format!("+{}\n", b[j]));
            j += 1;
            changed = true;
        } else {
            s.push_str(&format!("-{}\n", a[i]));
            i += 1;
            changed = true;
        }
    }
    if !changed {
        return format!("{}: unchanged", path.display());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_key_is_a_valid_rest() {
        assert_eq!(
            default_key(Path::new("/home/me/My Project.v2")),
            "agent:main:project:my-project-v2"
        );
        assert_eq!(default_key(Path::new("/")), "agent:main:project:project");
    }

    #[test]
    fn own_hook_commands_are_recognised() {
        assert!(is_aware_hook("/home/me/.cargo/bin/aware hook --session k"));
        assert!(is_aware_hook("AWARE_TOKEN=x aware hook"));
        assert!(is_aware_hook("'/opt/x/aware' hook --session 'k'"));
        assert!(!is_aware_hook("echo hook"));
        assert!(!is_aware_hook("aware-other hook"));
        assert!(!is_aware_hook("aware mcp"));
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("agent:main:x"), "agent:main:x");
        assert_eq!(shell_quote("/a b/aware"), "'/a b/aware'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn diff_marks_added_and_removed_lines() {
        let d = diff(Path::new("f"), "a\nb\nc\n", "a\nx\nc\n");
        assert!(
            d.contains("-b\n") && d.contains("+x\n") && d.contains(" a\n"),
            "{d}"
        );
        assert_eq!(diff(Path::new("f"), "a\n", "a\n"), "f: unchanged");
    }
}
