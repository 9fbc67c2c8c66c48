//! The hook's input: the JSON object Claude Code, Codex CLI or Gemini CLI writes on stdin, reduced
//! to the fields the hook acts on. Field names were checked against the pinned CLIs
//! (`clients/agent-clis/package-lock.json`); unknown fields are ignored, a known field of the
//! wrong type is an error (one warning line, nothing recorded). Used by `aware hook`; here, in a
//! library, so the `hook_stdin` fuzz target can call it.

use serde_json::{Map, Value};
use std::io::Read;

/// Largest hook input read from stdin (03 §8 step 1).
pub const MAX_INPUT: usize = 1 << 20;

/// The events the hook acts on. Every other event name (say Claude Code 2.1.332's
/// `PreSkillShellCommand`, a permission gate with nothing for the hook to hand over) is read and
/// ignored silently, so one command line can be installed under any event without harm, and a
/// CLI's new event never breaks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    SessionStart,
    UserPromptSubmit,
    PostToolUse,
    /// Claude Code: once per batch of parallel tool calls, after all of them and before the
    /// next model request; takes `additionalContext` like `PostToolUse`.
    PostToolBatch,
    Stop,
    SubagentStart,
    SubagentStop,
    PreCompact,
    SessionEnd,
}

impl Event {
    /// The CLIs' own spelling (case-sensitive: Claude Code and Codex both send these). Gemini
    /// CLI's names for the same moments (checked against Gemini CLI 0.61.0) read as the same
    /// events: `BeforeAgent` is the typed prompt, `AfterTool` the tool call's end, `AfterAgent`
    /// the stop. (Its `PreCompress` is not a compaction: Gemini fires it before every check
    /// whether to compress, so it is ignored.)
    pub fn parse(name: &str) -> Option<Event> {
        Some(match name {
            "SessionStart" => Event::SessionStart,
            "UserPromptSubmit" | "BeforeAgent" => Event::UserPromptSubmit,
            "PostToolUse" | "AfterTool" => Event::PostToolUse,
            "PostToolBatch" => Event::PostToolBatch,
            "Stop" | "AfterAgent" => Event::Stop,
            "SubagentStart" => Event::SubagentStart,
            "SubagentStop" => Event::SubagentStop,
            "PreCompact" => Event::PreCompact,
            "SessionEnd" => Event::SessionEnd,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Event::SessionStart => "SessionStart",
            Event::UserPromptSubmit => "UserPromptSubmit",
            Event::PostToolUse => "PostToolUse",
            Event::PostToolBatch => "PostToolBatch",
            Event::Stop => "Stop",
            Event::SubagentStart => "SubagentStart",
            Event::SubagentStop => "SubagentStop",
            Event::PreCompact => "PreCompact",
            Event::SessionEnd => "SessionEnd",
        }
    }
}

/// The fields of one hook input the hook uses.
#[derive(Debug, Clone, Default)]
pub struct HookInput {
    pub session_id: Option<String>,
    /// `UserPromptSubmit` only.
    pub prompt: String,
    /// `Stop` / `SubagentStop`: the CLI is already continuing because a stop hook blocked.
    pub stop_hook_active: bool,
    /// `SubagentStart` / `SubagentStop`: the native subagent's id and type. Claude Code runs a
    /// compaction as a forked subagent with an empty type and no `SubagentStart`.
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    /// `PreCompact`: `manual` or `auto`; `SessionEnd`: why it ended.
    pub trigger: Option<String>,
    /// The transcript file (Claude Code) or rollout (Codex): its size tells compactions apart.
    pub transcript_path: Option<String>,
    /// `Stop`: the text the agent ended its turn with (Claude Code and Codex send it as
    /// `last_assistant_message`, Gemini CLI's `AfterAgent` as `prompt_response`); it answers the
    /// messages handed over to the agent.
    pub last_assistant_message: Option<String>,
}

/// Reads stdin to its end, refusing more than [`MAX_INPUT`] bytes.
pub fn read(r: impl Read) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    r.take(MAX_INPUT as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read the hook input: {e}"))?;
    if buf.len() > MAX_INPUT {
        return Err("hook input is larger than 1 MiB; ignored".into());
    }
    Ok(buf)
}

/// `Ok(None)` for an event the hook does not act on. `forced` (`--event`) names the event when
/// the installed command says it, for a CLI that does not put `hook_event_name` in its input.
pub fn parse(bytes: &[u8], forced: Option<Event>) -> Result<Option<(Event, HookInput)>, String> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("hook input is not valid JSON: {e}"))?;
    let Value::Object(o) = v else {
        return Err("hook input must be a JSON object".into());
    };
    let event = match (o.get("hook_event_name"), forced) {
        (_, Some(e)) => e,
        (Some(Value::String(e)), None) => match Event::parse(e) {
            Some(e) => e,
            None => return Ok(None),
        },
        (Some(_), None) => return Err("hook_event_name must be a string".into()),
        (None, None) => return Err("hook input has no hook_event_name".into()),
    };
    let mut input = HookInput {
        session_id: match o.get("session_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(_) => return Err("session_id must be a non-empty string".into()),
        },
        stop_hook_active: match o.get("stop_hook_active") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("stop_hook_active must be true or false".into()),
        },
        agent_id: text(&o, "agent_id")?,
        agent_type: text(&o, "agent_type")?,
        trigger: text(&o, "trigger")?.or(text(&o, "reason")?),
        transcript_path: text(&o, "transcript_path")?,
        last_assistant_message: text(&o, "last_assistant_message")?
            .or(text(&o, "prompt_response")?),
        ..HookInput::default()
    };
    if event == Event::UserPromptSubmit {
        input.prompt = match o.get("prompt") {
            Some(Value::String(p)) => p.clone(),
            Some(_) => return Err("prompt must be a string".into()),
            None => return Err("hook input has no prompt".into()),
        };
    }
    if matches!(event, Event::SubagentStart | Event::SubagentStop) && input.agent_id.is_none() {
        return Err(format!("{} input has no agent_id", event.name()));
    }
    Ok(Some((event, input)))
}

