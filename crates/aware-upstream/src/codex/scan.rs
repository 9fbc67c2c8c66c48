//! The Codex window scan: the same newline rule as the Claude scanner (04 §8 steps 6–8), with
//! the Codex classifier and the self-echo rule of 04 §6. Pure.

use serde_json::Value;

use super::classify::classify_codex;
use crate::classify::{normalise, RowClass};
use crate::scan::{ScanInput, ScanOutput};

/// Scans the complete rows of a window read from a rollout at the marker offset.
///
/// `None` when the window holds no `\n` (a row still being written, or longer than the window:
/// bytes are never skipped); otherwise the bytes consumed (through the last `\n`) and the count.
/// Codex has no queue rows, so the output's `queued` memory is always empty.
pub fn scan_codex_window(window: &[u8], input: &ScanInput) -> Option<(usize, ScanOutput)> {
    let last_newline = window.iter().rposition(|&b| b == b'\n')?;
    let complete = window.get(..last_newline)?;
    let mut out = ScanOutput::default();
    for line in complete.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(row) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        feed_codex_row(&row, input, &mut out);
    }
    Some((last_newline + 1, out))
}

/// Counts one parsed (or slimmed, issue 15) rollout row into `out`, with the self-echo rule.
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
