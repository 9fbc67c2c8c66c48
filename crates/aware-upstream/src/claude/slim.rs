//! The slim row of the Claude classifier (decision D57): exactly what the rules of 04 §9 read of
//! one row, built either straight from a line's bytes (the window scan) or from a parsed `Value`
//! (node items, the public `classify`), so that one set of rules serves both.
//!
//! The scan's candidate rows used to be parsed into a `Value`: a map, an allocation and a copy
//! for every key and string of the row, most of which the rules never read. Read from the bytes,
//! the row keeps only the deciding values, borrowed from the line where they hold no escape.
//!
//! Reading the bytes must accept and reject exactly the lines a `Value` parse does, and see the
//! values a `Value` would hold. Every value is therefore read through serde_json's
//! `deserialize_any`, the path of a `Value` (string escapes and UTF-8, number range, nesting
//! depth are checked the same way), never through `IgnoredAny`, which checks less. A `Value` keeps
//! the last of repeated keys; the slim read refuses a repeated deciding key instead, and the caller
//! then parses a `Value` (see [`parse_line`]).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What the rules read of a row that is a JSON object.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Row<'a> {
    /// `type`, when it is a string.
    pub(crate) kind: Option<Cow<'a, str>>,
    /// `message`, when it is an object.
    pub(crate) message: Option<Message<'a>>,
    /// Rules 2–3: a sub-agent row, or one marked meta, summary, plan or notification.
    pub(crate) excluded: bool,
    /// `timestamp`, when it is a string.
    pub(crate) timestamp: Option<Cow<'a, str>>,
    /// `operation` (queue rows), when it is a string.
    pub(crate) operation: Option<Cow<'a, str>>,
    /// `content` (queue rows), when it is a string.
    pub(crate) content: Option<Cow<'a, str>>,
}

/// A row's `message` object.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Message<'a> {
    /// `role`, when it is a string.
    pub(crate) role: Option<Cow<'a, str>>,
    pub(crate) content: Content<'a>,
}

/// `message.content`.
#[derive(Debug, Default, PartialEq)]
pub(crate) enum Content<'a> {
    Text(Cow<'a, str>),
    /// The blocks that are objects, in order (a block of any other kind decides nothing).
    Blocks(Vec<Block<'a>>),
    /// Absent, or neither a string nor an array.
    #[default]
    Other,
}

/// One content block that is an object.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Block<'a> {
    /// `type`, when it is a string.
    pub(crate) kind: Option<Cow<'a, str>>,
    /// `text`, when it is a string.
    pub(crate) text: Option<Cow<'a, str>>,
    /// `is_error` is `true` (the JSON boolean, nothing else).
    pub(crate) is_error: bool,
    pub(crate) content: ToolContent<'a>,
}

/// A block's `content` (a tool result's output).
#[derive(Debug, Default, PartialEq)]
pub(crate) enum ToolContent<'a> {
    Text(Cow<'a, str>),
    /// The `text` strings of the parts that are objects holding one, in order.
    Parts(Vec<Cow<'a, str>>),
    /// Absent, or neither a string nor an array.
    #[default]
    Other,
}

impl<'a> Row<'a> {
    /// The row behind a `Value`; `None` when it is not an object (`NotHuman`).
    pub(crate) fn from_value(row: &'a Value) -> Option<Self> {
        let row = row.as_object()?;
        Some(Row {
            kind: string(row.get("type")),
            message: row
                .get("message")
                .and_then(Value::as_object)
                .map(|m| Message {
                    role: string(m.get("role")),
                    content: match m.get("content") {
                        Some(Value::String(text)) => Content::Text(Cow::Borrowed(text)),
                        Some(Value::Array(blocks)) => {
                            Content::Blocks(blocks.iter().filter_map(block_from_value).collect())
                        }
                        _ => Content::Other,
                    },
                }),
            excluded: is_excluded_by_flags(row),
            timestamp: string(row.get("timestamp")),
            operation: string(row.get("operation")),
            content: string(row.get("content")),
        })
    }
}

fn string(value: Option<&Value>) -> Option<Cow<'_, str>> {
    value.and_then(Value::as_str).map(Cow::Borrowed)
}

