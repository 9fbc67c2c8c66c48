//! Paired nodes (04 §2.2, §3, §10).
//!
//! Both sides of the pairing live here, apart from the HTTP server itself:
//!
//! - the node side: [`thread_items`] builds the newest items of a local transcript (read from its
//!   end in bounded chunks) and [`thread_list`] pages the local catalog, for `aware node serve`;
//! - the gateway side: [`NodeClient`] implements [`Provider`] over HTTP, and [`check_items`] is
//!   the pure paired-node check of 04 §10 over one fetched item list.

use crate::bigrow::slim_row;
use crate::classify::{classify, normalise, RowClass};
use crate::local::{read_at, LocalClaude};
use crate::provider::{CatalogItem, Outcome, Probe, Provider, ProviderError, ThreadInfo};
use crate::scan::{
    node_item_to_row, scan_rows, ScanInput, Scanner, QUEUED_MEMORY_MAX, WINDOW_BYTES,
};
use aware_engine::{ImportTurn, Role};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

/// Most items a node answers with, and what the gateway asks for (04 §2.2, §10 step 2).
pub const ITEMS_LIMIT: usize = 50;
/// Bytes read per step when walking a transcript backwards.
const CHUNK_BYTES: u64 = 64 * 1024;
/// Every node request is bounded by this (04 §2.2).
pub const NODE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a node answer the client reads.
const MAX_ANSWER_BYTES: u64 = 64 << 20;
/// Text imported at adoption from a node: the newest turns up to this many bytes (04 §3 step 5).
const HISTORY_BYTES: usize = 512 * 1024;
const HISTORY_MESSAGES: usize = 200;

// --- node side -----------------------------------------------------------------------------------

/// Opens thread `thread_id` under `root` for the node's answers.
///
/// "Thread not found" is definitive (the gateway counts it towards `upstream_missing`), so it is
/// answered only when the root itself can be read and no regular transcript of that id lies
/// under it; an unreadable root is an I/O error, never a deletion.
fn open_thread_file(root: &Path, thread_id: &str) -> Result<(File, u64), ProviderError> {
    if let Err(e) = std::fs::read_dir(root) {
        return Err(ProviderError::Io(format!(
            "the Claude root {} cannot be read: {e}",
            root.display()
        )));
    }
    let local = LocalClaude::new(root);
    let (path, _) = local.find(thread_id).ok_or(ProviderError::ThreadNotFound)?;
    let (file, meta) = local.open(&path)?;
    Ok((file, meta.len()))
}

/// The `limit` newest items of thread `thread_id` under `root`, newest first (04 §2.2, the v1
/// request, still answered).
///
/// The transcript is read from its end in chunks of 64 KiB until `limit` items are found or the
/// start of the file is reached, so a long transcript is not read whole. Rows that are blank,
/// not JSON, or of another type give no item. An unknown thread is
/// [`ProviderError::ThreadNotFound`].
pub fn thread_items(
    root: &Path,
    thread_id: &str,
    limit: usize,
) -> Result<Vec<Value>, ProviderError> {
    let (mut file, size) = open_thread_file(root, thread_id)?;
    let mut items = Vec::new();
    if limit == 0 {
        return Ok(items);
    }
    walk_back(&mut file, size, |file, line| {
        if let Some(item) = line_item(file, line)? {
            items.push(item);
        }
        Ok(items.len() >= limit)
    })?;
    Ok(items)
}

/// One page of the items after a uuid (issue 15): oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemsPage {
    pub items: Vec<Value>,
    /// More items follow the last one of this page.
    pub more: bool,
    /// The `after` uuid was found (always true when reading from the start).
    pub found: bool,
}

/// Most items of one page, and the default.
pub const PAGE_LIMIT_MAX: usize = 500;
pub const PAGE_LIMIT_DEFAULT: usize = 200;
/// A page stops growing past this many bytes of items (one oversized item may pass it).
const PAGE_BYTES: usize = 8 << 20;

