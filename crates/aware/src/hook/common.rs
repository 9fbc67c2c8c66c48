//! What the hook's parts share: which CLI runs it, what it hands back, the session it acts for,
//! requests bounded by the hook's deadline, and its one warning line.

use crate::client::seg;
use aware_client::{Client, ClientError};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Time kept back from the deadline for handing the answer over and printing it.
pub const MARGIN: Duration = Duration::from_millis(100);

/// Which CLI runs the hook: the answer's format and the channel of recorded prompts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cli {
    /// Claude Code (`.claude/settings.json`).
    ClaudeCode,
    /// Codex CLI (`.codex/hooks.json`).
    Codex,
    /// Gemini CLI (`.gemini/settings.json`; its event names are read as Claude Code's).
    Gemini,
}

impl Cli {
    pub fn channel(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "claude-code",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini-cli",
        }
    }
}

/// What the hook hands back to the CLI.
#[derive(Debug)]
pub enum Output {
    Nothing,
    /// Plain stdout (Claude Code's `UserPromptSubmit` adds it to the context).
    Text(String),
    /// A JSON answer on stdout (`hookSpecificOutput`, `decision`).
    Json(Value),
}

/// The one warning line on stderr, control characters flattened so it stays one line.
pub fn warn(msg: &str) {
    let line: String = msg
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let _ = writeln!(std::io::stderr().lock(), "aware hook: warning: {line}");
}

/// The session the hook acts for.
#[derive(Debug, Clone)]
pub struct Target {
    pub key: String,
    /// `agentId` for a bare `--session` key given with `--agent`.
    pub agent: Option<String>,
}

impl Target {
    /// `--session`, else `agent:<agent or main>:claude:<sha256 hex of session_id>` (03 §8 step
    /// 2), the key adoption mints for the same local thread (04 §3 step 4).
    pub fn resolve(gw: &Client, session_id: Option<&str>) -> Result<Target, String> {
        if let Some(s) = gw.session().filter(|s| !s.trim().is_empty()) {
            let bare = !s.trim().to_ascii_lowercase().starts_with("agent:");
            return Ok(Target {
                key: s.to_string(),
                agent: gw.agent().map(str::to_string).filter(|_| bare),
            });
        }
        let id = session_id
            .ok_or("hook input has no session_id (and no --session was given)".to_string())?;
        Ok(Target {
            key: claude_key(gw.agent().unwrap_or("main"), id),
            agent: None,
        })
    }

    pub fn query(&self) -> String {
        self.agent
            .as_deref()
            .map(|a| format!("?agentId={}", seg(a)))
            .unwrap_or_default()
    }

    pub fn path(&self, what: &str) -> String {
        format!("/v1/sessions/{}/{what}{}", seg(&self.key), self.query())
    }
}

/// `agent:<agent>:claude:<lowercase hex SHA-256 of session_id>`.
fn claude_key(agent: &str, session_id: &str) -> String {
    let digest = Sha256::digest(session_id.as_bytes());
    format!("agent:{agent}:claude:{}", aware_core::hex::lower(&digest))
}

/// Operator requests (no `X-Aware-Session`) bounded by the hook's deadline.
pub struct Http<'a> {
    pub gw: &'a Client,
    pub deadline: Instant,
}

impl Http<'_> {
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let budget = self
            .deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(MARGIN);
        if budget.is_zero() {
            return Err(ClientError::Timeout {
                url: self.gw.base().to_string(),
                detail: "out of time (--timeout-ms)".into(),
            });
        }
        self.gw
            .request("POST", path)
            .operator()
            .timeout(budget)
            .json(Some(body))
    }
}

/// A failed request as the warning line says it: the gateway's `<code>: <message>`, or that
/// it is unavailable.
pub fn said(e: &ClientError) -> String {
    if e.is_unavailable() {
        format!("gateway unavailable: {}", e.message())
    } else {
        e.to_string()
    }
}

/// The reconcile preview each hand-over asks for, in bytes per notice (the delta the notice
/// points at, next to it: one read for the model instead of three tool calls).
/// `AWARE_PREVIEW_BYTES` sets it, 0 turns it off; a value that is not 0..=16384 is ignored.
pub const DEFAULT_PREVIEW_BYTES: u64 = 1024;

/// The body of every drain that hands notices to a model: the hooks' and the MCP server's.
pub(crate) fn drain_body() -> serde_json::Value {
    let bytes = std::env::var("AWARE_PREVIEW_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|b| *b <= 16 * 1024)
        .unwrap_or(DEFAULT_PREVIEW_BYTES);
    // Claude Code and Codex name the MCP server's tools `mcp__<server>__<tool>`, and `aware
    // init` names the server `aware`.
    if bytes == 0 {
        return serde_json::json!({ "previewBytes": 0 });
    }
    serde_json::json!({ "previewBytes": bytes, "toolPrefix": "mcp__aware__" })
}

/// `$XDG_STATE_HOME/aware`, else `~/.local/state/aware`; never relative ([`crate::home`]).
pub fn state_dir() -> Result<PathBuf, String> {
    crate::home::xdg_dir("XDG_STATE_HOME", ".local/state")
        .map_err(|e| format!("cannot find the state directory: {e}"))
}
