//! WAL checkpoints off the writer's path (decision D60).
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` that takes the WAL past 1,000 pages:
//! that commit's leader (and every op queued behind it) waits while the checkpoint copies the
//! WAL's pages back into the database file and syncs it, a cost that grows with the store
//! because the pages are scattered over a bigger file. The writer connection instead reports the
//! WAL's length after each commit (a WAL hook, which also replaces the automatic checkpoint), and
//! a checkpointer thread with its own connection runs the passive checkpoint while the writer
//! goes on. A passive checkpoint never waits for readers or the writer; if it falls behind (a
//! long reader pinning old frames, or the thread paused by a test), the writer checkpoints
//! inline once the WAL reaches [`INLINE_PAGES`], so the WAL stays bounded as before.

use rusqlite::hooks::Wal;
use rusqlite::Connection;
use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// WAL pages after a commit from which the checkpointer is asked to run (SQLite's own
/// automatic checkpoint threshold).
pub(super) const BACKGROUND_PAGES: i32 = 1_000;
/// WAL pages after a commit from which the writer checkpoints inline, as SQLite would have at
/// 1,000: the bound on the WAL when the checkpointer cannot keep up.
pub(super) const INLINE_PAGES: i32 = 10_000;

thread_local! {
    /// The WAL's length in pages after the last commit on this thread's connection. The hook
    /// runs inside `COMMIT`, on the thread that steps it, so the leader reads its own commit's
    /// figure right after.
    static WAL_PAGES: Cell<i32> = const { Cell::new(0) };
}

/// The writer connection's WAL hook. Registering it replaces SQLite's automatic checkpoint.
pub(super) fn record_wal_pages(_: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|c| c.set(pages));
    Ok(())
}

/// The WAL's length after this thread's last commit (0 once taken).
pub(super) fn take_wal_pages() -> i32 {
    WAL_PAGES.with(|c| c.replace(0))
}

#[derive(Default)]
struct State {
    wanted: bool,
    closed: bool,
    paused: bool,
    background: u64,
    inline: u64,
}

/// The checkpointer thread's mailbox and its counters.
#[derive(Default)]
pub(super) struct Checkpointer {
    state: Mutex<State>,
    /// Signalled on a request, an unpause and on close.
    work: Condvar,
    /// Signalled after each checkpoint the thread ran.
    ran: Condvar,
}

impl Checkpointer {
    fn state(&self) -> MutexGuard<'_, State> {
        // Flags and counters, consistent at every unlock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for a checkpoint; requests made while one is pending or running coalesce.
    pub(super) fn request(&self) {
        let mut s = self.state();
        if !s.wanted {
            s.wanted = true;
            drop(s);
            self.work.notify_one();
        }
    }

    /// Called by the writer after each commit with the WAL's length.
    pub(super) fn after_commit(&self, conn: &Connection, pages: i32) {
        if pages >= INLINE_PAGES {
            match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                Ok(()) => self.state().inline += 1,
                Err(e) => {
                    tracing::warn!(event = "checkpoint_failed", error = %e, inline = true, "WAL checkpoint failed");
                }
            }
        } else if pages >= BACKGROUND_PAGES {
            self.request();
        }
    }

    /// The thread's loop: one passive checkpoint per (coalesced) request, until closed.
    pub(super) fn run(&self, conn: &Connection) {
        loop {
            let mut s = self.state();
            while !s.closed && (!s.wanted || s.paused) {
                s = self.work.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            if s.closed {
                return;
            }
            s.wanted = false;
            drop(s);
            let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            if let Err(e) = result {
                tracing::warn!(event = "checkpoint_failed", error = %e, inline = false, "WAL checkpoint failed");
            }
            self.state().background += 1;
            self.ran.notify_all();
        }
    }

    pub(super) fn close(&self) {
        self.state().closed = true;
        self.work.notify_all();
    }

    /// Test seam: holds the thread's checkpoints back (requests are kept) or lets them run.
    pub(super) fn pause(&self, on: bool) {
        self.state().paused = on;
        self.work.notify_all();
    }

    /// Checkpoints run so far: (by the thread, inline by the writer).
    pub(super) fn runs(&self) -> (u64, u64) {
        let s = self.state();
        (s.background, s.inline)
    }

    /// Test seam: waits until the thread has run at least `n` checkpoints, or `limit` passed;
    /// answers whether it has.
    pub(super) fn wait_background(&self, n: u64, limit: Duration) -> bool {
        let s = self.state();
        let (s, _) = self
            .ran
            .wait_timeout_while(s, limit, |s| s.background < n)
            .unwrap_or_else(|e| e.into_inner());
        s.background >= n
    }
}