/// The items that follow the row whose uuid is `after` (from the start of the transcript when
/// `after` is `None`), oldest first, at most `limit` of them and about [`PAGE_BYTES`], with a
/// `more` flag (issue 15). When `after` is not in the transcript (it was rewritten), `found` is
/// false and the page holds the oldest items of the whole file.
///
/// The transcript is read backwards from its end to the marker, keeping only the oldest `limit`
/// items seen so far, so memory stays bounded however far the marker is.
pub fn thread_items_after(
    root: &Path,
    thread_id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<ItemsPage, ProviderError> {
    let (mut file, size) = open_thread_file(root, thread_id)?;
    // Newest first while walking back; the front is dropped when the page is over its bounds.
    let mut kept: VecDeque<(Value, usize)> = VecDeque::new();
    let (mut bytes, mut more, mut found) = (0usize, false, after.is_none());
    let limit = limit.max(1);
    walk_back(&mut file, size, |file, line| {
        let Some(item) = line_item(file, line)? else {
            return Ok(false);
        };
        if after.is_some() && item_uuid(&item) == after {
            found = true;
            return Ok(true);
        }
        let len = serde_json::to_vec(&item).map_or(0, |v| v.len());
        bytes += len;
        kept.push_back((item, len));
        while kept.len() > limit || (bytes > PAGE_BYTES && kept.len() > 1) {
            if let Some((_, l)) = kept.pop_front() {
                bytes -= l;
                more = true;
            }
        }
        Ok(false)
    })?;
    Ok(ItemsPage {
        items: kept.into_iter().rev().map(|(i, _)| i).collect(),
        more,
        found,
    })
}

/// A line handed to a [`walk_back`] visitor.
enum Line<'a> {
    /// The line's bytes, without its `\n`.
    Bytes(&'a [u8]),
    /// A line longer than the window, `[start, end)` in the file (without its `\n`): too long to
    /// hold, it is streamed from the file.
    Span(u64, u64),
}

/// Calls `visit` on every line of `file` (of `size` bytes) from the last to the first, until it
/// answers true. At most one window (1 MiB) of a line is held; a longer one is handed over as a
/// span (issue 9: a line without a newline is never read whole into memory).
fn walk_back(
    file: &mut File,
    size: u64,
    mut visit: impl FnMut(&mut File, Line) -> Result<bool, ProviderError>,
) -> Result<(), ProviderError> {
    // The end of the line being assembled, and its pieces in the order they were read (each
    // piece precedes the previous ones in the file).
    let mut line_end = size;
    let mut tail: Vec<Vec<u8>> = Vec::new();
    let mut tail_len = 0usize;
    let mut too_long = false;
    let mut pos = size;
    while pos > 0 {
        let start = pos.saturating_sub(CHUNK_BYTES);
        let chunk = read_at(file, start, (pos - start) as usize)
            .map_err(|e| ProviderError::Io(e.to_string()))?;
        if chunk.len() as u64 != pos - start {
            // The file shrank while it was read: answer with what is certain.
            return Ok(());
        }
        pos = start;
        let mut end = chunk.len();
        while let Some(nl) = chunk
            .get(..end)
            .and_then(|c| c.iter().rposition(|b| *b == b'\n'))
        {
            let line_start = start + nl as u64 + 1;
            let head = chunk.get(nl + 1..end).unwrap_or_default();
            let done = if too_long {
                visit(file, Line::Span(line_start, line_end))?
            } else if tail.is_empty() {
                visit(file, Line::Bytes(head))?
            } else {
                let line = join_line(head, &mut tail);
                visit(file, Line::Bytes(&line))?
            };
            if done {
                return Ok(());
            }
            tail.clear();
            tail_len = 0;
            too_long = false;
            line_end = start + nl as u64;
            end = nl;
        }
        if !too_long {
            let piece = chunk.get(..end).unwrap_or_default();
            tail_len += piece.len();
            if tail_len > WINDOW_BYTES {
                tail.clear();
                too_long = true;
            } else {
                tail.push(piece.to_vec());
            }
        }
    }
    if too_long {
        visit(file, Line::Span(0, line_end))?;
    } else {
        let line = join_line(&[], &mut tail);
        visit(file, Line::Bytes(&line))?;
    }
    Ok(())
}

/// The item of one line, streaming a line too long to hold (issue 15).
fn line_item(file: &mut File, line: Line) -> Result<Option<Value>, ProviderError> {
    match line {
        Line::Bytes(bytes) => Ok(line_to_item(bytes)),
        Line::Span(start, mut end) => {
            let io = |e: std::io::Error| ProviderError::Io(e.to_string());
            if end > start && read_at(file, end - 1, 1).map_err(io)? == b"\r" {
                end -= 1;
            }
            file.seek(SeekFrom::Start(start)).map_err(io)?;
            let slim = slim_row(std::io::BufReader::new((&*file).take(end - start))).map_err(io)?;
            Ok(slim
                .row
                .and_then(|row| row_to_item_with_id(&row, || slim.row_id.clone())))
        }
    }
}

/// `head` followed by the pieces of `tail` in file order; empties `tail`.
fn join_line(head: &[u8], tail: &mut Vec<Vec<u8>>) -> Vec<u8> {
    let mut line = Vec::with_capacity(head.len() + tail.iter().map(Vec::len).sum::<usize>());
    line.extend_from_slice(head);
    for piece in tail.iter().rev() {
        line.extend_from_slice(piece);
    }
    tail.clear();
    line
}

/// The item of one raw transcript line (without its `\n`), or `None` when the line gives none.
fn line_to_item(line: &[u8]) -> Option<Value> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let row: Value = serde_json::from_slice(line).ok()?;
    row_to_item(&row, line)
}

/// Builds the item of one parsed row (04 §2.2); `raw` is the line it was parsed from.
pub fn row_to_item(row: &Value, raw: &[u8]) -> Option<Value> {
    row_to_item_with_id(row, || format!("row:{}", sha256_hex32(raw)))
}

/// [`row_to_item`] with the row id of a row without uuid given by `row_id`.
fn row_to_item_with_id(row: &Value, row_id: impl FnOnce() -> String) -> Option<Value> {
    let obj = row.as_object()?;
    let mut item = Map::new();
    let uuid = match obj.get("uuid").and_then(Value::as_str) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => row_id(),
    };
    item.insert("uuid".into(), Value::from(uuid));
    match obj.get("type").and_then(Value::as_str)? {
        "user" => {
            item.insert("type".into(), Value::from("userMessage"));
            if let Some(content) = row.pointer("/message/content") {
                item.insert("content".into(), slim_content(content));
            }
        }
        "assistant" => {
            let blocks: &[Value] = row
                .pointer("/message/content")
                .and_then(Value::as_array)
                .map_or(&[], Vec::as_slice);
            let has = |kinds: &[&str]| {
                blocks.iter().any(|b| {
                    b.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| kinds.contains(&t))
                })
            };
            let kind = if has(&["text"]) {
                let text: Vec<&str> = blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect();
                item.insert("text".into(), Value::from(text.join("\n")));
                "agentMessage"
            } else if has(&["tool_use"]) {
                "toolCall"
            } else if has(&["thinking", "redacted_thinking"]) {
                "reasoning"
            } else {
                "other"
            };
            item.insert("type".into(), Value::from(kind));
        }
        "queue-operation" => {
            item.insert("type".into(), Value::from("queueOperation"));
            for key in ["operation", "content"] {
                if let Some(v) = obj.get(key) {
                    item.insert(key.into(), v.clone());
                }
            }
        }
        _ => return None,
    }
    if let Some(ts) = obj.get("timestamp").filter(|t| t.is_string()) {
        item.insert("timestamp".into(), ts.clone());
    }
    let mut flags = Map::new();
    for (row_key, flag_key) in [
        ("isMeta", "meta"),
        ("isSidechain", "sidechain"),
        ("isCompactSummary", "compactSummary"),
        ("isVisibleInTranscriptOnly", "transcriptOnly"),
    ] {
        if let Some(v) = obj.get(row_key) {
            flags.insert(flag_key.into(), v.clone());
        }
    }
    // Rules 2–3 of 04 §9 also exclude sub-agent rows (`agentId`) and plan rows (`planContent`),
    // which an item has no field for: carry them as the flags with the same effect.
    if obj.contains_key("agentId") && flags.get("sidechain").and_then(Value::as_bool) != Some(true)
    {
        flags.insert("sidechain".into(), Value::Bool(true));
    }
    if obj.contains_key("planContent") && flags.get("meta").and_then(Value::as_bool) != Some(true) {
        flags.insert("meta".into(), Value::Bool(true));
    }
    if !flags.is_empty() {
        item.insert("flags".into(), Value::Object(flags));
    }
    if let Some(kind) = row.pointer("/origin/kind") {
        item.insert("originKind".into(), kind.clone());
    }
    Some(Value::Object(item))
}

/// A user row's content with image data left out: the classifier only looks at an image
/// block's `type`, and pasted screenshots would make every item answer megabytes long.
fn slim_content(content: &Value) -> Value {
    match content {
        Value::Array(blocks) => Value::Array(blocks.iter().map(slim_block).collect()),
        other => other.clone(),
    }
}