/// An optional string field; absent and `null` are the same.
fn text(o: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{name} must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_from_the_input_or_forced() {
        let (e, i) = parse(
            br#"{"hook_event_name":"Stop","session_id":"s","stop_hook_active":true}"#,
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(e, Event::Stop);
        assert!(i.stop_hook_active);
        assert!(parse(br#"{"hook_event_name":"PreToolUse"}"#, None)
            .unwrap()
            .is_none());
        let (e, _) = parse(
            br#"{"hook_event_name":"PostToolBatch","session_id":"s","tool_calls":[]}"#,
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(e, Event::PostToolBatch);
        assert_eq!(Event::parse(e.name()), Some(e));
        let (e, _) = parse(br#"{"session_id":"s"}"#, Some(Event::PostToolUse))
            .unwrap()
            .unwrap();
        assert_eq!(e, Event::PostToolUse);
        assert!(parse(br#"{"session_id":"s"}"#, None).is_err());
    }

    /// A new event of a CLI is ignored whatever its fields hold: its fields are not the hook's
    /// (Claude Code 2.1.332's PreSkillShellCommand, fields as its schema has them, and the same
    /// with fields the hook would refuse on an event it acts on).
    #[test]
    fn an_event_the_hook_does_not_know_is_ignored_whatever_it_holds() {
        for unknown in [
            r#"{"hook_event_name":"PreSkillShellCommand","session_id":"s","tool_name":"Bash",
                "tool_input":{"command":"git status"},"tool_use_id":"x","command_name":"review",
                "invoked_by":"user"}"#,
            r#"{"hook_event_name":"PreSkillShellCommand","session_id":7,"agent_id":[],
                "stop_hook_active":"yes","prompt":{}}"#,
            r#"{"hook_event_name":"","session_id":"s"}"#,
        ] {
            assert!(
                parse(unknown.as_bytes(), None).unwrap().is_none(),
                "{unknown}"
            );
        }
    }

    #[test]
    fn gemini_cli_events_read_as_their_claude_code_counterparts() {
        let (e, i) = parse(
            br#"{"hook_event_name":"BeforeAgent","session_id":"s","prompt":"hi"}"#,
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!((e, i.prompt.as_str()), (Event::UserPromptSubmit, "hi"));
        let (e, i) = parse(
            br#"{"hook_event_name":"AfterAgent","session_id":"s","prompt":"hi","prompt_response":"done","stop_hook_active":true}"#,
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(e, Event::Stop);
        assert_eq!(i.last_assistant_message.as_deref(), Some("done"));
        assert!(i.stop_hook_active);
        let (e, _) = parse(br#"{"hook_event_name":"AfterTool","session_id":"s"}"#, None)
            .unwrap()
            .unwrap();
        assert_eq!(e, Event::PostToolUse);
        for ignored in ["BeforeModel", "PreCompress"] {
            let input = format!(r#"{{"hook_event_name":"{ignored}","trigger":"auto"}}"#);
            assert!(
                parse(input.as_bytes(), None).unwrap().is_none(),
                "{ignored}"
            );
        }
    }

    #[test]
    fn wrong_types_are_refused() {
        for bad in [
            r#"{"hook_event_name":"Stop","stop_hook_active":"yes"}"#,
            r#"{"hook_event_name":"SessionStart","session_id":1}"#,
            r#"{"hook_event_name":"SubagentStop"}"#,
            r#"{"hook_event_name":"UserPromptSubmit"}"#,
        ] {
            assert!(parse(bad.as_bytes(), None).is_err(), "{bad}");
        }
    }
}
