//! What the scripted model says and to whom: its tool calls, and the conversation (lane) a
//! request belongs to.

use serde_json::Value;

/// The model name the server reports (both CLIs accept any name from a custom endpoint).
pub(super) const MODEL: &str = "claude-sonnet-4-5";

/// Which conversation a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    Main,
    Subagent,
    Compaction,
    Side,
    /// `POST /v1/messages/count_tokens`: answered with a token count, no step.
    CountTokens,
}

/// One tool call the model makes.
#[derive(Clone, Debug)]
pub struct Call {
    pub id: String,
    pub kind: CallKind,
}

#[derive(Clone, Debug)]
pub enum CallKind {
    /// A shell command: Claude Code's `Bash` tool (`{"command"}`), Codex's `exec_command`
    /// (`{"cmd"}`).
    Shell(String),
    /// Any other tool by the name Claude Code offers it under (say `mcp__aware__session_status`,
    /// or `Agent`), with its input object. For Codex an `mcp__SERVER__TOOL` name is sent as
    /// tool `TOOL` in namespace `mcp__SERVER`, the shape Codex 0.169.0 accepts, and
    /// `NAMESPACE.TOOL` (say `multi_agent_v1.spawn_agent`) as tool `TOOL` in `NAMESPACE`.
    Tool { name: String, input: Value },
}

impl Call {
    pub fn shell(id: &str, command: &str) -> Self {
        Call {
            id: id.to_string(),
            kind: CallKind::Shell(command.to_string()),
        }
    }
    pub fn tool(id: &str, name: &str, input: Value) -> Self {
        Call {
            id: id.to_string(),
            kind: CallKind::Tool {
                name: name.to_string(),
                input,
            },
        }
    }
}