fn slim_block(block: &Value) -> Value {
    match block.get("type").and_then(Value::as_str) {
        Some("image") => json!({"type": "image"}),
        Some("tool_result") => {
            let mut b = block.clone();
            if let Some(Value::Array(parts)) = b.get_mut("content") {
                for part in parts.iter_mut() {
                    if part.get("type").and_then(Value::as_str) == Some("image") {
                        *part = json!({"type": "image"});
                    }
                }
            }
            b
        }
        _ => block.clone(),
    }
}

/// The first 32 lowercase hex characters of SHA-256 of `bytes`.
fn sha256_hex32(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One catalog page of the local transcripts under `root` (04 §2.1), as the node answers it:
/// `{items: [{catalogId, threadId, updatedAt, sizeBytes, cwd?, title?}], nextCursor?}`. The
/// gateway fills `hostId` and `adoptedSessionKey`.
pub fn thread_list(
    root: &Path,
    limit: usize,
    cursor: Option<&str>,
) -> Result<Value, ProviderError> {
    let (items, next) = LocalClaude::new(root).list(limit, cursor)?;
    let items: Vec<Value> = items
        .into_iter()
        .map(|c| {
            let mut v = json!({"catalogId": "claude", "threadId": c.thread_id,
                               "updatedAt": c.updated_at});
            if let Some(size) = c.size_bytes {
                v["sizeBytes"] = json!(size);
            }
            if let Some(cwd) = c.cwd {
                v["cwd"] = json!(cwd);
            }
            if let Some(title) = c.title {
                v["title"] = json!(title);
            }
            v
        })
        .collect();
    let mut page = json!({ "items": items });
    if let Some(n) = next {
        page["nextCursor"] = json!(n);
    }
    Ok(page)
}

// --- gateway side: the pure check ----------------------------------------------------------------

/// Step 1 of 04 §10: the probe is for this node (`ref.nodeId` a string equal to `node_id`, and
/// `hostId = "node:" + ref.nodeId`) and its marker's `uuid` is a string or null.
pub fn probe_applies(probe: &Probe, node_id: &str) -> bool {
    let Some(ref_node) = probe.upstream_ref.get("nodeId").and_then(Value::as_str) else {
        return false;
    };
    ref_node == node_id
        && probe.host_id == format!("node:{ref_node}")
        && matches!(
            probe.marker.get("uuid"),
            Some(Value::Null | Value::String(_))
        )
}

fn item_uuid(item: &Value) -> Option<&str> {
    item.get("uuid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
}

/// Steps 3–6 of 04 §10 over the fetched items (newest first): `None` is "no outcome".
///
/// Only the first [`ITEMS_LIMIT`] items are looked at. The items before the marker's are new
/// (all of them when the marker is null or not among them); the newest new item must have a
/// uuid. New `userMessage` and `queueOperation` items are classified oldest first with the
/// marker's `queued` memory and the probe's own recent texts; `now_ms` dates a counted item
/// without a timestamp.
pub fn check_items(probe: &Probe, items: &[Value], now_ms: i64) -> Option<Outcome> {
    let marker = match probe.marker.get("uuid")? {
        Value::Null => None,
        Value::String(s) => Some(s.as_str()),
        _ => return None,
    };
    let queued: Vec<String> = probe
        .marker
        .get("queued")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let items = items
        .get(..items.len().min(ITEMS_LIMIT))
        .unwrap_or_default();
    let marker_index = marker.and_then(|m| items.iter().position(|i| item_uuid(i) == Some(m)));
    let new_items = match marker_index {
        Some(ix) => items.get(..ix).unwrap_or_default(),
        None => items,
    };
    let newest = item_uuid(new_items.first()?)?.to_string();
    let out = scan_rows(
        new_items.iter().rev().filter_map(node_item_to_row),
        &ScanInput {
            own_recent_user_texts: &probe.own_recent_user_texts,
            queued: &queued,
            fallback_time_ms: now_ms,
        },
    );
    let mut next_marker = json!({ "uuid": newest });
    if !out.queued.is_empty() {
        next_marker["queued"] = json!(out.queued);
    }
    let counted = out.human_turns > 0;
    Some(Outcome::Activity {
        session_key: probe.session_key.clone(),
        human_turns: out.human_turns,
        next_marker,
        occurred_at: out.occurred_at.filter(|_| counted),
        dedupe_id: counted.then_some(newest),
        rebased: false,
    })
}

/// What the paged check of one probe came to.
#[derive(Debug, PartialEq)]
pub enum Paged {
    /// An outcome (activity), or none: nothing new, or the first page failed inconclusively.
    Outcome(Option<Outcome>),
    /// The node said, definitively, that the thread does not exist.
    Missing,
    /// The node does not know the marker (the transcript was rewritten) or does not page (an
    /// older node): the v1 check over the 50 newest items decides.
    Fallback,
    /// The node could not be reached at all; the rest of the batch would fail the same way.
    Unreachable,
}

/// The paged-node check (issue 15, superseding 04 §10 steps 2–4): pages of the items after the
/// marker, oldest first, are classified in order until the node says there are no more or
/// `until` passes; the marker moves to the newest item examined, so a walk cut short carries
/// over to the next tick. `fetch(after)` fetches one page (`None`: from the start).
pub fn check_paged(
    probe: &Probe,
    now_ms: i64,
    until: std::time::Instant,
    mut fetch: impl FnMut(Option<&str>) -> Result<ItemsPage, NodeError>,
) -> Paged {
    let marker = match probe.marker.get("uuid") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        _ => return Paged::Outcome(None),
    };
    let queued: Vec<String> = probe
        .marker
        .get("queued")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let input = ScanInput {
        own_recent_user_texts: &probe.own_recent_user_texts,
        queued: &queued,
        fallback_time_ms: now_ms,
    };
    let mut scanner = Scanner::new(&input);
    let mut after = marker;
    let mut newest: Option<String> = None;
    let mut first = true;
    'pages: loop {
        let page = match fetch(after.as_deref()) {
            Ok(page) => page,
            Err(e) if first => {
                return match e {
                    NodeError::ThreadNotFound => Paged::Missing,
                    NodeError::Refused(_) => Paged::Fallback,
                    NodeError::Unreachable(_) => Paged::Unreachable,
                    NodeError::Other(_) => Paged::Outcome(None),
                }
            }
            // A later page failed: keep what the earlier pages gave.
            Err(_) => break,
        };
        if !page.found {
            if first {
                return Paged::Fallback;
            }
            break;
        }
        first = false;
        if page.items.is_empty() {
            break;
        }
        for item in &page.items {
            // The marker can never move past an item without a uuid: stop before it.
            let Some(uuid) = item_uuid(item) else {
                break 'pages;
            };
            if let Some(row) = node_item_to_row(item) {
                scanner.feed(&row);
            }
            newest = Some(uuid.to_string());
        }
        after.clone_from(&newest);
        if !page.more || std::time::Instant::now() >= until {
            break;
        }
    }
    let Some(newest) = newest else {
        return Paged::Outcome(None);
    };
    let out = scanner.finish();
    let mut next_marker = json!({ "uuid": newest });
    if !out.queued.is_empty() {
        next_marker["queued"] = json!(out.queued);
    }
    let counted = out.human_turns > 0;
    Paged::Outcome(Some(Outcome::Activity {
        session_key: probe.session_key.clone(),
        human_turns: out.human_turns,
        next_marker,
        occurred_at: out.occurred_at.filter(|_| counted),
        dedupe_id: counted.then_some(newest),
        rebased: false,
    }))
}

