//! Window scanner (04 §8, §10).
//!
//! Turns a window of appended transcript bytes (local check) or a list of node items (paired-node
//! check) into a count of human turns, applying the classifier (04 §9), self-echo suppression
//! (04 §6) and the `queued` memory of rule 7. Pure: the caller reads the file, supplies the
//! fallback time (file mtime or now) and stores the marker.

use std::collections::VecDeque;

use serde_json::{Map, Value};

use crate::claude::classify::{classify_row, normalise, row_timestamp_ms, RowClass};
use crate::claude::probe::is_tool_results_only;
use crate::claude::slim::{read_line, Row};

/// The window of one local check (04 §8 step 5): a larger append is consumed over several
/// ticks. A window without a newline is left to the caller: the local provider then streams the
/// oversized row (docs/upstream.md §2), and a row still being written waits.
pub const WINDOW_BYTES: usize = 1_048_576;

/// Most entries of the `queued` memory (04 §9 rule 7); the oldest is dropped beyond it, so a
/// marker stays small even if removes were never written.
pub const QUEUED_MEMORY_MAX: usize = 20;

/// What a scan needs besides the rows.
#[derive(Debug, Clone, Copy)]
pub struct ScanInput<'a> {
    /// The session's recent aware-side prompt texts (04 §6), already normalised: a human row
    /// with exactly one of these texts is an echo of aware's own input and is not counted.
    pub own_recent_user_texts: &'a [String],
    /// The link marker's `queued` memory (normalised texts of counted queued prompts, oldest
    /// first), so a queued prompt counted on an earlier tick is not counted again when its user
    /// row arrives.
    pub queued: &'a [String],
    /// Time of a counted row without a valid timestamp: the file's mtime for a local window,
    /// now for node items.
    pub fallback_time_ms: i64,
}

/// The result of one scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanOutput {
    /// Human rows that are not echoes and not repeats of a remembered queued prompt.
    pub human_turns: u32,
    /// Latest time among counted rows; `None` when nothing was counted.
    pub occurred_at: Option<i64>,
    /// The `queued` memory after the scan (at most [`QUEUED_MEMORY_MAX`], oldest first), to be
    /// stored in the next marker (omitted there when empty).
    pub queued: Vec<String>,
}

/// Scans the complete rows of a window read from a transcript at the marker offset (04 §8
/// steps 6–8).
///
/// Returns `None` when the window holds no `\n`: the row is still being written or is longer
/// than the window, and bytes are never skipped. Otherwise returns the number of bytes consumed
/// (up to and including the last `\n`, so a partial last row is read again next tick) and the
/// scan of those rows. Lines that are blank are skipped; lines that are not UTF-8 or not JSON are
/// consumed without counting. The caller bounds the window to [`WINDOW_BYTES`].
pub fn scan_window(window: &[u8], input: &ScanInput) -> Option<(usize, ScanOutput)> {
    let mut scanner = Scanner::new(input);
    let consumed = scan_lines(window, &mut scanner)?;
    Some((consumed, scanner.finish()))
}

/// Feeds the complete lines of `window` to `scanner`; the bytes consumed (through the last
/// `\n`), or `None` when the window holds no `\n` (nothing is fed then).
pub(crate) fn scan_lines(window: &[u8], scanner: &mut Scanner) -> Option<usize> {
    let (consumed, lines) = complete_lines(window)?;
    for line in lines {
        if !may_classify(line) || is_tool_results_only(line) {
            continue;
        }
        read_line(line, |row| scanner.feed_row(row));
    }
    Some(consumed)
}

/// The complete rows of a window: the bytes through its last `\n` (what a scan consumes) and
/// its lines, each without its `\n` and a trailing `\r`, blank ones left out; `None` when the
/// window holds no `\n` (a row still being written: bytes are never skipped). Line ends are
/// found with memchr (vectorised) rather than a byte-at-a-time split: with the prefilters,
/// finding lines became a large share of the scans (perf, W7).
pub(crate) fn complete_lines(window: &[u8]) -> Option<(usize, impl Iterator<Item = &[u8]>)> {
    let last_newline = memchr::memrchr(b'\n', window)?;
    let complete = window.get(..=last_newline)?;
    let mut start = 0;
    let lines = memchr::memchr_iter(b'\n', complete)
        .map(move |end| {
            let line = complete.get(start..end).unwrap_or_default();
            start = end + 1;
            line.strip_suffix(b"\r").unwrap_or(line)
        })
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace));
    Some((last_newline + 1, lines))
}

/// Byte-level prefilter: whether a line can be a row the classifier gives a meaning (a `user`
/// or `queue-operation` row), so that the other rows (assistant output, progress, attachments,
/// snapshots: about a third of a transcript's bytes) are never parsed. Such a row's `type`
/// value is the JSON string `"user"` or `"queue-operation"`, which appears verbatim in the line
/// unless it is written with `\u` escapes (the only JSON escape that yields a letter), so a
/// line with none of the three is `NotHuman` for certain. Conservative: a line that passes is
/// parsed and classified as before.
fn may_classify(line: &[u8]) -> bool {
    use memchr::memmem::Finder;
    // Built once: a finder's set-up is per needle, and this runs for every line.
    static NEEDLES: std::sync::LazyLock<[Finder<'static>; 3]> = std::sync::LazyLock::new(|| {
        [
            Finder::new(b"\"user\""),
            Finder::new(b"\"queue-operation\""),
            Finder::new(b"\\u"),
        ]
    });
    NEEDLES.iter().any(|n| n.find(line).is_some())
}

