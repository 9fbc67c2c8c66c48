//! The local Claude Code provider (04 §2.1, §8): transcripts under `[claude] root`.

use crate::classify::{classify, RowClass};
use crate::provider::{CatalogItem, Outcome, Probe, Provider, ProviderError, ThreadInfo};
use crate::scan::{scan_window, ScanInput, WINDOW_BYTES};
use aware_engine::{ImportTurn, Role};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Bytes read from the head of a transcript for `cwd` and `title`.
const HEAD_BYTES: u64 = 64 * 1024;
/// History imported at adoption: the newest rows up to these bounds (04 §3 step 5).
const HISTORY_BYTES: u64 = 512 * 1024;
const HISTORY_MESSAGES: usize = 200;

pub struct LocalClaude {
    root: PathBuf,
    /// Transcript bytes read by checks, so tests can prove a tick reads only what was appended.
    check_bytes_read: std::sync::atomic::AtomicU64,
}

/// A thread id is the stem of `<uuid>.jsonl`.
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

pub(crate) fn mtime_ms(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

/// Reads `len` bytes at `offset`, looping on short reads.
pub(crate) fn read_at(file: &mut File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

pub(crate) fn rows(bytes: &[u8]) -> impl Iterator<Item = Value> + '_ {
    bytes.split(|b| *b == b'\n').filter_map(|line| {
        serde_json::from_slice::<Value>(line.strip_suffix(b"\r").unwrap_or(line)).ok()
    })
}

fn assistant_text(row: &Value) -> Option<String> {
    if row.get("type")?.as_str()? != "assistant" {
        return None;
    }
    let text: Vec<&str> = row
        .pointer("/message/content")?
        .as_array()?
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let joined = text.join("\n").trim().to_string();
    (!joined.is_empty()).then_some(joined)
}

impl LocalClaude {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalClaude {
            root: root.into(),
            check_bytes_read: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Every thread file, the newest per thread id when several projects hold it.
    fn threads(&self) -> Vec<(String, PathBuf, std::fs::Metadata)> {
        let mut found: std::collections::HashMap<String, (PathBuf, std::fs::Metadata)> =
            Default::default();
        let Ok(projects) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        for project in projects.flatten() {
            let Ok(files) = std::fs::read_dir(project.path()) else {
                continue;
            };
            for f in files.flatten() {
                let path = f.path();
                let Some(stem) = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .map(str::to_string)
                else {
                    continue;
                };
                if path.extension().and_then(|e| e.to_str()) != Some("jsonl") || !is_uuid(&stem) {
                    continue;
                }
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                let newer = found
                    .get(&stem)
                    .is_none_or(|(_, m)| mtime_ms(&meta) > mtime_ms(m));
                if newer {
                    found.insert(stem, (path, meta));
                }
            }
        }
        found.into_iter().map(|(id, (p, m))| (id, p, m)).collect()
    }

    pub(crate) fn find(&self, thread_id: &str) -> Option<(PathBuf, std::fs::Metadata)> {
        self.threads()
            .into_iter()
            .find(|(id, _, _)| id == thread_id)
            .map(|(_, p, m)| (p, m))
    }

    fn head_details(path: &Path) -> (Option<String>, Option<String>) {
        let Ok(mut f) = File::open(path) else {
            return (None, None);
        };
        let Ok(head) = read_at(&mut f, 0, HEAD_BYTES as usize) else {
            return (None, None);
        };
        let (mut cwd, mut title) = (None, None);
        for row in rows(&head) {
            if cwd.is_none() {
                cwd = row.get("cwd").and_then(Value::as_str).map(str::to_string);
            }
            if title.is_none() {
                if let RowClass::Human { user_text, .. } = classify(&row) {
                    let t: String = user_text.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !t.is_empty() {
                        title = Some(t.chars().take(80).collect());
                    }
                }
            }
            if cwd.is_some() && title.is_some() {
                break;
            }
        }
        (cwd, title)
    }

    fn history(path: &Path, size: u64) -> Vec<ImportTurn> {
        let Ok(mut f) = File::open(path) else {
            return Vec::new();
        };
        let start = size.saturating_sub(HISTORY_BYTES);
        let Ok(mut bytes) = read_at(&mut f, start, (size - start) as usize) else {
            return Vec::new();
        };
        if start > 0 {
            // Started mid-row: drop the partial first line.
            let cut = bytes
                .iter()
                .position(|b| *b == b'\n')
                .map_or(bytes.len(), |i| i + 1);
            bytes.drain(..cut);
        }
        let mut turns = Vec::new();
        let mut queued: std::collections::VecDeque<String> = Default::default();
        for row in rows(&bytes) {
            match classify(&row) {
                RowClass::QueuedPrompt { user_text } => {
                    queued.push_back(crate::classify::normalise(&user_text));
                    if queued.len() > 20 {
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
                    let n = crate::classify::normalise(&user_text);
                    if let Some(i) = queued.iter().position(|q| *q == n) {
                        queued.remove(i);
                    } else {
                        turns.push(ImportTurn {
                            role: Role::User,
                            text: user_text,
                        });
                    }
                }
                RowClass::NotHuman => {
                    if let Some(t) = assistant_text(&row) {
                        turns.push(ImportTurn {
                            role: Role::Assistant,
                            text: t,
                        });
                    }
                }
            }
        }
        let skip = turns.len().saturating_sub(HISTORY_MESSAGES);
        turns.split_off(skip)
    }

    /// The local check of 04 §8 for one probe; `None` is "no outcome".
    fn check_one(&self, probe: &Probe) -> Option<Outcome> {
        if probe.upstream_kind != "claude-cli" {
            return None;
        }
        let path = probe.upstream_ref.get("filePath")?.as_str()?;
        let offset = probe.marker.get("offset")?.as_u64()?;
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
        let missing = Outcome::Missing {
            session_key: probe.session_key.clone(),
        };
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(missing),
            Err(_) => return None,
        };
        let meta = file.metadata().ok()?;
        if !meta.is_file() {
            return Some(missing);
        }
        let size = meta.len();
        if size == offset {
            return None;
        }
        if size < offset {
            tracing::warn!(event = "claude_transcript_shrank", session = %probe.session_key, old_offset = offset, new_size = size,
                "transcript shrank below the marker; rebasing to its end");
            return Some(Outcome::Activity {
                session_key: probe.session_key.clone(),
                human_turns: 0,
                next_marker: json!({"offset": size}),
                occurred_at: None,
                dedupe_id: None,
                rebased: true,
            });
        }
        let len = ((size - offset) as usize).min(WINDOW_BYTES);
        let window = read_at(&mut file, offset, len).ok()?;
        self.check_bytes_read
            .fetch_add(window.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let input = ScanInput {
            own_recent_user_texts: &probe.own_recent_user_texts,
            queued: &queued,
            fallback_time_ms: mtime_ms(&meta),
        };
        let (consumed, out) = scan_window(&window, &input)?;
        let next = offset + consumed as u64;
        let mut marker = json!({"offset": next});
        if !out.queued.is_empty() {
            marker["queued"] = json!(out.queued);
        }
        let counted = out.human_turns > 0;
        Some(Outcome::Activity {
            session_key: probe.session_key.clone(),
            human_turns: out.human_turns,
            next_marker: marker,
            occurred_at: out.occurred_at.filter(|_| counted),
            dedupe_id: counted.then(|| next.to_string()),
            rebased: false,
        })
    }
}

impl Provider for LocalClaude {
    fn host_id(&self) -> String {
        "gateway:local".into()
    }

    fn list(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<CatalogItem>, Option<String>), ProviderError> {
        let mut all = self.threads();
        all.sort_by(|a, b| {
            mtime_ms(&b.2)
                .cmp(&mtime_ms(&a.2))
                .then_with(|| a.0.cmp(&b.0))
        });
        let start: usize = match cursor {
            None => 0,
            Some(c) => c.parse().map_err(|_| ProviderError::InvalidCursor)?,
        };
        let page: Vec<CatalogItem> = all
            .iter()
            .skip(start)
            .take(limit)
            .map(|(id, path, meta)| {
                let (cwd, title) = Self::head_details(path);
                CatalogItem {
                    thread_id: id.clone(),
                    updated_at: mtime_ms(meta),
                    size_bytes: Some(meta.len()),
                    cwd,
                    title,
                }
            })
            .collect();
        let next = (start + page.len() < all.len()).then(|| (start + page.len()).to_string());
        Ok((page, next))
    }

    fn open_thread(
        &self,
        thread_id: &str,
        with_history: bool,
    ) -> Result<ThreadInfo, ProviderError> {
        let (path, meta) = self.find(thread_id).ok_or(ProviderError::ThreadNotFound)?;
        let abs = std::fs::canonicalize(&path).unwrap_or(path);
        Ok(ThreadInfo {
            upstream_kind: "claude-cli".into(),
            upstream_ref: json!({"filePath": abs.to_string_lossy()}),
            baseline: Some(json!({"offset": meta.len()})),
            history: if with_history {
                Self::history(&abs, meta.len())
            } else {
                Vec::new()
            },
        })
    }

    fn check(&self, probes: &[Probe]) -> Result<Vec<Outcome>, ProviderError> {
        Ok(probes.iter().filter_map(|p| self.check_one(p)).collect())
    }
}

impl LocalClaude {
    /// Total transcript bytes the checks have read so far.
    pub fn check_bytes_read(&self) -> u64 {
        self.check_bytes_read
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn probe(path: &Path, offset: u64) -> Probe {
        Probe {
            session_key: "agent:main:claude:x".into(),
            agent_id: "main".into(),
            host_id: "gateway:local".into(),
            thread_id: "t".into(),
            upstream_kind: "claude-cli".into(),
            upstream_ref: json!({"filePath": path.to_string_lossy()}),
            marker: json!({"offset": offset}),
            own_recent_user_texts: Vec::new(),
        }
    }

    #[test]
    fn incremental_ticks_read_only_the_new_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let old_row = format!(
            "{{\"type\":\"assistant\",\"message\":{{\"content\":\"{}\"}}}}\n",
            "x".repeat(50_000)
        );
        std::fs::write(&path, old_row.repeat(20)).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let p = LocalClaude::new(dir.path());
        assert!(
            p.check(&[probe(&path, size)]).unwrap().is_empty(),
            "no growth, no outcome"
        );
        assert_eq!(p.check_bytes_read(), 0);
        let new_row = b"{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"more\"}}\n";
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(new_row)
            .unwrap();
        let out = p.check(&[probe(&path, size)]).unwrap();
        assert_eq!(
            p.check_bytes_read(),
            new_row.len() as u64,
            "only the appended bytes were read"
        );
        match &out[0] {
            Outcome::Activity {
                human_turns,
                next_marker,
                ..
            } => {
                assert_eq!(
                    (*human_turns, next_marker["offset"].as_u64()),
                    (1, Some(size + new_row.len() as u64))
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
