//! The Codex classifier and window scan over every real rollout in `tests/fixtures/codex/`
//! (vendored; sources and licences in its SOURCES.md).
//! The expected prompts and the per-shape row counts were written by hand from reading each file
//! (and the inventory in SOURCES.md), not from this crate's output.

use std::collections::BTreeMap;

use aware_upstream::claude::classify::{normalise, RowClass};
use aware_upstream::claude::scan::{ScanInput, WINDOW_BYTES};
use aware_upstream::codex::classify::{classify_codex, session_meta};
use aware_upstream::codex::scan::scan_codex_window;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/codex/");

/// One rollout: its thread id, its human prompts (1-based line, start of the typed text), and
/// the rows per (type, payload.type, role) shape from the inventory in SOURCES.md.
struct Expected {
    file: &'static str,
    thread_id: &'static str,
    human: &'static [(usize, &'static str)],
    shapes: &'static [(&'static str, usize)],
}

const EXPECTED: &[Expected] = &[
    Expected {
        // Codex 0.130.0, 13-row slice. Line 3 is the <environment_context> response item, line 5
        // the response-item twin of the prompt event on line 6.
        file: "scribe-rollout-transcript.jsonl",
        thread_id: "019e2b97-a47a-7e42-b8a3-c4364f6098d9",
        human: &[(
            6,
            "Analyze this project and make feedback and suggestion how to improve it",
        )],
        shapes: &[
            ("response_item/message/user", 2),
            ("session_meta", 1),
            ("event_msg/task_started", 1),
            ("turn_context", 1),
            ("event_msg/user_message", 1),
            ("event_msg/token_count", 1),
            ("response_item/reasoning", 1),
            ("event_msg/agent_message", 1),
            ("response_item/message/assistant", 1),
            ("response_item/function_call", 1),
            ("response_item/function_call_output", 1),
            ("event_msg/task_complete", 1),
        ],
    },
    Expected {
        // Codex 0.77.0 (`codex exec`): line 2 is "# AGENTS.md instructions for …", line 3
        // <environment_context>, line 4 the twin of the prompt event on line 5.
        file: "rollout-2026-01-02T18-39-45-019b7f94-51b4-7593-922e-ba12b5b73b52.jsonl",
        thread_id: "019b7f94-51b4-7593-922e-ba12b5b73b52",
        human: &[(5, "what is current repository about? summarize purpuse")],
        shapes: &[
            ("event_msg/token_count", 6),
            ("turn_context", 4),
            ("response_item/message/user", 3),
            ("response_item/reasoning", 3),
            ("response_item/function_call", 3),
            ("response_item/function_call_output", 3),
            ("session_meta", 1),
            ("event_msg/user_message", 1),
            ("response_item/ghost_snapshot", 1),
            ("event_msg/agent_reasoning", 1),
        ],
    },
    Expected {
        // Codex 0.58.0: line 2 <environment_context>, line 3 the twin of the event on line 4.
        file: "rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl",
        thread_id: "019a93b9-f380-7600-98ff-940e6b99603c",
        human: &[(4, "finish up the users work by rigging up the chatbot-ui")],
        shapes: &[
            ("event_msg/token_count", 79),
            ("turn_context", 40),
            ("event_msg/agent_reasoning", 39),
            ("response_item/function_call", 39),
            ("response_item/function_call_output", 39),
            ("response_item/reasoning", 38),
            ("response_item/message/user", 2),
            ("session_meta", 1),
            ("event_msg/user_message", 1),
            ("response_item/ghost_snapshot", 1),
        ],
    },
    Expected {
        // Codex 0.125.0: line 3 is a developer message (permissions, collaboration mode, skills,
        // plugins), line 4 one user message holding AGENTS.md and <environment_context>, lines 6
        // and 22 the twins of the prompt events on lines 7 and 23.
        file: "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
        thread_id: "019e1625-789d-76c0-80ab-3724b5ddb799",
        human: &[
            (7, "show tools"),
            (
                23,
                "let's update the defailt context compart to 90 in env var",
            ),
        ],
        shapes: &[
            ("response_item/function_call", 99),
            ("response_item/function_call_output", 99),
            ("event_msg/token_count", 66),
            ("event_msg/exec_command_end", 43),
            ("response_item/reasoning", 25),
            ("event_msg/agent_message", 13),
            ("response_item/message/assistant", 13),
            ("response_item/message/user", 3),
            ("event_msg/web_search_end", 3),
            ("response_item/web_search_call", 3),
            ("response_item/custom_tool_call", 3),
            ("event_msg/patch_apply_end", 3),
            ("response_item/custom_tool_call_output", 3),
            ("event_msg/task_started", 2),
            ("turn_context", 2),
            ("event_msg/user_message", 2),
            ("event_msg/task_complete", 2),
            ("session_meta", 1),
            ("response_item/message/developer", 1),
        ],
    },
    Expected {
        // Codex 0.40.0 from the VS Code extension: every prompt carries "# Context from my IDE
        // setup:" and the typed text after "## My request for Codex:"; lines 2 and 267 are
        // <environment_context>; the 4 turn_aborted events are not prompts.
        file: "rollout-2025-09-24T19-22-20-01997e76-d124-7592-9cac-2ec05abbca08.jsonl",
        thread_id: "01997e76-d124-7592-9cac-2ec05abbca08",
        human: &[
            (
                4,
                "Updating a team to assign a lead or change from viewer to contributor",
            ),
            (175, "Why do we need stats for the team?"),
            (183, "Is this done?"),
            (191, "continue"),
            (
                269,
                "Can you auto accept all changes for the rest of this session?",
            ),
            (277, "ok continue"),
            (507, "can you run lint, test and check-types"),
            (554, "No teams or leads are loading into the pane now"),
            (
                617,
                "I am not seeing a network request when I load the TeamSheet.",
            ),
            (
                625,
                "Ok it is still not working either way. No data is showing up",
            ),
            (
                651,
                "Can you run tests, lint and check-types to ensure all is green.",
            ),
            (749, "can you create a pull request for this work"),
            (
                763,
                "yes commit the work, push the pr and then create a new branch",
            ),
        ],
        shapes: &[
            ("turn_context", 136),
            ("event_msg/agent_reasoning", 133),
            ("event_msg/token_count", 132),
            ("response_item/reasoning", 125),
            ("response_item/function_call", 123),
            ("response_item/function_call_output", 123),
            ("response_item/message/user", 15),
            ("event_msg/user_message", 13),
            ("event_msg/agent_message", 9),
            ("response_item/message/assistant", 9),
            ("event_msg/turn_aborted", 4),
            ("session_meta", 1),
        ],
    },
    Expected {
        // Codex Desktop 0.104.0-alpha.1 with every text redacted by its authors: no content rule
        // can tell the AGENTS.md (len 3021) and environment (len 112) user messages that are
        // re-sent at lines 4-5, 754-755 and 831-832 from a prompt; only the 7 prompt events count.
        file: "rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl",
        thread_id: "019c8a53-a0dd-7130-bcd7-95445d84846a",
        human: &[
            (10, "[REDACTED_MESSAGE len=64 sha=7d538904]"),
            (270, "[REDACTED_MESSAGE len=163 sha=e8109a06]"),
            (672, "[REDACTED_MESSAGE len=6 sha=402436c3]"),
            (760, "[REDACTED_MESSAGE len=59 sha=a41600e1]"),
            (771, "[REDACTED_MESSAGE len=43 sha=8e471f1c]"),
            (780, "[REDACTED_MESSAGE len=136 sha=2cca47bf]"),
            (837, "[REDACTED_MESSAGE len=15 sha=ce2cc05a]"),
        ],
        shapes: &[
            ("event_msg/token_count", 166),
            ("response_item/function_call", 134),
            ("response_item/function_call_output", 133),
            ("turn_context", 83),
            ("response_item/reasoning", 78),
            ("event_msg/agent_reasoning", 71),
            ("event_msg/agent_message", 52),
            ("response_item/message/assistant", 52),
            ("response_item/message/developer", 15),
            ("response_item/message/user", 13),
            ("response_item/custom_tool_call", 10),
            ("response_item/custom_tool_call_output", 10),
            ("event_msg/task_started", 7),
            ("event_msg/user_message", 7),
            ("event_msg/task_complete", 5),
            ("session_meta", 1),
        ],
    },
];

