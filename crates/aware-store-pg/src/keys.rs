//! Locks by key (`PgOptions::keyed_locks`, decision D56; design in docs/design/write-scaling.md):
//! a batch holds the cluster key (the row of `aware_write_epoch`) in share mode and, per stream
//! it reads or writes, an advisory transaction lock on that stream's key, so batches of
//! different gateways on different sessions run and commit at the same time.
//!
//! The rules that keep it free of deadlocks and of stale reads:
//! - a batch *waits* for a key only while it holds none (its first key); every later key is a
//!   try-lock, and an op that cannot get one is rolled back and run first in the next batch,
//!   which waits for that key before anything else;
//! - every row the writer reads or writes is reached under its key (a cursor under its
//!   target's), and rows found by a read that names no key (a watcher's cursors, a label, a
//!   run id) are read again once their keys are held;
//! - writes that reach rows of keys they cannot name (prune, expiry, the restart sweep, orphan
//!   marking, deleting a watcher's cursors, imports) and reads across the whole store need the
//!   cluster key exclusively: such an op is rolled back and run first in a batch that takes it
//!   (the epoch's `UPDATE`), which keeps every keyed batch out.

use std::collections::{HashMap, HashSet};

/// Most keys whose last version this writer remembers; past it the memory starts again (a
/// key forgotten only costs re-reading its rows once).
const MAX_REMEMBERED: usize = 100_000;

/// The first half of every key lock: the two-`int4` form of advisory locks lives apart from
/// the `bigint` keys of the migration and leadership locks, so no stream key can collide with
/// them.
pub(crate) const KEY_SPACE: i32 = 0x6177_6b79;

/// What a batch holds of the cluster key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    /// Keyed locks are off: the cluster lock is exclusive and nothing is keyed.
    #[default]
    Off,
    /// Share mode: every stream is reached under its own key.
    Shared,
    /// Exclusive: no other batch runs, keys are not needed.
    Exclusive,
}

/// Why an op cannot go on in this batch: what the next batch must take before running it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// A key another batch holds: the next batch waits for it first.
    Key(i32),
    /// The cluster key exclusively.
    Exclusive,
}

/// The keys of the writer's current batch.
#[derive(Default)]
pub(crate) struct KeyLocks {
    mode: Mode,
    held: HashSet<i32>,
    /// Keys in the order taken, with the savepoints set since, so a rollback to a savepoint
    /// forgets the keys taken after it (PostgreSQL releases the locks of a rolled-back
    /// subtransaction; forgetting one still held only costs a try-lock that succeeds).
    taken: Vec<i32>,
    marks: Vec<(String, usize)>,
    /// Set when an op met a busy key or needs the cluster key exclusively: the op is rolled
    /// back and deferred, whatever it answered.
    blocked: Option<Need>,
    /// This writer's name in `aware_key_versions` (unique per writer thread and start).
    writer: String,
    /// The number of the current batch, the version it writes for the keys it holds.
    batch: i64,
    /// Per key, the version this writer last committed holding it: its cached rows of a key
    /// are valid while the key's row still names this writer and version.
    mine: HashMap<i32, i64>,
    /// The cluster epoch seen by the last batch: raised by exclusive batches (bulk writes,
    /// `aware migrate`), which write rows of any key without key versions.
    epoch: Option<i64>,
}

impl KeyLocks {
    pub(crate) fn begin(&mut self, mode: Mode) {
        if self.writer.is_empty() {
            self.writer = writer_name();
        }
        self.batch += 1;
        self.mode = mode;
        self.held.clear();
        self.taken.clear();
        self.marks.clear();
        self.blocked = None;
    }

    /// Whether the version a key's row holds (`None`: no row) is this writer's last, i.e. no
    /// other writer held the key since this writer's last commit holding it.
    pub(crate) fn still_mine(&self, k: i32, writer: Option<&str>, version: Option<i64>) -> bool {
        match (self.mine.get(&k), writer, version) {
            (None, None, _) => true,
            (Some(&v), Some(w), Some(version)) => w == self.writer && v == version,
            _ => false,
        }
    }

    /// Whether the cluster epoch moved since the last batch (then every cached row may be
    /// stale); remembers `epoch`.
    pub(crate) fn epoch_moved(&mut self, epoch: i64) -> bool {
        self.epoch.replace(epoch) != Some(epoch)
    }

    /// The keys held at commit and the version to write for them.
    pub(crate) fn to_log(&self) -> (Vec<i32>, String, i64) {
        (
            self.held.iter().copied().collect(),
            self.writer.clone(),
            self.batch,
        )
    }

    /// The batch committed: its keys now carry its version.
    pub(crate) fn committed(&mut self) {
        if self.mine.len() + self.held.len() > MAX_REMEMBERED {
            self.mine.clear();
        }
        for &k in &self.held {
            self.mine.insert(k, self.batch);
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn holds(&self, k: i32) -> bool {
        self.held.contains(&k)
    }

    /// Whether the batch holds no key yet: only then may it wait for one.
    pub(crate) fn holds_none(&self) -> bool {
        self.held.is_empty()
    }

    pub(crate) fn granted(&mut self, k: i32) {
        if self.held.insert(k) {
            self.taken.push(k);
        }
    }

    pub(crate) fn block(&mut self, need: Need) {
        self.blocked.get_or_insert(need);
    }

    pub(crate) fn blocked(&self) -> Option<Need> {
        self.blocked
    }

    /// The op ended: answers what blocked it, and forgets it for the next op.
    pub(crate) fn take_blocked(&mut self) -> Option<Need> {
        self.blocked.take()
    }

    pub(crate) fn savepoint(&mut self, name: &str) {
        self.marks.push((name.to_string(), self.taken.len()));
    }

    pub(crate) fn release(&mut self, name: &str) {
        if let Some(at) = self.marks.iter().rposition(|(n, _)| n == name) {
            self.marks.truncate(at);
        }
    }

    pub(crate) fn rolled_back(&mut self, name: &str) {
        if let Some(at) = self.marks.iter().rposition(|(n, _)| n == name) {
            let len = self.marks[at].1;
            self.marks.truncate(at);
            for k in self.taken.drain(len..) {
                self.held.remove(&k);
            }
        }
    }
}

/// A name no other writer has: the process, the time and a random hash seed.
fn writer_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    format!("{}-{nanos}-{:016x}", std::process::id(), h.finish())
}

/// The lock key of a stream `(key, agent)`, or of another name (`parts`) that ops must not
/// race on (a label, a dedupe key). A stable hash, the same in every gateway: two names that
/// collide only share a lock.
pub(crate) fn key_of(parts: &[&str]) -> i32 {
    // FNV-1a, 64 bits, folded to 32.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            h ^= 0xff;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        for b in part.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    ((h >> 32) ^ h) as u32 as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollback_forgets_the_keys_taken_after_its_savepoint() {
        let mut k = KeyLocks::default();
        k.begin(Mode::Shared);
        k.granted(1);
        k.savepoint("op");
        k.granted(2);
        k.savepoint("inner");
        k.granted(3);
        k.rolled_back("inner");
        assert!(k.holds(1) && k.holds(2) && !k.holds(3));
        k.rolled_back("op");
        assert!(k.holds(1) && !k.holds(2));
    }

    #[test]
    fn keys_separate_their_parts() {
        assert_ne!(key_of(&["ab", "c"]), key_of(&["a", "bc"]));
        assert_eq!(key_of(&["a", "b"]), key_of(&["a", "b"]));
    }
}
