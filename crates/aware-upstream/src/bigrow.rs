//! Rows of any size (issue 15): a transcript row longer than the 1 MiB window is read as a
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

use crate::classify::{is_ide_context, is_machine_text, USER_SAID};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::io::Read;

/// Text kept verbatim (after leading whitespace) of every kept string.
const RAW_HEAD: usize = 4096;
/// Most bytes one kept text holds.
const TEXT_CAP: usize = 512 * 1024;
/// Most text bytes one row keeps in all.
const ROW_BUDGET: usize = 2 * 1024 * 1024;
/// Budget charged per kept block, so a row of countless empty blocks stays bounded too.
const BLOCK_COST: usize = 64;
/// Most bytes of a short scalar string (`type`, `uuid`, `timestamp`, …).
const SCALAR_CAP: usize = 1024;
/// serde_json's default nesting limit: 127 nested containers parse, 128 do not.
const MAX_DEPTH: usize = 127;

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

fn slim_with(reader: impl Read, codex: bool) -> std::io::Result<SlimRow> {
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
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("row:{hex}")
}

struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

/// A syntax error or an I/O error (kept in `Parser::io_error`).
struct Bad;
type P<T> = Result<T, Bad>;

/// One kept text, see the module docs.
#[derive(Default)]
struct Text {
    out: String,
    started: bool,
    in_ws: bool,
    cut: bool,
    cap: usize,
}

impl Text {
    fn new(budget: usize) -> Self {
        Text {
            cap: TEXT_CAP.min(budget).max(RAW_HEAD),
            ..Default::default()
        }
    }

    fn push(&mut self, c: char) {
        let ws = c.is_whitespace();
        if !self.started {
            if ws {
                return;
            }
            self.started = true;
        }
        if self.cut {
            return;
        }
        if self.out.len() < RAW_HEAD {
            self.in_ws = ws;
            self.out.push(c);
            return;
        }
        if ws && self.in_ws {
            return;
        }
        self.in_ws = ws;
        if self.out.len() + c.len_utf8() > self.cap {
            // Only a dropped non-space character makes the text differ from what is kept.
            if !ws {
                self.cut = true;
            }
            return;
        }
        self.out.push(c);
    }

    fn finish(mut self) -> String {
        if self.cut {
            self.out.push('\u{2026}');
        }
        self.out
    }
}

/// Finds the first `the user said:` directly followed by a line break in a streamed text, and
/// keeps what follows it (rule 4).
struct Feedback {
    pattern: Vec<char>,
    matched: usize,
    state: FbState,
    text: Option<Text>,
    budget: usize,
}

#[derive(PartialEq)]
enum FbState {
    Searching,
    /// Just after the pattern: a line break starts the feedback.
    AfterPattern,
    /// After a `\r`: a `\n` right after it belongs to the line break.
    AfterCr,
    Capturing,
}

impl Feedback {
    fn new(budget: usize) -> Self {
        Feedback {
            pattern: USER_SAID.chars().collect(),
            matched: 0,
            state: FbState::Searching,
            text: None,
            budget,
        }
    }

    fn push(&mut self, c: char) {
        match self.state {
            FbState::Capturing => {
                if let Some(t) = self.text.as_mut() {
                    t.push(c);
                }
            }
            FbState::AfterCr => {
                self.state = FbState::Capturing;
                if c != '\n' {
                    self.push(c);
                }
            }
            FbState::AfterPattern => match c {
                '\n' => self.start_capture(),
                '\r' => {
                    self.start_capture();
                    self.state = FbState::AfterCr;
                }
                other => {
                    self.state = FbState::Searching;
                    self.matched = 0;
                    self.search(other);
                }
            },
            FbState::Searching => self.search(c),
        }
    }

    fn start_capture(&mut self) {
        self.state = FbState::Capturing;
        self.text = Some(Text::new(self.budget));
    }

    /// The pattern has no border (no proper prefix that is also a suffix), so a mismatch
    /// restarts the match at this character.
    fn search(&mut self, c: char) {
        if self.pattern.get(self.matched) == Some(&c) {
            self.matched += 1;
        } else {
            self.matched = usize::from(self.pattern.first() == Some(&c));
        }
        if self.matched == self.pattern.len() {
            self.state = FbState::AfterPattern;
        }
    }
}