fn read(file: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}{file}")).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn shape(row: &Value) -> String {
    let t = row.get("type").and_then(Value::as_str).unwrap_or("?");
    let p = row.get("payload");
    let pt = p.and_then(|p| p.get("type")).and_then(Value::as_str);
    let role = p.and_then(|p| p.get("role")).and_then(Value::as_str);
    match (pt, role) {
        (Some(pt), Some(role)) => format!("{t}/{pt}/{role}"),
        (Some(pt), None) => format!("{t}/{pt}"),
        _ => t.to_string(),
    }
}

#[test]
fn every_real_rollout_has_exactly_its_hand_counted_prompts() {
    for e in EXPECTED {
        let bytes = read(e.file);
        let mut human = Vec::new();
        let mut shapes: BTreeMap<String, usize> = BTreeMap::new();
        let mut meta = None;
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let row: Value = serde_json::from_slice(line).expect("fixture rows are JSON");
            *shapes.entry(shape(&row)).or_default() += 1;
            if meta.is_none() {
                meta = session_meta(&row);
            }
            if let RowClass::Human { user_text, .. } = classify_codex(&row) {
                human.push((i + 1, user_text));
            }
        }
        let lines: Vec<usize> = human.iter().map(|(l, _)| *l).collect();
        let want: Vec<usize> = e.human.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, want, "{}: human rows", e.file);
        for ((_, got), (line, start)) in human.iter().zip(e.human) {
            assert!(
                got.starts_with(start),
                "{}:{line}: typed text {got:?} should start with {start:?}",
                e.file
            );
        }
        let want_shapes: BTreeMap<String, usize> =
            e.shapes.iter().map(|(s, n)| (s.to_string(), *n)).collect();
        assert_eq!(shapes, want_shapes, "{}: row shapes", e.file);
        assert_eq!(
            meta.map(|m| (m.id, m.subagent)),
            Some((e.thread_id.to_string(), false)),
            "{}: thread id from the metadata row",
            e.file
        );
    }
}

