//! Rows of any size (decision D23): a transcript row longer than the 1 MiB window is read as a
//! stream and reduced to a **slim row** holding only what the classifier (04 §9) and the node's
//! item builder look at, with bounded memory whatever the row's size.
//!
//! Why a hand-written tokenizer: `serde_json` buffers every string whole before a visitor sees
//! it, and the string is exactly what is huge (a pasted log, a tool result). This one walks the
//! bytes once, validates them as strictly as `serde_json::from_str` does for a `Value` (UTF-8,
//! escapes, lone surrogates, control characters, number range, nesting depth 127, trailing
//! bytes), so an oversized line that is not JSON is "not human" exactly as a short one is.
//!
//! What is kept, by path (everything else is validated and dropped as it streams by):
//! - row: `type`, `uuid`, `timestamp`, `operation` and the flags `isMeta`, `isSidechain`,
//!   `isCompactSummary`, `isVisibleInTranscriptOnly` (short scalars, at most 1 KiB each),
//!   `origin.kind`, the presence of `agentId` and `planContent`, the queue row's `content`
//!   (text);
//! - `message.role` and `message.content`: a string (text) or an array of blocks, each block's
//!   `type`, `is_error`, `text` (text) and, for a `tool_result`, its human feedback (the text
//!   after `the user said:` and a line break, rule 4), searched across the whole result.
//!
//! A kept **text** drops its leading whitespace, keeps the next 4 KiB exactly as written (every
//! marker of rules 4, 5 and 7 is decided there), then up to 512 KiB more with whitespace runs
//! collapsed to their first character (so `normalise`, which echoes and the queued memory use,
//! gives the same result as on the full text). A text cut there ends with `…`: it is longer
//! than any aware-side turn (256 KiB), so it can never be an echo, and two cut texts compare by
//! their kept prefixes. A row keeps at most 2 MiB of text in all; blocks past that are reduced
//! to the facts the rules need (an image, a tool result, the first surviving candidate).

mod parser;
mod parts;
mod rows;

use parser::Parser;
use parts::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Read;

/// A slim row and the row id a node gives a row without uuid (`row:` + 32 hex of SHA-256 of
/// the line).
#[derive(Debug, Clone, PartialEq)]
pub struct SlimRow {
    /// `None` when the line is not valid JSON (not human, still consumed).
    pub row: Option<Value>,
    pub row_id: String,
}

/// Reads one line (without its `\n`, and without a final `\r`) from `reader` and builds its
/// slim row. An I/O error is returned as such: the caller must not consume a row it could not
/// read.
pub fn slim_row(reader: impl Read) -> std::io::Result<SlimRow> {
    slim_with(reader, false)
}

/// [`slim_row`] for a Codex rollout row: keeps `type`, `timestamp` and, of `payload` (and of a
/// pre-envelope bare message), what `codex::classify_codex` reads: `type`, `role`, `kind`,
/// `message` (text), non-empty `images`/`local_images` (as one null), `item.type` and the
/// parts of `content` / `item.content` (`type`, `text`).
pub fn slim_codex_row(reader: impl Read) -> std::io::Result<SlimRow> {
    slim_with(reader, true)
}

