//! What both setups share: the settled inputs (binary, session, gateway), the written command
//! lines, reading the JSON configs, replacing aware's own hook entries, and finishing (the diff of
//! a dry run, or the writes and the session's creation).

use super::files::{self, Change, Scope};
use super::usage::UsageError;
use crate::client::{out, Client, Failure};
use crate::context::{self, Conn};
use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What both setups share: where the gateway is, the session, and how to reach it.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Session the hooks and the MCP server act for
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

/// The settled inputs of a setup.
pub(crate) struct Setup {
    /// This binary, absolute.
    pub exe: String,
    pub key: String,
    pub url: String,
    /// `--url URL`, for every written command line.
    pub extra: Vec<String>,
    pub resolved: context::Resolved,
}

impl Setup {
    pub(crate) fn new(common: &Common, project: &Path, outer: &Conn) -> Result<Setup> {
        let exe = std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .context("cannot find the path of this aware binary")?;
        let exe = exe.to_string_lossy().into_owned();
        let key = common.key.clone().unwrap_or_else(|| default_key(project));
        let conn = Conn {
            url: common.url.clone(),
            token: common.token.clone(),
            session: None,
            agent: None,
            ca_file: None,
        }
        .or(outer);
        let resolved = context::resolve(conn, None).map_err(|f| match f {
            Failure::Usage(m) | Failure::Server(m) | Failure::Unreachable(m) => UsageError(m),
        })?;
        let url = resolved.url.clone();
        if has_userinfo(&url) {
            bail!(UsageError(format!(
                "--url {}: a user or password in the URL would be written into the configs; \
                 give the URL without it and the token with --token or AWARE_TOKEN",
                redact(&url)
            )));
        }
        // Always written, the default URL too: a hook or MCP server without `--url` reads
        // `AWARE_URL`, which a cloned repository can set for the CLI's children
        // (`.claude/settings.json` `env`) and so send the user's token and every prompt
        // elsewhere. A moved gateway means running init again.
        let extra: Vec<String> = vec!["--url".into(), url.trim_end_matches('/').to_string()];
        Ok(Setup {
            exe,
            key,
            url,
            extra,
            resolved,
        })
    }

