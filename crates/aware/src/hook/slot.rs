//! The session's waiter slot: one waiter per session, and never a signal to a process that is
//! not that waiter.
//!
//! The slot is a pid file in the user's state directory (mode 0700), and holding it means
//! holding an exclusive `flock` on it for the waiter's whole life. The lock, not the file's
//! text, says whether a waiter runs: the kernel drops it when the holder exits however it
//! exits, so a pid file left by a crashed waiter is never read as a live one (its pid may name
//! any process by now).
//!
//! A starter that finds the lock held replaces the holder (the newest stop is the one the user
//! is idle at; the old waiter exits 0 quietly): it signals the pid of the record (`<pid>
//! <start time>`) only after checking that this pid still has that start time, runs this very
//! binary and belongs to this user, and it signals through a pidfd opened before the checks,
//! so a pid reused in between cannot receive it. It then waits for the lock; a starter that
//! loses the race for it to another new one exits quietly. Either way exactly one waiter holds
//! the slot: nothing runs unless it took the lock.
//!
//! The holder removes the file on every exit ([`release`]). Because the file may be removed
//! and created again under a starter's feet, a lock only counts when the path still names the
//! file that was locked.

use super::lineage::Stat;
use rustix::fs::FlockOperation;
use rustix::process::{Pid, PidfdFlags, Signal};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// How long a starter waits for the waiter it replaced to exit (it exits at once on SIGTERM;
/// past this, the starter leaves it the slot and exits).
const HANDOVER: Duration = Duration::from_secs(5);
/// Attempts at the lock (each after the file was replaced or the holder signalled).
const ATTEMPTS: usize = 4;

/// The slot this process holds, released before every exit.
static HELD: Mutex<Option<Slot>> = Mutex::new(None);

struct Slot {
    path: PathBuf,
    /// The locked file; closing it (at exit, at the latest) frees the slot.
    file: File,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Removed only while it is still our locked file: a path that names another file now
        // belongs to whoever created it.
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Takes the session's slot in `dir` (true), replacing the waiter that holds it; false when
/// the holder stays (another new waiter got the slot first, or the holder's record does not
/// check out): this one then exits quietly.
pub fn take(dir: &Path, url: &str, key: &str) -> Result<bool, String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let digest = Sha256::digest(format!("{url}\0{key}").as_bytes());
    let path = dir.join(format!("{}.pid", aware_core::hex::lower(&digest[..16])));
    let mut signalled = false;
    for _ in 0..ATTEMPTS {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) if same_file(&file, &path) => {
                record(&file).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                // A poisoned lock still holds the slot: the file must stay locked while this
                // process waits.
                *HELD.lock().unwrap_or_else(|p| p.into_inner()) = Some(Slot { path, file });
                return Ok(true);
            }
            // The holder removed it on its way out: lock the file the path names now.
            Ok(()) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => {
                // Signalled once already: the lock went to another new waiter, which stays.
                if signalled {
                    return Ok(false);
                }
                // No record that checks out: the holder has just locked and not written it yet
                // (it is itself a new waiter), or the pid is no waiter of ours. Nothing is
                // signalled and the holder stays.
                if !read_record(&file).is_some_and(stop) {
                    return Ok(false);
                }
                signalled = true;
                if !wait_for_lock(&file) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(format!("cannot lock {}: {e}", path.display())),
        }
    }
    Ok(false)
}

/// Frees the slot this process holds (removing its file). Called before every exit:
/// `process::exit` runs no destructors.
pub fn release() {
    HELD.lock().unwrap_or_else(|p| p.into_inner()).take();
}

/// Does `path` still name the open `file`?
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// `<pid> <start time>` of this process.
fn record(mut file: &File) -> std::io::Result<()> {
    let pid = std::process::id();
    let start = Stat::read(pid).map_or(0, |s| s.start);
    file.set_len(0)?;
    file.write_all_at(format!("{pid} {start}\n").as_bytes(), 0)?;
    file.flush()
}

fn read_record(file: &File) -> Option<(i32, u64)> {
    let mut buf = [0u8; 64];
    let n = file.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(buf.get(..n)?).ok()?;
    let mut words = text.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    let start = words.next()?.parse().ok()?;
    Some((pid, start))
}

/// SIGTERM to the waiter of the record, when the pid is still that process (same start time),
/// runs this binary and is this user's; false when nothing was signalled.
fn stop((pid, start): (i32, u64)) -> bool {
    if pid <= 0 || pid.unsigned_abs() == std::process::id() {
        return false;
    }
    let Some(raw) = Pid::from_raw(pid) else {
        return false;
    };
    // Opened first: from here on the pidfd names one process, whatever the pid comes to name,
    // so the checks below are about the process that gets the signal.
    let Ok(pidfd) = rustix::process::pidfd_open(raw, PidfdFlags::empty()) else {
        return false;
    };
    let proc_dir = format!("/proc/{pid}");
    let same_start = Stat::read(pid.unsigned_abs()).is_some_and(|s| s.start == start);
    let own_exe = match (
        std::fs::read_link(format!("{proc_dir}/exe")),
        std::fs::read_link("/proc/self/exe"),
    ) {
        (Ok(theirs), Ok(ours)) => theirs == ours || theirs == deleted(&ours),
        _ => false,
    };
    let own_uid =
        std::fs::metadata(&proc_dir).is_ok_and(|m| m.uid() == rustix::process::geteuid().as_raw());
    if !(same_start && own_exe && own_uid) {
        return false;
    }
    rustix::process::pidfd_send_signal(&pidfd, Signal::TERM).is_ok()
}

/// How /proc names the executable of a process whose binary was replaced since it started
/// (`cargo install` over the running `aware`): the same path, which is still this program.
fn deleted(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(" (deleted)");
    PathBuf::from(s)
}

/// Waits (at most [`HANDOVER`]) until the signalled holder has exited and freed the lock.
fn wait_for_lock(file: &File) -> bool {
    // flock has no timeout: it blocks on a thread of its own, on a second descriptor of the
    // same open file (a lock belongs to the open file, so it is taken for `file` too). Left
    // blocked after a timeout, it ends with the process.
    let Ok(dup) = file.try_clone() else {
        return false;
    };
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("aware-hook-slot".into())
        .spawn(move || {
            let _ = tx.send(rustix::fs::flock(&dup, FlockOperation::LockExclusive).is_ok());
        });
    spawned.is_ok() && rx.recv_timeout(HANDOVER).unwrap_or(false)
}
