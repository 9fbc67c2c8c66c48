//! The node side of the protocol: a thread's items, read from the end of its file in bounded
//! chunks, for `aware node serve` (04 §2.2; docs/upstream.md §4). Claude rows become the items of
//! 04 §2.2; Codex rows become [`CodexItem`]s.

use super::protocol::{CodexItem, CodexItemBody, ItemsPage, ThreadEntry, ThreadsPage};
use crate::bigrow::{row_id_of_digest, slim_codex_row, slim_row, SlimRow};
use crate::claude::local::{open_in_root, read_at, LocalClaude};
use crate::claude::scan::WINDOW_BYTES;
use crate::codex::classify::may_be_prompt;
use crate::codex::provider::assistant_text as codex_assistant_text;
use crate::codex::LocalCodex;
use crate::provider::{CatalogItem, Provider, ProviderError};
use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes read per step when walking a transcript backwards.
const CHUNK_BYTES: u64 = 64 * 1024;
/// A page stops growing past this many bytes of items (one oversized item may pass it).
const PAGE_BYTES: usize = 8 << 20;

/// Opens Claude thread `thread_id` under `root` for the node's answers.
///
/// "Thread not found" is definitive (the gateway counts it towards `upstream_missing`), so it is
/// answered only when the root itself can be read and no regular transcript of that id lies
/// under it; an unreadable root is an I/O error, never a deletion.
fn open_claude_thread(root: &Path, thread_id: &str) -> Result<(File, u64), ProviderError> {
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

/// Opens Codex thread `thread_id` under `home/sessions`, with the same rule: the rollout is
/// found by [`LocalCodex::find_rollout`] and opened by [`open_in_root`] (a regular file whose
/// canonical path, and the path the kernel opened, lie under the root; never a FIFO).
fn open_codex_thread(home: &Path, thread_id: &str) -> Result<(File, u64), ProviderError> {
    let codex = LocalCodex::new(home);
    let (root, path) = codex.find_rollout(thread_id)?;
    let (file, meta) = open_in_root(&root, &path)?;
    Ok((file, meta.len()))
}

/// The `limit` newest items of Claude thread `thread_id` under `root`, newest first (04 §2.2,
/// the v1 request, still answered).
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
    let (mut file, size) = open_claude_thread(root, thread_id)?;
    newest_items(&mut file, size, limit, line_item)
}

/// [`thread_items`] for Codex thread `thread_id` under `home/sessions`.
pub fn codex_thread_items(
    home: &Path,
    thread_id: &str,
    limit: usize,
) -> Result<Vec<CodexItem>, ProviderError> {
    let (mut file, size) = open_codex_thread(home, thread_id)?;
    newest_items(&mut file, size, limit, codex_line_item)
}

/// The items that follow the row whose uuid is `after` (from the start of the transcript when
/// `after` is `None`), oldest first, at most `limit` of them and about [`PAGE_BYTES`], with a
/// `more` flag (decision D24). When `after` is not in the transcript (it was rewritten), `found` is
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
    let (mut file, size) = open_claude_thread(root, thread_id)?;
    items_after(&mut file, size, after, limit, line_item, item_uuid)
}

