//! The Claude row classifier (`classify::classify`) on arbitrary JSON, and the window scanner
//! (`scan::scan_window`) on the raw bytes.
//!
//! Invariants (04 §8, §9; "classification and scanning do no I/O and never panic on any input"):
//! - `classify` never panics, on the input and on the row `node_item_to_row` builds from it;
//! - `scan_window` returns `None` exactly when there is no `\n`; otherwise it consumes at most
//!   the window, the consumed prefix ends with `\n` and the rest holds none (a partial last row
//!   is read again next tick);
//! - the scan's `queued` memory stays within `QUEUED_MEMORY_MAX`; a time is reported exactly when
//!   a turn was counted;
//! - scanning the window in two ticks (split after any `\n`, carrying the `queued` memory over)
//!   counts the same turns as one tick: where a tick boundary falls changes nothing;
//! - `parse_rfc3339_ms` never panics on any text.
#![no_main]

use aware_upstream::claude::classify::{classify, normalise, parse_rfc3339_ms, RowClass};
use aware_upstream::claude::scan::{
    node_item_to_row, scan_window, ScanInput, ScanOutput, QUEUED_MEMORY_MAX,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// 2026-01-01T00:00:00.000Z, the fallback time of rows without a valid timestamp.
const MTIME: i64 = 1_767_225_600_000;

fuzz_target!(|data: &[u8]| {
    if let Ok(row) = serde_json::from_slice::<Value>(data) {
        check_class(&row, &classify(&row));
        if let Some(rebuilt) = node_item_to_row(&row) {
            check_class(&rebuilt, &classify(&rebuilt));
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_rfc3339_ms(text);
        let n = normalise(text);
        assert_eq!(normalise(&n), n);
    }

    let own = vec!["hello".to_string(), "run the tests".to_string()];
    let queued = vec!["fix it".to_string()];
    let input = ScanInput {
        own_recent_user_texts: &own,
        queued: &queued,
        fallback_time_ms: MTIME,
    };
    let Some((consumed, whole)) = scan_window(data, &input) else {
        assert!(!data.contains(&b'\n'), "None only while no row is complete");
        return;
    };
    assert!(
        consumed >= 1 && consumed <= data.len(),
        "consumed {consumed} of {}",
        data.len()
    );
    assert_eq!(
        data[consumed - 1],
        b'\n',
        "the consumed prefix ends with a newline"
    );
    assert!(
        !data[consumed..].contains(&b'\n'),
        "only a partial row is left"
    );
    check_output(&whole);
    // The same bytes again: consuming is a pure function of the window.
    assert_eq!(
        scan_window(&data[..consumed], &input),
        Some((consumed, whole.clone()))
    );

    // Two ticks: split after the first newline.
    let first_newline = data.iter().position(|&b| b == b'\n').unwrap_or(0);
    let (head, tail) = data[..consumed].split_at(first_newline + 1);
    let (n1, out1) = scan_window(head, &input).expect("the head ends with a newline");
    assert_eq!(n1, head.len());
    let carried = out1.queued.clone();
    let second = ScanInput {
        queued: &carried,
        ..input
    };
    let out2 = match scan_window(tail, &second) {
        Some((n2, out2)) => {
            assert_eq!(n2, tail.len());
            out2
        }
        None => {
            assert!(tail.is_empty());
            ScanOutput {
                queued: carried.clone(),
                ..ScanOutput::default()
            }
        }
    };
    assert_eq!(
        out1.human_turns + out2.human_turns,
        whole.human_turns,
        "a tick boundary changes the count"
    );
    assert_eq!(
        out2.queued, whole.queued,
        "a tick boundary changes the queued memory"
    );
    let latest = match (out1.occurred_at, out2.occurred_at) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    assert_eq!(latest, whole.occurred_at);
});

/// A class other than `NotHuman` only for the row types that rules 1 and 7 name.
fn check_class(row: &Value, class: &RowClass) {
    let kind = row.get("type").and_then(Value::as_str);
    match class {
        RowClass::Human { .. } => assert_eq!(kind, Some("user")),
        RowClass::QueuedPrompt { .. } | RowClass::QueueRemove => {
            assert_eq!(kind, Some("queue-operation"))
        }
        RowClass::NotHuman => {}
    }
}

fn check_output(out: &ScanOutput) {
    assert!(out.queued.len() <= QUEUED_MEMORY_MAX);
    assert_eq!(out.human_turns == 0, out.occurred_at.is_none());
    for q in &out.queued {
        assert_eq!(&normalise(q), q, "the queued memory holds normalised texts");
    }
}
