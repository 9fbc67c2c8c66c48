//! The tool-result probe of the Claude window scan: decides, from the bytes of a line and without
//! building anything, that a `user` row holds only tool results (04 §9 rule 4 gives it no
//! candidate), so the scan never parses it.
//!
//! Such rows are most of a transcript's bytes (58 % of the vendored fixtures), and nearly all of
//! those bytes are string contents (tool output, twice: in the content block and in
//! `toolUseResult`). A typed serde probe walked them with serde's 8-byte string skip; this walker
//! skips a string with `memchr2` (vectorised) and only looks at the bytes between strings.
//!
//! The answer is trusted only for a line that is valid JSON: the full parse consumes any other
//! line without counting it, so a skip decided on invalid JSON skips what would not count. Every
//! case the walker does not handle exactly as the full parse would (a key or deciding value with
//! an escape, a repeated deciding key, a value of an unexpected type) answers `false`: "parse
//! it".

/// Whether a line is, for certain, a `user` row whose content blocks hold at least one tool
/// result, no `text` block and no `is_error: true` result (no rejection feedback): such a row is
/// `NotHuman`. `false` means "parse it".
pub(crate) fn is_tool_results_only(line: &[u8]) -> bool {
    let mut walk = Walk { bytes: line, at: 0 };
    walk.row().unwrap_or(false)
}

/// The deciding content of one block.
#[derive(Default)]
struct Block {
    tool_result: bool,
    text: bool,
    is_error: bool,
}