    /// `<exe> <words…> --session KEY [--url URL]`, quoted for a POSIX shell.
    pub(crate) fn command(&self, words: &[&str]) -> String {
        let mut all = vec![self.exe.clone()];
        all.extend(words.iter().map(|w| w.to_string()));
        all.extend(["--session".to_string(), self.key.clone()]);
        all.extend(self.extra.iter().cloned());
        all.iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The MCP server's arguments.
    pub(crate) fn mcp_args(&self) -> Vec<String> {
        let mut a = vec!["mcp".to_string(), "--session".into(), self.key.clone()];
        a.extend(self.extra.iter().cloned());
        a
    }

    /// Prints the diffs (dry run) or writes the files, then creates the session.
    pub(crate) fn finish(&self, changes: &[Change], dry_run: bool, next: &str) -> Result<()> {
        if dry_run {
            for c in changes {
                out(&files::diff(
                    &c.path,
                    c.old.as_deref().unwrap_or(""),
                    &c.new,
                ));
            }
            let exists = Client::new(self.resolved.clone(), false)
                .and_then(|c| {
                    c.call(
                        "GET",
                        &format!("/v1/sessions/{}", crate::client::seg(&self.key)),
                        None,
                    )
                })
                .is_ok();
            let verb = if exists { "exists" } else { "would be created" };
            out(&format!(
                "dry run: nothing written; the session {} {verb} at {}",
                self.key, self.url
            ));
            return Ok(());
        }
        for c in changes {
            if c.verb() != "unchanged" {
                files::write(c)?;
            }
            out(&format!("{} {}", c.verb(), c.path.display()));
        }
        let has_token = self.resolved.token.is_some();
        let created = Client::new(self.resolved.clone(), false)
            // Created for the CLI's hook, as the hook would create it: a session a CLI runs
            // takes messages through its hook's drains (aware_engine's `messages`).
            .and_then(|c| {
                c.call(
                    "POST",
                    "/v1/sessions",
                    Some(json!({"key": self.key, "createdVia": "hook"})),
                )
            });
        let up = match created {
            Ok(_) => {
                out(&format!("session {} is ready at {}", self.key, self.url));
                true
            }
            Err(Failure::Server(m)) => {
                out(&format!(
                    "warning: could not create the session {}: {m}; the hooks and `aware mcp` create it on first use",
                    self.key
                ));
                true
            }
            Err(Failure::Unreachable(m)) | Err(Failure::Usage(m)) => {
                out(&format!(
                    "note: {m}\nthe session {} will be created on first use, once `aware serve` runs",
                    self.key
                ));
                false
            }
        };
        if has_token {
            out("note: the token is not written into the project; export AWARE_TOKEN (or set token_file in ~/.config/aware/client.toml) where the CLI runs");
        }
        if up {
            out(&format!("next: {next}; `aware doctor` checks the setup"));
        } else {
            out(&format!(
                "next: start `aware serve`, then {next}; `aware doctor` checks the setup"
            ));
        }
        Ok(())
    }
}

/// The project directory, canonical; a usage error when it is not a directory.
pub(crate) fn project_dir(given: Option<&PathBuf>) -> Result<PathBuf> {
    let project = match given {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let canon = project.canonicalize().map_err(|e| {
        UsageError(format!(
            "--project {}: {e} (give an existing directory)",
            project.display()
        ))
    })?;
    if !canon.is_dir() {
        bail!(UsageError(format!(
            "--project {} is not a directory",
            project.display()
        )));
    }
    Ok(canon)
}

/// `user@` or `user:password@` in an http(s) URL's authority.
pub(crate) fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@')
}

/// The URL with its user information replaced, for messages.
pub(crate) fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// A JSON config file: its text (when it exists) and its object (empty when missing).
pub(crate) fn read_json(path: &Path, scope: &Scope) -> Result<(Option<String>, Value)> {
    match files::read(path, scope)? {
        Some(text) if text.trim().is_empty() => Ok((Some(text), json!({}))),
        Some(text) => {
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                UsageError(format!(
                    "{} is not valid JSON ({e}); nothing was written, fix it and run again",
                    path.display()
                ))
            })?;
            files::check_faithful(&text).map_err(|e| {
                UsageError(format!(
                    "{}: {e}; nothing was written (a rewrite would not be faithful), fix it and run again",
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
        None => Ok((None, json!({}))),
    }
}

pub(crate) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

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
pub(crate) fn is_aware_hook(cmd: &str) -> bool {
    let mut words = cmd.split_whitespace().filter(|w| !w.contains('='));
    let Some(prog) = words.next() else {
        return false;
    };
    let prog = prog.trim_matches(|c| c == '\'' || c == '"');
    let base = prog.rsplit('/').next().unwrap_or(prog);
    base == "aware" && cmd.split_whitespace().any(|w| w == "hook")
}

/// Removes aware's handlers from one event's groups (dropping groups left empty by that), then
/// appends `ours`, one group each: the result is the same whatever aware wrote before.
pub(crate) fn replace_hooks(
    hooks: &mut serde_json::Map<String, Value>,
    event: &str,
    ours: Vec<Value>,
) -> std::result::Result<(), String> {
    let groups = hooks.entry(event).or_insert_with(|| json!([]));
    let list = groups
        .as_array_mut()
        .ok_or(format!("\"hooks.{event}\" is not an array"))?;
    list.retain_mut(|g| {
        let Some(handlers) = g.get_mut("hooks").and_then(Value::as_array_mut) else {
            return true;
        };
        let before = handlers.len();
        handlers.retain(|h| !h["command"].as_str().is_some_and(is_aware_hook));
        !(before > 0 && handlers.is_empty())
    });
    for h in ours {
        list.push(json!({"hooks": [h]}));
    }
    if list.is_empty() {
        hooks.remove(event);
    }
    Ok(())
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
    fn user_information_in_urls_is_found_and_redacted() {
        assert!(has_userinfo("http://u:p@host:1/x"));
        assert!(!has_userinfo("http://host:1/x?a=b@c"));
        assert_eq!(redact("http://u:p@host"), "http://***@host");
    }
}