/// [`thread_items_after`] for Codex thread `thread_id` under `home/sessions`.
pub fn codex_thread_items_after(
    home: &Path,
    thread_id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<ItemsPage<CodexItem>, ProviderError> {
    let (mut file, size) = open_codex_thread(home, thread_id)?;
    items_after(&mut file, size, after, limit, codex_line_item, |i| {
        Some(i.uuid.as_str())
    })
}

/// Builds the item of one line, if it gives one.
type BuildItem<I> = fn(&mut File, Line) -> Result<Option<I>, ProviderError>;

fn newest_items<I>(
    file: &mut File,
    size: u64,
    limit: usize,
    build: BuildItem<I>,
) -> Result<Vec<I>, ProviderError> {
    let mut items = Vec::new();
    if limit == 0 {
        return Ok(items);
    }
    walk_back(file, size, |file, line| {
        if let Some(item) = build(file, line)? {
            items.push(item);
        }
        Ok(items.len() >= limit)
    })?;
    Ok(items)
}

fn items_after<I: Serialize>(
    file: &mut File,
    size: u64,
    after: Option<&str>,
    limit: usize,
    build: BuildItem<I>,
    uuid: impl Fn(&I) -> Option<&str>,
) -> Result<ItemsPage<I>, ProviderError> {
    // Newest first while walking back; the front is dropped when the page is over its bounds.
    let mut kept: VecDeque<(I, usize)> = VecDeque::new();
    let (mut bytes, mut more, mut found) = (0usize, false, after.is_none());
    let limit = limit.max(1);
    walk_back(file, size, |file, line| {
        let Some(item) = build(file, line)? else {
            return Ok(false);
        };
        if after.is_some() && uuid(&item) == after {
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
/// span (decision D7: a line without a newline is never read whole into memory).
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

/// The item of one line, streaming a line too long to hold (decision D23).
fn line_item(file: &mut File, line: Line) -> Result<Option<Value>, ProviderError> {
    match line {
        Line::Bytes(bytes) => Ok(line_to_item(bytes)),
        Line::Span(start, end) => {
            let slim = slim_span(file, start, end, slim_row)?;
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
    row_to_item_with_id(row, || row_id_of_digest(&Sha256::digest(raw)))
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

/// The Codex item of one line: its slim row (the same tokenizer, and so the same `row:` id,
/// for a short line and for one longer than the window), kept when the classifier may call it
/// human, or an assistant message's text. Other rows give no item.
fn codex_line_item(file: &mut File, line: Line) -> Result<Option<CodexItem>, ProviderError> {
    let io = |e: std::io::Error| ProviderError::Io(e.to_string());
    let slim = match line {
        Line::Bytes(bytes) => {
            let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(None);
            }
            slim_codex_row(bytes).map_err(io)?
        }
        Line::Span(start, end) => slim_span(file, start, end, slim_codex_row)?,
    };
    Ok(codex_item(slim))
}

/// The slim row of the line `[start, end)` of `file` (a final `\r` left out), streamed by
/// `slim` in bounded memory: a line too long to hold (decision D23).
fn slim_span<'f, R>(
    file: &'f mut File,
    start: u64,
    mut end: u64,
    slim: impl FnOnce(std::io::BufReader<std::io::Take<&'f File>>) -> std::io::Result<R>,
) -> Result<R, ProviderError> {
    let io = |e: std::io::Error| ProviderError::Io(e.to_string());
    if end > start && read_at(file, end - 1, 1).map_err(io)? == b"\r" {
        end -= 1;
    }
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let file: &'f File = file;
    slim(std::io::BufReader::new(file.take(end - start))).map_err(io)
}

/// The item of a slim Codex row, if it gives one.
pub fn codex_item(slim: SlimRow) -> Option<CodexItem> {
    let row = slim.row?;
    let body = if may_be_prompt(&row) {
        CodexItemBody::UserMessage { row }
    } else {
        CodexItemBody::AgentMessage {
            text: codex_assistant_text(&row)?,
        }
    };
    Some(CodexItem {
        uuid: slim.row_id,
        body,
    })
}

fn entry(catalog: &str, c: CatalogItem) -> ThreadEntry {
    ThreadEntry {
        catalog_id: catalog.to_string(),
        thread_id: c.thread_id,
        updated_at: c.updated_at,
        size_bytes: c.size_bytes,
        cwd: c.cwd,
        title: c.title,
    }
}

/// One catalog page of the local transcripts under `root` (04 §2.1), as the node answers it.
pub fn thread_list(
    root: &Path,
    limit: usize,
    cursor: Option<&str>,
) -> Result<ThreadsPage, ProviderError> {
    let (items, next_cursor) = LocalClaude::new(root).list(limit, cursor)?;
    Ok(ThreadsPage {
        items: items.into_iter().map(|c| entry("claude", c)).collect(),
        next_cursor,
    })
}

/// One catalog page of the Codex rollouts under `home/sessions`, as the node answers it.
pub fn codex_thread_list(
    home: &Path,
    limit: usize,
    cursor: Option<&str>,
) -> Result<ThreadsPage, ProviderError> {
    let (items, next_cursor) = LocalCodex::new(home).list(limit, cursor)?;
    Ok(ThreadsPage {
        items: items.into_iter().map(|c| entry("codex", c)).collect(),
        next_cursor,
    })
}

/// The uuid of a Claude item, when it has a non-empty one.
pub(crate) fn item_uuid(item: &Value) -> Option<&str> {
    item.get("uuid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claude::classify::{classify, RowClass};
    use crate::claude::scan::node_item_to_row;

    /// The first 32 lowercase hex characters of SHA-256 of `bytes`, computed here apart from
    /// the code under test.
    fn sha256_hex32(bytes: &[u8]) -> String {
        Sha256::digest(bytes)
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

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

    // --- Codex ----------------------------------------------------------------------------------

    const CODEX_ID: &str = "019a0000-0000-7000-8000-00000000000a";

    fn codex_meta(id: &str) -> String {
        format!("{{\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"{id}\",\"cwd\":\"/w\"}}}}")
    }

    fn codex_prompt(text: &str) -> [String; 2] {
        [
            format!("{{\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"{text}\"}}]}}}}"),
            format!("{{\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"{text}\",\"images\":[]}}}}"),
        ]
    }

    fn codex_answer(text: &str) -> String {
        format!("{{\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"{text}\"}}]}}}}")
    }

    /// A Codex home with one rollout of `lines` (after its metadata row) for `CODEX_ID`.
    fn codex_home(lines: &[String]) -> (tempfile::TempDir, std::path::PathBuf) {
        let home = tempfile::tempdir().unwrap();
        let day = home.path().join("sessions/2026/01/01");
        std::fs::create_dir_all(&day).unwrap();
        let path = day.join(format!("rollout-2026-01-01T00-00-00-{CODEX_ID}.jsonl"));
        let mut text = codex_meta(CODEX_ID);
        for l in lines {
            text.push('\n');
            text.push_str(l);
        }
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        (home, path)
    }

    fn row_id(line: &str) -> String {
        format!("row:{}", sha256_hex32(line.as_bytes()))
    }

    #[test]
    fn codex_items_are_prompt_shapes_and_assistant_text_with_row_ids() {
        let [twin, event] = codex_prompt("fix it");
        let tool = "{\"type\":\"response_item\",\"payload\":{\"type\":\"function_call_output\",\"output\":\"ok\"}}".to_string();
        let ctx = "{\"type\":\"event_msg\",\"payload\":{\"type\":\"user_message\",\"message\":\"x\",\"kind\":\"environment_context\"}}".to_string();
        let answer = codex_answer("done");
        let (home, _) = codex_home(&[
            twin.clone(),
            event.clone(),
            tool,
            ctx.clone(),
            answer.clone(),
        ]);
        let items = codex_thread_items(home.path(), CODEX_ID, 50).unwrap();
        // Newest first: the answer, the context event (a prompt shape the gateway's classifier
        // refuses), the prompt event. The twin and the tool output give no item.
        let ids: Vec<&str> = items.iter().map(|i| i.uuid.as_str()).collect();
        assert_eq!(ids, [row_id(&answer), row_id(&ctx), row_id(&event)]);
        assert_eq!(
            items[0].body,
            CodexItemBody::AgentMessage {
                text: "done".into()
            }
        );
        let CodexItemBody::UserMessage { row } = &items[2].body else {
            panic!("{:?}", items[2]);
        };
        assert_eq!(
            crate::codex::classify::classify_codex(row),
            crate::claude::classify::RowClass::Human {
                user_text: "fix it".into(),
                occurred_at: Some(1_767_225_601_000)
            }
        );
        let page =
            codex_thread_items_after(home.path(), CODEX_ID, Some(&row_id(&event)), 1).unwrap();
        assert_eq!(page.items, vec![items[1].clone()]);
        assert!(page.more && page.found);
        let listed = codex_thread_list(home.path(), 10, None).unwrap();
        assert_eq!(listed.items[0].catalog_id, "codex");
        assert_eq!(listed.items[0].thread_id, CODEX_ID);
        assert_eq!(listed.items[0].title.as_deref(), Some("fix it"));
    }

    #[test]
    fn a_codex_row_longer_than_the_window_is_streamed_with_the_same_id() {
        let text = "pasted ".repeat(3 * 1024 * 1024 / 7);
        let [_, big] = codex_prompt(&text);
        let (home, _) = codex_home(&[big.clone(), codex_answer("ok")]);
        let page = codex_thread_items_after(home.path(), CODEX_ID, None, 10).unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.items[0].uuid, row_id(&big));
        let CodexItemBody::UserMessage { row } = &page.items[0].body else {
            panic!("a prompt item expected");
        };
        assert!(row.to_string().len() < 600 * 1024, "slim");
        assert!(matches!(
            crate::codex::classify::classify_codex(row),
            crate::claude::classify::RowClass::Human { .. }
        ));
    }

    #[cfg(unix)]
    #[test]
    fn codex_threads_are_found_only_inside_the_root_and_a_missing_root_is_an_error() {
        let (home, path) = codex_home(&codex_prompt("in root"));
        let outside = tempfile::tempdir().unwrap();
        // A symlink leading out of the root, named as a rollout of another thread.
        let other = "019a0000-0000-7000-8000-00000000000b";
        let secret = outside.path().join("secret.jsonl");
        std::fs::write(&secret, format!("{}\n", codex_meta(other))).unwrap();
        let day = path.parent().unwrap();
        std::os::unix::fs::symlink(
            &secret,
            day.join(format!("rollout-2026-01-01T00-00-01-{other}.jsonl")),
        )
        .unwrap();
        // A FIFO named as a rollout: never opened for reading (it would block).
        let fifo_id = "019a0000-0000-7000-8000-00000000000c";
        let fifo = day.join(format!("rollout-2026-01-01T00-00-02-{fifo_id}.jsonl"));
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for id in [other, fifo_id, "../../etc/passwd", ""] {
            assert_eq!(
                codex_thread_items(home.path(), id, 50),
                Err(ProviderError::ThreadNotFound),
                "{id}"
            );
        }
        assert_eq!(
            codex_thread_items(home.path(), CODEX_ID, 50).unwrap().len(),
            1
        );
        // Deleted: not found. The sessions root gone: an error, never a deletion.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            codex_thread_items_after(home.path(), CODEX_ID, None, 10),
            Err(ProviderError::ThreadNotFound)
        );
        std::fs::rename(home.path().join("sessions"), home.path().join("moved")).unwrap();
        assert!(matches!(
            codex_thread_items(home.path(), CODEX_ID, 50),
            Err(ProviderError::Io(_))
        ));
    }
}