/// A block reduced to what rule 4 and the node's item builder read.
#[derive(Default)]
struct Block {
    kind: Option<String>,
    is_error: Option<Value>,
    text: Option<Value>,
    feedback: Option<Option<String>>,
    image_parts: usize,
}

struct Parser<R> {
    src: Hashing<R>,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    depth: usize,
    budget: usize,
    io_error: Option<std::io::Error>,
    /// Keep what the Codex classifier reads instead of the Claude one.
    codex: bool,
}

impl<R: Read> Parser<R> {
    fn peek(&mut self) -> Option<u8> {
        if self.pos == self.len {
            loop {
                match self.src.read(&mut self.buf) {
                    Ok(n) => {
                        self.len = n;
                        self.pos = 0;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.io_error = Some(e);
                        self.len = 0;
                        self.pos = 0;
                        break;
                    }
                }
            }
            if self.len == 0 {
                return None;
            }
        }
        self.buf.get(self.pos).copied()
    }

    fn next(&mut self) -> P<u8> {
        let b = self.peek().ok_or(Bad)?;
        self.pos += 1;
        Ok(b)
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, want: u8) -> P<()> {
        (self.next()? == want).then_some(()).ok_or(Bad)
    }

    /// The whole line: one value and nothing but whitespace after it.
    fn document(&mut self) -> Option<Value> {
        let row = self.row().ok()?;
        self.ws();
        if self.peek().is_some() || self.io_error.is_some() {
            return None;
        }
        Some(row)
    }

    fn row(&mut self) -> P<Value> {
        self.ws();
        if self.peek() != Some(b'{') {
            self.skip()?;
            // Not an object: nothing of it is ever human.
            return Ok(Value::Null);
        }
        let mut row = Map::new();
        if self.codex {
            self.codex_object(&mut row, true)?;
            return Ok(Value::Object(row));
        }
        self.object(|p, key| {
            let v = match key {
                "type"
                | "uuid"
                | "timestamp"
                | "operation"
                | "isMeta"
                | "isSidechain"
                | "isCompactSummary"
                | "isVisibleInTranscriptOnly" => p.scalar()?,
                "agentId" | "planContent" => {
                    p.skip()?;
                    Value::Bool(true)
                }
                "origin" => p.origin()?,
                "message" => p.message()?,
                "content" => p.text_or_skip()?,
                _ => {
                    p.skip()?;
                    return Ok(());
                }
            };
            row.insert(key.to_string(), v);
            Ok(())
        })?;
        Ok(Value::Object(row))
    }

    /// A Codex row (`top`) or payload / item object, see [`slim_codex_row`].
    fn codex_object(&mut self, out: &mut Map<String, Value>, top: bool) -> P<()> {
        self.object(|p, key| {
            let v = match key {
                "type" | "timestamp" | "role" | "kind" => p.scalar()?,
                "message" => p.text_or_skip()?,
                "payload" | "item" if top || key == "item" => {
                    p.ws();
                    if p.peek() != Some(b'{') {
                        p.skip()?;
                        Value::Null
                    } else {
                        let mut inner = Map::new();
                        p.codex_object(&mut inner, false)?;
                        Value::Object(inner)
                    }
                }
                "images" | "local_images" => {
                    let mut any = false;
                    p.ws();
                    if p.peek() == Some(b'[') {
                        p.array(|p| {
                            any = true;
                            p.skip()
                        })?;
                        Value::Array(if any { vec![Value::Null] } else { vec![] })
                    } else {
                        p.skip()?;
                        Value::Null
                    }
                }
                "content" => p.codex_parts()?,
                _ => {
                    p.skip()?;
                    return Ok(());
                }
            };
            out.insert(key.to_string(), v);
            Ok(())
        })
    }

