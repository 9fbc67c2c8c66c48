//! `aware doctor`'s checks of Gemini CLI, when the project's `.gemini/settings.json` names aware:
//! the hook on every event `init gemini` installs, the MCP server's program, the hook's trust key
//! (`~/.gemini/trusted_hooks.json`) and the folder's trust. Each check is a [`Finding`] that
//! `doctor` reports like its own.

use crate::init::gemini::{folder_trusted, gemini_dir, EVENTS, HOOK_NAME};
use crate::init::setup::is_aware_hook;
use serde_json::Value;
use std::path::Path;

/// What one check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Finding {
    Ok(String),
    /// What failed, and the fix.
    Fail(String, String),
    /// What is not as it should be but works, and the fix.
    Warn(String, String),
    /// The program a configured command runs (what runs it, the program): doctor checks it is
    /// there.
    Program(String, String),
    /// A session a hook or the MCP server acts for.
    Session(String),
}

pub fn check(project: &Path) -> Vec<Finding> {
    let project = project
        .canonicalize()
        .unwrap_or_else(|_| project.to_path_buf());
    let path = project.join(".gemini/settings.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    let v: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return vec![Finding::Fail(
                format!("{}: not valid JSON: {e}", path.display()),
                "fix the JSON".into(),
            )]
        }
    };
    let ours = |event: &str| -> Vec<String> {
        v["hooks"][event]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["hooks"].as_array().into_iter().flatten())
            .filter_map(|h| h["command"].as_str().filter(|c| is_aware_hook(c)))
            .map(str::to_string)
            .collect()
    };
    let mut commands: Vec<String> = EVENTS.iter().flat_map(|e| ours(e)).collect();
    let server = v["mcpServers"]["aware"]["command"].as_str();
    if commands.is_empty() && server.is_none() {
        return Vec::new();
    }
    let mut found = Vec::new();
    let missing: Vec<&str> = EVENTS
        .iter()
        .copied()
        .filter(|e| ours(e).is_empty())
        .collect();
    if missing.is_empty() {
        found.push(Finding::Ok(format!(
            "Gemini CLI hooks in {}",
            path.display()
        )));
    } else {
        found.push(Finding::Fail(
            format!(
                "{} has no aware hook on {}",
                path.display(),
                missing.join(", ")
            ),
            "run `aware init gemini` again".into(),
        ));
    }
    for cmd in &commands {
        if let Some(s) = session_of(cmd.split_whitespace().map(|w| w.trim_matches('\''))) {
            found.push(Finding::Session(s));
        }
    }
    if let Some(prog) = server {
        found.push(Finding::Program(
            format!("the aware MCP server of {}", path.display()),
            prog.to_string(),
        ));
        let args = v["mcpServers"]["aware"]["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str);
        if let Some(s) = session_of(args) {
            found.push(Finding::Session(s));
        }
    }
    commands.dedup();
    found.extend(trust(&project, &path, &commands));
    found
}

/// The hook's trust key in `trusted_hooks.json` (`commands`: aware's distinct hook commands) and
/// the folder's trust.
fn trust(project: &Path, path: &Path, commands: &[String]) -> Vec<Finding> {
    let mut found = Vec::new();
    let Ok(dir) = gemini_dir() else {
        return found;
    };
    let trusted_path = dir.join("trusted_hooks.json");
    let trusted: Value = std::fs::read_to_string(&trusted_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let keys: Vec<&str> = trusted[project.to_string_lossy().as_ref()]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if commands
        .iter()
        .any(|c| !keys.contains(&format!("{HOOK_NAME}:{c}").as_str()))
    {
        found.push(Finding::Warn(
            format!(
                "{} does not list aware's hook for {}: Gemini CLI warns before it runs it",
                trusted_path.display(),
                project.display()
            ),
            "run `aware init gemini` again (it writes the trust key)".into(),
        ));
    }
    if !folder_trusted(project) {
        found.push(Finding::Warn(
            format!(
                "Gemini CLI reads {} only in a trusted folder, and this one is not",
                path.display()
            ),
            "trust the folder in Gemini CLI, or run `aware init gemini --trust-project`".into(),
        ));
    }
    found
}

/// The value after `--session` (or of `--session=`).
fn session_of<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<String> {
    while let Some(w) = words.next() {
        if w == "--session" {
            return words.next().map(str::to_string);
        }
        if let Some(v) = w.strip_prefix("--session=") {
            return Some(v.to_string());
        }
    }
    None
}
