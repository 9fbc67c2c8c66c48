//! `aware init claude-code`, `aware init codex` and `aware init gemini`: one-step setup of a
//! project for Claude Code, Codex CLI or Gemini CLI. Each writes or merges the CLI's config files (the hooks of every event that
//! matters and the MCP server, with this binary's absolute path) and creates the session on the
//! gateway.
//!
//! Merging never clobbers: other keys, other hooks and other MCP servers are kept; aware's own
//! entries (a command running `… hook` of an `aware` binary, and the `aware` MCP server, written
//! whole in a project's files: [`dropped`]) are replaced, so a second run changes nothing. A file that is not valid JSON or TOML, repeats a key, is read-only, or leads
//! out of the project through a symlink is left alone and reported ([`files`]).

pub(crate) mod claude;
pub(crate) mod codex;
mod dropped;
mod files;
pub(crate) mod gemini;
pub(crate) mod setup;
mod usage;

use crate::client::Failure;
use crate::context::Conn;
use anyhow::Result;
use usage::UsageError;

pub use claude::ClaudeCodeArgs;
pub use codex::CodexArgs;
pub use gemini::GeminiArgs;

#[derive(clap::Subcommand, Debug)]
pub enum InitCommand {
    /// Write the hooks to .claude/settings.json and the MCP server to .mcp.json of a project,
    /// merging with what is there, and create the session.
    ClaudeCode(ClaudeCodeArgs),
    /// Write the MCP server to .codex/config.toml and the hooks to .codex/hooks.json (of a
    /// project, or of ~/.codex with --global), trust those hooks, and create the session.
    Codex(CodexArgs),
    /// Write the hooks and the MCP server to .gemini/settings.json of a project, trust that
    /// hook in ~/.gemini/trusted_hooks.json, and create the session.
    Gemini(GeminiArgs),
}

pub fn run(cmd: InitCommand, outer: &Conn) -> Result<()> {
    let r = match cmd {
        InitCommand::ClaudeCode(args) => claude::run(args, outer),
        InitCommand::Codex(args) => codex::run(args, outer),
        InitCommand::Gemini(args) => gemini::run(args, outer),
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) => match e.downcast::<UsageError>() {
            Ok(u) => Failure::Usage(u.0).exit(),
            Err(e) => Err(e),
        },
    }
}