pub(super) fn slim_with(reader: impl Read, codex: bool) -> std::io::Result<SlimRow> {
    let mut p = Parser {
        codex,
        src: Hashing {
            inner: reader,
            hash: Sha256::new(),
        },
        buf: vec![0; 64 * 1024],
        pos: 0,
        len: 0,
        depth: 0,
        budget: ROW_BUDGET,
        io_error: None,
    };
    let row = p.document();
    if let Some(e) = p.io_error.take() {
        return Err(e);
    }
    // Read (and so hash) what a line rejected early left unread: the id covers the whole line.
    let mut rest = [0u8; 8192];
    loop {
        match p.src.read(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let row_id = row_id_of_digest(&p.src.hash.finalize());
    Ok(SlimRow { row, row_id })
}

/// The row id a node gives a row without uuid: `row:` + the first 32 lowercase hex digits of
/// the SHA-256 `digest` of its line. The one spelling of it, for short and streamed rows alike.
pub(crate) fn row_id_of_digest(digest: &[u8]) -> String {
    format!(
        "row:{}",
        aware_core::hex::lower(digest.get(..16).unwrap_or(digest))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claude::classify::{classify, normalise, RowClass};
    use proptest::prelude::*;
    use serde_json::json;

    /// The classifier's verdict, texts compared as echoes and the queued memory compare them.
    fn verdict(row: &Value) -> (u8, String, Option<i64>) {
        match classify(row) {
            RowClass::Human {
                user_text,
                occurred_at,
            } => (1, normalise(&user_text), occurred_at),
            RowClass::QueuedPrompt { user_text } => (2, normalise(&user_text), None),
            RowClass::QueueRemove => (3, String::new(), None),
            RowClass::NotHuman => (0, String::new(), None),
        }
    }

    fn slim(line: &str) -> Option<Value> {
        slim_row(line.as_bytes()).unwrap().row
    }

    /// The classifier's verdict on the slim row equals its verdict on the full row.
    fn same_verdict(line: &str) {
        let full = serde_json::from_str::<Value>(line).ok();
        let slim = slim(line);
        assert_eq!(full.is_some(), slim.is_some(), "validity of {line:.200}");
        if let (Some(full), Some(slim)) = (full, slim) {
            assert_eq!(verdict(&full), verdict(&slim), "{line:.300}\nslim {slim}");
        }
    }

    #[test]
    fn keeps_what_the_classifier_reads() {
        let row = json!({"parentUuid": "p", "isSidechain": false, "type": "user",
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "is_error": true,
                 "content": [{"type": "text", "text": "rejected. To tell you how to proceed, the user said:\nuse tabs"}]},
                {"type": "text", "text": "  <ide_opened_file>x</ide_opened_file>"},
                {"type": "image", "source": {"data": "AAAA"}}]},
            "uuid": "u-1", "timestamp": "2026-01-01T00:00:01.000Z", "cwd": "/w",
            "origin": {"kind": "human", "x": 1}, "agentId": null});
        let s = slim(&row.to_string()).unwrap();
        assert_eq!(
            s,
            json!({"isSidechain": false, "type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "is_error": true,
                 "content": [{"type": "text", "text": "the user said:\nuse tabs"}]},
                {"type": "text", "text": "<ide_opened_file>x</ide_opened_file>"},
                {"type": "image"}]},
                "uuid": "u-1", "timestamp": "2026-01-01T00:00:01.000Z",
                "origin": {"kind": "human"}, "agentId": true})
        );
        assert_eq!(verdict(&s), verdict(&row));
    }

    #[test]
    fn row_id_hashes_the_whole_line() {
        let line = r#"{"type":"queue-operation","operation":"enqueue","content":"x"}"#;
        let got = slim_row(line.as_bytes()).unwrap().row_id;
        let want: String = Sha256::digest(line.as_bytes())
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, format!("row:{want}"));
        // Also for a line that is not JSON, read to its end.
        let bad = "{\"a\": nope and more bytes";
        let got = slim_row(bad.as_bytes()).unwrap();
        assert_eq!(got.row, None);
        let want: String = Sha256::digest(bad.as_bytes())
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got.row_id, format!("row:{want}"));
    }

    #[test]
    fn validity_matches_serde_json() {
        for line in [
            r#"{"a":1}"#,
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":01}"#,
            r#"{"a":1e400}"#,
            r#"{"a":-0.5e-3}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"tab	raw"}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":tru}"#,
            r#"  {"a":null}  "#,
            r#""just a string""#,
            r#"[1,2]"#,
            "",
            "   ",
            r#"{"a" 1}"#,
            r#"{"a":1 "b":2}"#,
            r#"{1:2}"#,
        ] {
            same_verdict(line);
        }
        let deep_ok = format!("{}{}", "[".repeat(127), "]".repeat(127));
        let deep_bad = format!("{}{}", "[".repeat(128), "]".repeat(128));
        for line in [deep_ok, deep_bad] {
            assert_eq!(
                serde_json::from_str::<Value>(&line).is_ok(),
                slim(&line).is_some()
            );
        }
        assert_eq!(slim_row(&b"{\"a\":\"\xff\"}"[..]).unwrap().row, None);
    }

    #[test]
    fn long_texts_keep_their_head_and_normalised_prefix() {
        let text = format!("   Caveat:  {}{}", "word ".repeat(200_000), "END");
        let row = json!({"type": "user", "message": {"role": "user", "content": text}});
        let s = slim(&row.to_string()).unwrap();
        let kept = s["message"]["content"].as_str().unwrap();
        assert!(kept.starts_with("Caveat:  word"));
        assert!(kept.ends_with('\u{2026}'));
        assert!(kept.len() <= TEXT_CAP + 4);
        // Cut: the same class; the text is the kept prefix.
        assert_eq!(verdict(&s).0, verdict(&row).0);

        // Whitespace runs past the head collapse, so `normalise` agrees with the full text.
        let spaced = format!(
            "{} a{}b   \n\n  c",
            "x".repeat(RAW_HEAD),
            " ".repeat(3_000_000)
        );
        let row = json!({"type": "user", "message": {"role": "user", "content": spaced}});
        let s = slim(&row.to_string()).unwrap();
        let kept = s["message"]["content"].as_str().unwrap();
        assert_eq!(
            crate::claude::classify::normalise(kept),
            crate::claude::classify::normalise(&spaced)
        );
        assert!(!kept.ends_with('\u{2026}'));
    }

    #[test]
    fn feedback_is_found_anywhere_in_a_long_tool_result() {
        let result = format!(
            "{}the user said: no\nthe user said:\r\nkeep going",
            "log ".repeat(300_000)
        );
        let row = json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "content": result, "is_error": true}]}});
        let s = slim(&row.to_string()).unwrap();
        assert_eq!(verdict(&s), verdict(&row));
        assert!(
            matches!(classify(&s), RowClass::Human { user_text, .. } if user_text == "keep going")
        );
    }

    #[test]
    fn many_blocks_stay_bounded_and_keep_their_verdict() {
        let mut blocks: Vec<Value> = (0..40_000)
            .map(|i| json!({"type": "text", "text": format!("<system-reminder>{i}</system-reminder>")}))
            .collect();
        blocks.push(json!({"type": "text", "text": "typed at the end"}));
        let row = json!({"type": "user", "message": {"role": "user", "content": blocks}});
        let line = row.to_string();
        let s = slim(&line).unwrap();
        assert!(s.to_string().len() < ROW_BUDGET + 64 * 1024);
        assert_eq!(verdict(&s), verdict(&row));
        let tools: Vec<Value> = (0..40_000)
            .map(|_| json!({"type": "tool_result", "content": "ok"}))
            .chain([json!({"type": "image"})])
            .collect();
        let row = json!({"type": "user", "message": {"role": "user", "content": tools}});
        same_verdict(&row.to_string());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            prop::sample::select(vec![
                "user",
                "text",
                "tool_result",
                "image",
                "enqueue",
                "queue-operation",
                "the user said:\nretry",
                " <command-name>x",
                "(no content)",
                "  ",
                "task-notification",
            ])
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            let key = prop::sample::select(vec![
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
                "origin",
                "kind",
                "timestamp",
                "operation",
                "uuid",
                "isCompactSummary",
                "isVisibleInTranscriptOnly",
                "other",
            ]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((key, inner), 0..7).prop_map(|pairs| Value::Object(
                    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    fn codex_verdict(row: &Value) -> (u8, String, Option<i64>) {
        match crate::codex::classify::classify_codex(row) {
            RowClass::Human {
                user_text,
                occurred_at,
            } => (1, normalise(&user_text), occurred_at),
            _ => (0, String::new(), None),
        }
    }

    fn arb_codex() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            prop::sample::select(vec![
                "event_msg",
                "response_item",
                "message",
                "user_message",
                "item_completed",
                "UserMessage",
                "user",
                "text",
                "input_text",
                "input_image",
                "image",
                "local_image",
                "plain",
                "<environment_context>",
                "2026-01-01T00:00:01.000Z",
            ])
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            let key = prop::sample::select(vec![
                "type",
                "payload",
                "message",
                "role",
                "content",
                "text",
                "kind",
                "item",
                "images",
                "local_images",
                "timestamp",
                "other",
            ]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((key, inner), 0..7).prop_map(|pairs| Value::Object(
                    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    #[test]
    fn codex_slim_rows_keep_a_huge_prompt_and_drop_a_huge_image() {
        let text = "typed ".repeat(1 << 20);
        let line = json!({"timestamp": "2026-01-01T00:00:01.000Z", "type": "event_msg",
            "payload": {"type": "user_message", "message": text, "images": ["data:image/png;base64,AAAA"]}})
        .to_string();
        let slim = slim_codex_row(line.as_bytes()).unwrap().row.unwrap();
        assert!(slim.to_string().len() < 600 * 1024);
        assert_eq!(codex_verdict(&slim).0, 1);
        let full: Value = serde_json::from_str(&line).unwrap();
        assert!(codex_verdict(&full)
            .1
            .starts_with(&codex_verdict(&slim).1[..1000]));
    }

    proptest! {
        #[test]
        fn codex_slim_rows_classify_like_full_rows(v in arb_codex()) {
            let line = v.to_string();
            let full = serde_json::from_str::<Value>(&line).ok();
            let slim = slim_codex_row(line.as_bytes()).unwrap().row;
            prop_assert_eq!(full.is_some(), slim.is_some());
            if let (Some(full), Some(slim)) = (full, slim) {
                prop_assert_eq!(codex_verdict(&full), codex_verdict(&slim));
            }
        }
    }

    proptest! {
        #[test]
        fn slim_rows_classify_like_full_rows(v in arb_json()) {
            let line = v.to_string();
            let full = serde_json::from_str::<Value>(&line).ok();
            let slim = slim(&line);
            prop_assert_eq!(full.is_some(), slim.is_some());
            if let (Some(full), Some(slim)) = (full, slim) {
                prop_assert_eq!(verdict(&full), verdict(&slim));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let r = slim_row(bytes.as_slice()).unwrap();
            let valid = std::str::from_utf8(&bytes).ok().and_then(|s| serde_json::from_str::<Value>(s).ok()).is_some();
            prop_assert_eq!(r.row.is_some(), valid);
        }
    }
}
