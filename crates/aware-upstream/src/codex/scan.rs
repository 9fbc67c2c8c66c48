//! The Codex window scan: the same newline rule as the Claude scanner (04 §8 steps 6–8), with
//! the Codex classifier and the self-echo rule of 04 §6. Pure.

use serde_json::Value;

use super::classify::classify_codex;
use crate::claude::classify::{normalise, RowClass};
use crate::claude::scan::{complete_lines, ScanInput, ScanOutput};

/// Scans the complete rows of a window read from a rollout at the marker offset.
///
/// `None` when the window holds no `\n` (a row still being written, or longer than the window:
/// bytes are never skipped); otherwise the bytes consumed (through the last `\n`) and the count.
/// Codex has no queue rows, so the output's `queued` memory is always empty.
pub fn scan_codex_window(window: &[u8], input: &ScanInput) -> Option<(usize, ScanOutput)> {
    let (consumed, lines) = complete_lines(window)?;
    let mut out = ScanOutput::default();
    for line in lines.filter(|l| may_be_human(l)) {
        let Ok(row) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        feed_codex_row(&row, input, &mut out);
    }
    Some((consumed, out))
}

/// Byte-level prefilter: whether a line can be a row [`classify_codex`] calls human, so that
/// tool calls and outputs, reasoning, assistant messages and context rows (about 96 % of a
/// rollout's bytes in the fixtures) are never parsed. A human row is an `event_msg` whose
/// payload type is `"user_message"` or `"item_completed"`, or a pre-envelope message whose role
/// is `"user"`; each of those JSON strings appears verbatim in the line unless it is written
/// with `\u` escapes (the only JSON escape that yields a letter or `_`). Conservative: a line
/// that passes is parsed and classified as before.
fn may_be_human(line: &[u8]) -> bool {
    use memchr::memmem::Finder;
    // Built once: a finder's set-up is per needle, and this runs for every line.
    static NEEDLES: std::sync::LazyLock<[Finder<'static>; 4]> = std::sync::LazyLock::new(|| {
        [
            Finder::new(b"\"user\""),
            Finder::new(b"\"user_message\""),
            Finder::new(b"\"item_completed\""),
            Finder::new(b"\\u"),
        ]
    });
    NEEDLES.iter().any(|n| n.find(line).is_some())
}

/// Counts one parsed (or slimmed, decision D23) rollout row into `out`, with the self-echo rule.
pub fn feed_codex_row(row: &Value, input: &ScanInput, out: &mut ScanOutput) {
    if let RowClass::Human {
        user_text,
        occurred_at,
    } = classify_codex(row)
    {
        let text = normalise(&user_text);
        if !text.is_empty() && input.own_recent_user_texts.contains(&text) {
            return;
        }
        out.human_turns = out.human_turns.saturating_add(1);
        let at = occurred_at.unwrap_or(input.fallback_time_ms);
        out.occurred_at = Some(out.occurred_at.map_or(at, |p: i64| p.max(at)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claude::classify::RowClass;
    use proptest::prelude::*;

    /// Over every row of the vendored Codex rollouts, a line the prefilter skips is one the
    /// classifier calls `NotHuman`: skipping never changes a count.
    #[test]
    fn prefilter_skips_only_rows_that_cannot_count() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/codex");
        let (mut skipped, mut human) = (0, 0);
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let bytes = std::fs::read(entry.path()).unwrap();
            for line in bytes.split(|&b| b == b'\n') {
                let Ok(row) = serde_json::from_slice::<Value>(line) else {
                    continue;
                };
                let class = classify_codex(&row);
                if matches!(class, RowClass::Human { .. }) {
                    human += 1;
                }
                if !may_be_human(line) {
                    skipped += 1;
                    assert_eq!(class, RowClass::NotHuman, "{row}");
                }
            }
        }
        assert!(skipped > 0 && human > 0, "skipped {skipped}, human {human}");
    }

    /// Prompt rows whose deciding strings are written with `\u` escapes still count.
    #[test]
    fn escaped_prompt_rows_pass_the_prefilter() {
        let text = concat!(
            r#"{"timestamp":"2026-01-01T00:00:01.000Z","type":"event_msg","payload":{"type":"\u0075ser_message","message":"one"}}"#,
            "\n",
            r#"{"type":"message","role":"\u0075ser","content":[{"type":"input_text","text":"two"}]}"#,
            "\n",
            r#"{"type":"event_msg","payload":{"type":"item_c\u006fmpleted","item":{"type":"UserMessage","content":[{"type":"text","text":"three"}]}}}"#,
            "\n",
        );
        let input = ScanInput {
            own_recent_user_texts: &[],
            queued: &[],
            fallback_time_ms: 0,
        };
        let (_, out) = scan_codex_window(text.as_bytes(), &input).unwrap();
        assert_eq!(out.human_turns, 3);
    }

    proptest! {
        /// Any line the prefilter skips classifies as `NotHuman`, whatever its shape.
        #[test]
        fn prefilter_agrees_with_classifier(
            ty in prop::sample::select(vec!["event_msg", "response_item", "message", "turn_context", "m\\u0065ssage"]),
            pty in prop::sample::select(vec!["user_message", "item_completed", "agent_message", "\\u0075ser_message", "token_count"]),
            role in prop::sample::select(vec!["user", "assistant", "developer", "us\\u0065r"]),
            item in prop::sample::select(vec!["UserMessage", "AgentMessage"]),
            part in prop::sample::select(vec!["input_text", "text", "output_text", "input_image", "image"]),
            text in "[a-z <>#]{0,20}",
        ) {
            for line in [
                format!(r#"{{"type":"{ty}","payload":{{"type":"{pty}","message":"{text}","item":{{"type":"{item}","content":[{{"type":"{part}","text":"{text}"}}]}}}}}}"#),
                format!(r#"{{"type":"{ty}","role":"{role}","content":[{{"type":"{part}","text":"{text}"}}]}}"#),
                format!(r#"{{"type":"{ty}","payload":{{"type":"message","role":"{role}","content":[{{"type":"{part}","text":"{text}"}}]}}}}"#),
            ] {
                let row: Value = serde_json::from_str(&line).unwrap();
                if !may_be_human(line.as_bytes()) {
                    prop_assert_eq!(classify_codex(&row), RowClass::NotHuman, "{}", line);
                }
            }
        }
    }
}