/// Scans rows already parsed, oldest first: the paired-node check feeds the rows built by
/// [`node_item_to_row`] (04 §10 step 5), with the same echo and `queued` rules as a window.
pub fn scan_rows(rows: impl IntoIterator<Item = Value>, input: &ScanInput) -> ScanOutput {
    let mut scanner = Scanner::new(input);
    for row in rows {
        scanner.feed(&row);
    }
    scanner.finish()
}

/// Rebuilds the transcript row behind a node item (04 §10 step 5), so that the classifier
/// applies to node threads exactly as to local files.
///
/// A `userMessage` item becomes `{type: "user", message: {role: "user", content: content ??
/// text}, timestamp, isMeta, isSidechain, isCompactSummary, isVisibleInTranscriptOnly, origin:
/// {kind: originKind}}` (flags from the item's `flags` object, keys left out when absent); a
/// `queueOperation` item becomes `{type: "queue-operation", operation, content}`. Other items
/// (assistant output, tool calls) can never be human and give `None`.
pub fn node_item_to_row(item: &Value) -> Option<Value> {
    let item = item.as_object()?;
    match item.get("type")?.as_str()? {
        "userMessage" => {
            let content = match item.get("content") {
                Some(content) if !content.is_null() => content.clone(),
                _ => item.get("text").cloned().unwrap_or(Value::Null),
            };
            let mut message = Map::new();
            message.insert("role".into(), Value::from("user"));
            message.insert("content".into(), content);
            let mut row = Map::new();
            row.insert("type".into(), Value::from("user"));
            row.insert("message".into(), Value::Object(message));
            if let Some(timestamp) = item.get("timestamp") {
                row.insert("timestamp".into(), timestamp.clone());
            }
            let flags = item.get("flags");
            for (row_key, flag_key) in [
                ("isMeta", "meta"),
                ("isSidechain", "sidechain"),
                ("isCompactSummary", "compactSummary"),
                ("isVisibleInTranscriptOnly", "transcriptOnly"),
            ] {
                if let Some(value) = flags.and_then(|f| f.get(flag_key)) {
                    row.insert(row_key.into(), value.clone());
                }
            }
            if let Some(kind) = item.get("originKind") {
                let mut origin = Map::new();
                origin.insert("kind".into(), kind.clone());
                row.insert("origin".into(), Value::Object(origin));
            }
            Some(Value::Object(row))
        }
        "queueOperation" => {
            let mut row = Map::new();
            row.insert("type".into(), Value::from("queue-operation"));
            for key in ["operation", "content"] {
                row.insert(key.into(), item.get(key).cloned().unwrap_or(Value::Null));
            }
            Some(Value::Object(row))
        }
        _ => None,
    }
}

