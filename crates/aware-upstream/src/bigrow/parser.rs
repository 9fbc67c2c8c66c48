//! The streaming tokenizer: bytes, whitespace, scalars, objects, arrays, strings, with a depth
//! limit and a byte budget.

use super::parts::*;
use serde_json::Value;
use std::io::Read;

pub(super) struct Parser<R> {
    pub(super) src: Hashing<R>,
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
    pub(super) len: usize,
    pub(super) depth: usize,
    pub(super) budget: usize,
    pub(super) io_error: Option<std::io::Error>,
    /// Keep what the Codex classifier reads instead of the Claude one.
    pub(super) codex: bool,
}

impl<R: Read> Parser<R> {
    pub(super) fn peek(&mut self) -> Option<u8> {
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

    pub(super) fn next(&mut self) -> P<u8> {
        let b = self.peek().ok_or(Bad)?;
        self.pos += 1;
        Ok(b)
    }

    pub(super) fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    pub(super) fn expect(&mut self, want: u8) -> P<()> {
        (self.next()? == want).then_some(()).ok_or(Bad)
    }

    /// A short value kept whole: a string up to 1 KiB (a longer one keeps its prefix and `…`,
    /// so it never equals a short expected value), a bool, a number or null; a container is
    /// skipped and kept as null.
    pub(super) fn scalar(&mut self) -> P<Value> {
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

    pub(super) fn literal(&mut self, word: &[u8]) -> P<()> {
        for &b in word {
            self.expect(b)?;
        }
        Ok(())
    }

    pub(super) fn number(&mut self) -> P<Value> {
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
    pub(super) fn skip(&mut self) -> P<()> {
        self.ws();
        match self.peek() {
            Some(b'{') => self.object(|p, _| p.skip()),
            Some(b'[') => self.array(|p| p.skip()),
            Some(b'"') => self.string(&mut |_| {}),
            _ => self.scalar().map(|_| ()),
        }
    }

    pub(super) fn enter(&mut self) -> P<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(()).ok_or(Bad)
    }

    pub(super) fn object(&mut self, mut field: impl FnMut(&mut Self, &str) -> P<()>) -> P<()> {
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

    pub(super) fn array(&mut self, mut element: impl FnMut(&mut Self) -> P<()>) -> P<()> {
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
    pub(super) fn string(&mut self, sink: &mut dyn FnMut(char)) -> P<()> {
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

    pub(super) fn hex4(&mut self) -> P<u32> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = char::from(self.next()?).to_digit(16).ok_or(Bad)?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// `\uXXXX`, with a surrogate pair as one character; a lone surrogate is an error, as in
    /// serde_json.
    pub(super) fn unicode_escape(&mut self) -> P<char> {
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
