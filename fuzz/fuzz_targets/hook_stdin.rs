//! `aware hook`'s stdin: `aware_client::hook_input::parse` (the JSON object Claude Code or Codex CLI
//! writes) and `read`, on arbitrary bytes, with no event forced and with each event forced
//! (`--event`). Pure functions: every input is independent.
//!
//! Invariants:
//! - `read` returns the bytes as they are (inputs are far below `MAX_INPUT`);
//! - an accepted input is a JSON object; its event is the forced one, else the one
//!   `hook_event_name` names (`Event::parse`, which round-trips with `Event::name`); its fields
//!   are the object's, with the documented types: `session_id` a non-empty string, `prompt`
//!   required for `UserPromptSubmit` and empty otherwise, `stop_hook_active` a boolean,
//!   `agent_id` required for `SubagentStart`/`SubagentStop`, `trigger` from `trigger` else
//!   `reason`; `null` is the same as absent for the optional fields;
//! - an event name the hook does not act on is `Ok(None)`, never an error, and only without
//!   `--event`;
//! - an error is a message: "not valid JSON" for what `serde_json` refuses, otherwise it names
//!   the field (or the object) that is wrong.
#![no_main]

use aware_client::hook_input::{parse, read, Event, HookInput};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const EVENTS: [Event; 9] = [
    Event::SessionStart,
    Event::UserPromptSubmit,
    Event::PostToolUse,
    Event::PostToolBatch,
    Event::Stop,
    Event::SubagentStart,
    Event::SubagentStop,
    Event::PreCompact,
    Event::SessionEnd,
];

/// The names an error may be about.
const FIELDS: [&str; 9] = [
    "hook_event_name",
    "session_id",
    "stop_hook_active",
    "agent_id",
    "agent_type",
    "trigger",
    "reason",
    "transcript_path",
    "prompt",
];

fuzz_target!(|data: &[u8]| {
    assert_eq!(read(data).as_deref(), Ok(data));
    let json = serde_json::from_slice::<Value>(data);
    for forced in std::iter::once(None).chain(EVENTS.map(Some)) {
        match parse(data, forced) {
            Ok(Some((event, input))) => {
                let Ok(Value::Object(o)) = &json else {
                    panic!("accepted a non-object")
                };
                check_accepted(o, forced, event, &input);
            }
            Ok(None) => {
                assert!(forced.is_none(), "--event given, yet nothing to do");
                let Ok(Value::Object(o)) = &json else {
                    panic!("Ok(None) for a non-object")
                };
                let name = o["hook_event_name"].as_str().expect("a string event name");
                assert_eq!(Event::parse(name), None);
            }
            Err(msg) => match &json {
                Err(_) => assert!(msg.starts_with("hook input is not valid JSON"), "{msg}"),
                Ok(Value::Object(_)) => assert!(
                    FIELDS.iter().any(|f| msg.contains(f)),
                    "the error names no field: {msg}"
                ),
                Ok(_) => assert_eq!(msg, "hook input must be a JSON object"),
            },
        }
    }
});

fn text<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    match o.get(k) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str().unwrap_or_else(|| panic!("{k} accepted as {v}"))),
    }
}

fn check_accepted(o: &Map<String, Value>, forced: Option<Event>, event: Event, i: &HookInput) {
    assert_eq!(Event::parse(event.name()), Some(event));
    match forced {
        Some(f) => assert_eq!(event, f),
        None => assert_eq!(
            o.get("hook_event_name").and_then(Value::as_str),
            Some(event.name())
        ),
    }
    assert_eq!(i.session_id.as_deref(), text(o, "session_id"));
    assert!(i.session_id.as_ref().is_none_or(|s| !s.is_empty()));
    assert_eq!(
        i.stop_hook_active,
        match o.get("stop_hook_active") {
            None | Some(Value::Null) => false,
            Some(v) => v.as_bool().expect("a boolean"),
        }
    );
    assert_eq!(i.agent_id.as_deref(), text(o, "agent_id"));
    assert_eq!(i.agent_type.as_deref(), text(o, "agent_type"));
    assert_eq!(i.transcript_path.as_deref(), text(o, "transcript_path"));
    assert_eq!(
        i.trigger.as_deref(),
        text(o, "trigger").or(text(o, "reason"))
    );
    if event == Event::UserPromptSubmit {
        assert_eq!(
            Some(i.prompt.as_str()),
            o.get("prompt").and_then(Value::as_str)
        );
    } else {
        assert!(i.prompt.is_empty());
    }
    if matches!(event, Event::SubagentStart | Event::SubagentStop) {
        assert!(i.agent_id.is_some());
    }
}