/// Running state of one scan.
pub(crate) struct Scanner<'a> {
    own_recent_user_texts: &'a [String],
    fallback_time_ms: i64,
    human_turns: u32,
    occurred_at: Option<i64>,
    queued: VecDeque<String>,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(input: &ScanInput<'a>) -> Self {
        let skip = input.queued.len().saturating_sub(QUEUED_MEMORY_MAX);
        Scanner {
            own_recent_user_texts: input.own_recent_user_texts,
            fallback_time_ms: input.fallback_time_ms,
            human_turns: 0,
            occurred_at: None,
            queued: input
                .queued
                .iter()
                .skip(skip)
                .map(|text| normalise(text))
                .collect(),
        }
    }

    pub(crate) fn feed(&mut self, row: &Value) {
        if let Some(row) = Row::from_value(row) {
            self.feed_row(&row);
        }
    }

    /// [`Scanner::feed`] on the slim row; a row that is not an object is `NotHuman`.
    pub(crate) fn feed_row(&mut self, row: &Row) {
        match classify_row(row) {
            RowClass::Human {
                user_text,
                occurred_at,
            } => {
                let text = normalise(&user_text);
                // Delivered as an ordinary prompt after it was counted as queued: forget it.
                if !text.is_empty() {
                    if let Some(at) = self.queued.iter().position(|q| *q == text) {
                        self.queued.remove(at);
                        return;
                    }
                }
                if !self.is_echo(&text) {
                    self.count(occurred_at);
                }
            }
            RowClass::QueuedPrompt { user_text } => {
                let text = normalise(&user_text);
                if self.is_echo(&text) {
                    return;
                }
                self.count(row_timestamp_ms(row));
                self.queued.push_back(text);
                while self.queued.len() > QUEUED_MEMORY_MAX {
                    self.queued.pop_front();
                }
            }
            RowClass::QueueRemove => {
                self.queued.pop_front();
            }
            RowClass::NotHuman => {}
        }
    }

    /// Counts one Codex rollout row (docs/codex-rows.md): the Codex classifier and the echo
    /// rule; Codex has no queue rows.
    pub(crate) fn feed_codex(&mut self, row: &Value) {
        if let RowClass::Human {
            user_text,
            occurred_at,
        } = crate::codex::classify::classify_codex(row)
        {
            if !self.is_echo(&normalise(&user_text)) {
                self.count(occurred_at);
            }
        }
    }

    /// Exact match on normalised text (04 §6); an empty text (image only) is never an echo.
    fn is_echo(&self, text: &str) -> bool {
        !text.is_empty() && self.own_recent_user_texts.iter().any(|own| own == text)
    }

    fn count(&mut self, occurred_at: Option<i64>) {
        self.human_turns = self.human_turns.saturating_add(1);
        let at = occurred_at.unwrap_or(self.fallback_time_ms);
        self.occurred_at = Some(self.occurred_at.map_or(at, |prev| prev.max(at)));
    }

    pub(crate) fn finish(self) -> ScanOutput {
        ScanOutput {
            human_turns: self.human_turns,
            occurred_at: self.occurred_at,
            queued: self.queued.into(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::claude::classify::classify;
    use proptest::prelude::*;
    use serde_json::json;

    /// 2026-01-01T00:00:00.000Z
    const T0: i64 = 1_767_225_600_000;
    const MTIME: i64 = T0 + 999_000;

    fn input<'a>(own: &'a [String], queued: &'a [String]) -> ScanInput<'a> {
        ScanInput {
            own_recent_user_texts: own,
            queued,
            fallback_time_ms: MTIME,
        }
    }

    fn line(row: &Value) -> String {
        format!("{row}\n")
    }

    fn user_row(content: Value, timestamp: Option<&str>) -> Value {
        let mut row = json!({"type": "user", "message": {"role": "user", "content": content}});
        if let (Some(ts), Some(obj)) = (timestamp, row.as_object_mut()) {
            obj.insert("timestamp".into(), json!(ts));
        }
        row
    }

    fn u(text: &str) -> Value {
        user_row(json!(text), Some("2026-01-01T00:00:01.000Z"))
    }

    fn assistant(text: &str) -> Value {
        json!({"type": "assistant", "message": {"role": "assistant",
               "content": [{"type": "text", "text": text}]}})
    }

    fn queue(operation: &str, content: Option<&str>) -> Value {
        let mut row = json!({"type": "queue-operation", "operation": operation,
                             "timestamp": "2026-01-01T00:00:02.000Z"});
        if let (Some(c), Some(obj)) = (content, row.as_object_mut()) {
            obj.insert("content".into(), json!(c));
        }
        row
    }

    /// `row` serialised with a trailing `pad` field so that the line, newline included, is
    /// exactly `total` bytes long.
    fn padded_line(row: Value, total: usize) -> Vec<u8> {
        let mut row = row;
        if let Some(obj) = row.as_object_mut() {
            obj.insert("pad".into(), json!(""));
        }
        let bare = row.to_string().len() + 1;
        assert!(bare <= total, "row too long to pad");
        if let Some(obj) = row.as_object_mut() {
            obj.insert("pad".into(), json!("x".repeat(total - bare)));
        }
        let out = line(&row).into_bytes();
        assert_eq!(out.len(), total);
        out
    }

    fn scan_text(text: &str, input: &ScanInput) -> Option<(usize, ScanOutput)> {
        scan_window(text.as_bytes(), input)
    }

    // --- Prefilter ------------------------------------------------------------------------------

    /// A row whose `type` is written with `\u` escapes is still a user (or queue) row: the
    /// byte-level prefilter must let it through to the classifier.
    #[test]
    fn escaped_type_values_pass_the_prefilter() {
        let text = "{\"type\":\"\\u0075ser\",\"message\":{\"role\":\"user\",\"content\":\"typed\"}}\n\
                    {\"type\":\"queue-\\u006fperation\",\"operation\":\"enqueue\",\"content\":\"later\"}\n";
        let (_, out) = scan_text(text, &input(&[], &[])).unwrap();
        assert_eq!(out.human_turns, 2);
    }

    /// The tool-result probe skips plain tool output only: a rejected tool's result (which may
    /// carry the human's feedback) and a row with a text block are parsed in full.
    #[test]
    fn tool_result_probe_skips_plain_tool_output_only() {
        let plain = br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"big output"}]}]}}"#;
        assert!(is_tool_results_only(plain));
        let rejected = br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","is_error":true,"content":"x"}]}}"#;
        assert!(!is_tool_results_only(rejected));
        let with_text = br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"x"},{"type":"text","text":"and this"}]}}"#;
        assert!(!is_tool_results_only(with_text));
        let duplicate =
            br#"{"type":"user","type":"assistant","message":{"content":[{"type":"tool_result"}]}}"#;
        assert!(!is_tool_results_only(duplicate));
    }

    /// Over every row of the vendored Claude Code fixtures, a line the prefilter skips is one
    /// the classifier calls `NotHuman`: skipping never changes a count.
    #[test]
    fn prefilter_skips_only_rows_that_cannot_count() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-code");
        let mut skipped = 0;
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let bytes = std::fs::read(entry.path()).unwrap();
            for line in bytes.split(|&b| b == b'\n') {
                let Ok(row) = serde_json::from_slice::<Value>(line) else {
                    continue;
                };
                if !may_classify(line) || is_tool_results_only(line) {
                    skipped += 1;
                    assert_eq!(classify(&row), RowClass::NotHuman, "{row}");
                }
            }
        }
        assert!(skipped > 0, "the fixtures have rows the prefilter skips");
    }

    proptest! {
        /// Any line the prefilter skips classifies as `NotHuman`, whatever its shape.
        #[test]
        fn prefilter_agrees_with_classifier(
            ty in prop::sample::select(vec!["user", "assistant", "queue-operation", "progress", "\\u0075ser", "us\\u0065r"]),
            role in prop::sample::select(vec!["user", "assistant"]),
            text in "[a-z <>\\[\\]]{0,20}",
            op in prop::sample::select(vec!["enqueue", "remove", "popAll"]),
            blocks in prop::collection::vec((
                prop::sample::select(vec!["tool_result", "text", "image", "thinking"]),
                prop::sample::select(vec!["", ",\"is_error\":true", ",\"is_error\":false", ",\"is_error\":1"]),
                prop::sample::select(vec!["ok", "no\\nthe user said:\\nstop", "[Request interrupted by user]"]),
            ), 0..4),
        ) {
            let blocks: Vec<String> = blocks
                .iter()
                .map(|(kind, err, body)| {
                    format!("{{\"type\":\"{kind}\"{err},\"content\":\"{body}\",\"text\":\"{body}\"}}")
                })
                .collect();
            let blocks = blocks.join(",");
            for line in [
                format!("{{\"type\":\"{ty}\",\"message\":{{\"role\":\"{role}\",\"content\":[{blocks}]}}}}"),
                format!("{{\"type\":\"{ty}\",\"message\":{{\"role\":\"{role}\",\"content\":\"{text}\"}}}}"),
                format!("{{\"type\":\"{ty}\",\"operation\":\"{op}\",\"content\":\"{text}\"}}"),
            ] {
                let row: Value = serde_json::from_str(&line).unwrap();
                if !may_classify(line.as_bytes()) || is_tool_results_only(line.as_bytes()) {
                    prop_assert_eq!(classify(&row), RowClass::NotHuman, "{}", line);
                }
            }
        }
    }

    /// The fixture lines the prefilter lets through (the rows the probe and the classifier see).
    fn fixture_candidate_lines() -> &'static [String] {
        static LINES: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
            let dir =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-code");
            let mut lines = Vec::new();
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                lines.extend(
                    text.lines()
                        .filter(|l| may_classify(l.as_bytes()))
                        .map(str::to_string),
                );
            }
            lines
        });
        &LINES
    }

    proptest! {
        // Few fixture rows are ones that count, so many cases are needed to mutate them (the
        // check is fast); with 256 a probe that skipped text blocks went unnoticed.
        #![proptest_config(ProptestConfig::with_cases(8192))]
        /// Real rows, mutated where the fast paths decide (block types, `is_error`, the row's
        /// `type`, duplicate keys before or after the original ones, string content, keys spelt
        /// with escapes, whitespace between tokens, a block that is an array, escaped quotes and
        /// backslashes in the strings the probe skips): a line the prefilter or the tool-result
        /// probe skips still classifies `NotHuman` by the full parse, so the fast paths never
        /// change a count on hostile transcripts.
        #[test]
        fn fast_paths_agree_with_the_full_parse_on_mutated_fixture_rows(
            pick in any::<prop::sample::Index>(),
            edits in prop::collection::vec((0usize..10, any::<prop::sample::Index>(), 0usize..8), 1..4),
        ) {
            let lines = fixture_candidate_lines();
            prop_assume!(!lines.is_empty());
            let mut line = pick.get(lines).clone();
            const TOKENS: [&str; 8] = [
                "\"tool_result\"", "\"text\"", "\"user\"", "\"is_error\":false",
                "\"is_error\":true", "\"content\":[", "\"type\":", "\"image\"",
            ];
            const REPLACEMENTS: [&str; 8] = [
                "\"text\"", "\"tool_result\"", "\"assistant\"", "\"is_error\":true",
                "\"is_error\":null", "\"content\":\"typed by a human\",\"x\":[",
                "\"type\":\"user\",\"kind\":", "\"t\\u0065xt\"",
            ];
            for (how, at, which) in edits {
                match how {
                    // Replace one occurrence of a deciding token.
                    0 | 1 => {
                        let token = TOKENS[which];
                        let hits: Vec<usize> = line.match_indices(token).map(|(i, _)| i).collect();
                        if !hits.is_empty() {
                            let i = *at.get(&hits);
                            line.replace_range(i..i + token.len(), REPLACEMENTS[which]);
                        }
                    }
                    // Duplicate keys first (the full parse keeps the last one).
                    2 => line = line.replacen('{', "{\"type\":\"assistant\",", 1),
                    3 => line = line.replacen('{', "{\"message\":{\"role\":\"user\",\"content\":\"hi\"},", 1),
                    // Duplicate keys last: these win in the full parse.
                    4 => {
                        if let Some(end) = line.rfind('}') {
                            line.replace_range(end..=end, ",\"message\":{\"role\":\"user\",\"content\":\"typed\"}}");
                        }
                    }
                    5 => {
                        if let Some(end) = line.rfind('}') {
                            line.replace_range(end..=end, ",\"type\":\"user\"}");
                        }
                    }
                    // A deciding key spelt with an escape (the full parse reads `type`).
                    6 => line = line.replacen("\"type\":", "\"t\\u0079pe\":", *at.get(&[1, 2, 3])),
                    // Whitespace between tokens (the walker of `probe.rs` skips it itself).
                    7 => line = line.replacen("\":", "\" :\n ", *at.get(&[1, 3, 9])),
                    // A block in serde's sequence form of a struct.
                    8 => line = line.replacen("\"content\":[", "\"content\":[[\"tool_result\",false],", 1),
                    // A skipped string ending in an escaped backslash, then an escaped quote
                    // followed by what looks like a text block.
                    _ => line = line.replacen(
                        "\"tool_use_id\":\"",
                        "\"tool_use_id\":\"\\\\\",\"x\":\"\\\"}],\\\"type\\\":\\\"text\\\", ",
                        1,
                    ),
                }
            }
            // The slim read decides the mutated row as the replaced `Value` path did.
            prop_assert_eq!(
                crate::claude::slim::tests::scan_reads(line.as_bytes()),
                crate::claude::slim::tests::reference_reads(line.as_bytes()),
                "{}",
                line
            );
            let Ok(row) = serde_json::from_str::<Value>(&line) else {
                return Ok(()); // not JSON: consumed without counting either way
            };
            if !may_classify(line.as_bytes()) || is_tool_results_only(line.as_bytes()) {
                prop_assert_eq!(classify(&row), RowClass::NotHuman, "{}", line);
            }
        }
    }

    // --- S139 ---------------------------------------------------------------------------------

    #[test]
    fn s139_row_classifier_sequence() {
        let mut text = String::new();
        text += &line(&assistant("Let me look."));
        text += &line(&user_row(
            json!([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]),
            Some("2026-01-01T00:00:03.000Z"),
        ));
        text += &line(&user_row(json!("[Inter-session message] synthetic"), None));
        for flag in ["isMeta", "isSidechain", "isCompactSummary"] {
            let mut row = user_row(json!("flagged"), Some("2026-01-01T00:00:04.000Z"));
            if let Some(obj) = row.as_object_mut() {
                obj.insert(flag.into(), json!(true));
            }
            text += &line(&row);
        }
        let mut notification = user_row(json!("done"), None);
        if let Some(obj) = notification.as_object_mut() {
            obj.insert("origin".into(), json!({"kind": "task-notification"}));
        }
        text += &line(&notification);
        text += &line(&user_row(
            json!("  <task-notification>done</task-notification>"),
            None,
        ));
        text += "not json\n";
        text += &line(&user_row(
            json!("real upstream prompt"),
            Some("2026-01-01T00:00:12.000Z"),
        ));

        let (consumed, out) = scan_text(&text, &input(&[], &[])).expect("complete rows");
        assert_eq!(consumed, text.len(), "the marker is the file size");
        assert_eq!(
            out,
            ScanOutput {
                human_turns: 1,
                occurred_at: Some(T0 + 12_000),
                queued: vec![],
            }
        );
    }

    // --- S140 ---------------------------------------------------------------------------------

    #[test]
    fn s140_one_mib_window() {
        let first = padded_line(assistant("big"), 1_048_376);
        let middle = padded_line(u("middle prompt"), 300);
        let last = padded_line(assistant("tail"), 524_288);
        let file = [first.as_slice(), &middle, &last].concat();

        let b0 = 0;
        let window1 = file
            .get(b0..(b0 + WINDOW_BYTES).min(file.len()))
            .unwrap_or_default();
        assert_eq!(window1.len(), WINDOW_BYTES);
        let (consumed1, out1) = scan_window(window1, &input(&[], &[])).expect("tick 1");
        assert_eq!(consumed1, 1_048_376);
        assert_eq!(out1.human_turns, 0);
        assert_eq!(out1.occurred_at, None);

        let b1 = b0 + consumed1;
        let window2 = file
            .get(b1..(b1 + WINDOW_BYTES).min(file.len()))
            .unwrap_or_default();
        let (consumed2, out2) = scan_window(window2, &input(&[], &[])).expect("tick 2");
        assert_eq!(b1 + consumed2, file.len(), "marker moves to the file size");
        assert_eq!(out2.human_turns, 1);
        assert_eq!(out2.occurred_at, Some(T0 + 1_000));
    }

    // --- S141 ---------------------------------------------------------------------------------

    #[test]
    fn s141_oversized_row_blocks_never_skips() {
        let big = padded_line(assistant("huge"), 2 * 1_048_576);
        let file = [big.as_slice(), line(&u("after")).as_bytes()].concat();
        for _tick in 1..=3 {
            let window = file.get(..WINDOW_BYTES).unwrap_or_default();
            assert_eq!(scan_window(window, &input(&[], &[])), None);
        }
    }

    #[test]
    fn s141_one_and_a_half_mib_row_blocks() {
        let big = padded_line(assistant("huge"), 1_572_864);
        let file = [big.as_slice(), line(&u("after")).as_bytes()].concat();
        let window = file.get(..WINDOW_BYTES).unwrap_or_default();
        assert_eq!(scan_window(window, &input(&[], &[])), None);
    }

    #[test]
    fn s141_partial_row_waits_for_its_newline() {
        let row = u("typed").to_string();
        assert_eq!(scan_text(&row, &input(&[], &[])), None);
        let complete = format!("{row}\n");
        let (consumed, out) = scan_text(&complete, &input(&[], &[])).expect("complete");
        assert_eq!(consumed, complete.len());
        assert_eq!(out.human_turns, 1);
    }

    #[test]
    fn partial_last_line_is_left_for_the_next_tick() {
        let first = line(&u("one"));
        let text = format!("{first}{}", u("two")); // no final newline
        let (consumed, out) = scan_text(&text, &input(&[], &[])).expect("one complete row");
        assert_eq!(consumed, first.len());
        assert_eq!(out.human_turns, 1);
    }

    // --- S148 ---------------------------------------------------------------------------------

    fn s148_rows() -> Vec<Value> {
        vec![
            queue("enqueue", Some("also check the logs")),
            queue("remove", None),
            queue(
                "enqueue",
                Some("<task-notification>\n<task-id>a1</task-id>\n</task-notification>"),
            ),
            user_row(json!("(no content)"), Some("2026-01-01T00:00:03.000Z")),
            queue("enqueue", Some("run the tests")),
            queue("dequeue", None),
            user_row(json!("run the tests"), Some("2026-01-01T00:00:05.000Z")),
        ]
    }

    #[test]
    fn s148_queued_prompts_and_placeholders() {
        let text: String = s148_rows().iter().map(line).collect();
        let (consumed, out) = scan_text(&text, &input(&[], &[])).expect("complete");
        assert_eq!(consumed, text.len());
        assert_eq!(out.human_turns, 2, "also check the logs, run the tests");
        assert_eq!(
            out.queued,
            Vec::<String>::new(),
            "no queued memory in the marker"
        );
        assert_eq!(out.occurred_at, Some(T0 + 2_000));

        let more = line(&queue("enqueue", Some("/mcp")));
        let (_, out) = scan_text(&more, &input(&[], &out.queued)).expect("complete");
        assert_eq!(out.human_turns, 0);
        assert!(out.queued.is_empty());
    }

    #[test]
    fn s148_same_sequence_through_scan_rows() {
        let out = scan_rows(s148_rows(), &input(&[], &[]));
        assert_eq!(out.human_turns, 2);
        assert!(out.queued.is_empty());
    }

    #[test]
    fn s148_queued_memory_carries_across_ticks() {
        let tick1 = line(&queue("enqueue", Some("run  the\ntests")));
        let (_, out1) = scan_text(&tick1, &input(&[], &[])).expect("tick 1");
        assert_eq!(out1.human_turns, 1);
        assert_eq!(out1.queued, vec!["run the tests".to_owned()]);

        let tick2 = line(&u("run the tests")) + &line(&u("run the tests"));
        let (_, out2) = scan_text(&tick2, &input(&[], &out1.queued)).expect("tick 2");
        assert_eq!(
            out2.human_turns, 1,
            "first copy delivered the queued prompt, second is new"
        );
        assert!(out2.queued.is_empty());
    }

    // --- queued memory --------------------------------------------------------------------------

    #[test]
    fn remove_forgets_the_oldest_entry() {
        let rows = vec![
            queue("enqueue", Some("alpha")),
            queue("enqueue", Some("beta")),
            queue("remove", None),
            u("alpha"),
            u("beta"),
        ];
        let out = scan_rows(rows, &input(&[], &[]));
        assert_eq!(
            out.human_turns, 3,
            "alpha, beta queued; alpha typed again; beta delivered"
        );
        assert!(out.queued.is_empty());
        // remove on an empty memory is harmless
        let out = scan_rows(vec![queue("remove", None)], &input(&[], &[]));
        assert_eq!(out, ScanOutput::default());
    }

    #[test]
    fn queued_memory_keeps_the_newest_twenty() {
        let rows: Vec<Value> = (0..25)
            .map(|i| queue("enqueue", Some(&format!("prompt {i}"))))
            .collect();
        let out = scan_rows(rows, &input(&[], &[]));
        assert_eq!(out.human_turns, 25);
        let expected: Vec<String> = (5..25).map(|i| format!("prompt {i}")).collect();
        assert_eq!(out.queued, expected);

        let long: Vec<String> = (0..30).map(|i| format!("old {i}")).collect();
        let out = scan_rows(vec![], &input(&[], &long));
        assert_eq!(out.queued, long.get(10..).unwrap_or_default().to_vec());
    }

    #[test]
    fn duplicate_queued_prompts_count_twice_and_forget_one_at_a_time() {
        let rows = vec![
            queue("enqueue", Some("again")),
            queue("enqueue", Some("again")),
            u("again"),
        ];
        let out = scan_rows(rows, &input(&[], &[]));
        assert_eq!(out.human_turns, 2);
        assert_eq!(out.queued, vec!["again".to_owned()]);
    }

    #[test]
    fn queued_prompt_time_is_its_timestamp_or_the_fallback() {
        let out = scan_rows(vec![queue("enqueue", Some("x"))], &input(&[], &[]));
        assert_eq!(out.occurred_at, Some(T0 + 2_000));
        let bare = json!({"type": "queue-operation", "operation": "enqueue", "content": "x"});
        let out = scan_rows(vec![bare], &input(&[], &[]));
        assert_eq!(out.occurred_at, Some(MTIME));
    }

    // --- echoes -------------------------------------------------------------------------------

    #[test]
    fn echoes_are_consumed_but_not_counted() {
        let own = vec!["run the tests".to_owned(), "deploy".to_owned()];
        let text = line(&u("  run\n the   tests ")) + &line(&u("deploy now")) + &line(&u("deploy"));
        let (consumed, out) = scan_text(&text, &input(&own, &[])).expect("complete");
        assert_eq!(consumed, text.len());
        assert_eq!(out.human_turns, 1, "only `deploy now` (no prefix match)");
    }

    #[test]
    fn echoed_queued_prompt_is_neither_counted_nor_remembered() {
        let own = vec!["from aware".to_owned()];
        let rows = vec![queue("enqueue", Some("from aware")), u("from aware")];
        let out = scan_rows(rows, &input(&own, &[]));
        assert_eq!(out, ScanOutput::default());
    }

    #[test]
    fn image_only_row_is_never_an_echo() {
        let own = vec![String::new()];
        let row = user_row(json!([{"type": "image", "source": {}}]), None);
        let out = scan_rows(vec![row], &input(&own, &[String::new()]));
        assert_eq!(out.human_turns, 1);
        assert_eq!(out.occurred_at, Some(MTIME));
    }

    // --- lines ----------------------------------------------------------------------------------

    #[test]
    fn crlf_lines_are_accepted() {
        let text = format!(
            "{}\r\n{}\r\n",
            u("first"),
            user_row(json!("second"), Some("2026-01-01T00:00:09.000Z"))
        );
        let (consumed, out) = scan_text(&text, &input(&[], &[])).expect("complete");
        assert_eq!(consumed, text.len());
        assert_eq!(out.human_turns, 2);
        assert_eq!(out.occurred_at, Some(T0 + 9_000));
    }

    #[test]
    fn malformed_and_blank_lines_are_consumed() {
        let mut bytes: Vec<u8> = Vec::new();
        bytes.extend_from_slice(b"\n\n   \r\n\t\n");
        bytes.extend_from_slice(b"not json\n");
        bytes.extend_from_slice(b"{\"type\":\"user\",\n");
        bytes.extend_from_slice(b"\xff\xfe{\"type\":\"user\"}\n");
        let mut bad_utf8 = u("bad \u{e9}").to_string().into_bytes();
        if let Some(pos) = bad_utf8.iter().position(|&b| b == 0xc3) {
            bad_utf8.truncate(pos + 1); // cut the two-byte sequence in half
            bad_utf8.extend_from_slice(b"\"}}");
        }
        bytes.extend_from_slice(&bad_utf8);
        bytes.push(b'\n');
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(line(&u("survivor")).as_bytes());
        let (consumed, out) = scan_window(&bytes, &input(&[], &[])).expect("complete");
        assert_eq!(consumed, bytes.len());
        assert_eq!(out.human_turns, 1);
    }

    #[test]
    fn only_non_human_rows_still_advance() {
        let text = line(&assistant("a")) + &line(&json!({"type": "summary", "summary": "s"}));
        let (consumed, out) = scan_text(&text, &input(&[], &[])).expect("complete");
        assert_eq!(consumed, text.len());
        assert_eq!(out, ScanOutput::default());
    }

    #[test]
    fn empty_and_newline_only_windows() {
        assert_eq!(scan_window(b"", &input(&[], &[])), None);
        assert_eq!(
            scan_window(b"\n", &input(&[], &[])),
            Some((1, ScanOutput::default()))
        );
        // the input memory is passed through when nothing touches it
        let queued = vec!["kept".to_owned()];
        let (_, out) = scan_window(b"\n", &input(&[], &queued)).expect("complete");
        assert_eq!(out.queued, queued);
    }

    #[test]
    fn occurred_at_is_the_latest_counted_time_with_fallback() {
        let rows = vec![
            user_row(json!("late"), Some("2026-01-01T00:00:30.000Z")),
            user_row(json!("early"), Some("2026-01-01T00:00:10.000Z")),
            user_row(json!("echo"), Some("2026-01-01T00:10:00.000Z")),
        ];
        let own = vec!["echo".to_owned()];
        let out = scan_rows(rows.clone(), &input(&own, &[]));
        assert_eq!(out.human_turns, 2);
        assert_eq!(
            out.occurred_at,
            Some(T0 + 30_000),
            "the echo's time is not used"
        );

        let mut with_untimed = rows;
        with_untimed.push(user_row(json!("untimed"), None));
        let out = scan_rows(with_untimed, &input(&own, &[]));
        assert_eq!(out.occurred_at, Some(MTIME));
    }

    // --- node items (04 §10) --------------------------------------------------------------------

    #[test]
    fn node_user_message_becomes_a_user_row() {
        let item = json!({"uuid": "item-2", "type": "userMessage",
            "timestamp": "2026-01-01T00:00:05.000Z", "text": "native prompt",
            "content": "native prompt",
            "flags": {"meta": false, "sidechain": false, "compactSummary": false,
                      "transcriptOnly": false},
            "originKind": "human"});
        assert_eq!(
            node_item_to_row(&item),
            Some(
                json!({"type": "user", "message": {"role": "user", "content": "native prompt"},
                "timestamp": "2026-01-01T00:00:05.000Z", "isMeta": false, "isSidechain": false,
                "isCompactSummary": false, "isVisibleInTranscriptOnly": false,
                "origin": {"kind": "human"}})
            )
        );
        // content ?? text
        let text_only = json!({"type": "userMessage", "text": "hi", "content": null});
        assert_eq!(
            node_item_to_row(&text_only),
            Some(json!({"type": "user", "message": {"role": "user", "content": "hi"}}))
        );
    }

    #[test]
    fn node_queue_operation_becomes_a_queue_row() {
        let item = json!({"uuid": "row:ab", "type": "queueOperation", "operation": "enqueue",
                          "content": "run the tests", "timestamp": "2026-01-01T00:00:05.000Z"});
        assert_eq!(
            node_item_to_row(&item),
            Some(json!({"type": "queue-operation", "operation": "enqueue",
                        "content": "run the tests"}))
        );
    }

    #[test]
    fn node_other_items_give_none() {
        for item in [
            json!({"uuid": "item-3", "type": "agentMessage", "text": "done"}),
            json!({"type": "toolCall"}),
            json!({"type": "reasoning"}),
            json!({"type": "other"}),
            json!({"text": "no type"}),
            json!({"type": 5}),
            json!("userMessage"),
            json!(null),
        ] {
            assert_eq!(node_item_to_row(&item), None, "{item}");
        }
    }

    #[test]
    fn node_items_scan_like_s145() {
        // newest first, as the node answers; scanned oldest first
        let items = [
            json!({"uuid": "item-3", "type": "agentMessage", "text": "answer"}),
            json!({"uuid": "item-2b", "type": "userMessage", "text": "sub", "flags": {"sidechain": true}}),
            json!({"uuid": "item-2a", "type": "userMessage", "text": "meta", "flags": {"meta": true}}),
            json!({"uuid": "item-2n", "type": "userMessage", "text": "done",
                   "originKind": "task-notification"}),
            json!({"uuid": "item-2", "type": "userMessage", "content": "native prompt",
                   "timestamp": "2026-01-01T00:00:05.000Z"}),
        ];
        let rows = items.iter().rev().filter_map(node_item_to_row);
        let out = scan_rows(rows, &input(&[], &[]));
        assert_eq!(out.human_turns, 1);
        assert_eq!(out.occurred_at, Some(T0 + 5_000));

        let untimed = json!({"uuid": "i", "type": "userMessage", "text": "no time"});
        let out = scan_rows(node_item_to_row(&untimed), &input(&[], &[]));
        assert_eq!(
            out.occurred_at,
            Some(MTIME),
            "now for an item without a timestamp"
        );
    }

    // --- fuzz -----------------------------------------------------------------------------------

    pub(crate) const WORDS: &[&str] = &[
        "user",
        "assistant",
        "queue-operation",
        "enqueue",
        "remove",
        "dequeue",
        "popAll",
        "text",
        "tool_result",
        "image",
        "userMessage",
        "queueOperation",
        "task-notification",
        "the user said:\nretry",
        "the user said:",
        "<command-name>/x</command-name>",
        "<ide_opened_file>f</ide_opened_file>",
        "(no content)",
        "/mcp",
        "run the tests",
        "2026-01-01T00:00:12.000Z",
        "2026-02-30T25:61:61.5+99:99",
        "",
        " ",
        "\u{e9}\u{1f600}",
    ];

    pub(crate) const KEYS: &[&str] = &[
        "type",
        "message",
        "role",
        "content",
        "text",
        "is_error",
        "isMeta",
        "isSidechain",
        "agentId",
        "planContent",
        "isCompactSummary",
        "isVisibleInTranscriptOnly",
        "origin",
        "kind",
        "timestamp",
        "operation",
        "flags",
        "meta",
        "sidechain",
        "originKind",
        "source",
    ];

    pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "\\PC{0,16}".prop_map(Value::from),
            prop::sample::select(WORDS).prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 96, 6, |inner| {
            let key = prop_oneof![
                3 => prop::sample::select(KEYS).prop_map(str::to_owned),
                1 => "\\PC{0,6}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key, inner), 0..8)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    /// Rows shaped like transcript rows, so the fuzzer reaches the deep rules.
    pub(crate) fn arb_row() -> impl Strategy<Value = Value> {
        let block = (prop::sample::select(WORDS), arb_json(), arb_json(), any::<bool>()).prop_map(
            |(kind, text, content, is_error)| {
                json!({"type": kind, "text": text, "content": content, "is_error": is_error})
            },
        );
        let content = prop_oneof![
            arb_json(),
            prop::sample::select(WORDS).prop_map(Value::from),
            prop::collection::vec(block, 0..5).prop_map(Value::Array),
        ];
        (
            prop::sample::select(WORDS),
            prop::sample::select(WORDS),
            content,
            arb_json(),
            prop::collection::vec((prop::sample::select(KEYS), arb_json()), 0..3),
        )
            .prop_map(|(kind, operation, content, timestamp, extra)| {
                let mut row = json!({"type": kind, "operation": operation,
                    "message": {"role": "user", "content": content.clone()},
                    "content": content, "timestamp": timestamp});
                if let Some(obj) = row.as_object_mut() {
                    for (k, v) in extra {
                        obj.insert(k.to_owned(), v);
                    }
                }
                row
            })
    }

    fn arb_line() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            arb_row().prop_map(|r| r.to_string().into_bytes()),
            arb_json().prop_map(|r| r.to_string().into_bytes()),
            prop::collection::vec(any::<u8>(), 0..40),
        ]
    }

    fn arb_texts() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(prop::sample::select(WORDS).prop_map(normalise), 0..4)
    }

    proptest! {
        #[test]
        fn classify_never_panics_on_arbitrary_json(value in arb_json()) {
            let _ = classify(&value);
            let _ = node_item_to_row(&value);
        }

        #[test]
        fn classify_never_panics_on_row_shapes(row in arb_row()) {
            let _ = classify(&row);
        }

        #[test]
        fn scan_window_never_panics_on_arbitrary_bytes(
            bytes in prop::collection::vec(any::<u8>(), 0..4096),
            own in arb_texts(),
            queued in arb_texts(),
        ) {
            let input = ScanInput { own_recent_user_texts: &own, queued: &queued, fallback_time_ms: 0 };
            match scan_window(&bytes, &input) {
                None => prop_assert!(!bytes.contains(&b'\n')),
                Some((consumed, out)) => {
                    prop_assert!(consumed >= 1 && consumed <= bytes.len());
                    prop_assert_eq!(bytes.get(consumed - 1), Some(&b'\n'));
                    prop_assert!(!bytes.get(consumed..).unwrap_or_default().contains(&b'\n'));
                    prop_assert!(out.queued.len() <= QUEUED_MEMORY_MAX);
                }
            }
        }

        #[test]
        fn scan_window_never_panics_on_json_lines(
            lines in prop::collection::vec((arb_line(), any::<bool>()), 0..12),
            own in arb_texts(),
            queued in arb_texts(),
            fallback in any::<i64>(),
        ) {
            let mut bytes = Vec::new();
            for (line, crlf) in &lines {
                bytes.extend_from_slice(line);
                if *crlf {
                    bytes.push(b'\r');
                }
                bytes.push(b'\n');
            }
            let input = ScanInput { own_recent_user_texts: &own, queued: &queued, fallback_time_ms: fallback };
            let result = scan_window(&bytes, &input);
            if !bytes.is_empty() {
                let (consumed, out) = result.unwrap_or_default();
                prop_assert_eq!(consumed, bytes.len());
                prop_assert!(out.human_turns as usize <= lines.len());
            }
        }

        #[test]
        fn scan_rows_never_panics_on_node_items(
            items in prop::collection::vec(arb_json(), 0..8),
            rows in prop::collection::vec(arb_row(), 0..8),
            own in arb_texts(),
            queued in arb_texts(),
        ) {
            let input = ScanInput { own_recent_user_texts: &own, queued: &queued, fallback_time_ms: 0 };
            let node_rows: Vec<Value> = items.iter().filter_map(node_item_to_row).collect();
            let _ = scan_rows(node_rows.into_iter().chain(rows), &input);
        }
    }
}