/// A cursor over the line; every method answers `None` for "not a case handled here".
struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    fn row(&mut self) -> Option<bool> {
        let (mut user, mut seen_type, mut blocks) = (false, false, None);
        self.object(|walk, key| {
            match key {
                b"type" => {
                    if std::mem::replace(&mut seen_type, true) {
                        return None; // the full parse keeps the last one
                    }
                    user = walk.plain_string()? == b"user";
                }
                b"message" => {
                    if blocks.is_some() {
                        return None;
                    }
                    blocks = Some(walk.message()?);
                }
                _ => walk.skip_value()?,
            }
            Some(())
        })?;
        Some(user && blocks == Some(true))
    }

    /// A `message` object: whether its `content` is an array of blocks with a tool result, no
    /// `text` block and no failed result.
    fn message(&mut self) -> Option<bool> {
        let mut verdict = None;
        self.object(|walk, key| {
            if key != b"content" {
                return walk.skip_value();
            }
            if verdict.is_some() {
                return None;
            }
            verdict = Some(walk.blocks()?);
            Some(())
        })?;
        verdict
    }

    fn blocks(&mut self) -> Option<bool> {
        self.skip_ws();
        self.eat(b'[')?;
        let mut tool_result = false;
        self.skip_ws();
        if self.eat(b']').is_some() {
            return Some(false);
        }
        loop {
            let block = self.block()?;
            if block.text || (block.tool_result && block.is_error) {
                return Some(false);
            }
            tool_result |= block.tool_result;
            self.skip_ws();
            match self.next()? {
                b',' => {}
                b']' => return Some(tool_result),
                _ => return None,
            }
        }
    }

    fn block(&mut self) -> Option<Block> {
        let mut block = Block::default();
        let (mut seen_type, mut seen_error) = (false, false);
        self.object(|walk, key| {
            match key {
                b"type" => {
                    if std::mem::replace(&mut seen_type, true) {
                        return None;
                    }
                    let kind = walk.plain_string()?;
                    block.tool_result = kind == b"tool_result";
                    block.text = kind == b"text";
                }
                b"is_error" => {
                    if std::mem::replace(&mut seen_error, true) {
                        return None;
                    }
                    block.is_error = walk.boolean()?;
                }
                _ => walk.skip_value()?,
            }
            Some(())
        })?;
        Some(block)
    }

    /// Walks an object, calling `field` with the cursor on each value; a key with an escape is
    /// not handled (it may spell a deciding key).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.skip_ws();
        self.eat(b'{')?;
        self.skip_ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.skip_ws();
            let key = self.plain_string()?;
            self.skip_ws();
            self.eat(b':')?;
            self.skip_ws();
            field(self, key)?;
            self.skip_ws();
            match self.next()? {
                b',' => {}
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// A string without escapes, its contents; any escape is not handled.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = self.bytes.get(self.at..)?;
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest.get(end) != Some(&b'"') {
            return None;
        }
        self.at += end + 1;
        rest.get(..end)
    }

    fn boolean(&mut self) -> Option<bool> {
        let rest = self.bytes.get(self.at..)?;
        for (word, value) in [(&b"true"[..], true), (b"false", false), (b"null", false)] {
            if rest.starts_with(word) {
                self.at += word.len();
                return Some(value);
            }
        }
        None
    }

    /// Skips one value of any kind: strings with `memchr2`, containers by their depth (the
    /// strings inside them skipped the same way), scalars up to the next delimiter.
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => self.skip_string()?,
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    self.at += 1;
                }
                b'}' | b']' | b',' if depth == 0 => return Some(()),
                _ => self.at += 1,
            }
            if depth == 0 && self.ends_scalar_or_value() {
                return Some(());
            }
        }
    }

    /// After a step of `skip_value` at depth 0: whether the value just ended (a container or
    /// string closed, or a scalar's last byte).
    fn ends_scalar_or_value(&self) -> bool {
        matches!(
            self.bytes.get(self.at),
            None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
        )
    }

    /// Skips a string by its closing quote alone: tool output is dense with escapes (a
    /// backslash every ~20 bytes in the fixtures, a quote every ~40), so stopping only at quotes
    /// halves the searches. A quote is escaped when an odd run of backslashes precedes it: inside
    /// a string every backslash starts an escape of one byte (hex digits after `\u` are never
    /// backslashes), so a run pairs up from its first backslash.
    fn skip_string(&mut self) -> Option<()> {
        let start = self.at + 1; // after the opening quote
        let mut from = start;
        loop {
            let quote = from + memchr::memchr(b'"', self.bytes.get(from..)?)?;
            let run = self
                .bytes
                .get(start..quote)?
                .iter()
                .rev()
                .take_while(|&&b| b == b'\\')
                .count();
            if run % 2 == 0 {
                self.at = quote + 1;
                return Some(());
            }
            from = quote + 1;
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.bytes.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    fn next(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::claude::classify::{classify, RowClass};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// The typed serde probe the walker replaced: the reference for which rows are skipped.
    #[derive(serde::Deserialize)]
    struct UserRowProbe<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        message: Option<MessageProbe<'a>>,
    }

    #[derive(serde::Deserialize)]
    struct MessageProbe<'a> {
        #[serde(borrow)]
        content: Option<Vec<BlockProbe<'a>>>,
    }

    #[derive(serde::Deserialize)]
    struct BlockProbe<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
        is_error: Option<bool>,
    }

    fn typed_probe(line: &[u8]) -> bool {
        let Ok(row) = serde_json::from_slice::<UserRowProbe>(line) else {
            return false;
        };
        let blocks = row.message.and_then(|m| m.content).unwrap_or_default();
        row.kind.as_deref() == Some("user")
            && blocks
                .iter()
                .any(|b| b.kind.as_deref() == Some("tool_result"))
            && !blocks.iter().any(|b| {
                b.kind.as_deref() == Some("text")
                    || (b.kind.as_deref() == Some("tool_result") && b.is_error == Some(true))
            })
    }

    /// On the vendored transcripts the walker skips exactly the rows the typed probe skipped,
    /// so the scan's fast path still takes every tool-output row.
    #[test]
    fn walker_skips_the_fixture_rows_the_typed_probe_skipped() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-code");
        let mut skipped = 0;
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let bytes = std::fs::read(entry.path()).unwrap();
            for line in bytes.split(|&b| b == b'\n') {
                let walker = is_tool_results_only(line);
                assert_eq!(
                    walker,
                    typed_probe(line),
                    "{}",
                    String::from_utf8_lossy(line)
                );
                skipped += usize::from(walker);
            }
        }
        assert!(skipped > 100, "only {skipped} rows skipped");
    }

    /// Strings the walker must step over exactly: escaped quotes and backslashes, and text that
    /// would close the row early (and so hide a later text block) if an escaped quote ended a
    /// string.
    pub(crate) const TRICKY: [&str; 7] = [
        "plain output",
        "\"}]}}",
        "\\",
        "\\\"}],\"type\":\"text\"",
        "{\"type\":\"text\",\"text\":\"x\"}",
        "line\nbreak \u{e9}\u{1f600} \u{1}",
        "",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Generated rows (valid JSON, plain keys, tricky strings before and after the deciding
        /// fields, compact or pretty): the walker answers exactly as the typed probe, and a row
        /// it skips classifies `NotHuman` by the full parse.
        #[test]
        fn walker_agrees_with_the_typed_probe_and_the_classifier(
            kind in prop::sample::select(vec!["user", "assistant"]),
            blocks in prop::collection::vec((
                prop::sample::select(vec!["tool_result", "text", "image"]),
                prop::sample::select(vec![None, Some(true), Some(false)]),
                prop::sample::select(TRICKY.to_vec()),
                prop::sample::select(TRICKY.to_vec()),
            ), 0..4),
            extras in prop::collection::vec((
                prop::sample::select(vec!["a_before", "toolUseResult", "z_after"]),
                prop::sample::select(TRICKY.to_vec()),
            ), 0..3),
            content_is_text in prop::sample::select(vec![None, Some(TRICKY[1]), Some(TRICKY[4])]),
            pretty in any::<bool>(),
        ) {
            let blocks: Vec<Value> = blocks
                .iter()
                .map(|(kind, is_error, before, after)| {
                    let mut block = json!({"content": before, "type": kind, "zz": [after, {"k": after}]});
                    if let (Some(e), Some(obj)) = (is_error, block.as_object_mut()) {
                        obj.insert("is_error".into(), json!(e));
                    }
                    block
                })
                .collect();
            let content = content_is_text.map_or(Value::Array(blocks), Value::from);
            let mut row = json!({"type": kind, "message": {"role": "user", "content": content}});
            if let Some(obj) = row.as_object_mut() {
                for (key, text) in extras {
                    obj.insert(key.into(), json!({"nested": [text, {"type": "text", "text": text}]}));
                }
            }
            let line = if pretty {
                serde_json::to_string_pretty(&row).unwrap()
            } else {
                row.to_string()
            };
            let skipped = is_tool_results_only(line.as_bytes());
            prop_assert_eq!(skipped, typed_probe(line.as_bytes()), "{}", line);
            if skipped {
                prop_assert_eq!(classify(&row), RowClass::NotHuman, "{}", line);
            }
        }
    }

    #[test]
    fn escapes_repeats_and_odd_shapes_are_parsed_in_full() {
        let parse_it: [&[u8]; 9] = [
            br#"{"t\u0079pe":"user","message":{"content":[{"type":"tool_result"}]}}"#,
            br#"{"type":"\u0075ser","message":{"content":[{"type":"tool_result"}]}}"#,
            br#"{"type":"user","message":{"c\u006fntent":[{"type":"tool_result"}]}}"#,
            br#"{"type":"user","message":{"content":[{"type":"tool_result","type":"text"}]}}"#,
            br#"{"type":"user","message":{"content":[{"type":"tool_result"}]},"message":{"content":"hi"}}"#,
            br#"{"type":"user","message":{"content":[["tool_result",false]]}}"#,
            br#"{"type":"user","message":{"content":[{"type":"tool_result","is_error":1}]}}"#,
            br#"{"type":"user","message":{"content":[]}}"#,
            br#"{"type":"user","message":{"content":[{"type":"tool_result"}]"#,
        ];
        for line in parse_it {
            assert!(
                !is_tool_results_only(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        let skip_it: [&[u8]; 3] = [
            br#" { "type" : "user" , "message" : { "content" : [ { "type" : "tool_result" , "is_error" : false } ] } } "#,
            br#"{"x":"\\","y":"\"}],\"type\":\"text\"","type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":"x"}]}]},"n":[1,{"a":[]},-2.5e3,true,null]}"#,
            br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","is_error":null},{"type":"image"}]},"z":0}"#,
        ];
        for line in skip_it {
            assert!(
                is_tool_results_only(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }
}
