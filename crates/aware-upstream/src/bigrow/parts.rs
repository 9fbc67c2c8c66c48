//! The pieces a slim row is built from: limits, kept texts, the feedback matcher, blocks.

use crate::claude::classify::USER_SAID;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::io::Read;

/// Text kept verbatim (after leading whitespace) of every kept string.
pub(super) const RAW_HEAD: usize = 4096;
/// Most bytes one kept text holds.
pub(super) const TEXT_CAP: usize = 512 * 1024;
/// Most text bytes one row keeps in all.
pub(super) const ROW_BUDGET: usize = 2 * 1024 * 1024;
/// Budget charged per kept block, so a row of countless empty blocks stays bounded too.
pub(super) const BLOCK_COST: usize = 64;
/// Most bytes of a short scalar string (`type`, `uuid`, `timestamp`, …).
pub(super) const SCALAR_CAP: usize = 1024;
/// serde_json's default nesting limit: 127 nested containers parse, 128 do not.
pub(super) const MAX_DEPTH: usize = 127;

/// A syntax error or an I/O error (kept in `Parser::io_error`).
pub(super) struct Bad;
pub(super) type P<T> = Result<T, Bad>;

/// One kept text, see the module docs.
#[derive(Default)]
pub(super) struct Text {
    pub(super) out: String,
    pub(super) started: bool,
    pub(super) in_ws: bool,
    pub(super) cut: bool,
    pub(super) cap: usize,
}

impl Text {
    pub(super) fn new(budget: usize) -> Self {
        Text {
            cap: TEXT_CAP.min(budget).max(RAW_HEAD),
            ..Default::default()
        }
    }

    pub(super) fn push(&mut self, c: char) {
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

    pub(super) fn finish(mut self) -> String {
        if self.cut {
            self.out.push('\u{2026}');
        }
        self.out
    }
}

/// Finds the first `the user said:` directly followed by a line break in a streamed text, and
/// keeps what follows it (rule 4).
pub(super) struct Feedback {
    pub(super) pattern: Vec<char>,
    pub(super) matched: usize,
    pub(super) state: FbState,
    pub(super) text: Option<Text>,
    pub(super) budget: usize,
}

#[derive(PartialEq)]
pub(super) enum FbState {
    Searching,
    /// Just after the pattern: a line break starts the feedback.
    AfterPattern,
    /// After a `\r`: a `\n` right after it belongs to the line break.
    AfterCr,
    Capturing,
}

impl Feedback {
    pub(super) fn new(budget: usize) -> Self {
        Feedback {
            pattern: USER_SAID.chars().collect(),
            matched: 0,
            state: FbState::Searching,
            text: None,
            budget,
        }
    }

    pub(super) fn push(&mut self, c: char) {
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

    pub(super) fn start_capture(&mut self) {
        self.state = FbState::Capturing;
        self.text = Some(Text::new(self.budget));
    }

    /// The pattern has no border (no proper prefix that is also a suffix), so a mismatch
    /// restarts the match at this character.
    pub(super) fn search(&mut self, c: char) {
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
pub(super) struct Block {
    pub(super) kind: Option<String>,
    pub(super) is_error: Option<Value>,
    pub(super) text: Option<Value>,
    pub(super) feedback: Option<Option<String>>,
    pub(super) image_parts: usize,
}

/// The slim JSON of one block.
pub(super) fn block_value(b: &Block) -> Value {
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

/// A reader that hashes what it reads (the row id of a streamed row is its line's digest).
pub(super) struct Hashing<R> {
    pub(super) inner: R,
    pub(super) hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}
