//! The Codex rollout classifier (`codex::classify::classify_codex`, `session_meta`) on arbitrary
//! JSON, and the Codex window scan (`codex::scan::scan_codex_window`) on the raw bytes.
//!
//! Invariants (docs/codex-rows.md; "classification and scanning do no I/O and never panic"):
//! - `classify_codex` and `session_meta` never panic; a human verdict comes only from a prompt
//!   event (`event_msg` `user_message` / `item_completed`) or a pre-envelope bare `message`, and
//!   its text never starts with a machine marker;
//! - `scan_codex_window` returns `None` exactly when there is no `\n`; otherwise the consumed
//!   prefix ends with `\n`, the rest holds none, and the `queued` memory stays empty;
//! - scanning the window in two ticks (split after any `\n`) counts the same turns as one tick;
//! - a paired node sends every row the classifier calls human as a `userMessage` item whose slim
//!   row the gateway calls human with the same normalised text (docs/upstream.md §4).
#![no_main]

use aware_upstream::bigrow::slim_codex_row;
use aware_upstream::claude::classify::{normalise, RowClass};
use aware_upstream::codex::classify::{classify_codex, is_machine_text, session_meta};
use aware_upstream::codex::scan::scan_codex_window;
use aware_upstream::node::{codex_item, CodexItemBody};
use aware_upstream::claude::scan::ScanInput;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const MTIME: i64 = 1_767_225_600_000;

fuzz_target!(|data: &[u8]| {
    if let Ok(row) = serde_json::from_slice::<Value>(data) {
        let _ = session_meta(&row);
        if let RowClass::Human { user_text, .. } = classify_codex(&row) {
            let t = row.get("type").and_then(Value::as_str);
            let pt = row.pointer("/payload/type").and_then(Value::as_str);
            assert!(
                (t == Some("event_msg") && matches!(pt, Some("user_message" | "item_completed")))
                    || (t == Some("message") && row.get("payload").is_none()),
                "human verdict from another shape"
            );
            assert!(!is_machine_text(&user_text), "machine text counted");
            let slim = slim_codex_row(data).expect("reading a slice never fails");
            let item = codex_item(slim).expect("a human row gives an item");
            let CodexItemBody::UserMessage { row: slim_row } = item.body else {
                panic!("a human row is sent as a userMessage item");
            };
            match classify_codex(&slim_row) {
                RowClass::Human {
                    user_text: sent, ..
                } => {
                    assert_eq!(normalise(&sent), normalise(&user_text), "same text");
                }
                other => panic!("the node's item lost the human verdict: {other:?}"),
            }
        }
    }

    let own = vec!["hello".to_string(), "run the tests".to_string()];
    let input = ScanInput {
        own_recent_user_texts: &own,
        queued: &[],
        fallback_time_ms: MTIME,
    };
    let Some((consumed, whole)) = scan_codex_window(data, &input) else {
        assert!(!data.contains(&b'\n'), "None only while no row is complete");
        return;
    };
    assert!(consumed >= 1 && consumed <= data.len());
    assert_eq!(data[consumed - 1], b'\n');
    assert!(!data[consumed..].contains(&b'\n'));
    assert!(whole.queued.is_empty());
    assert_eq!(whole.human_turns == 0, whole.occurred_at.is_none());

    let first_newline = data.iter().position(|&b| b == b'\n').unwrap_or(0);
    let (head, tail) = data[..consumed].split_at(first_newline + 1);
    let (n1, out1) = scan_codex_window(head, &input).expect("the head ends with a newline");
    assert_eq!(n1, head.len());
    let out2 = match scan_codex_window(tail, &input) {
        Some((n2, out2)) => {
            assert_eq!(n2, tail.len());
            out2
        }
        None => {
            assert!(tail.is_empty());
            Default::default()
        }
    };
    assert_eq!(out1.human_turns + out2.human_turns, whole.human_turns);
    let latest = match (out1.occurred_at, out2.occurred_at) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    assert_eq!(latest, whole.occurred_at);
});
