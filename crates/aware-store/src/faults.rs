//! The fault-injection seam (test mode, 03 §9, and the failure-model tests of 01 §12).
//! Checked by the store itself, so faults hit the real code paths above it; the provider-check
//! faults are checked by the upstream monitor, which reaches this plan through its engine.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct FaultPlan {
    fail_appends: AtomicBool,
    /// Session key whose appends fail; a std mutex, held only to clone or compare.
    fail_appends_for: Mutex<Option<String>>,
    fail_reads: AtomicBool,
    fail_link_settles: AtomicBool,
    fail_commits: AtomicU32,
    /// The writer holds its next batch until this is cleared (a stuck disk or lock, for the
    /// `/health` probe).
    stall_writer: AtomicBool,
    /// The upstream monitor's provider checks hold (their thread waits) until this is cleared:
    /// a provider that never answers, for the monitor's timeout and single flight (04 §7).
    stall_provider_checks: AtomicBool,
    /// The upstream monitor's provider checks fail (04 §7 "provider failure").
    fail_provider_checks: AtomicBool,
    /// Statements the writer runs on its own connection before its next batch (the test seams
    /// `SqliteStore::set_max_page_count` and `SqliteStore::set_writer_query_only`).
    writer_pragmas: Mutex<Vec<String>>,
}

impl FaultPlan {
    pub fn set_fail_appends(&self, on: bool) {
        self.fail_appends.store(on, Ordering::SeqCst);
    }
    pub fn set_fail_appends_for(&self, key: Option<String>) {
        if let Ok(mut slot) = self.fail_appends_for.lock() {
            *slot = key;
        }
    }
    pub fn set_fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::SeqCst);
    }
    pub fn set_fail_link_settles(&self, on: bool) {
        self.fail_link_settles.store(on, Ordering::SeqCst);
    }
    /// The next `n` commits fail (the whole batch is rolled back).
    pub fn fail_next_commits(&self, n: u32) {
        self.fail_commits.store(n, Ordering::SeqCst);
    }
    pub fn set_stall_writer(&self, on: bool) {
        self.stall_writer.store(on, Ordering::SeqCst);
    }
    pub fn set_stall_provider_checks(&self, on: bool) {
        self.stall_provider_checks.store(on, Ordering::SeqCst);
    }
    pub fn provider_checks_stalled(&self) -> bool {
        self.stall_provider_checks.load(Ordering::SeqCst)
    }
    pub fn set_fail_provider_checks(&self, on: bool) {
        self.fail_provider_checks.store(on, Ordering::SeqCst);
    }
    pub fn provider_checks_fail(&self) -> bool {
        self.fail_provider_checks.load(Ordering::SeqCst)
    }
    /// For store backends; not for use above the store.
    #[doc(hidden)]
    pub fn writer_stalled(&self) -> bool {
        self.stall_writer.load(Ordering::SeqCst)
    }
    pub fn clear(&self) {
        self.set_stall_writer(false);
        self.set_fail_appends(false);
        self.set_fail_appends_for(None);
        self.set_fail_reads(false);
        self.set_fail_link_settles(false);
        self.fail_next_commits(0);
        self.set_stall_provider_checks(false);
        self.set_fail_provider_checks(false);
    }

    /// For store backends; not for use above the store.
    #[doc(hidden)]
    pub fn append_fails(&self, session_key: &str) -> bool {
        self.fail_appends.load(Ordering::SeqCst)
            || self
                .fail_appends_for
                .lock()
                .map(|k| k.as_deref() == Some(session_key))
                .unwrap_or(false)
    }
    /// For store backends; not for use above the store.
    #[doc(hidden)]
    pub fn reads_fail(&self) -> bool {
        self.fail_reads.load(Ordering::SeqCst)
    }
    pub fn link_settles_fail(&self) -> bool {
        self.fail_link_settles.load(Ordering::SeqCst)
    }
    /// For store backends; not for use above the store.
    #[doc(hidden)]
    pub fn queue_writer_pragma(&self, sql: String) {
        if let Ok(mut q) = self.writer_pragmas.lock() {
            q.push(sql);
        }
    }
    /// For store backends; not for use above the store.
    #[doc(hidden)]
    pub fn take_writer_pragmas(&self) -> Vec<String> {
        self.writer_pragmas
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default()
    }
    /// For store backends; not for use above the store.
    #[doc(hidden)]
    pub fn take_commit_failure(&self) -> bool {
        self.fail_commits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}