    /// Codex content parts: each part's `type` and `text`. Past the row budget only the first
    /// image part and the first text part are kept (the facts the verdict needs, short of a
    /// row with more than 2 MiB of machine text before its typed text).
    fn codex_parts(&mut self) -> P<Value> {
        self.ws();
        if self.peek() != Some(b'[') {
            self.skip()?;
            return Ok(Value::Null);
        }
        let mut kept: Vec<Value> = Vec::new();
        let (mut late_image, mut late_text) = (false, false);
        self.array(|p| {
            p.ws();
            if p.peek() != Some(b'{') {
                return p.skip();
            }
            let mut part = Map::new();
            p.object(|p, key| {
                match key {
                    "type" => {
                        let v = p.scalar()?;
                        part.insert("type".into(), v);
                    }
                    "text" => {
                        let v = p.text_or_skip()?;
                        part.insert("text".into(), v);
                    }
                    _ => p.skip()?,
                }
                Ok(())
            })?;
            let cost = BLOCK_COST + part.get("text").and_then(Value::as_str).map_or(0, str::len);
            if p.budget >= cost {
                p.budget -= cost;
                kept.push(Value::Object(part));
            } else {
                p.budget = 0;
                let is_text = part.contains_key("text");
                if is_text && !late_text {
                    late_text = true;
                    kept.push(Value::Object(part));
                } else if !is_text
                    && !late_image
                    && part
                        .get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| t.contains("image"))
                {
                    late_image = true;
                    kept.push(Value::Object(part));
                }
            }
            Ok(())
        })?;
        Ok(Value::Array(kept))
    }

    fn origin(&mut self) -> P<Value> {
        self.ws();
        if self.peek() != Some(b'{') {
            self.skip()?;
            return Ok(Value::Null);
        }
        let mut out = Map::new();
        self.object(|p, key| {
            if key == "kind" {
                let v = p.scalar()?;
                out.insert("kind".into(), v);
            } else {
                p.skip()?;
            }
            Ok(())
        })?;
        Ok(Value::Object(out))
    }

    fn message(&mut self) -> P<Value> {
        self.ws();
        if self.peek() != Some(b'{') {
            self.skip()?;
            return Ok(Value::Null);
        }
        let mut out = Map::new();
        self.object(|p, key| {
            match key {
                "role" => {
                    let v = p.scalar()?;
                    out.insert("role".into(), v);
                }
                "content" => {
                    let v = p.content()?;
                    out.insert("content".into(), v);
                }
                _ => p.skip()?,
            }
            Ok(())
        })?;
        Ok(Value::Object(out))
    }

    /// `message.content`: a string, or an array of blocks; anything else can hold no candidate.
    fn content(&mut self) -> P<Value> {
        self.ws();
        match self.peek() {
            Some(b'"') => self.text(),
            Some(b'[') => self.blocks(),
            _ => {
                self.skip()?;
                Ok(Value::Null)
            }
        }
    }

    fn blocks(&mut self) -> P<Value> {
        let mut kept: Vec<Value> = Vec::new();
        // Past the row budget only the facts the rules need are kept.
        let (mut image, mut plain_result, mut survivor_text, mut survivor_result) =
            (false, false, false, false);
        self.array(|p| {
            let block = p.block()?;
            let cost = BLOCK_COST
                + block
                    .text
                    .as_ref()
                    .and_then(Value::as_str)
                    .map_or(0, str::len)
                + block
                    .feedback
                    .as_ref()
                    .and_then(Option::as_deref)
                    .map_or(0, str::len);
            let value = block_value(&block);
            if p.budget >= cost {
                p.budget -= cost;
                kept.push(value);
                return Ok(());
            }
            p.budget = 0;
            let keep = match block.kind.as_deref() {
                Some("image") => !std::mem::replace(&mut image, true),
                Some("text") => {
                    let text = block.text.as_ref().and_then(Value::as_str).unwrap_or("");
                    let survives =
                        !text.trim().is_empty() && !is_ide_context(text) && !is_machine_text(text);
                    survives && !std::mem::replace(&mut survivor_text, true)
                }
                Some("tool_result") => {
                    let feedback = block.is_error == Some(Value::Bool(true))
                        && block
                            .feedback
                            .as_ref()
                            .and_then(Option::as_deref)
                            .is_some_and(|f| !f.trim().is_empty() && !is_machine_text(f));
                    if feedback {
                        !std::mem::replace(&mut survivor_result, true)
                    } else {
                        !std::mem::replace(&mut plain_result, true)
                    }
                }
                _ => false,
            };
            if keep {
                kept.push(value);
            }
            Ok(())
        })?;
        Ok(Value::Array(kept))
    }

    fn block(&mut self) -> P<Block> {
        self.ws();
        let mut b = Block::default();
        if self.peek() != Some(b'{') {
            self.skip()?;
            return Ok(b);
        }
        self.object(|p, key| {
            match key {
                "type" => b.kind = p.scalar()?.as_str().map(str::to_string),
                "is_error" => b.is_error = Some(p.scalar()?),
                "text" => b.text = Some(p.text_or_skip()?),
                "content" => {
                    let (feedback, images) = p.tool_content()?;
                    b.feedback = Some(feedback);
                    b.image_parts = images;
                }
                _ => p.skip()?,
            }
            Ok(())
        })?;
        Ok(b)
    }

    /// A tool result's `content`: its text (a string, or the `text` of its parts joined with
    /// `\n`) is searched for the human's feedback; image parts are counted for the node item.
    fn tool_content(&mut self) -> P<(Option<String>, usize)> {
        self.ws();
        let mut fb = Feedback::new(self.budget);
        let mut images = 0;
        match self.peek() {
            Some(b'"') => self.string(&mut |c| fb.push(c))?,
            Some(b'[') => {
                let mut first = true;
                self.array(|p| {
                    p.ws();
                    if p.peek() != Some(b'{') {
                        return p.skip();
                    }
                    let mut is_image = false;
                    p.object(|p, key| {
                        p.ws();
                        match key {
                            "text" if p.peek() == Some(b'"') => {
                                if !std::mem::replace(&mut first, false) {
                                    fb.push('\n');
                                }
                                p.string(&mut |c| fb.push(c))
                            }
                            "type" => {
                                is_image = p.scalar()? == "image";
                                Ok(())
                            }
                            _ => p.skip(),
                        }
                    })?;
                    images += usize::from(is_image);
                    Ok(())
                })?;
            }
            _ => {
                self.skip()?;
                return Ok((None, 0));
            }
        }
        Ok((fb.text.map(Text::finish), images))
    }

    fn text_or_skip(&mut self) -> P<Value> {
        self.ws();
        if self.peek() == Some(b'"') {
            self.text()
        } else {
            self.scalar()
        }
    }

    fn text(&mut self) -> P<Value> {
        let mut t = Text::new(self.budget);
        self.string(&mut |c| t.push(c))?;
        Ok(Value::String(t.finish()))
    }

    /// A short value kept whole: a string up to 1 KiB (a longer one keeps its prefix and `…`,
    /// so it never equals a short expected value), a bool, a number or null; a container is
    /// skipped and kept as null.
    fn scalar(&mut self) -> P<Value> {
        self.ws();
        match self.peek() {
            Some(b'"') => {
                let mut s = String::new();
                let mut cut = false;
                self.string(&mut |c| {
                    if s.len() + c.len_utf8() <= SCALAR_CAP {
                        s.push(c);
                    } else {
                        cut = true;
                    }
                })?;
                if cut {
                    s.push('\u{2026}');
                }
                Ok(Value::String(s))
            }
            Some(b't') => self.literal(b"true").map(|_| Value::Bool(true)),
            Some(b'f') => self.literal(b"false").map(|_| Value::Bool(false)),
            Some(b'n') => self.literal(b"null").map(|_| Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'{' | b'[') => {
                self.skip()?;
                Ok(Value::Null)
            }
            _ => Err(Bad),
        }
    }

    fn literal(&mut self, word: &[u8]) -> P<()> {
        for &b in word {
            self.expect(b)?;
        }
        Ok(())
    }

    fn number(&mut self) -> P<Value> {
        let mut text = String::new();
        let mut long = false;
        let mut push = |p: &mut Self, text: &mut String| -> P<()> {
            let b = p.next()?;
            if text.len() < 4096 {
                text.push(char::from(b));
            } else {
                long = true;
            }
            Ok(())
        };
        let digit = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_digit());
        if self.peek() == Some(b'-') {
            push(self, &mut text)?;
        }
        match self.peek() {
            Some(b'0') => push(self, &mut text)?,
            Some(b'1'..=b'9') => {
                while digit(self.peek()) {
                    push(self, &mut text)?;
                }
            }
            _ => return Err(Bad),
        }
        if self.peek() == Some(b'.') {
            push(self, &mut text)?;
            if !digit(self.peek()) {
                return Err(Bad);
            }
            while digit(self.peek()) {
                push(self, &mut text)?;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            push(self, &mut text)?;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                push(self, &mut text)?;
            }
            if !digit(self.peek()) {
                return Err(Bad);
            }
            while digit(self.peek()) {
                push(self, &mut text)?;
            }
        }
        if long {
            // Thousands of digits: kept as null; no rule reads a number's value.
            return Ok(Value::Null);
        }
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = text.parse::<u64>() {
            return Ok(Value::from(u));
        }
        // serde_json refuses a number out of the f64 range.
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::from(f)),
            _ => Err(Bad),
        }
    }

    /// Validates and drops one value.
    fn skip(&mut self) -> P<()> {
        self.ws();
        match self.peek() {
            Some(b'{') => self.object(|p, _| p.skip()),
            Some(b'[') => self.array(|p| p.skip()),
            Some(b'"') => self.string(&mut |_| {}),
            _ => self.scalar().map(|_| ()),
        }
    }

    fn enter(&mut self) -> P<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(()).ok_or(Bad)
    }

    fn object(&mut self, mut field: impl FnMut(&mut Self, &str) -> P<()>) -> P<()> {
        self.enter()?;
        self.expect(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(Bad);
            }
            let key = match self.scalar()? {
                Value::String(k) => k,
                _ => return Err(Bad),
            };
            self.ws();
            self.expect(b':')?;
            field(self, &key)?;
            self.ws();
            match self.next()? {
                b',' => continue,
                b'}' => break,
                _ => return Err(Bad),
            }
        }
        self.depth -= 1;
        Ok(())
    }

    fn array(&mut self, mut element: impl FnMut(&mut Self) -> P<()>) -> P<()> {
        self.enter()?;
        self.expect(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            element(self)?;
            self.ws();
            match self.next()? {
                b',' => continue,
                b']' => break,
                _ => return Err(Bad),
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// One JSON string, its characters handed to `sink` one by one (escapes decoded).
    fn string(&mut self, sink: &mut dyn FnMut(char)) -> P<()> {
        self.expect(b'"')?;
        loop {
            // Fast path: the plain ASCII already buffered, without a refill check per byte.
            let plain = self.buf.get(self.pos..self.len).map_or(0, |rest| {
                rest.iter()
                    .take_while(|&&b| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\')
                    .map(|&b| sink(char::from(b)))
                    .count()
            });
            self.pos += plain;
            let b = self.next()?;
            match b {
                b'"' => return Ok(()),
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(Bad),
                    };
                    sink(c);
                }
                0x00..=0x1f => return Err(Bad),
                0x20..=0x7f => sink(char::from(b)),
                _ => {
                    let width = match b {
                        0xc2..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf4 => 4,
                        _ => return Err(Bad),
                    };
                    let mut bytes = [b, 0, 0, 0];
                    for slot in bytes.iter_mut().take(width).skip(1) {
                        *slot = self.next()?;
                    }
                    let s = std::str::from_utf8(bytes.get(..width).ok_or(Bad)?).map_err(|_| Bad)?;
                    s.chars().for_each(&mut *sink);
                }
            }
        }
    }

    fn hex4(&mut self) -> P<u32> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = char::from(self.next()?).to_digit(16).ok_or(Bad)?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// `\uXXXX`, with a surrogate pair as one character; a lone surrogate is an error, as in
    /// serde_json.
    fn unicode_escape(&mut self) -> P<char> {
        let first = self.hex4()?;
        let code = match first {
            0xd800..=0xdbff => {
                self.expect(b'\\')?;
                self.expect(b'u')?;
                let second = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&second) {
                    return Err(Bad);
                }
                0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
            }
            0xdc00..=0xdfff => return Err(Bad),
            other => other,
        };
        char::from_u32(code).ok_or(Bad)
    }
}

/// The slim JSON of one block.
fn block_value(b: &Block) -> Value {
    let mut out = Map::new();
    if let Some(kind) = &b.kind {
        out.insert("type".into(), Value::from(kind.as_str()));
    }
    if let Some(e) = &b.is_error {
        out.insert("is_error".into(), e.clone());
    }
    if let Some(t) = &b.text {
        out.insert("text".into(), t.clone());
    }
    if let Some(feedback) = &b.feedback {
        // Rebuilt so that rule 4 finds exactly the kept feedback.
        let mut content = match feedback {
            Some(f) => vec![Value::from(format!("{USER_SAID}\n{f}"))],
            None => Vec::new(),
        };
        let mut parts: Vec<Value> = content
            .drain(..)
            .map(|t| serde_json::json!({"type": "text", "text": t}))
            .collect();
        for _ in 0..b.image_parts.min(1) {
            parts.push(serde_json::json!({"type": "image"}));
        }
        out.insert("content".into(), Value::Array(parts));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{classify, normalise, RowClass};
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
            crate::classify::normalise(kept),
            crate::classify::normalise(&spaced)
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