fn block_from_value(block: &Value) -> Option<Block<'_>> {
    let block = block.as_object()?;
    Some(Block {
        kind: string(block.get("type")),
        text: string(block.get("text")),
        is_error: block.get("is_error").and_then(Value::as_bool) == Some(true),
        content: match block.get("content") {
            Some(Value::String(text)) => ToolContent::Text(Cow::Borrowed(text)),
            Some(Value::Array(parts)) => ToolContent::Parts(
                parts
                    .iter()
                    .filter_map(|part| string(part.get("text")))
                    .collect(),
            ),
            _ => ToolContent::Other,
        },
    })
}

/// Rules 2–3 on a `Value`'s map.
fn is_excluded_by_flags(row: &Map<String, Value>) -> bool {
    let is_true = |key: &str| row.get(key).and_then(Value::as_bool) == Some(true);
    is_true("isSidechain")
        || row.contains_key("agentId")
        || is_true("isMeta")
        || is_true("isCompactSummary")
        || is_true("isVisibleInTranscriptOnly")
        || row.contains_key("planContent")
        || row
            .get("origin")
            .and_then(|origin| origin.get("kind"))
            .and_then(Value::as_str)
            == Some("task-notification")
}

/// Reads one line of a window as the scan does and hands its row to `f`: the slim row when the
/// slim read is sure of it, else the row of a `Value` parse; `None` for a line that is not JSON or
/// not an object (`NotHuman`, consumed without counting).
pub(crate) fn read_line<R>(line: &[u8], f: impl FnOnce(&Row) -> R) -> Option<R> {
    match parse_line(line) {
        Ok(row) => row.map(|row| f(&row)),
        Err(_) => {
            let value = serde_json::from_slice::<Value>(line).ok()?;
            Row::from_value(&value).map(|row| f(&row))
        }
    }
}

/// Reads a line as the slim row: `Ok(None)` when the line is JSON but not an object, an error
/// when it is not JSON **or** when the slim read cannot be sure (a repeated deciding key): on an
/// error the caller parses a `Value`, which decides both cases exactly (and costs a second parse
/// only on such rare lines).
pub(crate) fn parse_line(line: &[u8]) -> Result<Option<Row<'_>>, NotSlim> {
    // One pass over the line instead of serde_json's check of each string (one call per key and
    // value): a line is JSON only if it is UTF-8 (the bytes between strings must be ASCII), and
    // serde_json does not check a `&str`'s strings again.
    let text = std::str::from_utf8(line).map_err(|_| NotSlim)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let row = Read(RowShape).deserialize(&mut de).map_err(|_| NotSlim)?;
    de.end().map_err(|_| NotSlim)?;
    Ok(row)
}

/// The slim read could not read a line: it is not JSON, or it repeats a deciding key.
#[derive(Debug)]
pub(crate) struct NotSlim;

/// How one position of the row is read: each JSON kind either gives a value here or is checked
/// and dropped (`other`).
trait Shape<'de>: Sized {
    type Out;
    fn other(self) -> Self::Out;
    fn string(self, text: Cow<'de, str>) -> Self::Out {
        let _ = text;
        self.other()
    }
    /// A string with an escape, unescaped into serde_json's scratch buffer: copied only by the
    /// shapes that keep it.
    fn escaped(self, text: &str) -> Self::Out {
        self.string(Cow::Owned(text.to_owned()))
    }
    fn boolean(self, value: bool) -> Self::Out {
        let _ = value;
        self.other()
    }
    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        while map.next_key_seed(Read(Skip))?.is_some() {
            map.next_value_seed(Read(Skip))?;
        }
        Ok(self.other())
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Out, A::Error> {
        while seq.next_element_seed(Read(Skip))?.is_some() {}
        Ok(self.other())
    }
}

/// The one visitor, over a [`Shape`]; always entered through `deserialize_any`.
struct Read<S>(S);

