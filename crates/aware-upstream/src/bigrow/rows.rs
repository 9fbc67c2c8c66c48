//! Row shapes: what of a Claude or Codex row is kept (messages, blocks, tool content, texts).

use super::parser::Parser;
use super::parts::*;
use crate::claude::classify::{is_ide_context, is_machine_text};
use serde_json::{Map, Value};
use std::io::Read;

impl<R: Read> Parser<R> {
    /// The whole line: one value and nothing but whitespace after it.
    pub(super) fn document(&mut self) -> Option<Value> {
        let row = self.row().ok()?;
        self.ws();
        if self.peek().is_some() || self.io_error.is_some() {
            return None;
        }
        Some(row)
    }

    pub(super) fn row(&mut self) -> P<Value> {
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
    pub(super) fn codex_object(&mut self, out: &mut Map<String, Value>, top: bool) -> P<()> {
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
    pub(super) fn codex_parts(&mut self) -> P<Value> {
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

    pub(super) fn origin(&mut self) -> P<Value> {
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

    pub(super) fn message(&mut self) -> P<Value> {
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
    pub(super) fn content(&mut self) -> P<Value> {
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

    pub(super) fn blocks(&mut self) -> P<Value> {
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

    pub(super) fn block(&mut self) -> P<Block> {
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
    pub(super) fn tool_content(&mut self) -> P<(Option<String>, usize)> {
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

    pub(super) fn text_or_skip(&mut self) -> P<Value> {
        self.ws();
        if self.peek() == Some(b'"') {
            self.text()
        } else {
            self.scalar()
        }
    }

    pub(super) fn text(&mut self) -> P<Value> {
        let mut t = Text::new(self.budget);
        self.string(&mut |c| t.push(c))?;
        Ok(Value::String(t.finish()))
    }
}
