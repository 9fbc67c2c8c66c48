//! The local Codex provider: rollouts under `<home>/sessions/YYYY/MM/DD/rollout-*.jsonl`, with
//! the Claude provider's contract (04 §2.1, §3, §8): listing newest first and paged, adoption
//! with a baseline at the file's end and a bounded history, and the windowed check with the
//! shrink rebase and the never-skip rule.

use super::classify::{classify_codex, session_meta, SessionMeta};
use super::scan::{feed_codex_row, scan_codex_window};
use crate::bigrow::slim_codex_row;
use crate::claude::classify::{normalise, RowClass};
use crate::claude::local::{is_uuid, mtime_ms, open_in_root, read_at, rows, OpenRefused};
use crate::claude::scan::{ScanInput, ScanOutput, WINDOW_BYTES};
use crate::provider::{CatalogItem, Outcome, Probe, Provider, ProviderError, ThreadInfo};
use aware_engine::{ImportTurn, Role};
use serde_json::{json, Value};
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};

/// Most bytes of oversized rows one check reads before it carries over to the next tick.
const OVERSIZED_PER_CHECK: u64 = 256 << 20;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// `upstreamKind` of a Codex link.
pub const UPSTREAM_KIND: &str = "codex-cli";
/// Most bytes read from the head of a rollout for its metadata and title. A recent Codex writes
/// tens of KiB of instructions (session metadata, developer and AGENTS.md messages) before the
/// first prompt; read in steps so a small rollout costs one read.
const HEAD_STEP: usize = 64 * 1024;
const HEAD_MAX: usize = 256 * 1024;
/// History imported at adoption: the newest rows up to these bounds (04 §3 step 5).
const HISTORY_BYTES: u64 = 512 * 1024;
const HISTORY_MESSAGES: usize = 200;
/// Characters of a catalog title.
const TITLE_CHARS: usize = 80;

/// One rollout found under the root.
struct Rollout {
    id: String,
    path: PathBuf,
    meta: Metadata,
    head: Head,
}

#[derive(Default)]
struct Head {
    meta: Option<SessionMeta>,
    /// Read only when asked for (see [`LocalCodex::read_head`]).
    title: Option<String>,
}

pub struct LocalCodex {
    home: PathBuf,
    /// Rollout bytes read by checks, so tests can prove a tick reads only what was appended.
    check_bytes_read: AtomicU64,
}

/// Opens a file for reading without blocking (a FIFO planted under the root must not hang the
/// catalog or a tick) and refuses anything that `fstat` does not call a regular file.
fn open_regular(path: &Path) -> std::io::Result<(File, Metadata)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok((file, meta))
}

/// `rollout-<time>-<uuid>.jsonl` → the uuid, used when the metadata row gives no id.
fn id_from_file_name(path: &Path) -> Option<String> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".jsonl")?;
    let tail = stem.get(stem.len().checked_sub(36)?..)?;
    is_uuid(tail).then(|| tail.to_ascii_lowercase())
}

