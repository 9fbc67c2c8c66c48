//! How the waiting hook wakes an idle Codex session, and how the prompt hook tells that wake
//! from a human prompt.
//!
//! Codex has no `asyncRewake`: an async Stop hook's exit code wakes nothing. What does wake an
//! idle interactive session (checked against Codex 0.169.0) is `codex queue --thread <UUID>
//! --message <TEXT>`, run with the session's `HOME`/`CODEX_HOME` (the hook inherits both): it
//! starts a turn on the open thread with the text as its prompt. The hook payload's
//! `session_id` is that thread's UUID.
//!
//! The queued turn runs the `UserPromptSubmit` hook like a typed prompt, so before queueing the
//! waiter records the text's digest in its private state directory; the prompt hook that finds
//! the digest removes it ([`claim`]) and records no human turn. Removal is the claim: of two
//! prompts with the same text, one is the wake.
//!
//! The drain that produced the text acknowledged it, so a failed `codex queue` must not drop
//! it: the text goes back to the session's queue as system lines, handed over at the next
//! prompt, tool call or stop, and the warning says so.

use super::common::{said, warn, Target};
use aware_client::Client;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long `codex queue` may take (0.3–1.4 s seen; it starts Codex's binary and reaches the
/// session's process). Past it, it is killed and the text goes back to the queue.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
/// The gateway's limit on one system line (`POST …/system-events`).
const MAX_LINE_CHARS: usize = 4000;

/// Hands `prompt` (a drain's text, already acknowledged) to the Codex thread `thread` as a new
/// turn; on failure it goes back to `target`'s queue. Never fails: every problem is a warning.
pub fn hand_over(gw: &Client, target: &Target, thread: &str, prompt: &str, per_request: Duration) {
    let marked =
        match super::common::state_dir().and_then(|d| mark(&records(&d), &target.key, prompt)) {
            Ok(path) => path,
            Err(msg) => {
                // Without the mark the queued turn would be recorded as a human prompt; the text
                // waits for the next hand-over instead.
                return requeue(gw, target, prompt, per_request, &msg);
            }
        };
    if let Err(msg) = queue(thread, prompt) {
        let _ = std::fs::remove_file(&marked);
        requeue(gw, target, prompt, per_request, &msg);
    }
}

/// True (once) when `prompt` is the text the waiting hook queued for session `key`: the mark is
/// removed, and the caller records no human turn for it.
pub fn claim(key: &str, prompt: &str) -> bool {
    super::common::state_dir()
        .map(|d| std::fs::remove_file(mark_path(&records(&d), key, prompt)).is_ok())
        .unwrap_or(false)
}

/// Where the marks live: beside the waiters' slots, in the user's state directory.
fn records(state: &Path) -> PathBuf {
    state.join("codex-queued")
}

/// `<dir>/<sha256 of key NUL trimmed text>`: Codex may trim the prompt it runs hooks with.
fn mark_path(dir: &Path, key: &str, prompt: &str) -> PathBuf {
    let digest = Sha256::digest(format!("{key}\0{}", prompt.trim()).as_bytes());
    dir.join(aware_core::hex::lower(&digest))
}

fn mark(dir: &Path, key: &str, prompt: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = mark_path(dir, key, prompt);
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path);
    match made {
        Ok(_) => Ok(path),
        // The same text is marked already (queued before and not yet seen): one mark serves.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(path),
        Err(e) => Err(format!("cannot write {}: {e}", path.display())),
    }
}

/// The programs that may run `codex`, best first: the hook's `PATH` has no `codex`, but Codex
/// started from its npm package names the package in `CODEX_MANAGED_PACKAGE_ROOT`, whose
/// `bin/codex.js` (run by `node`, which started it) picks the platform binary as the user's own
/// `codex` does; then `codex` from `PATH` (a standalone install, or no `node` on `PATH`).
fn codex_commands() -> Vec<Command> {
    let mut all = Vec::new();
    if let Some(root) = std::env::var_os("CODEX_MANAGED_PACKAGE_ROOT").filter(|r| !r.is_empty()) {
        let script = PathBuf::from(root).join("bin").join("codex.js");
        if script.is_file() {
            let mut cmd = Command::new("node");
            cmd.arg(script);
            all.push(cmd);
        }
    }
    all.push(Command::new("codex"));
    all
}

