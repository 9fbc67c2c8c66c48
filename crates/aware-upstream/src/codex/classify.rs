//! Codex rollout row classifier (docs/codex-rows.md).
//!
//! Decides whether one parsed row of a Codex CLI rollout (`rollout-*.jsonl`) is a prompt that a
//! human typed. A rollout writes every typed prompt twice in the envelope format (a
//! `response_item` `message` with role `user` and an `event_msg` `user_message`), and most
//! user-role `response_item` messages are not typed at all (environment context, AGENTS.md and
//! user instructions, turn-aborted markers, compaction summaries, skill bodies), sometimes in a
//! form no content rule can recognise (redacted rollouts). So in the envelope format only the
//! prompt *events* count; the pre-envelope (mid-2025) format has no events and its bare user
//! messages are filtered by content. Pure: no I/O, no clock, and no input can make it panic.

use serde_json::{Map, Value};

use crate::classify::{parse_rfc3339_ms, RowClass};

/// Leading markers of user-role text that Codex wrote, not the human.
pub const MACHINE_MARKERS: &[&str] = &[
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions for",
    "<INSTRUCTIONS>",
    "<turn_aborted>",
    "<user_shell_command>",
    "<skill>",
    "<subagent_notification>",
    "<permissions instructions>",
    "<collaboration_mode>",
    // Compaction: the summary handed to the model after `/compact` or an automatic compaction.
    "Another language model started to solve this problem",
];

/// What the VS Code extension puts before a prompt: editor context the human did not type.
const IDE_CONTEXT_HEADER: &str = "# Context from my IDE setup:";
/// The heading after which the extension writes what the human typed.
const IDE_REQUEST_HEADING: &str = "## My request for Codex:";

/// What the first row of a rollout says about its thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionMeta {
    /// The thread (conversation) id.
    pub id: String,
    pub cwd: Option<String>,
    /// A sub-agent's thread (`source: {"subagent": …}`): its prompts come from the parent agent.
    pub subagent: bool,
}

/// Reads the session metadata of a rollout's header row: an envelope `session_meta` row, or the
/// bare `{id, timestamp, instructions, …}` header of the pre-envelope format. `None` for any
/// other row.
pub fn session_meta(row: &Value) -> Option<SessionMeta> {
    let obj = row.as_object()?;
    let meta = match (obj.get("type").and_then(Value::as_str), obj.get("payload")) {
        (Some("session_meta"), Some(Value::Object(p))) => p,
        (None, _) if !obj.contains_key("record_type") => obj,
        _ => return None,
    };
    let id = meta.get("id").and_then(Value::as_str)?;
    if id.is_empty() {
        return None;
    }
    let subagent = meta
        .get("source")
        .and_then(Value::as_object)
        .is_some_and(|s| s.contains_key("subagent"));
    Some(SessionMeta {
        id: id.to_owned(),
        cwd: meta.get("cwd").and_then(Value::as_str).map(str::to_owned),
        subagent,
    })
}

/// Classifies one parsed rollout row. Returns [`RowClass::Human`] or [`RowClass::NotHuman`]
/// (Codex has no queue rows).
pub fn classify_codex(row: &Value) -> RowClass {
    let Some(obj) = row.as_object() else {
        return RowClass::NotHuman;
    };
    let occurred_at = obj
        .get("timestamp")
        .and_then(Value::as_str)
        .and_then(parse_rfc3339_ms);
    match (obj.get("type").and_then(Value::as_str), obj.get("payload")) {
        (Some("event_msg"), Some(Value::Object(p))) => classify_event(p, occurred_at),
        // Envelope rows other than prompt events: `response_item` (the prompt's twin, injected
        // context, tool calls and outputs, reasoning, assistant and developer messages),
        // `turn_context`, `session_meta`, `compacted`, and whatever later versions add.
        (Some(_), Some(_)) => RowClass::NotHuman,
        // Pre-envelope format: a bare response item.
        (Some("message"), None) => classify_bare_message(obj, occurred_at),
        _ => RowClass::NotHuman,
    }
}

fn classify_event(p: &Map<String, Value>, occurred_at: Option<i64>) -> RowClass {
    match p.get("type").and_then(Value::as_str) {
        Some("user_message") => {
            // Versions of late 2025 tag injected context events with a `kind`; only `plain` is typed.
            if p.get("kind").is_some_and(|k| k.as_str() != Some("plain")) {
                return RowClass::NotHuman;
            }
            let text = p.get("message").and_then(Value::as_str).unwrap_or("");
            let has_image = ["images", "local_images"].iter().any(|k| {
                p.get(*k)
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
            });
            verdict(&[text], has_image, occurred_at)
        }
        // Rollouts in the paginated history mode persist completed turn items instead of the
        // legacy `user_message` event.
        Some("item_completed") => {
            let Some(item) = p.get("item").and_then(Value::as_object) else {
                return RowClass::NotHuman;
            };
            if item.get("type").and_then(Value::as_str) != Some("UserMessage") {
                return RowClass::NotHuman;
            }
            let parts = item
                .get("content")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut texts = Vec::new();
            let mut has_image = false;
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = part.get("text").and_then(Value::as_str) {
                            texts.push(t);
                        }
                    }
                    Some("image" | "local_image") => has_image = true,
                    _ => {}
                }
            }
            verdict(&texts, has_image, occurred_at)
        }
        _ => RowClass::NotHuman,
    }
}

fn classify_bare_message(obj: &Map<String, Value>, occurred_at: Option<i64>) -> RowClass {
    if obj.get("role").and_then(Value::as_str) != Some("user") {
        return RowClass::NotHuman;
    }
    let parts = match obj.get("content") {
        Some(Value::Array(a)) => a.as_slice(),
        _ => return RowClass::NotHuman,
    };
    let mut texts = Vec::new();
    let mut has_image = false;
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("input_text") => {
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    texts.push(t);
                }
            }
            Some("input_image") => has_image = true,
            _ => {}
        }
    }
    verdict(&texts, has_image, occurred_at)
}

/// The content rules shared by every prompt shape: machine-written text is dropped; a row with
/// surviving text or an image is human.
fn verdict(texts: &[&str], has_image: bool, occurred_at: Option<i64>) -> RowClass {
    let kept: Vec<&str> = texts
        .iter()
        .filter(|t| !is_machine_text(t))
        .map(|t| typed_part(t))
        .filter(|t| !t.trim().is_empty())
        .collect();
    let all_machine = !texts.is_empty() && texts.iter().all(|t| is_machine_text(t));
    if kept.is_empty() && (!has_image || all_machine) {
        return RowClass::NotHuman;
    }
    RowClass::Human {
        user_text: kept.join("\n"),
        occurred_at,
    }
}

/// A candidate that starts with a marker of machine-written text.
pub fn is_machine_text(text: &str) -> bool {
    let trimmed = text.trim_start();
    MACHINE_MARKERS.iter().any(|m| trimmed.starts_with(m))
}

/// What the human typed: the text after the IDE extension's request heading when the prompt
/// carries editor context, else the whole text.
fn typed_part(text: &str) -> &str {
    if !text.trim_start().starts_with(IDE_CONTEXT_HEADER) {
        return text;
    }
    match text.find(IDE_REQUEST_HEADING) {
        Some(at) => text
            .get(at + IDE_REQUEST_HEADING.len()..)
            .unwrap_or_default()
            .trim_start_matches(['\r', '\n']),
        None => text,
    }
}
