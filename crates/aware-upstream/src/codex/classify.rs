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

use crate::claude::classify::{parse_rfc3339_ms, RowClass};

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

/// Whether `row` has a shape [`classify_codex`] may call human: a prompt event (`user_message`,
/// `item_completed`) or a pre-envelope user message. A paired node sends exactly these rows to
/// the gateway, which classifies them with its own rules (docs/upstream.md §4).
pub fn may_be_prompt(row: &Value) -> bool {
    let Some(obj) = row.as_object() else {
        return false;
    };
    match (obj.get("type").and_then(Value::as_str), obj.get("payload")) {
        (Some("event_msg"), Some(Value::Object(p))) => matches!(
            p.get("type").and_then(Value::as_str),
            Some("user_message" | "item_completed")
        ),
        (Some("message"), None) => obj.get("role").and_then(Value::as_str) == Some("user"),
        _ => false,
    }
}

fn classify_event(p: &Map<String, Value>, occurred_at: Option<i64>) -> RowClass {
    match p.get("type").and_then(Value::as_str) {
        Some("user_message") => {
            // Versions of late 2025 tag injected context events with a `kind`; only `plain` is typed.
            // A `null` kind is an absent one.
            let kind = p.get("kind").filter(|k| !k.is_null());
            if kind.is_some_and(|k| k.as_str() != Some("plain")) {
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
        .map(|t| typed_part(t))
        .filter(|t| !is_machine_text(t) && !t.trim().is_empty())
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const TS: &str = "2026-01-01T00:00:01.000Z";
    const T1: i64 = 1_767_225_601_000;

    fn event(payload: Value) -> Value {
        json!({"timestamp": TS, "type": "event_msg", "payload": payload})
    }

    fn human(text: &str) -> RowClass {
        RowClass::Human {
            user_text: text.into(),
            occurred_at: Some(T1),
        }
    }

    #[test]
    fn a_prompt_event_is_human_with_its_time() {
        let row = event(json!({"type": "user_message", "message": "fix the build", "images": []}));
        assert_eq!(classify_codex(&row), human("fix the build"));
    }

    #[test]
    fn injected_context_events_are_not_human() {
        for kind in ["user_instructions", "environment_context"] {
            let row = event(json!({"type": "user_message", "message": "x", "kind": kind}));
            assert_eq!(classify_codex(&row), RowClass::NotHuman, "{kind}");
        }
        for kind in [json!("plain"), Value::Null] {
            let plain = event(json!({"type": "user_message", "message": "x", "kind": kind}));
            assert_eq!(classify_codex(&plain), human("x"));
        }
        for text in [
            "<environment_context>\n  <cwd>/tmp</cwd>\n</environment_context>",
            "<user_instructions>\nbe brief\n</user_instructions>",
            "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nx\n</INSTRUCTIONS>",
            "<turn_aborted>\nThe user interrupted the previous turn.\n</turn_aborted>",
            "<user_shell_command>\n<command>ls</command>\n</user_shell_command>",
            "Another language model started to solve this problem and produced a summary",
            "  <skill>\n<name>x</name>\n</skill>",
        ] {
            let row = event(json!({"type": "user_message", "message": text}));
            assert_eq!(classify_codex(&row), RowClass::NotHuman, "{text}");
        }
    }

    #[test]
    fn an_empty_event_is_not_human_but_an_image_only_prompt_is() {
        let empty = event(json!({"type": "user_message", "message": "  ", "images": []}));
        assert_eq!(classify_codex(&empty), RowClass::NotHuman);
        let image = event(json!({"type": "user_message", "message": "", "images": ["data:"]}));
        assert_eq!(classify_codex(&image), human(""));
        let local = event(json!({"type": "user_message", "local_images": ["/tmp/a.png"]}));
        assert_eq!(classify_codex(&local), human(""));
    }

    #[test]
    fn the_ide_context_is_cut_from_the_typed_text() {
        let text = "# Context from my IDE setup:\n\n## Open tabs:\n- a.rs: a.rs\n\n## My request for Codex:\nwhy?\n";
        let row = event(json!({"type": "user_message", "message": text, "kind": "plain"}));
        assert_eq!(classify_codex(&row), human("why?\n"));
    }

    #[test]
    fn response_items_never_count_in_the_envelope_format() {
        for payload in [
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the build"}]}),
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "x"}]}),
            json!({"type": "function_call_output", "call_id": "c", "output": "ok"}),
        ] {
            let row = json!({"timestamp": TS, "type": "response_item", "payload": payload});
            assert_eq!(classify_codex(&row), RowClass::NotHuman);
        }
        for row in [
            json!({"type": "compacted", "payload": {"message": "summary", "replacement_history": []}}),
            json!({"type": "turn_context", "payload": {"cwd": "/tmp"}}),
            event(json!({"type": "turn_aborted", "reason": "interrupted"})),
            event(json!({"type": "context_compacted"})),
            event(json!({"type": "agent_message", "message": "done"})),
        ] {
            assert_eq!(classify_codex(&row), RowClass::NotHuman, "{row}");
        }
    }

    #[test]
    fn paginated_rollouts_count_completed_user_message_items() {
        let row = event(
            json!({"type": "item_completed", "thread_id": "t", "turn_id": "u",
            "item": {"type": "UserMessage", "id": "i", "content": [
                {"type": "text", "text": "first", "text_elements": []},
                {"type": "local_image", "path": "/tmp/a.png"},
                {"type": "text", "text": "second"}]}}),
        );
        assert_eq!(classify_codex(&row), human("first\nsecond"));
        let agent = event(json!({"type": "item_completed",
            "item": {"type": "AgentMessage", "id": "i", "content": [{"type": "Text", "text": "x"}]}}));
        assert_eq!(classify_codex(&agent), RowClass::NotHuman);
    }

    #[test]
    fn pre_envelope_rollouts_filter_bare_user_messages_by_content() {
        let header = json!({"id": "0198c0de-0000-7000-8000-000000000001",
            "timestamp": "2025-08-20T13:20:47.060Z", "instructions": null});
        assert_eq!(classify_codex(&header), RowClass::NotHuman);
        assert_eq!(
            session_meta(&header).map(|m| m.id),
            Some("0198c0de-0000-7000-8000-000000000001".into())
        );
        assert_eq!(
            classify_codex(&json!({"record_type": "state"})),
            RowClass::NotHuman
        );
        assert_eq!(session_meta(&json!({"record_type": "state"})), None);
        let typed = json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "index the rollouts"}]});
        assert_eq!(
            classify_codex(&typed),
            RowClass::Human {
                user_text: "index the rollouts".into(),
                occurred_at: None
            }
        );
        let env = json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n<cwd>/</cwd>\n</environment_context>"}]});
        assert_eq!(classify_codex(&env), RowClass::NotHuman);
        let assistant = json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "hi"}]});
        assert_eq!(classify_codex(&assistant), RowClass::NotHuman);
    }

    #[test]
    fn sub_agent_threads_are_marked() {
        let row = json!({"type": "session_meta", "payload": {"id": "a", "cwd": "/r",
            "source": {"subagent": "review"}}});
        assert_eq!(
            session_meta(&row),
            Some(SessionMeta {
                id: "a".into(),
                cwd: Some("/r".into()),
                subagent: true
            })
        );
        let cli = json!({"type": "session_meta", "payload": {"id": "b", "source": "cli"}});
        assert_eq!(session_meta(&cli).map(|m| m.subagent), Some(false));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            prop_oneof![
                Just("user_message".to_string()),
                Just("event_msg".to_string()),
                Just("message".to_string()),
                Just("user".to_string()),
                Just("item_completed".to_string()),
                Just("UserMessage".to_string()),
                Just("# Context from my IDE setup:\n## My request for Codex:".to_string()),
                ".{0,12}",
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("type".to_string()),
                        Just("payload".to_string()),
                        Just("message".to_string()),
                        Just("content".to_string()),
                        Just("text".to_string()),
                        Just("role".to_string()),
                        Just("item".to_string()),
                        Just("kind".to_string()),
                        Just("images".to_string()),
                        Just("timestamp".to_string()),
                        Just("id".to_string()),
                        Just("source".to_string()),
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics_and_human_only_from_prompt_shapes(row in arb_json()) {
            let class = classify_codex(&row);
            let _ = session_meta(&row);
            if let RowClass::Human { user_text, .. } = &class {
                let t = row.get("type").and_then(Value::as_str);
                let pt = row.pointer("/payload/type").and_then(Value::as_str);
                prop_assert!(
                    (t == Some("event_msg") && matches!(pt, Some("user_message" | "item_completed")))
                        || (t == Some("message") && row.get("payload").is_none()),
                    "human from {}", row
                );
                prop_assert!(!is_machine_text(user_text));
            }
            let no_queue_class = !matches!(class, RowClass::QueuedPrompt { .. } | RowClass::QueueRemove);
            prop_assert!(no_queue_class);
        }

        #[test]
        fn any_text_never_panics(text in ".{0,64}") {
            let row = event(json!({"type": "user_message", "message": text}));
            let _ = classify_codex(&row);
            let _ = typed_part(&text);
        }
    }
}