/// Starts the first of [`codex_commands`] that exists with `args`, stderr piped.
fn spawn_codex(args: &[&str]) -> Result<std::process::Child, String> {
    let mut missing = Vec::new();
    for mut cmd in codex_commands() {
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        match cmd.spawn() {
            Ok(child) => return Ok(child),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(cmd.get_program().to_string_lossy().into_owned());
            }
            Err(e) => {
                return Err(format!(
                    "cannot run `codex queue` ({:?}): {e}",
                    cmd.get_program()
                ))
            }
        }
    }
    Err(format!(
        "cannot run `codex queue`: not found ({}); is Codex on PATH?",
        missing.join(", ")
    ))
}

/// `codex queue --thread THREAD --message PROMPT`, bounded by [`QUEUE_TIMEOUT`].
fn queue(thread: &str, prompt: &str) -> Result<(), String> {
    let child = spawn_codex(&["queue", "--thread", thread, "--message", prompt])?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("aware-hook-queue".into())
        .spawn(move || {
            let _ = tx.send(child.wait_with_output());
        })
        .map_err(|e| format!("cannot wait for `codex queue`: {e}"))?;
    match rx.recv_timeout(QUEUE_TIMEOUT) {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            Err(format!(
                "`codex queue` failed ({}): {}",
                out.status,
                last.unwrap_or("no message")
            ))
        }
        Ok(Err(e)) => Err(format!("`codex queue` failed: {e}")),
        Err(_) => {
            // Not reaped yet (its waiter thread is still blocked), so the pid is still this
            // child's and no other process can receive the signal.
            if let Some(p) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            Err(format!(
                "`codex queue` gave no answer within {} s (killed; the turn may still start)",
                QUEUE_TIMEOUT.as_secs()
            ))
        }
    }
}

/// Puts `prompt` back on the session's queue as system lines (each within the gateway's
/// limit), with one warning that says why and where the text went.
fn requeue(gw: &Client, target: &Target, prompt: &str, per_request: Duration, why: &str) {
    for line in lines_within(prompt, MAX_LINE_CHARS) {
        let put = gw
            .request("POST", &target.path("system-events"))
            .operator()
            .timeout(per_request)
            .json(Some(&json!({ "text": line })));
        if let Err(e) = put {
            return warn(&format!(
                "{why}; and the drained text could not be queued again ({}), so the session \
                 does not get it: session_status still shows the watched sessions' state",
                said(&e)
            ));
        }
    }
    warn(&format!(
        "{why}; the drained text is queued again and comes with the session's next prompt, tool \
         call or stop"
    ));
}

/// A drained line without its `System: [time] ` prefix: the gateway prefixes the requeued line
/// again when it hands it over.
fn bare(line: &str) -> &str {
    let Some(rest) = line.strip_prefix("System: ") else {
        return line;
    };
    match rest.strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((_, after)) => after,
        None => rest,
    }
}

/// `text` in pieces of at most `max` characters (lines without their `System:` prefix), cut at
/// line ends where a line allows it.
fn lines_within(text: &str, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in text.lines().map(bare).filter(|l| !l.trim().is_empty()) {
        let chars: Vec<char> = line.chars().collect();
        for piece in chars.chunks(max) {
            let piece: String = piece.iter().collect();
            let len = cur.chars().count();
            if len > 0 && len + 1 + piece.chars().count() > max {
                out.push(std::mem::take(&mut cur));
            }
            if !cur.is_empty() {
                cur.push('\n');
            }
            cur.push_str(&piece);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_text_is_claimed_once_and_only_for_its_session() {
        let dir = tempfile::tempdir().unwrap();
        let d = records(dir.path());
        mark(&d, "agent:main:main", "System: notice\n").unwrap();
        let claim_in =
            |key: &str, text: &str| std::fs::remove_file(mark_path(&d, key, text)).is_ok();
        assert!(!claim_in("agent:main:other", "System: notice"));
        assert!(claim_in("agent:main:main", "System: notice"));
        assert!(!claim_in("agent:main:main", "System: notice"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn requeued_lines_stay_within_the_gateway_limit() {
        let text = format!("a\n{}\nb", "x".repeat(9));
        let parts = lines_within(&text, 4);
        assert!(parts.iter().all(|p| p.chars().count() <= 4), "{parts:?}");
        assert_eq!(
            parts.concat().replace('\n', ""),
            format!("a{}b", "x".repeat(9))
        );
        assert_eq!(lines_within("one\ntwo", 4000), vec!["one\ntwo".to_string()]);
        assert_eq!(
            lines_within(
                "System: [2026-01-01T00:00:00.000Z] a\nSystem: b\n[c] d",
                4000
            ),
            vec!["a\nb\n[c] d".to_string()]
        );
    }
}