/// The text of an assistant message: an envelope `response_item` or a pre-envelope bare item.
pub(crate) fn assistant_text(row: &Value) -> Option<String> {
    let item = match row.get("payload") {
        Some(p) if row.get("type").and_then(Value::as_str) == Some("response_item") => p,
        Some(_) => return None,
        None => row,
    };
    if item.get("type")?.as_str()? != "message" || item.get("role")?.as_str()? != "assistant" {
        return None;
    }
    let text: Vec<&str> = item
        .get("content")?
        .as_array()?
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("output_text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let joined = text.join("\n").trim().to_string();
    (!joined.is_empty()).then_some(joined)
}

impl LocalCodex {
    /// `home` is `$CODEX_HOME` (default `~/.codex`); rollouts live under `home/sessions`.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        LocalCodex {
            home: home.into(),
            check_bytes_read: AtomicU64::new(0),
        }
    }

    /// The canonical sessions root, looked up on every call: Codex creates it on first use,
    /// possibly after the gateway started.
    fn root(&self) -> Option<PathBuf> {
        std::fs::canonicalize(self.home.join("sessions")).ok()
    }

    /// The canonical form of `path` when it lies under the root; `None` for anything that
    /// resolves outside it (a symlink planted under the root, a `..` path in a link).
    fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
        let canonical = std::fs::canonicalize(path).ok()?;
        canonical.starts_with(root).then_some(canonical)
    }

    /// Candidate files `YYYY/MM/DD/rollout-*.jsonl`, canonical and under the root.
    fn files(root: &Path) -> Vec<PathBuf> {
        let mut dirs = vec![root.to_path_buf()];
        for _level in 0..3 {
            let mut next = Vec::new();
            for dir in &dirs {
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                next.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
            dirs = next;
        }
        let mut out = Vec::new();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(name) = name.to_str() else {
                    continue;
                };
                if !name.starts_with("rollout-") || !name.ends_with(".jsonl") {
                    continue;
                }
                if let Some(p) = Self::inside(root, &e.path()) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Metadata (and, when asked, the title) from the head of a rollout. The title can sit tens
    /// of KiB in, so the listing asks for it only for the rows of the page it returns.
    fn read_head(file: &mut File, size: u64, want_title: bool) -> Head {
        let mut head = Head::default();
        let mut offset = 0u64;
        let mut carry: Vec<u8> = Vec::new();
        while offset < size && (offset as usize) < HEAD_MAX {
            let Ok(chunk) = read_at(file, offset, HEAD_STEP) else {
                break;
            };
            if chunk.is_empty() {
                break;
            }
            offset += chunk.len() as u64;
            carry.extend_from_slice(&chunk);
            let Some(last) = carry.iter().rposition(|b| *b == b'\n') else {
                continue;
            };
            let complete: Vec<u8> = carry.drain(..=last).collect();
            for row in rows(&complete) {
                if head.meta.is_none() {
                    head.meta = session_meta(&row);
                }
                if want_title && head.title.is_none() {
                    if let RowClass::Human { user_text, .. } = classify_codex(&row) {
                        let t = normalise(&user_text);
                        if !t.is_empty() {
                            head.title = Some(t.chars().take(TITLE_CHARS).collect());
                        }
                    }
                }
                if head.meta.is_some() && (head.title.is_some() || !want_title) {
                    return head;
                }
            }
        }
        head
    }

    /// The rollout at `path` (canonical, under the root), unless it is not a regular file, is a
    /// sub-agent's (no human types into it) or names no thread.
    fn rollout_at(path: PathBuf) -> Option<Rollout> {
        let (mut file, meta) = open_regular(&path).ok()?;
        let head = Self::read_head(&mut file, meta.len(), false);
        if head.meta.as_ref().is_some_and(|m| m.subagent) {
            return None;
        }
        let id = head
            .meta
            .as_ref()
            .map(|m| m.id.clone())
            .or_else(|| id_from_file_name(&path))?;
        Some(Rollout {
            id,
            path,
            meta,
            head,
        })
    }

    /// The newest rollout of each thread id among `paths`.
    fn newest_per_thread(paths: Vec<PathBuf>) -> Vec<Rollout> {
        let mut found: std::collections::HashMap<String, Rollout> = Default::default();
        for r in paths.into_iter().filter_map(Self::rollout_at) {
            let newer = found
                .get(&r.id)
                .is_none_or(|old| mtime_ms(&r.meta) > mtime_ms(&old.meta));
            if newer {
                found.insert(r.id.clone(), r);
            }
        }
        found.into_values().collect()
    }

    /// Every rollout of a top-level thread, the newest file per thread id.
    fn rollouts(&self) -> Vec<Rollout> {
        match self.root() {
            Some(root) => Self::newest_per_thread(Self::files(&root)),
            None => Vec::new(),
        }
    }

    /// The sessions root and the canonical path of thread `thread_id`'s rollout, for a paired
    /// node's answers. Files named `rollout-*-<id>.jsonl` are looked at first (one open each);
    /// the whole tree only when none of them is that thread (a rollout whose metadata names
    /// another id than its file). The id is only compared, never put in a path.
    ///
    /// "Thread not found" is definitive for the gateway (`upstream_missing`), so a sessions root
    /// that cannot be read is an I/O error, never a deletion.
    pub(crate) fn find_rollout(
        &self,
        thread_id: &str,
    ) -> Result<(PathBuf, PathBuf), ProviderError> {
        let sessions = self.home.join("sessions");
        let unreadable = |e: std::io::Error| {
            ProviderError::Io(format!(
                "the Codex sessions root {} cannot be read: {e}",
                sessions.display()
            ))
        };
        let root = std::fs::canonicalize(&sessions).map_err(unreadable)?;
        std::fs::read_dir(&root).map_err(unreadable)?;
        let files = Self::files(&root);
        let suffix = format!("-{}.jsonl", thread_id.to_ascii_lowercase());
        let named: Vec<PathBuf> = files
            .iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.to_ascii_lowercase().ends_with(&suffix))
            })
            .cloned()
            .collect();
        let pick = |paths: Vec<PathBuf>| {
            Self::newest_per_thread(paths)
                .into_iter()
                .find(|r| r.id == thread_id)
                .map(|r| r.path)
        };
        let path = pick(named)
            .or_else(|| pick(files))
            .ok_or(ProviderError::ThreadNotFound)?;
        Ok((root, path))
    }

    fn history(path: &Path) -> Vec<ImportTurn> {
        let Ok((mut f, meta)) = open_regular(path) else {
            return Vec::new();
        };
        let size = meta.len();
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
        for row in rows(&bytes) {
            match classify_codex(&row) {
                RowClass::Human { user_text, .. } => turns.push(ImportTurn {
                    role: Role::User,
                    text: user_text,
                }),
                _ => {
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

    /// The windowed check of 04 §8 for one probe; `None` is "no outcome".
    fn check_one(&self, probe: &Probe) -> Option<Outcome> {
        if probe.upstream_kind != UPSTREAM_KIND {
            return None;
        }
        let path = Path::new(probe.upstream_ref.get("filePath")?.as_str()?);
        let offset = probe.marker.get("offset")?.as_u64()?;
        let missing = Outcome::Missing {
            session_key: probe.session_key.clone(),
        };
        let root = self.root()?;
        // The adopted rollout resolved under the root; a path that now resolves elsewhere (the
        // file was replaced by a symlink, also between the check and the open) or is no longer
        // a regular file is not the rollout we adopted. The same open as Claude transcripts.
        let (mut file, meta) = match open_in_root(&root, path) {
            Ok(f) => f,
            Err(OpenRefused::OutsideRoot) => {
                tracing::warn!(event = "codex_rollout_outside_root", session = %probe.session_key,
                    "the adopted rollout now resolves outside the Codex sessions root; counted as missing");
                return Some(missing);
            }
            Err(OpenRefused::NotFound | OpenRefused::NotRegular) => return Some(missing),
            Err(OpenRefused::Io(_)) => return None,
        };
        let size = meta.len();
        if size == offset {
            return None;
        }
        if size < offset {
            tracing::warn!(event = "codex_rollout_shrank", session = %probe.session_key, old_offset = offset, new_size = size,
                "rollout shrank below the marker; rebasing to its end");
            return Some(Outcome::rebase(&probe.session_key, json!({"offset": size})));
        }
        let input = ScanInput {
            own_recent_user_texts: &probe.own_recent_user_texts,
            queued: &[],
            fallback_time_ms: mtime_ms(&meta),
        };
        let mut out = ScanOutput::default();
        let mut at = offset;
        let mut oversized = 0u64;
        while at < size {
            let len = ((size - at) as usize).min(WINDOW_BYTES);
            let window = read_at(&mut file, at, len).ok()?;
            self.check_bytes_read
                .fetch_add(window.len() as u64, Ordering::Relaxed);
            if let Some((consumed, o)) = scan_codex_window(&window, &input) {
                out.human_turns = out.human_turns.saturating_add(o.human_turns);
                out.occurred_at = match (out.occurred_at, o.occurred_at) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                at += consumed as u64;
                break;
            }
            if window.len() < WINDOW_BYTES {
                // No newline up to the end of the file: the row is still being written.
                break;
            }
            // A row longer than the window (decision D23; a pasted screenshot is an inline data
            // URL): find its end and classify it from a slim stream, with bounded memory,
            // instead of blocking the marker for ever. Never skipped unclassified.
            let Some((end, row_len)) = crate::claude::local::oversized_row_extent(
                &mut file,
                at,
                size,
                &self.check_bytes_read,
            )?
            else {
                break;
            };
            file.seek(SeekFrom::Start(at)).ok()?;
            let slim = slim_codex_row(std::io::BufReader::new((&file).take(row_len))).ok()?;
            self.check_bytes_read.fetch_add(row_len, Ordering::Relaxed);
            if let Some(row) = slim.row {
                feed_codex_row(&row, &input, &mut out);
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
        let next = offset + consumed;
        let counted = out.human_turns > 0;
        Some(Outcome::Activity {
            session_key: probe.session_key.clone(),
            human_turns: out.human_turns,
            next_marker: json!({"offset": next}),
            occurred_at: out.occurred_at.filter(|_| counted),
            dedupe_id: counted.then(|| next.to_string()),
            rebased: false,
        })
    }

    /// Total rollout bytes the checks have read so far.
    pub fn check_bytes_read(&self) -> u64 {
        self.check_bytes_read.load(Ordering::Relaxed)
    }
}

impl Provider for LocalCodex {
    fn host_id(&self) -> String {
        "gateway:local".into()
    }

    fn catalog_id(&self) -> &'static str {
        "codex"
    }

    fn list(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<CatalogItem>, Option<String>), ProviderError> {
        let start: usize = match cursor {
            None => 0,
            Some(c) => c.parse().map_err(|_| ProviderError::InvalidCursor)?,
        };
        let mut all = self.rollouts();
        all.sort_by(|a, b| {
            mtime_ms(&b.meta)
                .cmp(&mtime_ms(&a.meta))
                .then_with(|| a.id.cmp(&b.id))
        });
        let total = all.len();
        let page: Vec<CatalogItem> = all
            .into_iter()
            .skip(start)
            .take(limit)
            .map(|r| {
                let title = open_regular(&r.path)
                    .ok()
                    .and_then(|(mut f, m)| Self::read_head(&mut f, m.len(), true).title);
                CatalogItem {
                    updated_at: mtime_ms(&r.meta),
                    size_bytes: Some(r.meta.len()),
                    cwd: r.head.meta.and_then(|m| m.cwd),
                    title,
                    thread_id: r.id,
                }
            })
            .collect();
        let next = (start + page.len() < total).then(|| (start + page.len()).to_string());
        Ok((page, next))
    }

    fn open_thread(
        &self,
        thread_id: &str,
        with_history: bool,
    ) -> Result<ThreadInfo, ProviderError> {
        let r = self
            .rollouts()
            .into_iter()
            .find(|r| r.id == thread_id)
            .ok_or(ProviderError::ThreadNotFound)?;
        Ok(ThreadInfo {
            upstream_kind: UPSTREAM_KIND.into(),
            upstream_ref: json!({"filePath": r.path.to_string_lossy()}),
            baseline: Some(json!({"offset": r.meta.len()})),
            history: if with_history {
                Self::history(&r.path)
            } else {
                Vec::new()
            },
        })
    }

    fn check(&self, probes: &[Probe]) -> Result<Vec<Outcome>, ProviderError> {
        Ok(probes.iter().filter_map(|p| self.check_one(p)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const ID_A: &str = "019a0000-0000-7000-8000-00000000000a";
    const ID_B: &str = "019a0000-0000-7000-8000-00000000000b";

    fn meta_row(id: &str) -> String {
        format!(
            "{{\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"{id}\",\"cwd\":\"/work/{id}\",\"source\":\"cli\"}}}}\n"
        )
    }

    fn prompt(text: &str) -> String {
        format!(
            "{{\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"{text}\"}}]}}}}\n{{\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"{text}\",\"images\":[]}}}}\n"
        )
    }

    fn day(home: &Path) -> PathBuf {
        let d = home.join("sessions/2026/01/01");
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write_rollout(home: &Path, id: &str, body: &str) -> PathBuf {
        let path = day(home).join(format!("rollout-2026-01-01T00-00-00-{id}.jsonl"));
        std::fs::write(&path, format!("{}{body}", meta_row(id))).unwrap();
        path
    }

    fn probe(path: &Path, offset: u64) -> Probe {
        Probe {
            session_key: "agent:main:claude:x".into(),
            agent_id: "main".into(),
            host_id: "gateway:local".into(),
            thread_id: ID_A.into(),
            upstream_kind: UPSTREAM_KIND.into(),
            upstream_ref: json!({"filePath": path.to_string_lossy()}),
            marker: json!({"offset": offset}),
            own_recent_user_texts: Vec::new(),
        }
    }

    fn append(path: &Path, text: &str) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }

    #[test]
    fn listing_reads_id_cwd_and_title_and_pages_newest_first() {
        let home = tempfile::tempdir().unwrap();
        let a = write_rollout(home.path(), ID_A, &prompt("first prompt of a"));
        write_rollout(home.path(), ID_B, "");
        // b is newer.
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        File::options()
            .write(true)
            .open(&a)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let p = LocalCodex::new(home.path());
        let (page, next) = p.list(1, None).unwrap();
        assert_eq!(page[0].thread_id, ID_B);
        assert_eq!(page[0].title, None);
        assert_eq!(next.as_deref(), Some("1"));
        let (page, next) = p.list(1, Some("1")).unwrap();
        assert_eq!(
            (
                page[0].thread_id.as_str(),
                page[0].cwd.as_deref(),
                page[0].title.as_deref()
            ),
            (
                ID_A,
                Some(format!("/work/{ID_A}").as_str()),
                Some("first prompt of a")
            )
        );
        assert_eq!(page[0].updated_at, 1_700_000_000_000);
        assert_eq!(next, None);
        assert_eq!(p.list(1, Some("x")), Err(ProviderError::InvalidCursor));
    }

    #[cfg(unix)]
    #[test]
    fn fifos_symlinks_out_of_the_root_and_sub_agents_are_refused() {
        let home = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let d = day(home.path());
        let fifo = d.join(format!("rollout-2026-01-01T00-00-00-{ID_A}.jsonl"));
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let target = outside.path().join("rollout-x.jsonl");
        std::fs::write(&target, format!("{}{}", meta_row(ID_B), prompt("secret"))).unwrap();
        std::os::unix::fs::symlink(
            &target,
            d.join(format!("rollout-2026-01-01T00-00-01-{ID_B}.jsonl")),
        )
        .unwrap();
        let sub = "019a0000-0000-7000-8000-00000000000c";
        std::fs::write(
            d.join(format!("rollout-2026-01-01T00-00-02-{sub}.jsonl")),
            format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{sub}\",\"source\":{{\"subagent\":\"review\"}}}}}}\n"),
        )
        .unwrap();
        let p = LocalCodex::new(home.path());
        assert_eq!(
            p.list(50, None).unwrap(),
            (Vec::new(), None),
            "nothing listable, and no hang"
        );
        assert_eq!(
            p.open_thread(ID_B, true),
            Err(ProviderError::ThreadNotFound)
        );
        assert_eq!(
            p.open_thread(sub, false),
            Err(ProviderError::ThreadNotFound)
        );
        // A link whose file now resolves outside the root, or is a FIFO, is missing.
        for path in [target.as_path(), fifo.as_path()] {
            assert!(matches!(
                p.check(&[probe(path, 0)]).unwrap().as_slice(),
                [Outcome::Missing { .. }]
            ));
        }
    }

    #[test]
    fn adoption_then_checks_count_typed_prompts_only_and_rebase_on_shrink() {
        let home = tempfile::tempdir().unwrap();
        let path = write_rollout(
            home.path(),
            ID_A,
            &format!(
                "{}{{\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"done\"}}]}}}}\n",
                prompt("old prompt")
            ),
        );
        let p = LocalCodex::new(home.path());
        let info = p.open_thread(ID_A, true).unwrap();
        assert_eq!(info.upstream_kind, "codex-cli");
        let size = std::fs::metadata(&path).unwrap().len();
        assert_eq!(info.baseline, Some(json!({"offset": size})));
        assert_eq!(
            info.history,
            vec![
                ImportTurn {
                    role: Role::User,
                    text: "old prompt".into()
                },
                ImportTurn {
                    role: Role::Assistant,
                    text: "done".into()
                },
            ]
        );
        let file_path = PathBuf::from(info.upstream_ref["filePath"].as_str().unwrap());
        assert!(p.check(&[probe(&file_path, size)]).unwrap().is_empty());

        // Tool output and environment context: consumed, nothing counted.
        let noise = "{\"type\":\"response_item\",\"payload\":{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"ok\"}}\n{\"type\":\"response_item\",\"payload\":{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"<environment_context>x</environment_context>\"}]}}\n";
        append(&path, noise);
        let out = p.check(&[probe(&file_path, size)]).unwrap();
        let after_noise = size + noise.len() as u64;
        assert!(
            matches!(&out[..], [Outcome::Activity { human_turns: 0, next_marker, dedupe_id: None, .. }]
            if next_marker["offset"] == after_noise)
        );
        assert_eq!(
            p.check_bytes_read(),
            noise.len() as u64,
            "only the appended bytes were read"
        );

        // A typed prompt, then a partial row that waits for its newline.
        let typed = prompt("new prompt");
        append(&path, &typed);
        append(&path, "{\"type\":\"event_msg\"");
        let out = p.check(&[probe(&file_path, after_noise)]).unwrap();
        let after_typed = after_noise + typed.len() as u64;
        match &out[..] {
            [Outcome::Activity {
                human_turns,
                next_marker,
                occurred_at,
                dedupe_id,
                rebased,
                ..
            }] => {
                assert_eq!(*human_turns, 1);
                assert_eq!(next_marker["offset"], after_typed);
                assert_eq!(*occurred_at, Some(1_767_225_601_000));
                assert_eq!(dedupe_id.as_deref(), Some(after_typed.to_string().as_str()));
                assert!(!rebased);
            }
            other => panic!("unexpected {other:?}"),
        }

        // Shrink: rebase to the end, nothing counted.
        std::fs::write(&path, meta_row(ID_A)).unwrap();
        let short = std::fs::metadata(&path).unwrap().len();
        match &p.check(&[probe(&file_path, after_typed)]).unwrap()[..] {
            [Outcome::Activity {
                human_turns: 0,
                next_marker,
                rebased: true,
                ..
            }] => {
                assert_eq!(next_marker["offset"], short)
            }
            other => panic!("unexpected {other:?}"),
        }
        // Deleted: missing. A Claude link is not ours.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            &p.check(&[probe(&file_path, short)]).unwrap()[..],
            [Outcome::Missing { .. }]
        ));
        let mut claude = probe(&file_path, short);
        claude.upstream_kind = "claude-cli".into();
        assert!(p.check(&[claude]).unwrap().is_empty());
    }

    #[test]
    fn history_keeps_the_newest_200_messages_of_the_last_512_kib() {
        let home = tempfile::tempdir().unwrap();
        let body: String = (0..300).map(|i| prompt(&format!("prompt {i}"))).collect();
        write_rollout(home.path(), ID_A, &body);
        let p = LocalCodex::new(home.path());
        let h = p.open_thread(ID_A, true).unwrap().history;
        assert_eq!(h.len(), 200);
        assert_eq!(h[0].text, "prompt 100");
        assert_eq!(h[199].text, "prompt 299");
        // Past 512 KiB only the tail is read, from its first complete row.
        let pad = format!(
            "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"output\":\"{}\"}}}}\n",
            "y".repeat(600 * 1024)
        );
        write_rollout(
            home.path(),
            ID_B,
            &format!("{}{pad}{}", prompt("too old"), prompt("recent")),
        );
        let h = p.open_thread(ID_B, true).unwrap().history;
        let texts: Vec<&str> = h.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(texts, ["recent"]);
        assert!(p.open_thread(ID_B, false).unwrap().history.is_empty());
    }

    fn turns(out: &[Outcome]) -> (u64, u64) {
        match out {
            [Outcome::Activity {
                human_turns,
                next_marker,
                ..
            }] => (*human_turns as u64, next_marker["offset"].as_u64().unwrap()),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Decision D23: a 40 MiB pasted screenshot (an inline data URL) or tool output no longer
    /// blocks the link; the typed prompt after it counts once.
    #[test]
    fn a_40_mib_response_item_then_a_typed_prompt_is_one_human_turn() {
        let home = tempfile::tempdir().unwrap();
        let path = write_rollout(home.path(), ID_A, "");
        let size = std::fs::metadata(&path).unwrap().len();
        let data = "A".repeat(40 << 20);
        let image = format!(
            "{{\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"output\":[{{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,{data}\"}}]}}}}\n"
        );
        append(&path, &image);
        drop(image);
        let typed = "{\"timestamp\":\"2026-01-01T00:00:02.000Z\",\"type\":\"event_msg\",\"payload\":{\"type\":\"user_message\",\"message\":\"after\",\"images\":[]}}\n";
        append(&path, typed);
        let end = std::fs::metadata(&path).unwrap().len();
        let p = LocalCodex::new(home.path());
        let file_path = std::fs::canonicalize(&path).unwrap();
        assert_eq!(
            turns(&p.check(&[probe(&file_path, size)]).unwrap()),
            (1, end)
        );
    }

    #[test]
    fn a_40_mib_typed_prompt_is_one_human_turn() {
        let home = tempfile::tempdir().unwrap();
        let path = write_rollout(home.path(), ID_A, "");
        let size = std::fs::metadata(&path).unwrap().len();
        let text = "pasted log line\\n".repeat((40 << 20) / 17);
        let big = format!(
            "{{\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"{text}\"}}]}}}}\n{{\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"{text}\",\"images\":[]}}}}\n"
        );
        drop(text);
        append(&path, &big);
        drop(big);
        let end = std::fs::metadata(&path).unwrap().len();
        let p = LocalCodex::new(home.path());
        let file_path = std::fs::canonicalize(&path).unwrap();
        assert_eq!(
            turns(&p.check(&[probe(&file_path, size)]).unwrap()),
            (1, end)
        );
    }

    #[test]
    fn a_partial_huge_row_at_eof_waits() {
        let home = tempfile::tempdir().unwrap();
        let path = write_rollout(home.path(), ID_A, "");
        let size = std::fs::metadata(&path).unwrap().len();
        let partial = format!(
            "{{\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"{}",
            "x".repeat(WINDOW_BYTES * 3)
        );
        append(&path, &partial);
        let p = LocalCodex::new(home.path());
        let file_path = std::fs::canonicalize(&path).unwrap();
        for _tick in 0..2 {
            assert!(p.check(&[probe(&file_path, size)]).unwrap().is_empty());
        }
        // Once its newline is written, it counts.
        append(&path, "\"}}\n");
        let end = std::fs::metadata(&path).unwrap().len();
        assert_eq!(
            turns(&p.check(&[probe(&file_path, size)]).unwrap()),
            (1, end)
        );
    }
}