impl<'de, S: Shape<'de>> DeserializeSeed<'de> for Read<S> {
    type Value = S::Out;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Out, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, S: Shape<'de>> Visitor<'de> for Read<S> {
    type Value = S::Out;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<S::Out, E> {
        Ok(self.0.boolean(v))
    }
    fn visit_i64<E>(self, _: i64) -> Result<S::Out, E> {
        Ok(self.0.other())
    }
    fn visit_u64<E>(self, _: u64) -> Result<S::Out, E> {
        Ok(self.0.other())
    }
    fn visit_f64<E>(self, _: f64) -> Result<S::Out, E> {
        Ok(self.0.other())
    }
    fn visit_unit<E>(self) -> Result<S::Out, E> {
        Ok(self.0.other())
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<S::Out, E> {
        Ok(self.0.string(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<S::Out, E> {
        Ok(self.0.escaped(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Out, A::Error> {
        self.0.map(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<S::Out, A::Error> {
        self.0.seq(seq)
    }
}

/// Any value, checked and dropped.
struct Skip;

impl<'de> Shape<'de> for Skip {
    type Out = ();
    fn other(self) {}
    fn escaped(self, _: &str) {}
}

/// A scalar the rules compare: a string, or `true`.
#[derive(PartialEq)]
enum Scalar<'a> {
    Str(Cow<'a, str>),
    True,
    Other,
}

impl<'a> Scalar<'a> {
    fn into_str(self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Str(text) => Some(text),
            _ => None,
        }
    }
}

struct ScalarShape;

impl<'de> Shape<'de> for ScalarShape {
    type Out = Scalar<'de>;
    fn other(self) -> Scalar<'de> {
        Scalar::Other
    }
    fn string(self, text: Cow<'de, str>) -> Scalar<'de> {
        Scalar::Str(text)
    }
    fn boolean(self, value: bool) -> Scalar<'de> {
        if value {
            Scalar::True
        } else {
            Scalar::Other
        }
    }
}

/// The keys the rules read, at any depth; every other key is `Other`.
#[derive(Clone, Copy, PartialEq)]
enum Key {
    Type,
    Message,
    Role,
    Content,
    Text,
    IsError,
    Timestamp,
    Operation,
    IsSidechain,
    AgentId,
    IsMeta,
    IsCompactSummary,
    IsVisibleInTranscriptOnly,
    PlanContent,
    Origin,
    Kind,
    Other,
}

struct KeyShape;

impl<'de> Shape<'de> for KeyShape {
    type Out = Key;
    fn other(self) -> Key {
        Key::Other
    }
    fn string(self, text: Cow<'de, str>) -> Key {
        self.escaped(&text)
    }
    fn escaped(self, text: &str) -> Key {
        match text {
            "type" => Key::Type,
            "message" => Key::Message,
            "role" => Key::Role,
            "content" => Key::Content,
            "text" => Key::Text,
            "is_error" => Key::IsError,
            "timestamp" => Key::Timestamp,
            "operation" => Key::Operation,
            "isSidechain" => Key::IsSidechain,
            "agentId" => Key::AgentId,
            "isMeta" => Key::IsMeta,
            "isCompactSummary" => Key::IsCompactSummary,
            "isVisibleInTranscriptOnly" => Key::IsVisibleInTranscriptOnly,
            "planContent" => Key::PlanContent,
            "origin" => Key::Origin,
            "kind" => Key::Kind,
            _ => Key::Other,
        }
    }
}

/// The deciding keys one object has shown; a second one is refused, since a `Value` would keep
/// the last while the slim row has already read the first.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first<E: de::Error>(&mut self, key: Key) -> Result<(), E> {
        let bit = 1u32 << (key as u32);
        if self.0 & bit != 0 {
            return Err(E::custom("a repeated key the rules read"));
        }
        self.0 |= bit;
        Ok(())
    }
}

/// Reads an object's entries, giving each key the rules read (once) to `field`, which must read
/// its value; every other value is checked and dropped.
fn entries<'de, A: MapAccess<'de>>(
    mut map: A,
    mut field: impl FnMut(Key, &mut A) -> Result<bool, A::Error>,
) -> Result<(), A::Error> {
    let mut seen = Seen::default();
    while let Some(key) = map.next_key_seed(Read(KeyShape))? {
        if key != Key::Other && field(key, &mut map)? {
            seen.first::<A::Error>(key)?;
        } else {
            map.next_value_seed(Read(Skip))?;
        }
    }
    Ok(())
}

fn scalar<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Scalar<'de>, A::Error> {
    map.next_value_seed(Read(ScalarShape))
}

struct RowShape;

impl<'de> Shape<'de> for RowShape {
    type Out = Option<Row<'de>>;
    fn other(self) -> Self::Out {
        None
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error> {
        let mut row = Row::default();
        entries(map, |key, map| {
            match key {
                Key::Type => row.kind = scalar(map)?.into_str(),
                Key::Message => row.message = map.next_value_seed(Read(MessageShape))?,
                Key::Timestamp => row.timestamp = scalar(map)?.into_str(),
                Key::Operation => row.operation = scalar(map)?.into_str(),
                Key::Content => row.content = scalar(map)?.into_str(),
                Key::IsSidechain
                | Key::IsMeta
                | Key::IsCompactSummary
                | Key::IsVisibleInTranscriptOnly => row.excluded |= scalar(map)? == Scalar::True,
                Key::AgentId | Key::PlanContent => {
                    map.next_value_seed(Read(Skip))?;
                    row.excluded = true;
                }
                Key::Origin => row.excluded |= map.next_value_seed(Read(OriginShape))?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(Some(row))
    }
}

/// `origin`: whether it is an object whose `kind` is `task-notification`.
struct OriginShape;

impl<'de> Shape<'de> for OriginShape {
    type Out = bool;
    fn other(self) -> bool {
        false
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        let mut notification = false;
        entries(map, |key, map| {
            if key != Key::Kind {
                return Ok(false);
            }
            notification = scalar(map)?.into_str().as_deref() == Some("task-notification");
            Ok(true)
        })?;
        Ok(notification)
    }
}

struct MessageShape;

impl<'de> Shape<'de> for MessageShape {
    type Out = Option<Message<'de>>;
    fn other(self) -> Self::Out {
        None
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error> {
        let mut message = Message::default();
        entries(map, |key, map| {
            match key {
                Key::Role => message.role = scalar(map)?.into_str(),
                Key::Content => message.content = map.next_value_seed(Read(ContentShape))?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(Some(message))
    }
}

struct ContentShape;

impl<'de> Shape<'de> for ContentShape {
    type Out = Content<'de>;
    fn other(self) -> Content<'de> {
        Content::Other
    }
    fn string(self, text: Cow<'de, str>) -> Content<'de> {
        Content::Text(text)
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content<'de>, A::Error> {
        let mut blocks = Vec::new();
        while let Some(block) = seq.next_element_seed(Read(BlockShape))? {
            blocks.extend(block);
        }
        Ok(Content::Blocks(blocks))
    }
}

struct BlockShape;

impl<'de> Shape<'de> for BlockShape {
    type Out = Option<Block<'de>>;
    fn other(self) -> Self::Out {
        None
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error> {
        let mut block = Block::default();
        entries(map, |key, map| {
            match key {
                Key::Type => block.kind = scalar(map)?.into_str(),
                Key::Text => block.text = scalar(map)?.into_str(),
                Key::IsError => block.is_error = scalar(map)? == Scalar::True,
                Key::Content => block.content = map.next_value_seed(Read(ToolContentShape))?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(Some(block))
    }
}

struct ToolContentShape;

impl<'de> Shape<'de> for ToolContentShape {
    type Out = ToolContent<'de>;
    fn other(self) -> ToolContent<'de> {
        ToolContent::Other
    }
    fn string(self, text: Cow<'de, str>) -> ToolContent<'de> {
        ToolContent::Text(text)
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolContent<'de>, A::Error> {
        let mut parts = Vec::new();
        while let Some(text) = seq.next_element_seed(Read(PartShape))? {
            parts.extend(text);
        }
        Ok(ToolContent::Parts(parts))
    }
}

/// One part of a tool result's content list: its `text`, when it is an object holding a string.
struct PartShape;

impl<'de> Shape<'de> for PartShape {
    type Out = Option<Cow<'de, str>>;
    fn other(self) -> Self::Out {
        None
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error> {
        let mut text = None;
        entries(map, |key, map| {
            if key != Key::Text {
                return Ok(false);
            }
            text = scalar(map)?.into_str();
            Ok(true)
        })?;
        Ok(text)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::claude::classify::{classify, classify_row, row_timestamp_ms, RowClass};
    use crate::claude::probe::tests::TRICKY;
    use crate::claude::scan::tests::{arb_row, KEYS, WORDS};
    use proptest::prelude::*;

    /// The classifier on `Value` the slim row replaced, kept verbatim as the reference: the
    /// scan must decide every line as it did.
    mod reference {
        use crate::claude::classify::{
            is_bare_slash_command, is_ide_context, is_machine_text, parse_rfc3339_ms,
            text_after_user_said, RowClass,
        };
        use serde_json::{Map, Value};

        pub(crate) fn classify(row: &Value) -> RowClass {
            let Some(row) = row.as_object() else {
                return RowClass::NotHuman;
            };
            match row.get("type").and_then(Value::as_str) {
                Some("user") => classify_user(row),
                Some("queue-operation") => classify_queue_operation(row),
                _ => RowClass::NotHuman,
            }
        }

        fn classify_user(row: &Map<String, Value>) -> RowClass {
            let Some(message) = row.get("message").and_then(Value::as_object) else {
                return RowClass::NotHuman;
            };
            if message.get("role").and_then(Value::as_str) != Some("user")
                || is_excluded_by_flags(row)
            {
                return RowClass::NotHuman;
            }
            let mut candidates: Vec<String> = Vec::new();
            let mut has_image = false;
            let mut has_tool_result = false;
            match message.get("content") {
                Some(Value::String(text)) => candidates.push(text.clone()),
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        match block.get("type").and_then(Value::as_str) {
                            Some("tool_result") => {
                                has_tool_result = true;
                                if let Some(feedback) = rejection_feedback(block) {
                                    candidates.push(feedback);
                                }
                            }
                            Some("text") => {
                                if let Some(text) = block.get("text").and_then(Value::as_str) {
                                    if !is_ide_context(text) {
                                        candidates.push(text.to_owned());
                                    }
                                }
                            }
                            Some("image") => has_image = true,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
            candidates.retain(|c| !c.trim().is_empty());
            if candidates.is_empty() && (has_tool_result || !has_image) {
                return RowClass::NotHuman;
            }
            candidates.retain(|c| !is_machine_text(c));
            if candidates.is_empty() && !has_image {
                return RowClass::NotHuman;
            }
            RowClass::Human {
                user_text: candidates.join("\n"),
                occurred_at: row_timestamp_ms(row),
            }
        }

        fn classify_queue_operation(row: &Map<String, Value>) -> RowClass {
            match row.get("operation").and_then(Value::as_str) {
                Some("remove") => RowClass::QueueRemove,
                Some("enqueue") => {
                    let Some(content) = row.get("content").and_then(Value::as_str) else {
                        return RowClass::NotHuman;
                    };
                    if is_excluded_by_flags(row)
                        || content.trim().is_empty()
                        || is_machine_text(content)
                        || is_bare_slash_command(content)
                    {
                        return RowClass::NotHuman;
                    }
                    RowClass::QueuedPrompt {
                        user_text: content.to_owned(),
                    }
                }
                _ => RowClass::NotHuman,
            }
        }

        pub(crate) fn row_timestamp_ms(row: &Map<String, Value>) -> Option<i64> {
            row.get("timestamp")
                .and_then(Value::as_str)
                .and_then(parse_rfc3339_ms)
        }

        fn is_excluded_by_flags(row: &Map<String, Value>) -> bool {
            let is_true = |key: &str| row.get(key).and_then(Value::as_bool) == Some(true);
            is_true("isSidechain")
                || row.contains_key("agentId")
                || is_true("isMeta")
                || is_true("isCompactSummary")
                || is_true("isVisibleInTranscriptOnly")
                || row.contains_key("planContent")
                || row
                    .get("origin")
                    .and_then(|origin| origin.get("kind"))
                    .and_then(Value::as_str)
                    == Some("task-notification")
        }

        fn rejection_feedback(block: &Value) -> Option<String> {
            if block.get("is_error").and_then(Value::as_bool) != Some(true) {
                return None;
            }
            let text = match block.get("content")? {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => return None,
            };
            text_after_user_said(&text).map(str::to_owned)
        }
    }

    /// What the scan takes from a line: its class and its timestamp (which dates a queued
    /// prompt); `None` for a line that is not JSON or not an object.
    pub(crate) fn scan_reads(line: &[u8]) -> Option<(RowClass, Option<i64>)> {
        read_line(line, |row| (classify_row(row), row_timestamp_ms(row)))
    }

    /// The same by the replaced path: a `Value` parse and the reference classifier.
    pub(crate) fn reference_reads(line: &[u8]) -> Option<(RowClass, Option<i64>)> {
        let value = serde_json::from_slice::<Value>(line).ok()?;
        let row = value.as_object()?;
        Some((
            reference::classify(&value),
            reference::row_timestamp_ms(row),
        ))
    }

    /// A line's slim row, when read from the bytes, is the row of its `Value`, and the scan
    /// decides it as the reference did.
    fn check_line(line: &[u8]) -> Result<(), TestCaseError> {
        let shown = String::from_utf8_lossy(line);
        prop_assert_eq!(scan_reads(line), reference_reads(line), "{}", shown);
        if let Ok(slim) = parse_line(line) {
            let value: Value = serde_json::from_slice(line).map_err(|e| {
                TestCaseError::fail(format!(
                    "slim read a line serde_json refuses ({e}): {shown}"
                ))
            })?;
            prop_assert_eq!(slim, Row::from_value(&value), "{}", shown);
            prop_assert_eq!(classify(&value), reference::classify(&value), "{}", shown);
        }
        Ok(())
    }

    fn fixture_lines() -> Vec<Vec<u8>> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-code");
        let mut lines = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let bytes = std::fs::read(entry.path()).unwrap();
            lines.extend(bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec));
        }
        lines
    }

    /// Every line of the vendored transcripts: the same decision and the same row by both
    /// reads, and the slim read never falls back on them (real rows repeat no deciding key).
    #[test]
    fn every_fixture_line_reads_as_its_value() {
        let (mut rows, mut human) = (0, 0);
        for line in fixture_lines() {
            check_line(&line).unwrap();
            if let Ok(value) = serde_json::from_slice::<Value>(&line) {
                assert!(
                    parse_line(&line).is_ok(),
                    "{}",
                    String::from_utf8_lossy(&line)
                );
                rows += 1;
                human += usize::from(matches!(
                    reference::classify(&value),
                    RowClass::Human { .. } | RowClass::QueuedPrompt { .. }
                ));
            }
        }
        assert!(rows > 500 && human > 10, "{rows} rows, {human} prompts");
    }

    #[test]
    fn repeated_deciding_keys_fall_back_and_read_the_last() {
        let last_wins: [(&str, bool); 8] = [
            (
                r#"{"type":"assistant","type":"user","message":{"role":"user","content":"hi"}}"#,
                true,
            ),
            (
                r#"{"type":"user","message":{"role":"user","content":"hi"},"message":{"role":"user","content":[]}}"#,
                false,
            ),
            (
                r#"{"type":"user","isMeta":true,"isMeta":false,"message":{"role":"user","content":"hi"}}"#,
                true,
            ),
            (
                r#"{"type":"user","message":{"role":"user","role":"assistant","content":"hi"}}"#,
                false,
            ),
            (
                r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}}"#,
                true,
            ),
            (
                r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","is_error":true,"is_error":false,"content":"the user said:\nx"}]}}"#,
                false,
            ),
            (
                r#"{"type":"user","origin":{"kind":"task-notification","kind":"human"},"message":{"role":"user","content":"hi"}}"#,
                true,
            ),
            (
                r#"{"t\u0079pe":"assistant","type":"user","message":{"role":"user","content":"hi"}}"#,
                true,
            ),
        ];
        for (line, human) in last_wins {
            assert!(parse_line(line.as_bytes()).is_err(), "{line}");
            check_line(line.as_bytes()).unwrap();
            assert_eq!(
                matches!(
                    scan_reads(line.as_bytes()),
                    Some((RowClass::Human { .. }, _))
                ),
                human,
                "{line}"
            );
        }
        // A repeated key the rules do not read is no reason to fall back.
        let other = r#"{"uuid":"a","uuid":"b","type":"user","message":{"role":"user","content":"hi","id":1,"id":2}}"#;
        assert!(parse_line(other.as_bytes()).is_ok());
    }

    /// Lines a `Value` parse refuses while a lighter skip would pass them: the slim read refuses
    /// them too, so they are consumed without counting.
    #[test]
    fn lines_a_value_refuses_are_refused() {
        let deep = format!(
            r#"{{"type":"user","x":{}{},"message":{{"role":"user","content":"hi"}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let mut bad_utf8 =
            br#"{"type":"user","x":"?","message":{"role":"user","content":"hi"}}"#.to_vec();
        bad_utf8[20] = 0xff;
        let lines: [&[u8]; 6] = [
            br#"{"type":"user","x":1e400,"message":{"role":"user","content":"hi"}}"#,
            br#"{"type":"user","x":"\ud800","message":{"role":"user","content":"hi"}}"#,
            br#"{"type":"user","x":"\q","message":{"role":"user","content":"hi"}}"#,
            br#"{"type":"user","message":{"role":"user","content":"hi"}} x"#,
            deep.as_bytes(),
            &bad_utf8,
        ];
        for line in lines {
            assert!(serde_json::from_slice::<Value>(line).is_err());
            assert_eq!(scan_reads(line), None, "{}", String::from_utf8_lossy(line));
        }
        let ok = br#"{"type":"user","x":[1e300,-0,18446744073709551615,"\ud83d\ude00"],"message":{"role":"user","content":"hi"}}"#;
        assert!(matches!(
            scan_reads(ok),
            Some((RowClass::Human { .. }, None))
        ));
    }

    /// Types other than the rules expect are read as a `Value`'s `as_str`/`as_bool`/`get` read
    /// them, without falling back.
    #[test]
    fn odd_types_read_as_the_value_reads_them() {
        let lines = [
            r#"{"type":"user","message":["user","hi"]}"#,
            r#"{"type":"user","message":{"role":"user","content":[["text","hi"],"hi",{"type":"text","text":"yes"}]}}"#,
            r#"{"type":"user","isMeta":1,"isSidechain":"true","agentId":null,"message":{"role":"user","content":"hi"}}"#,
            r#"{"type":"user","origin":["task-notification"],"message":{"role":"user","content":"hi"}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","is_error":1,"content":"the user said:\nx"}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","is_error":true,"content":[{"text":"the user said:"},"x",{"text":5},{"text":"go"}]}]}}"#,
            r#"{"type":["user"],"message":{"role":"user","content":"hi"}}"#,
            r#"["user"]"#,
            r#""user""#,
        ];
        for line in lines {
            assert!(parse_line(line.as_bytes()).is_ok(), "{line}");
            check_line(line.as_bytes()).unwrap();
        }
    }

    /// A JSON string for `text`, written as serde does or with escapes where serde writes none
    /// (every character as `\u`, or only the first).
    fn json_string(text: &str, style: u8) -> String {
        match style {
            1 => {
                let escaped: String = text.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
                format!("\"{escaped}\"")
            }
            2 => {
                let mut chars = text.chars();
                match chars.next() {
                    Some(c) if (c as u32) < 0x10000 => {
                        format!(
                            "\"\\u{:04X}{}",
                            c as u32,
                            &Value::from(chars.as_str()).to_string()[1..]
                        )
                    }
                    _ => Value::from(text).to_string(),
                }
            }
            _ => Value::from(text).to_string(),
        }
    }

    /// A string from the words of the scan's tests and the probe's tricky strings, written with
    /// or without escapes.
    fn arb_word() -> BoxedStrategy<String> {
        let words: Vec<&str> = WORDS.iter().chain(TRICKY.iter()).copied().collect();
        (prop::sample::select(words), 0u8..4)
            .prop_map(|(w, s)| json_string(w, s))
            .boxed()
    }

    /// Any JSON value, mostly strings; rarely one a `Value` parse refuses (out-of-range number,
    /// lone surrogate).
    fn arb_value(depth: u32) -> BoxedStrategy<String> {
        let leaf = prop_oneof![
            12 => arb_word(),
            4 => prop::sample::select(vec!["null", "true", "false", "1", "0", "-2.5e3", "\"\\ud83d\\ude00\""])
                .prop_map(str::to_owned),
            1 => prop::sample::select(vec!["1e400", "\"\\ud800\""]).prop_map(str::to_owned),
        ];
        if depth == 0 {
            return leaf.boxed();
        }
        let inner = arb_value(depth - 1);
        prop_oneof![
            3 => leaf,
            1 => prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            2 => arb_object(inner),
        ]
        .boxed()
    }

    /// An object of keys the rules read (some spelt with escapes, some repeated) and others.
    fn arb_object(value: BoxedStrategy<String>) -> BoxedStrategy<String> {
        let key = prop_oneof![
            4 => (prop::sample::select(KEYS), 0u8..3).prop_map(|(k, s)| json_string(k, if s == 1 { 2 } else { 0 })),
            1 => "[a-z]{1,6}".prop_map(|k| json_string(&k, 0)),
        ];
        (prop::collection::vec((key, value), 0..7), any::<bool>())
            .prop_map(|(pairs, spaced)| {
                let sep = if spaced { " ,\n " } else { "," };
                let colon = if spaced { " : " } else { ":" };
                let body: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| format!("{k}{colon}{v}"))
                    .collect();
                format!("{{{}}}", body.join(sep))
            })
            .boxed()
    }

    /// A transcript-like row written as text: mostly a `user` or queue row whose deciding
    /// fields hold the expected kinds, with extra fields (flags, repeated deciding keys, big
    /// ignored objects) inserted anywhere, and values of other kinds now and then.
    fn arb_text_row() -> impl Strategy<Value = String> {
        let text = prop_oneof![4 => arb_word(), 1 => arb_value(1)];
        let part = prop_oneof![
            3 => text.clone().prop_map(|t| format!("{{\"type\":\"text\",\"text\":{t}}}")),
            1 => arb_value(1),
        ];
        let tool_content = prop_oneof![
            2 => arb_word(),
            2 => prop::collection::vec(part, 0..3).prop_map(|p| format!("[{}]", p.join(","))),
            1 => arb_value(1),
        ];
        let block = (
            prop::sample::select(vec!["tool_result", "text", "image", "thinking"]),
            prop::sample::select(vec![
                "",
                ",\"is_error\":true",
                ",\"is_error\":false",
                ",\"is_error\":1",
                ",\"is_error\":true,\"is_error\":false",
            ]),
            text,
            tool_content,
        )
            .prop_map(|(kind, err, text, content)| {
                format!("{{\"type\":\"{kind}\"{err},\"text\":{text},\"content\":{content}}}")
            });
        let content = prop_oneof![
            3 => arb_word(),
            3 => prop::collection::vec(prop_oneof![6 => block, 1 => arb_value(1)], 0..4)
                .prop_map(|b| format!("[{}]", b.join(","))),
            1 => arb_value(2),
        ];
        let kind = prop_oneof![
            6 => Just("\"user\""),
            2 => Just("\"queue-operation\""),
            1 => prop::sample::select(vec!["\"assistant\"", "\"\\u0075ser\"", "5", "null"]),
        ];
        let role = prop_oneof![
            6 => Just("\"user\""),
            1 => prop::sample::select(vec!["\"assistant\"", "5", "\"us\\u0065r\""]),
        ];
        let message = prop_oneof![
            8 => (role, content.clone())
                .prop_map(|(role, c)| format!("{{\"role\":{role},\"content\":{c}}}")),
            1 => arb_value(1),
        ];
        let extra = prop_oneof![
            2 => prop::sample::select(vec!["\"enqueue\"", "\"remove\"", "\"popAll\""])
                .prop_map(|o| format!("\"operation\":{o}")),
            2 => content.prop_map(|c| format!("\"content\":{c}")),
            2 => (
                prop::sample::select(vec![
                    "isMeta",
                    "isSidechain",
                    "agentId",
                    "planContent",
                    "isCompactSummary",
                    "isVisibleInTranscriptOnly",
                    "timestamp",
                    "origin",
                    "type",
                    "message",
                    "t\\u0079pe",
                ]),
                arb_value(2),
            )
                .prop_map(|(k, v)| format!("\"{k}\":{v}")),
            1 => prop::sample::select(vec!["true", "false"])
                .prop_map(|b| format!("\"isMeta\":{b}")),
            1 => Just("\"origin\":{\"kind\":\"task-notification\"}".to_owned()),
            2 => Just("\"timestamp\":\"2026-01-01T00:00:12.000Z\"".to_owned()),
            1 => arb_object(arb_value(1)).prop_map(|o| format!("\"toolUseResult\":{o}")),
        ];
        let queue = prop::option::of((
            prop::sample::select(vec!["enqueue", "enqueue", "remove", "popAll"]),
            arb_word(),
        ));
        (
            kind,
            message,
            queue,
            prop::collection::vec((extra, any::<prop::sample::Index>()), 0..5),
        )
            .prop_map(|(kind, message, queue, extras)| {
                let mut fields = vec![format!("\"type\":{kind}"), format!("\"message\":{message}")];
                if let Some((operation, content)) = queue {
                    fields.push(format!(
                        "\"operation\":\"{operation}\",\"content\":{content}"
                    ));
                }
                for (field, at) in extras {
                    fields.insert(at.index(fields.len() + 1), field);
                }
                format!("{{{}}}", fields.join(","))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Generated rows written as text: repeated keys, escaped keys and values, arrays where
        /// objects are expected, `is_error: 1`, numbers out of range, lone surrogates, spaced
        /// and compact JSON.
        #[test]
        fn text_rows_read_as_their_value(line in arb_text_row()) {
            check_line(line.as_bytes())?;
        }

        /// The row generators of the scan's tests, compact and pretty.
        #[test]
        fn generated_rows_read_as_their_value(row in arb_row(), pretty in any::<bool>()) {
            let line = if pretty { serde_json::to_string_pretty(&row) } else { serde_json::to_string(&row) };
            check_line(line.unwrap().as_bytes())?;
        }
    }
}