/// The link baseline of a node thread (04 §3 step 6): `{uuid: null}` for an empty thread, the
/// newest item's uuid, or `None` (decline) when the newest item has none.
pub fn baseline(items: &[Value]) -> Option<Value> {
    match items.first() {
        None => Some(json!({ "uuid": null })),
        Some(item) => item_uuid(item).map(|u| json!({ "uuid": u })),
    }
}

/// Bounded history from node items (newest first), oldest first: human prompts found by the
/// classifier (queued prompts and their de-duplication included) and assistant text.
pub fn history_from_items(items: &[Value]) -> Vec<ImportTurn> {
    let mut turns = Vec::new();
    let mut queued: VecDeque<String> = VecDeque::new();
    for item in items.iter().rev() {
        if item.get("type").and_then(Value::as_str) == Some("agentMessage") {
            let text = item
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim();
            if !text.is_empty() {
                turns.push(ImportTurn {
                    role: Role::Assistant,
                    text: text.to_string(),
                });
            }
            continue;
        }
        let Some(row) = node_item_to_row(item) else {
            continue;
        };
        match classify(&row) {
            RowClass::QueuedPrompt { user_text } => {
                queued.push_back(normalise(&user_text));
                if queued.len() > QUEUED_MEMORY_MAX {
                    queued.pop_front();
                }
                turns.push(ImportTurn {
                    role: Role::User,
                    text: user_text,
                });
            }
            RowClass::QueueRemove => {
                queued.pop_front();
            }
            RowClass::Human { user_text, .. } => {
                let n = normalise(&user_text);
                if let Some(i) = queued.iter().position(|q| *q == n) {
                    queued.remove(i);
                } else {
                    turns.push(ImportTurn {
                        role: Role::User,
                        text: user_text,
                    });
                }
            }
            RowClass::NotHuman => {}
        }
    }
    // The newest turns within the bounds.
    let mut bytes = 0usize;
    let mut keep = 0usize;
    for t in turns.iter().rev() {
        if keep >= HISTORY_MESSAGES || bytes + t.text.len() > HISTORY_BYTES {
            break;
        }
        bytes += t.text.len();
        keep += 1;
    }
    let skip = turns.len() - keep;
    turns.split_off(skip)
}

// --- gateway side: the HTTP client ---------------------------------------------------------------

/// Why a node request failed.
#[derive(Debug)]
pub enum NodeError {
    /// 404 `thread_not_found`: definitive.
    ThreadNotFound,
    /// 400: the node refused the request as malformed (an older node that does not page).
    Refused(String),
    /// The node could not be reached at all (connection refused, DNS): the rest of a batch is
    /// skipped, it would fail the same way.
    Unreachable(String),
    /// Anything else: another status (a refused token), a timeout, a malformed answer.
    Other(String),
}

impl From<NodeError> for ProviderError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::ThreadNotFound => ProviderError::ThreadNotFound,
            NodeError::Refused(m) | NodeError::Unreachable(m) | NodeError::Other(m) => {
                ProviderError::Unavailable(m)
            }
        }
    }
}

/// A paired node, as the gateway sees it: a [`Provider`] for host `node:<id>` over HTTP.
pub struct NodeClient {
    id: String,
    url: String,
    token: Option<String>,
    agent: ureq::Agent,
    /// Bound of one request (connect, send and read together).
    request_timeout: Duration,
    /// Bound of one `check` batch: shorter than the monitor's deadline, so the thread returns
    /// (and frees its executor slot) before the monitor gives up on it.
    check_budget: Duration,
}

/// Percent-encodes one path segment (everything but unreserved characters).
fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl NodeClient {
    /// `url` is the node's base URL (`http://host:7421`); `token` its bearer token.
    pub fn new(id: &str, url: &str, token: Option<&str>) -> Self {
        NodeClient {
            id: id.to_string(),
            url: url.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()).map(str::to_string),
            agent: ureq::AgentBuilder::new()
                .timeout_connect(NODE_TIMEOUT)
                .timeout(NODE_TIMEOUT)
                .build(),
            request_timeout: NODE_TIMEOUT,
            check_budget: NODE_TIMEOUT,
        }
    }

    /// Fits the client under a caller's `deadline` (the monitor's provider timeout): requests
    /// and whole checks end at three quarters of it (at most 10 s per request), so a hanging
    /// node never keeps a thread past the deadline.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        let inner = deadline.mul_f64(0.75);
        self.request_timeout = NODE_TIMEOUT.min(inner);
        self.check_budget = inner;
        self.agent = ureq::AgentBuilder::new()
            .timeout_connect(self.request_timeout)
            .timeout(self.request_timeout)
            .build();
        self
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    fn get(
        &self,
        path: &str,
        query: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        let mut req = self
            .agent
            .get(&format!("{}{}", self.url, path))
            .timeout(timeout.min(self.request_timeout));
        for (k, v) in query {
            req = req.query(k, v);
        }
        if let Some(t) = &self.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let body: Value = r.into_json().unwrap_or(Value::Null);
                let err_code = body.pointer("/error/code").and_then(Value::as_str);
                if code == 404 && err_code == Some("thread_not_found") {
                    return Err(NodeError::ThreadNotFound);
                }
                if code == 400 {
                    return Err(NodeError::Refused(format!(
                        "node {} refused the request: {}",
                        self.id,
                        err_code.unwrap_or("")
                    )));
                }
                return Err(NodeError::Other(format!(
                    "node {} answered {code} {}",
                    self.id,
                    err_code.unwrap_or("")
                )));
            }
            Err(ureq::Error::Transport(t)) => {
                let msg = format!("node {} cannot be reached: {t}", self.id);
                return Err(match t.kind() {
                    ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => {
                        NodeError::Unreachable(msg)
                    }
                    _ => NodeError::Other(msg),
                });
            }
        };
        serde_json::from_reader(resp.into_reader().take(MAX_ANSWER_BYTES))
            .map_err(|e| NodeError::Other(format!("node {} sent a malformed answer: {e}", self.id)))
    }

    /// The newest `limit` items of a thread, newest first.
    fn items(
        &self,
        thread_id: &str,
        limit: usize,
        timeout: Duration,
    ) -> Result<Vec<Value>, NodeError> {
        let path = format!(
            "/v1/node/claude/threads/{}/items",
            encode_segment(thread_id)
        );
        let body = self.get(&path, &[("limit", &limit.to_string())], timeout)?;
        match body.get("items") {
            Some(Value::Array(items)) => Ok(items.clone()),
            _ => Err(NodeError::Other(format!(
                "node {} sent an answer without items",
                self.id
            ))),
        }
    }
}

