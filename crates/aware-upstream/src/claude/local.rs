//! The local Claude Code provider (04 §2.1, §8): transcripts under `[claude] root`.

use crate::bigrow::slim_row;
use crate::claude::classify::{classify, RowClass};
use crate::claude::scan::{scan_lines, ScanInput, Scanner, WINDOW_BYTES};
use crate::provider::{CatalogItem, Outcome, Probe, Provider, ProviderError, ThreadInfo};
use aware_engine::{ImportTurn, Role};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Oversized rows one check consumes at most before it returns its progress (the rest waits
/// for the next tick), so one check's time stays bounded.
const OVERSIZED_PER_CHECK: u64 = 256 << 20;
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

/// The extent of a row longer than the 1 MiB window that starts at `at` (decision D23): its newline
/// is looked for in 64 KiB reads from `at + WINDOW_BYTES`, so memory stays bounded whatever the
/// row's size. Returns `(end, row_len)` (the newline's offset and the row's length without a
/// trailing `\r`), `Some(None)` while the row has no newline yet (still being written), `None`
/// on a read error. Bytes read are added to `read`. Shared by the Claude and Codex checks.
pub(crate) fn oversized_row_extent(
    file: &mut File,
    at: u64,
    size: u64,
    read: &std::sync::atomic::AtomicU64,
) -> Option<Option<(u64, u64)>> {
    let mut pos = at + WINDOW_BYTES as u64;
    let mut end = None;
    while pos < size {
        let len = ((size - pos) as usize).min(64 * 1024);
        let chunk = read_at(file, pos, len).ok()?;
        read.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if let Some(i) = chunk.iter().position(|b| *b == b'\n') {
            end = Some(pos + i as u64);
            break;
        }
        if chunk.is_empty() {
            break;
        }
        pos += chunk.len() as u64;
    }
    let Some(end) = end else {
        return Some(None);
    };
    let mut row_len = end - at;
    if row_len > 0 && read_at(file, end - 1, 1).ok()? == b"\r" {
        row_len -= 1;
    }
    Some(Some((end, row_len)))
}

/// Why a transcript was not opened.
#[derive(Debug)]
pub(crate) enum OpenRefused {
    NotFound,
    /// A FIFO, socket, device or directory: never read (a FIFO would block the reading thread).
    NotRegular,
    /// Its canonical path is not under the configured root (a symlink leading out of it).
    OutsideRoot,
    Io(std::io::Error),
}

impl From<OpenRefused> for ProviderError {
    fn from(e: OpenRefused) -> Self {
        match e {
            OpenRefused::NotFound | OpenRefused::NotRegular | OpenRefused::OutsideRoot => {
                ProviderError::ThreadNotFound
            }
            OpenRefused::Io(e) => ProviderError::Io(e.to_string()),
        }
    }
}

fn refused(e: std::io::Error) -> OpenRefused {
    if e.kind() == std::io::ErrorKind::NotFound {
        OpenRefused::NotFound
    } else {
        OpenRefused::Io(e)
    }
}

/// Opens `path` for reading only if it is a regular file whose canonical path lies under the
/// canonical `root` (decision D6).
///
/// The open is non-blocking and does not follow a final symlink, so a FIFO put in place of a
/// transcript can never block the thread (opening a FIFO for reading blocks until a writer
/// appears); `fstat` on the open handle then refuses anything but a regular file. On Linux the
/// path the kernel actually opened (`/proc/self/fd`) is checked against the root too, so a
/// directory swapped for a symlink between the check and the open is still refused.
pub(crate) fn open_in_root(
    root: &Path,
    path: &Path,
) -> Result<(File, std::fs::Metadata), OpenRefused> {
    // A root that cannot be resolved (unmounted, renamed) is an error, never a deletion of
    // every transcript under it: the same rule as a paired node's unreadable root.
    let root = std::fs::canonicalize(root).map_err(OpenRefused::Io)?;
    let canon = std::fs::canonicalize(path).map_err(refused)?;
    if !canon.starts_with(&root) {
        return Err(OpenRefused::OutsideRoot);
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    let file = options.open(&canon).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            // The last component became a symlink after `canonicalize`.
            return OpenRefused::OutsideRoot;
        }
        refused(e)
    })?;
    let meta = file.metadata().map_err(OpenRefused::Io)?;
    if !meta.is_file() {
        return Err(OpenRefused::NotRegular);
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if let Ok(real) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            if !real.starts_with(&root) {
                return Err(OpenRefused::OutsideRoot);
            }
        }
    }
    Ok((file, meta))
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

    /// Every thread file, the newest per thread id when several projects hold it, by its
    /// canonical path. A file or project reached through a symlink that leads out of the root
    /// is left out, and so is anything that is not a regular file (decision D6).
    fn threads(&self) -> Vec<(String, PathBuf, std::fs::Metadata)> {
        let mut found: std::collections::HashMap<String, (PathBuf, std::fs::Metadata)> =
            Default::default();
        let Ok(root) = std::fs::canonicalize(&self.root) else {
            return Vec::new();
        };
        let Ok(projects) = std::fs::read_dir(&root) else {
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
                let Ok(canon) = std::fs::canonicalize(&path) else {
                    continue;
                };
                if !canon.starts_with(&root) {
                    continue;
                }
                let Ok(meta) = std::fs::metadata(&canon) else {
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                let newer = found
                    .get(&stem)
                    .is_none_or(|(_, m)| mtime_ms(&meta) > mtime_ms(m));
                if newer {
                    found.insert(stem, (canon, meta));
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

    /// Opens a transcript under this provider's root; see [`open_in_root`].
    pub(crate) fn open(&self, path: &Path) -> Result<(File, std::fs::Metadata), OpenRefused> {
        open_in_root(&self.root, path)
    }

    fn head_details(&self, path: &Path) -> (Option<String>, Option<String>) {
        let Ok((mut f, _)) = self.open(path) else {
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

    fn history(&self, path: &Path, size: u64) -> Vec<ImportTurn> {
        let Ok((mut f, _)) = self.open(path) else {
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
                    queued.push_back(crate::claude::classify::normalise(&user_text));
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
                    let n = crate::claude::classify::normalise(&user_text);
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
        // Not found, not a regular file (a FIFO, a directory) or outside the root: the
        // transcript is not there for this gateway (04 §8 step 2, decision D6).
        let (mut file, meta) = match self.open(Path::new(path)) {
            Ok(opened) => opened,
            Err(OpenRefused::NotFound | OpenRefused::NotRegular | OpenRefused::OutsideRoot) => {
                return Some(missing)
            }
            Err(OpenRefused::Io(_)) => return None,
        };
        let size = meta.len();
        if size == offset {
            return None;
        }
        if size < offset {
            tracing::warn!(event = "claude_transcript_shrank", session = %probe.session_key, old_offset = offset, new_size = size,
                "transcript shrank below the marker; rebasing to its end");
            return Some(Outcome::rebase(&probe.session_key, json!({"offset": size})));
        }
        let input = ScanInput {
            own_recent_user_texts: &probe.own_recent_user_texts,
            queued: &queued,
            fallback_time_ms: mtime_ms(&meta),
        };
        let mut scanner = Scanner::new(&input);
        let mut at = offset;
        let mut oversized = 0u64;
        while at < size {
            let len = ((size - at) as usize).min(WINDOW_BYTES);
            let window = read_at(&mut file, at, len).ok()?;
            self.count_read(window.len() as u64);
            if let Some(consumed) = scan_lines(&window, &mut scanner) {
                at += consumed as u64;
                break;
            }
            if window.len() < WINDOW_BYTES {
                // No newline up to the end of the file: the row is still being written.
                break;
            }
            // A row longer than the window (decision D23): find its end and classify it from a
            // stream, with bounded memory, instead of blocking the marker for ever.
            let Some((end, row_len)) =
                oversized_row_extent(&mut file, at, size, &self.check_bytes_read)?
            else {
                break;
            };
            file.seek(SeekFrom::Start(at)).ok()?;
            let slim = slim_row(std::io::BufReader::new((&file).take(row_len))).ok()?;
            self.count_read(row_len);
            if let Some(row) = slim.row {
                scanner.feed(&row);
            }
            oversized += end + 1 - at;
            at = end + 1;
            if oversized >= OVERSIZED_PER_CHECK {
                break;
            }
        }
        if at == offset {
            return None;
        }
        let consumed = at - offset;
        let out = scanner.finish();
        let next = offset + consumed;
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
                let (cwd, title) = self.head_details(path);
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
        // `find` answers canonical paths inside the root only.
        let abs = path;
        Ok(ThreadInfo {
            upstream_kind: "claude-cli".into(),
            upstream_ref: json!({"filePath": abs.to_string_lossy()}),
            baseline: Some(json!({"offset": meta.len()})),
            history: if with_history {
                self.history(&abs, meta.len())
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
    fn count_read(&self, n: u64) {
        self.check_bytes_read
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

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

    const T1: &str = "0b9f0c2e-1d3a-4c5b-8e7f-000000000001";
    const T2: &str = "0b9f0c2e-1d3a-4c5b-8e7f-000000000002";
    const T3: &str = "0b9f0c2e-1d3a-4c5b-8e7f-000000000003";
    const PROMPT: &str = "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";

    #[test]
    fn symlinks_out_of_the_root_are_not_listed_adopted_or_checked() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.jsonl");
        std::fs::write(&secret, PROMPT).unwrap();
        let other_project = outside.path().join("proj");
        std::fs::create_dir_all(&other_project).unwrap();
        std::fs::write(other_project.join(format!("{T3}.jsonl")), PROMPT).unwrap();

        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("p1");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join(format!("{T1}.jsonl")), PROMPT).unwrap();
        // A file symlink and a project symlink leading out of the root, and one staying inside.
        std::os::unix::fs::symlink(&secret, project.join(format!("{T2}.jsonl"))).unwrap();
        std::os::unix::fs::symlink(&other_project, root.path().join("p2")).unwrap();
        let inside = root.path().join("p3");
        std::fs::create_dir_all(&inside).unwrap();
        let in_target = root.path().join("p1").join("kept.txt");
        std::fs::write(&in_target, PROMPT).unwrap();
        let t4 = "0b9f0c2e-1d3a-4c5b-8e7f-000000000004";
        std::os::unix::fs::symlink(&in_target, inside.join(format!("{t4}.jsonl"))).unwrap();

        let p = LocalClaude::new(root.path());
        let (items, _) = p.list(50, None).unwrap();
        let mut ids: Vec<&str> = items.iter().map(|i| i.thread_id.as_str()).collect();
        ids.sort();
        assert_eq!(
            ids,
            [T1, t4],
            "only files whose real path is under the root"
        );
        for t in [T2, T3] {
            assert_eq!(p.open_thread(t, true), Err(ProviderError::ThreadNotFound));
        }
        // A probe whose stored path leads out of the root (the link was swapped after adoption).
        let via_link = project.join(format!("{T2}.jsonl"));
        for path in [via_link.as_path(), secret.as_path()] {
            assert_eq!(
                p.check(&[probe(path, 0)]).unwrap(),
                vec![Outcome::Missing {
                    session_key: "agent:main:claude:x".into()
                }],
                "{}",
                path.display()
            );
        }
        assert_eq!(p.check_bytes_read(), 0, "nothing outside the root was read");
    }

    #[test]
    fn a_fifo_in_place_of_a_transcript_is_missing_and_never_blocks() {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("p1");
        std::fs::create_dir_all(&project).unwrap();
        let path = project.join(format!("{T1}.jsonl"));
        std::fs::write(&path, PROMPT).unwrap();
        let p = LocalClaude::new(root.path());
        let info = p.open_thread(T1, false).unwrap();
        let stored = std::path::PathBuf::from(info.upstream_ref["filePath"].as_str().unwrap());
        std::fs::remove_file(&path).unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        // Without a writer, a blocking open of the FIFO would never return.
        assert_eq!(
            p.check(&[probe(&stored, 0)]).unwrap(),
            vec![Outcome::Missing {
                session_key: "agent:main:claude:x".into()
            }]
        );
        assert!(
            p.list(50, None).unwrap().0.is_empty(),
            "a FIFO is not listed"
        );
        assert_eq!(p.open_thread(T1, true), Err(ProviderError::ThreadNotFound));
    }

    #[test]
    fn a_vanished_root_is_no_outcome_not_missing() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("projects");
        let project = root.join("p1");
        std::fs::create_dir_all(&project).unwrap();
        let path = project.join(format!("{T1}.jsonl"));
        std::fs::write(&path, PROMPT).unwrap();
        let p = LocalClaude::new(&root);
        std::fs::rename(&root, parent.path().join("moved")).unwrap();
        assert_eq!(p.check(&[probe(&path, 0)]).unwrap(), vec![]);
        // The file alone gone, under a readable root: missing.
        std::fs::rename(parent.path().join("moved"), &root).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            p.check(&[probe(&path, 0)]).unwrap(),
            vec![Outcome::Missing {
                session_key: "agent:main:claude:x".into()
            }]
        );
    }
}
