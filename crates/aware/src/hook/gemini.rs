//! What Gemini CLI needs beyond the shared events (checked against Gemini CLI 0.61.0,
//! docs/gemini-cli.md): its events are read as Claude Code's (`BeforeAgent` the prompt,
//! `AfterTool` the tool call, `AfterAgent` the stop), and the answers carry its own event
//! names. Its `PreCompress` is ignored: Gemini CLI fires it before every check whether to
//! compress the history, also when it then compresses nothing, so it marks no compaction.
//!
//! Two things differ from Claude Code and Codex:
//! - After an `AfterAgent` block, Gemini CLI sends the block's reason to the model as a new
//!   prompt and runs `BeforeAgent` again on it, as if the user had typed it. That prompt is the
//!   notices aware handed over (every line in the hub's voice, `System: `, decision D63), not a
//!   human's words: it is drained for, never recorded as a human turn.
//! - `AfterAgent` always has a `prompt_response`; with no text it is `[no response text]`,
//!   which answers no message.

use super::act;
use super::common::{Cli, Http, Output, Target};
use aware_client::hook_input::{Event, HookInput};
use serde_json::Value;

/// What Gemini CLI puts in `prompt_response` when the turn ended without text.
const NO_RESPONSE_TEXT: &str = "[no response text]";

pub fn act(
    http: &Http,
    target: &Target,
    event: Event,
    input: &HookInput,
) -> Result<Output, String> {
    let mut input = input.clone();
    if input.last_assistant_message.as_deref() == Some(NO_RESPONSE_TEXT) {
        input.last_assistant_message = None;
    }
    let acted = if event == Event::UserPromptSubmit && is_own_reason(&input.prompt) {
        // The stop gate's own reason, back as a prompt: hand over what is pending, record
        // nothing.
        act::act(http, target, Cli::Gemini, Event::PostToolUse, &input)?
    } else {
        act::act(http, target, Cli::Gemini, event, &input)?
    };
    Ok(named(acted, event))
}

/// A prompt every line of which is in the hub's voice: the reason of an `AfterAgent` block,
/// which Gemini CLI runs `BeforeAgent` on as a new prompt. (No key or text can put a line in
/// the hub's voice into a notice, D63, so a drain's prompt is exactly such lines.)
fn is_own_reason(prompt: &str) -> bool {
    let mut lines = prompt.lines().filter(|l| !l.trim().is_empty()).peekable();
    lines.peek().is_some() && lines.all(|l| l.starts_with("System: "))
}

/// Gemini CLI's name of an event, in `hookSpecificOutput.hookEventName` (Gemini does not read
/// it; it says which event the answer is for, as with the other CLIs).
fn gemini_name(event: Event) -> &'static str {
    match event {
        Event::UserPromptSubmit => "BeforeAgent",
        Event::PostToolUse => "AfterTool",
        Event::Stop => "AfterAgent",
        other => other.name(),
    }
}

fn named(out: Output, event: Event) -> Output {
    match out {
        Output::Json(mut v) => {
            if let Some(Value::Object(o)) = v.get_mut("hookSpecificOutput") {
                o.insert("hookEventName".into(), gemini_name(event).into());
            }
            Output::Json(v)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_prompts_wholly_in_the_hubs_voice_are_the_gates_own() {
        assert!(is_own_reason(
            "System: [2026-01-01T00:00:00.000Z] Session \"k\" changed (other actor).\n\
             System: #2 human_direct_message by human via slack: \"x\"\n"
        ));
        assert!(!is_own_reason("please fix the build"));
        assert!(!is_own_reason("System: [t] x\nand also this"));
        assert!(!is_own_reason("  \n"));
    }

    #[test]
    fn answers_carry_geminis_event_names() {
        let out = named(
            Output::Json(serde_json::json!({"hookSpecificOutput": {
                "hookEventName": "PostToolUse", "additionalContext": "x"}})),
            Event::PostToolUse,
        );
        let Output::Json(v) = out else { panic!("json") };
        assert_eq!(v["hookSpecificOutput"]["hookEventName"], "AfterTool");
    }
}