/// A paired node sends each row as an item (docs/upstream.md §4): the prompts the gateway finds
/// among the items of every real rollout are exactly the hand-counted ones, with the same text.
#[test]
fn a_node_sends_every_hand_counted_prompt_as_an_item() {
    use aware_upstream::node::{codex_item, CodexItemBody};
    for e in EXPECTED {
        let bytes = read(e.file);
        let mut human = Vec::new();
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let slim = aware_upstream::bigrow::slim_codex_row(line).expect("in memory");
            let Some(item) = codex_item(slim) else {
                continue;
            };
            assert!(item.uuid.starts_with("row:") && item.uuid.len() == 36);
            if let CodexItemBody::UserMessage { row } = item.body {
                if let RowClass::Human { user_text, .. } = classify_codex(&row) {
                    human.push((i + 1, user_text));
                }
            }
        }
        let lines: Vec<usize> = human.iter().map(|(l, _)| *l).collect();
        let want: Vec<usize> = e.human.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, want, "{}: human items", e.file);
        for ((_, got), (line, start)) in human.iter().zip(e.human) {
            assert!(got.starts_with(start), "{}:{line}: {got:?}", e.file);
        }
    }
}

#[test]
fn the_response_item_twin_of_each_prompt_is_not_counted_again() {
    // In every envelope rollout the prompt event is preceded by a user message with the same
    // text (the IDE context included); exactly one of the two counts.
    for e in EXPECTED {
        let bytes = read(e.file);
        let rows: Vec<Value> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect();
        for (line, _) in e.human {
            let event = &rows[line - 1];
            let text = event["payload"]["message"].as_str().unwrap_or_default();
            let twin = rows[..line - 1]
                .iter()
                .rev()
                .find(|r| shape(r) == "response_item/message/user")
                .expect("a twin before the event");
            let twin_text: String = twin["payload"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["text"].as_str())
                .collect();
            if !e.file.contains("019c8a53") {
                assert_eq!(normalise(&twin_text), normalise(text), "{}:{line}", e.file);
            }
            assert_eq!(
                classify_codex(twin),
                RowClass::NotHuman,
                "{}:{line}",
                e.file
            );
        }
    }
}

#[test]
fn a_whole_rollout_scanned_in_windows_counts_its_prompts_once() {
    for e in EXPECTED {
        let bytes = read(e.file);
        let input = ScanInput {
            own_recent_user_texts: &[],
            queued: &[],
            fallback_time_ms: 0,
        };
        let (mut at, mut total) = (0usize, 0u32);
        while at < bytes.len() {
            let end = (at + WINDOW_BYTES).min(bytes.len());
            let (consumed, out) =
                scan_codex_window(&bytes[at..end], &input).expect("rows end with a newline");
            at += consumed;
            total += out.human_turns;
            assert_eq!(out.queued, Vec::<String>::new());
        }
        assert_eq!(total as usize, e.human.len(), "{}", e.file);
    }
}

#[test]
fn an_own_prompt_sent_through_aware_is_an_echo() {
    let e = &EXPECTED[3];
    let bytes = read(e.file);
    let own = vec![normalise("show tools")];
    let input = ScanInput {
        own_recent_user_texts: &own,
        queued: &[],
        fallback_time_ms: 0,
    };
    let (_, out) = scan_codex_window(&bytes, &input).expect("complete rows");
    assert_eq!(out.human_turns, 1, "only the second prompt is not an echo");
    // 2026-05-11T08:32:57.xxxZ is the second prompt event's time.
    let at = out.occurred_at.expect("a time");
    assert_eq!(
        at / 1000,
        1_778_488_377,
        "the counted prompt's own timestamp"
    );
}
