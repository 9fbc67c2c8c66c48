//! Builders of Claude Code transcript rows (one JSON object a line) and of the keys and link
//! hashes the upstream conventions derive from a thread, computed independently of the engine.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Thread T of the upstream conventions.
pub const THREAD_T: &str = "0b7c2a4e-5d6f-4a8b-9c0d-1e2f3a4b5c6d";

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The adopted key of a local thread (04 §3 step 4): `agent:main:claude:` + sha256 hex of it.
pub fn key_of(thread: &str) -> String {
    format!("agent:main:claude:{}", sha256_hex(thread.as_bytes()))
}

/// `sourceKey16` of a local link (04 §5): the transcript's canonical path in the reference.
pub fn local_source16(file: &Path, thread: &str) -> String {
    let abs = std::fs::canonicalize(file).expect("transcript file exists");
    let ref_json = json!({"filePath": abs.to_string_lossy()}).to_string();
    let input = format!("gateway:local\0{thread}\0{ref_json}");
    sha256_hex(input.as_bytes())[..16].to_string()
}

/// `sourceKey16` of the link of `thread` on paired node `node_id` (04 §5).
pub fn node_source16(node_id: &str, thread: &str) -> String {
    let ref_json = format!("{{\"nodeId\":\"{node_id}\",\"threadId\":\"{thread}\"}}");
    sha256_hex(format!("node:{node_id}\0{thread}\0{ref_json}").as_bytes())[..16].to_string()
}

/// A fresh, process-unique row uuid.
pub fn new_uuid() -> String {
    static N: AtomicU64 = AtomicU64::new(1);
    format!(
        "00000000-0000-4000-8000-{:012}",
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One transcript line (with its `\n`).
pub fn line(v: &Value) -> String {
    format!("{v}\n")
}

/// A human user row with uuid `uuid`.
pub fn user_row_with(uuid: &str, text: &str, ts: &str) -> Value {
    json!({"type":"user","uuid":uuid,"timestamp":ts,"message":{"role":"user","content":text}})
}

/// An assistant text row with uuid `uuid`.
pub fn assistant_row_with(uuid: &str, text: &str) -> Value {
    json!({"type":"assistant","uuid":uuid,"timestamp":"2026-01-01T00:00:11.000Z",
        "message":{"role":"assistant","content":[{"type":"text","text":text}]}})
}

/// A human user row with a fresh uuid.
pub fn user_row(text: &str, ts: &str) -> Value {
    user_row_with(&new_uuid(), text, ts)
}

/// An assistant text row with a fresh uuid.
pub fn assistant_row(text: &str) -> Value {
    assistant_row_with(&new_uuid(), text)
}

/// The 3 rows of the conventions: user `hi`, assistant `hello`, user `thanks` (fresh uuids).
pub fn initial_transcript() -> String {
    let mut s = line(&user_row("hi", "2025-12-31T23:00:00.000Z"));
    s.push_str(&line(&assistant_row("hello")));
    s.push_str(&line(&user_row("thanks", "2025-12-31T23:00:02.000Z")));
    s
}

/// The 3 rows of the conventions with fixed uuids `u-hi`, `a-hello`, `u-thanks` (a peer that
/// reports the newest row's uuid can then be checked against `u-thanks`).
pub fn initial_transcript_fixed() -> String {
    let mut s = line(&user_row_with("u-hi", "hi", "2025-12-31T23:00:00.000Z"));
    s.push_str(&line(&assistant_row_with("a-hello", "hello")));
    s.push_str(&line(&user_row_with(
        "u-thanks",
        "thanks",
        "2025-12-31T23:00:02.000Z",
    )));
    s
}

/// An assistant row of exactly `total` bytes, newline included.
pub fn assistant_row_of(total: usize) -> String {
    let empty = line(&assistant_row(""));
    assert!(total > empty.len());
    let row = line(&assistant_row(&"x".repeat(total - empty.len())));
    assert_eq!(row.len(), total);
    row
}

/// A human row `text` padded (an extra field) to exactly `total` bytes, newline included.
pub fn user_row_of(text: &str, ts: &str, total: usize) -> String {
    let mut v = user_row(text, ts);
    v["pad"] = json!("");
    let base = line(&v).len();
    assert!(total > base);
    v["pad"] = json!("p".repeat(total - base));
    let row = line(&v);
    assert_eq!(row.len(), total);
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_the_conventions() {
        // A and NA of the upstream conventions (S114, S144).
        assert_eq!(
            key_of(THREAD_T),
            "agent:main:claude:5eeb30d272634929ba01f98fd47fd4f114387b26516060195702b36c5ef42975"
        );
        assert_eq!(
            format!(
                "agent:main:claude:{}",
                sha256_hex(format!("node:laptop\0{THREAD_T}").as_bytes())
            ),
            "agent:main:claude:140eae5ade16053d451ec68047fabaea6b71aaaac0232d673187efff3a4752ad"
        );
    }

    #[test]
    fn sized_rows_have_their_size() {
        assert_eq!(assistant_row_of(4096).len(), 4096);
        assert_eq!(
            user_row_of("hi", "2026-01-01T00:00:00.000Z", 5000).len(),
            5000
        );
        assert_eq!(initial_transcript().lines().count(), 3);
    }
}