impl NodeClient {
    /// One page of the items after `after` (from the start when `None`), oldest first.
    fn page(
        &self,
        thread_id: &str,
        after: Option<&str>,
        timeout: Duration,
    ) -> Result<ItemsPage, NodeError> {
        let path = format!(
            "/v1/node/claude/threads/{}/items",
            encode_segment(thread_id)
        );
        let limit = PAGE_LIMIT_DEFAULT.to_string();
        let body = self.get(
            &path,
            &[("after", after.unwrap_or("")), ("limit", &limit)],
            timeout,
        )?;
        let malformed = || NodeError::Other(format!("node {} sent a malformed page", self.id));
        let items = match body.get("items") {
            Some(Value::Array(items)) => items.clone(),
            _ => return Err(malformed()),
        };
        let flag = |k: &str| body.get(k).and_then(Value::as_bool).ok_or_else(malformed);
        Ok(ItemsPage {
            items,
            more: flag("more")?,
            found: flag("found")?,
        })
    }
}

impl Provider for NodeClient {
    fn host_id(&self) -> String {
        format!("node:{}", self.id)
    }

    fn list(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<CatalogItem>, Option<String>), ProviderError> {
        let limit = limit.to_string();
        let mut query = vec![("limit", limit.as_str())];
        if let Some(c) = cursor {
            query.push(("cursor", c));
        }
        let body = self.get("/v1/node/claude/threads", &query, self.request_timeout)?;
        let Some(items) = body.get("items").and_then(Value::as_array) else {
            return Err(ProviderError::Unavailable(format!(
                "node {} sent an answer without items",
                self.id
            )));
        };
        let page = items
            .iter()
            .filter_map(|i| {
                Some(CatalogItem {
                    thread_id: i.get("threadId")?.as_str()?.to_string(),
                    updated_at: i.get("updatedAt").and_then(Value::as_i64).unwrap_or(0),
                    size_bytes: i.get("sizeBytes").and_then(Value::as_u64),
                    cwd: i.get("cwd").and_then(Value::as_str).map(str::to_string),
                    title: i.get("title").and_then(Value::as_str).map(str::to_string),
                })
            })
            .collect();
        let next = body
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok((page, next))
    }

    fn open_thread(
        &self,
        thread_id: &str,
        with_history: bool,
    ) -> Result<ThreadInfo, ProviderError> {
        let items = self.items(thread_id, ITEMS_LIMIT, self.request_timeout)?;
        Ok(ThreadInfo {
            upstream_kind: "claude-cli".into(),
            upstream_ref: json!({"nodeId": self.id, "threadId": thread_id}),
            baseline: baseline(&items),
            history: if with_history {
                history_from_items(&items)
            } else {
                Vec::new()
            },
        })
    }

    fn check(&self, probes: &[Probe]) -> Result<Vec<Outcome>, ProviderError> {
        let until = std::time::Instant::now() + self.check_budget;
        let mut outcomes = Vec::new();
        for probe in probes {
            if !probe_applies(probe, &self.id) {
                continue;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::debug!(node = %self.id, "check budget spent; the remaining probes wait for the next tick");
                break;
            }
            let paged = check_paged(probe, wall_ms(), until, |after| {
                let left = until.saturating_duration_since(std::time::Instant::now());
                self.page(&probe.thread_id, after, left)
            });
            match paged {
                Paged::Outcome(o) => outcomes.extend(o),
                // The node answered, definitively, that the thread is gone: counted like a
                // deleted local file (issue 15; 04 §10 step 2 said never).
                Paged::Missing => outcomes.push(Outcome::Missing {
                    session_key: probe.session_key.clone(),
                }),
                Paged::Fallback => {
                    let left = until.saturating_duration_since(std::time::Instant::now());
                    match self.items(&probe.thread_id, ITEMS_LIMIT, left) {
                        Ok(items) => outcomes.extend(check_items(probe, &items, wall_ms())),
                        Err(e) => {
                            tracing::debug!(node = %self.id, session = %probe.session_key, error = ?e, "paired-node probe gave no outcome");
                        }
                    }
                }
                Paged::Unreachable => {
                    tracing::debug!(node = %self.id, "paired node unreachable; no outcome for the batch");
                    break;
                }
            }
        }
        Ok(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00.000Z
    const T0: i64 = 1_767_225_600_000;
    const NOW: i64 = T0 + 999_000;
    const THREAD: &str = "0b9f0c2e-1d3a-4c5b-8e7f-112233445566";

    fn write_thread(lines: &[String]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("-home-u-proj");
        std::fs::create_dir_all(&project).unwrap();
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(project.join(format!("{THREAD}.jsonl")), text).unwrap();
        dir
    }

    fn user(uuid: Option<&str>, text: &str) -> Value {
        let mut row = json!({"type": "user", "message": {"role": "user", "content": text},
                             "timestamp": "2026-01-01T00:00:05.000Z"});
        if let Some(u) = uuid {
            row["uuid"] = json!(u);
        }
        row
    }

    fn assistant(uuid: &str, blocks: Value) -> Value {
        json!({"type": "assistant", "uuid": uuid,
               "message": {"role": "assistant", "content": blocks}})
    }

    #[test]
    fn items_newest_first_with_row_ids_flags_and_limit() {
        let queue = json!({"type": "queue-operation", "operation": "enqueue",
                           "content": "queued prompt", "timestamp": "2026-01-01T00:00:06.000Z"})
        .to_string();
        let mut meta = user(Some("u-meta"), "meta row");
        meta["isMeta"] = json!(true);
        meta["isSidechain"] = json!(false);
        meta["origin"] = json!({"kind": "task-notification"});
        let lines = vec![
            user(Some("u-1"), "first").to_string(),
            json!({"type": "summary", "summary": "s"}).to_string(),
            assistant("a-text", json!([{"type": "thinking", "thinking": "hm"},
                                       {"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]))
            .to_string(),
            assistant("a-tool", json!([{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]))
                .to_string(),
            assistant("a-think", json!([{"type": "thinking", "thinking": "hm"}])).to_string(),
            assistant("a-other", json!([])).to_string(),
            "not json".to_string(),
            String::new(),
            queue.clone(),
            meta.to_string(),
            user(None, "no uuid").to_string(),
        ];
        let dir = write_thread(&lines);

        let items = thread_items(dir.path(), THREAD, 50).unwrap();
        let types: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "userMessage",
                "userMessage",
                "queueOperation",
                "other",
                "reasoning",
                "toolCall",
                "agentMessage",
                "userMessage"
            ]
        );
        // A row without uuid: `row:` + the first 32 hex of SHA-256 of the raw line.
        let raw = user(None, "no uuid").to_string();
        let expect = format!("row:{}", &sha256_hex32(raw.as_bytes()));
        assert_eq!(items[0]["uuid"], json!(expect));
        assert_eq!(expect.len(), 4 + 32);
        assert_eq!(items[0]["content"], json!("no uuid"));
        assert_eq!(items[0]["timestamp"], json!("2026-01-01T00:00:05.000Z"));
        assert!(items[0].get("flags").is_none());
        // Flags and origin kind copied.
        assert_eq!(items[1]["uuid"], json!("u-meta"));
        assert_eq!(items[1]["flags"], json!({"meta": true, "sidechain": false}));
        assert_eq!(items[1]["originKind"], json!("task-notification"));
        // Queue operations have no uuid of their own.
        let q = format!("row:{}", sha256_hex32(queue.as_bytes()));
        assert_eq!(
            items[2],
            json!({"uuid": q, "type": "queueOperation", "operation": "enqueue",
                   "content": "queued prompt", "timestamp": "2026-01-01T00:00:06.000Z"})
        );
        assert_eq!(items[6]["text"], json!("hello\nthere"));
        assert_eq!(items[7]["uuid"], json!("u-1"));

        // The limit keeps the newest.
        let two = thread_items(dir.path(), THREAD, 2).unwrap();
        assert_eq!(two, items[..2].to_vec());
        // Unknown thread.
        assert_eq!(
            thread_items(dir.path(), "0b9f0c2e-1d3a-4c5b-8e7f-000000000000", 50),
            Err(ProviderError::ThreadNotFound)
        );
    }

    #[test]
    fn items_across_chunks_long_rows_and_crlf() {
        // Rows longer than a chunk, CRLF endings and no final newline.
        let big = "x".repeat(150 * 1024);
        let mut lines: Vec<String> = (0..30)
            .map(|i| user(Some(&format!("u-{i}")), &format!("prompt {i}")).to_string() + "\r")
            .collect();
        lines.insert(10, user(Some("big-1"), &big).to_string());
        lines.push(user(Some("big-2"), &big).to_string());
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join(format!("{THREAD}.jsonl")), lines.join("\n")).unwrap();

        let items = thread_items(dir.path(), THREAD, 50).unwrap();
        let uuids: Vec<&str> = items.iter().map(|i| i["uuid"].as_str().unwrap()).collect();
        let mut expect: Vec<String> = vec!["big-2".into()];
        for i in (0..30).rev() {
            if i == 9 {
                expect.push("big-1".into());
            }
            expect.push(format!("u-{i}"));
        }
        assert_eq!(uuids, expect);
        assert_eq!(items[0]["content"].as_str().unwrap().len(), big.len());
        let some = thread_items(dir.path(), THREAD, 3).unwrap();
        assert_eq!(some, items[..3].to_vec());
    }

    #[test]
    fn image_data_is_left_out_of_items() {
        let row = json!({"type": "user", "uuid": "u", "message": {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
            {"type": "tool_result", "content": [{"type": "image", "source": {}}, {"type": "text", "text": "t"}]}
        ]}});
        let item = row_to_item(&row, row.to_string().as_bytes()).unwrap();
        assert_eq!(
            item["content"],
            json!([{"type": "image"},
                   {"type": "tool_result", "content": [{"type": "image"}, {"type": "text", "text": "t"}]}])
        );
    }

    #[test]
    fn agent_id_and_plan_rows_are_flagged() {
        let row = json!({"type": "user", "uuid": "u", "agentId": "a1", "planContent": "p",
                         "message": {"role": "user", "content": "hi"}});
        let item = row_to_item(&row, b"").unwrap();
        assert_eq!(item["flags"], json!({"sidechain": true, "meta": true}));
        let back = node_item_to_row(&item).unwrap();
        assert_eq!(classify(&back), RowClass::NotHuman);
    }

    fn probe(marker: Value) -> Probe {
        Probe {
            session_key: "agent:main:claude:abc".into(),
            agent_id: "main".into(),
            host_id: "node:laptop".into(),
            thread_id: THREAD.into(),
            upstream_kind: "claude-cli".into(),
            upstream_ref: json!({"nodeId": "laptop", "threadId": THREAD}),
            marker,
            own_recent_user_texts: Vec::new(),
        }
    }

    fn um(uuid: &str, text: &str, ts: Option<&str>) -> Value {
        let mut v = json!({"uuid": uuid, "type": "userMessage", "content": text});
        if let Some(t) = ts {
            v["timestamp"] = json!(t);
        }
        v
    }

    fn activity(o: Option<Outcome>) -> (u32, Value, Option<i64>, Option<String>) {
        match o {
            Some(Outcome::Activity {
                human_turns,
                next_marker,
                occurred_at,
                dedupe_id,
                ..
            }) => (human_turns, next_marker, occurred_at, dedupe_id),
            other => panic!("expected activity, got {other:?}"),
        }
    }

    #[test]
    fn s145_window_after_the_marker() {
        let items = vec![
            json!({"uuid": "item-3", "type": "agentMessage", "text": "ok"}),
            um("item-2", "native prompt", Some("2026-01-01T00:00:05.000Z")),
            um("item-1", "old prompt", Some("2026-01-01T00:00:01.000Z")),
        ];
        let (turns, marker, at, id) =
            activity(check_items(&probe(json!({"uuid": "item-1"})), &items, NOW));
        assert_eq!(turns, 1);
        assert_eq!(marker, json!({"uuid": "item-3"}));
        assert_eq!(at, Some(T0 + 5_000));
        assert_eq!(id.as_deref(), Some("item-3"));

        // Nothing new after the marker: no outcome.
        assert_eq!(
            check_items(&probe(json!({"uuid": "item-3"})), &items, NOW),
            None
        );
        // A null marker (empty at adoption): everything is new.
        let (turns, marker, _, _) =
            activity(check_items(&probe(json!({"uuid": null})), &items, NOW));
        assert_eq!((turns, marker), (2, json!({"uuid": "item-3"})));
        // A marker not among the items: everything is new.
        let (turns, _, _, _) = activity(check_items(&probe(json!({"uuid": "gone"})), &items, NOW));
        assert_eq!(turns, 2);
        // Assistant output only: the marker moves with no turns.
        let (turns, marker, at, id) =
            activity(check_items(&probe(json!({"uuid": "item-2"})), &items, NOW));
        assert_eq!(
            (turns, marker, at, id),
            (0, json!({"uuid": "item-3"}), None, None)
        );
    }

    #[test]
    fn s145_flagged_user_rows_are_not_counted() {
        let items = vec![
            json!({"uuid": "n4", "type": "userMessage", "content": "notified",
                   "originKind": "task-notification"}),
            json!({"uuid": "n3", "type": "userMessage", "content": "meta", "flags": {"meta": true}}),
            json!({"uuid": "n2", "type": "userMessage", "content": "side", "flags": {"sidechain": true}}),
            json!({"uuid": "n1", "type": "userMessage", "content": [{"type": "tool_result", "content": "x"}]}),
            um("item-1", "old", None),
        ];
        let (turns, marker, _, _) =
            activity(check_items(&probe(json!({"uuid": "item-1"})), &items, NOW));
        assert_eq!((turns, marker), (0, json!({"uuid": "n4"})));
    }

    #[test]
    fn s145_only_the_50_newest_are_classified() {
        // 60 new rows after the marker; the caller asked for 50, but even a longer list is cut.
        let mut items: Vec<Value> = (1..=60)
            .rev()
            .map(|i| um(&format!("new-{i}"), &format!("prompt {i}"), None))
            .collect();
        items.push(um("item-1", "old", None));
        let (turns, marker, at, id) =
            activity(check_items(&probe(json!({"uuid": "item-1"})), &items, NOW));
        assert_eq!(turns, 50);
        assert_eq!(marker, json!({"uuid": "new-60"}));
        assert_eq!(at, Some(NOW), "untimed items are dated now");
        assert_eq!(id.as_deref(), Some("new-60"));
    }

    #[test]
    fn newest_without_uuid_gives_no_outcome() {
        let items = vec![
            json!({"type": "userMessage", "content": "no id"}),
            um("item-1", "old", None),
        ];
        assert_eq!(
            check_items(&probe(json!({"uuid": "item-1"})), &items, NOW),
            None
        );
        assert_eq!(check_items(&probe(json!({"uuid": null})), &[], NOW), None);
    }

    #[test]
    fn echoes_and_queued_memory() {
        let mut p = probe(json!({"uuid": "item-1"}));
        p.own_recent_user_texts = vec!["sent by aware".into()];
        let items = vec![
            um(
                "u-3",
                "typed  while\nbusy",
                Some("2026-01-01T00:00:09.000Z"),
            ),
            json!({"uuid": "row:q", "type": "queueOperation", "operation": "enqueue",
                   "content": "typed while busy"}),
            um("u-2", "sent by aware", Some("2026-01-01T00:00:07.000Z")),
            um("item-1", "old", None),
        ];
        // The queued prompt counts (dated now), its later user row does not, the echo does not.
        let (turns, marker, at, _) = activity(check_items(&p, &items, NOW));
        assert_eq!((turns, at), (1, Some(NOW)));
        assert_eq!(marker, json!({"uuid": "u-3"}));

        // Queued memory carried in the marker across ticks.
        let first = &items[1..];
        let (turns, marker, _, _) = activity(check_items(&p, first, NOW));
        assert_eq!(turns, 1);
        assert_eq!(
            marker,
            json!({"uuid": "row:q", "queued": ["typed while busy"]})
        );
        let p2 = probe(marker);
        let (turns, marker, _, _) = activity(check_items(&p2, &items, NOW));
        assert_eq!((turns, marker), (0, json!({"uuid": "u-3"})));
    }

    #[test]
    fn probe_applicability() {
        assert!(probe_applies(&probe(json!({"uuid": null})), "laptop"));
        assert!(probe_applies(&probe(json!({"uuid": "x"})), "laptop"));
        assert!(!probe_applies(&probe(json!({"uuid": "x"})), "other"));
        assert!(!probe_applies(&probe(json!({"offset": 5})), "laptop"));
        assert!(!probe_applies(&probe(json!({"uuid": 5})), "laptop"));
        let mut p = probe(json!({"uuid": null}));
        p.host_id = "gateway:local".into();
        assert!(!probe_applies(&p, "laptop"));
        let mut p = probe(json!({"uuid": null}));
        p.upstream_ref = json!({"filePath": "/x"});
        assert!(!probe_applies(&p, "laptop"));
    }

    #[test]
    fn baseline_and_history() {
        assert_eq!(baseline(&[]), Some(json!({"uuid": null})));
        assert_eq!(baseline(&[um("u", "x", None)]), Some(json!({"uuid": "u"})));
        assert_eq!(
            baseline(&[json!({"type": "userMessage", "content": "x"})]),
            None
        );
        let items = vec![
            json!({"uuid": "a2", "type": "agentMessage", "text": " done "}),
            json!({"uuid": "t", "type": "toolCall"}),
            um("u2", "typed while busy", None),
            json!({"uuid": "row:q", "type": "queueOperation", "operation": "enqueue",
                   "content": "typed while busy"}),
            json!({"uuid": "m", "type": "userMessage", "content": "meta", "flags": {"meta": true}}),
            um("u1", "hello", None),
        ];
        let h = history_from_items(&items);
        let got: Vec<(Role, &str)> = h.iter().map(|t| (t.role, t.text.as_str())).collect();
        assert_eq!(
            got,
            [
                (Role::User, "hello"),
                (Role::User, "typed while busy"),
                (Role::Assistant, "done")
            ]
        );
    }

    #[test]
    fn client_maps_errors() {
        // Nothing listens on port 9 of loopback (discard); a refused connection is unavailable.
        let c = NodeClient::new("laptop", "http://127.0.0.1:9/", Some("t"));
        assert_eq!(c.host_id(), "node:laptop");
        assert!(matches!(
            c.open_thread(THREAD, false),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            c.list(10, None),
            Err(ProviderError::Unavailable(_))
        ));
        assert_eq!(c.check(&[probe(json!({"uuid": null}))]), Ok(Vec::new()));
        assert_eq!(encode_segment("a b/c%"), "a%20b%2Fc%25");
    }

    #[test]
    fn pages_after_a_uuid_oldest_first() {
        let lines: Vec<String> = (1..=7)
            .map(|i| user(Some(&format!("u-{i}")), &format!("prompt {i}")).to_string())
            .collect();
        let dir = write_thread(&lines);
        let uuids = |p: &ItemsPage| -> Vec<String> {
            p.items
                .iter()
                .map(|i| i["uuid"].as_str().unwrap().to_string())
                .collect()
        };
        let page = thread_items_after(dir.path(), THREAD, Some("u-2"), 3).unwrap();
        assert_eq!(uuids(&page), ["u-3", "u-4", "u-5"]);
        assert!(page.more && page.found);
        let page = thread_items_after(dir.path(), THREAD, Some("u-5"), 3).unwrap();
        assert_eq!(uuids(&page), ["u-6", "u-7"]);
        assert!(!page.more && page.found);
        let page = thread_items_after(dir.path(), THREAD, Some("u-7"), 3).unwrap();
        assert!(page.items.is_empty() && !page.more && page.found);
        let page = thread_items_after(dir.path(), THREAD, None, 2).unwrap();
        assert_eq!(uuids(&page), ["u-1", "u-2"]);
        assert!(page.more && page.found);
        let page = thread_items_after(dir.path(), THREAD, Some("gone"), 2).unwrap();
        assert!(!page.found);
        assert_eq!(
            thread_items_after(dir.path(), "0b9f0c2e-1d3a-4c5b-8e7f-000000000000", None, 2),
            Err(ProviderError::ThreadNotFound)
        );
    }

    #[test]
    fn a_row_longer_than_the_window_is_streamed_into_a_slim_item() {
        let pasted = "pasted ".repeat(3 * 1024 * 1024 / 7);
        let lines = vec![
            user(Some("u-1"), "first").to_string(),
            user(Some("u-big"), &pasted).to_string() + "\r",
            user(None, &pasted).to_string(),
            user(Some("u-3"), "after").to_string(),
        ];
        let dir = write_thread(&lines);
        let page = thread_items_after(dir.path(), THREAD, Some("u-1"), 10).unwrap();
        let uuids: Vec<&str> = page
            .items
            .iter()
            .map(|i| i["uuid"].as_str().unwrap())
            .collect();
        let row_id = format!("row:{}", sha256_hex32(lines[2].as_bytes()));
        assert_eq!(uuids, ["u-big", row_id.as_str(), "u-3"]);
        let content = page.items[0]["content"].as_str().unwrap();
        assert!(content.len() < 600 * 1024, "slim: {}", content.len());
        for item in &page.items {
            let row = node_item_to_row(item).unwrap();
            assert!(
                matches!(classify(&row), RowClass::Human { .. }),
                "{item:.200}"
            );
        }
        // A last line over the window without a newline is not held whole either.
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(
            project.join(format!("{THREAD}.jsonl")),
            format!("{}\n{}", lines[0], "x".repeat(3 * 1024 * 1024)),
        )
        .unwrap();
        let items = thread_items(dir.path(), THREAD, 50).unwrap();
        assert_eq!(items.len(), 1, "the unfinished line gives no item");
    }

    fn page(items: &[Value], more: bool) -> ItemsPage {
        ItemsPage {
            items: items.to_vec(),
            more,
            found: true,
        }
    }

    #[test]
    fn paged_check_walks_pages_and_carries_over_at_the_deadline() {
        let p = probe(json!({"uuid": "item-1"}));
        let pages = [
            vec![um("a", "one", None), um("b", "two", None)],
            vec![um("c", "three", None)],
        ];
        let later = std::time::Instant::now() + Duration::from_secs(60);
        let fetch = |after: Option<&str>| -> Result<ItemsPage, NodeError> {
            Ok(match after {
                Some("item-1") => page(&pages[0], true),
                Some("b") => page(&pages[1], false),
                _ => page(&[], false),
            })
        };
        let Paged::Outcome(o) = check_paged(&p, NOW, later, fetch) else {
            panic!("outcome expected")
        };
        let (turns, marker, _, id) = activity(o);
        assert_eq!(
            (turns, marker, id.as_deref()),
            (3, json!({"uuid": "c"}), Some("c"))
        );

        // Past the deadline after the first page: its items count, the rest waits.
        let Paged::Outcome(o) = check_paged(&p, NOW, std::time::Instant::now(), fetch) else {
            panic!("outcome expected")
        };
        let (turns, marker, _, _) = activity(o);
        assert_eq!((turns, marker), (2, json!({"uuid": "b"})));
        let Paged::Outcome(o) = check_paged(&probe(json!({"uuid": "b"})), NOW, later, fetch) else {
            panic!("outcome expected")
        };
        assert_eq!(activity(o).0, 1);

        // Nothing new: no outcome. Errors on the first page.
        assert_eq!(
            check_paged(&probe(json!({"uuid": "c"})), NOW, later, fetch),
            Paged::Outcome(None)
        );
        let fail = |e: fn() -> NodeError| {
            check_paged(&p, NOW, later, move |_| -> Result<ItemsPage, NodeError> {
                Err(e())
            })
        };
        assert_eq!(fail(|| NodeError::ThreadNotFound), Paged::Missing);
        assert_eq!(fail(|| NodeError::Refused("old".into())), Paged::Fallback);
        assert_eq!(
            fail(|| NodeError::Unreachable("x".into())),
            Paged::Unreachable
        );
        assert_eq!(
            fail(|| NodeError::Other("timeout".into())),
            Paged::Outcome(None)
        );
        let unknown = |_: Option<&str>| -> Result<ItemsPage, NodeError> {
            Ok(ItemsPage {
                items: vec![],
                more: false,
                found: false,
            })
        };
        assert_eq!(check_paged(&p, NOW, later, unknown), Paged::Fallback);
    }
}
