//! The writer's row cache: session rows, cursors, the live watchers of a target and turn
//! counts that this gateway's writer read or wrote, so the reads an op repeats (the session it
//! writes to, the watcher's cursor it is about to update) cost no round trip.
//!
//! Why it is right: every write to the cluster runs under the cluster-wide write lock, and every
//! write batch raises one counter (`aware_write_epoch`) under that lock. A batch that finds the
//! counter one above what this writer's last committed batch set knows that nobody else wrote
//! in between, so every row the writer saw or wrote is still as it left it; otherwise the cache
//! is emptied first, unless the write log (`aware_write_log`, one row per committed batch with
//! the session keys whose cached rows it wrote) accounts for every epoch in between: then only
//! the rows of those keys are dropped, so gateways taking turns at the lock keep the rows of
//! sessions the others did not touch. Inside a transaction the cache follows this writer's own writes (write
//! through); a write whose effect on a cached row is not modelled exactly empties the affected
//! map instead. Any rollback (of an op, of a savepoint, of a batch) and any commit whose outcome
//! is unknown empty the cache. An empty cache is always right, so every doubt empties it.

use aware_store::{CursorRow, SessionRow};
use std::collections::{HashMap, HashSet};

/// Beyond this many entries in all, the cache is emptied rather than grown.
const MAX_ENTRIES: usize = 50_000;

/// Beyond this many touched keys a batch logs "everything" instead of its keys.
const MAX_TOUCHED: usize = 4_096;

/// One committed batch of another writer, as `aware_write_log` has it.
pub(crate) struct LoggedBatch {
    pub(crate) epoch: i64,
    /// The batch wrote cached tables in bulk (sweep, expiry, orphan marking, …).
    pub(crate) everything: bool,
    /// The session keys whose session row, turn count or cursors (as watcher or as target)
    /// the batch wrote.
    pub(crate) keys: Vec<String>,
}

type Pair = (String, String);
type Triple = (String, String, String);

#[derive(Default)]
pub(crate) struct RowCache {
    /// The write epoch of this writer's last committed batch.
    epoch: Option<i64>,
    /// `None` = known not to exist.
    sessions: HashMap<Pair, Option<SessionRow>>,
    cursors: HashMap<Triple, Option<CursorRow>>,
    /// Non-muted watchers of a target, sorted (`live_watchers_of`).
    watchers: HashMap<Pair, Vec<String>>,
    /// `MAX(idx) + 1` of a session's turns.
    turn_counts: HashMap<Pair, i64>,
    /// Keyed mode: sessions seen to exist by a read without their key (a watcher's existence,
    /// `watcher_cursors`). A session disappears only in a batch holding the cluster key
    /// exclusively, after which every writer's next batch finds the epoch moved and empties
    /// the cache; so a session seen existing stays so, and one not seen is read again.
    existing: HashSet<Pair>,
    /// What this batch wrote, for its row in `aware_write_log` (recorded whether or not the
    /// row was cached: other writers' caches are what it is for).
    touched: HashSet<String>,
    touched_everything: bool,
}

fn pair(a: &str, b: &str) -> Pair {
    (a.to_string(), b.to_string())
}

impl RowCache {
    /// A batch begins with `epoch` (the cluster-wide counter every write batch raises under the
    /// write lock) and `log`, the logged batches after this writer's last commit and before
    /// `epoch`. Unless this writer's last commit set `epoch - 1`, someone else wrote since: if
    /// `log` accounts for every epoch in between, the rows of the keys it names are dropped;
    /// otherwise (a batch logged "everything", rows pruned from the log, `aware migrate`'s bump,
    /// no last commit known) every cached row may be stale and all are dropped.
    pub(crate) fn begin_batch(&mut self, epoch: i64, log: &[LoggedBatch]) {
        self.touched.clear();
        self.touched_everything = false;
        match self.epoch.take() {
            Some(last) if last == epoch - 1 => {}
            Some(last) if accounts_for(last, epoch, log) => {
                let keys: HashSet<&str> = log
                    .iter()
                    .flat_map(|b| b.keys.iter().map(String::as_str))
                    .collect();
                self.evict(&keys);
            }
            _ => self.clear(),
        }
    }

    /// What this batch wrote, for its `aware_write_log` row: `(everything, keys)`.
    pub(crate) fn touched(&self) -> (bool, Vec<String>) {
        if self.touched_everything {
            (true, Vec::new())
        } else {
            (false, self.touched.iter().cloned().collect())
        }
    }

    fn touch(&mut self, key: &str) {
        if self.touched_everything || self.touched.contains(key) {
            return;
        }
        if self.touched.len() >= MAX_TOUCHED {
            self.touch_everything();
        } else {
            self.touched.insert(key.to_string());
        }
    }

    fn touch_everything(&mut self) {
        self.touched_everything = true;
        self.touched.clear();
    }

    /// Drops every row of the sessions `keys` names: their session rows (any agent), turn
    /// counts, live-watcher lists, and cursors where they are the watcher or the target.
    fn evict(&mut self, keys: &HashSet<&str>) {
        if keys.is_empty() {
            return;
        }
        self.sessions.retain(|(k, _), _| !keys.contains(k.as_str()));
        self.turn_counts
            .retain(|(k, _), _| !keys.contains(k.as_str()));
        self.watchers.retain(|(k, _), _| !keys.contains(k.as_str()));
        self.cursors
            .retain(|(w, tk, _), _| !keys.contains(w.as_str()) && !keys.contains(tk.as_str()));
    }

    /// The write epoch of this writer's last committed batch, if it is known.
    pub(crate) fn last_epoch(&self) -> Option<i64> {
        self.epoch
    }

    /// The batch that raised the counter to `epoch` committed.
    pub(crate) fn committed(&mut self, epoch: i64) {
        self.epoch = Some(epoch);
    }

    /// Forgets every row (an empty cache is always right).
    pub(crate) fn clear(&mut self) {
        self.sessions.clear();
        self.cursors.clear();
        self.watchers.clear();
        self.turn_counts.clear();
        self.existing.clear();
    }

    /// Rows were written behind the cache (`aware migrate`'s import): forget every row, and
    /// have this batch's log row tell the other gateways to do the same.
    pub(crate) fn imported(&mut self) {
        self.clear();
        self.touch_everything();
    }

    fn room(&mut self) {
        let n = self.sessions.len()
            + self.cursors.len()
            + self.watchers.len()
            + self.turn_counts.len()
            + self.existing.len();
        if n >= MAX_ENTRIES {
            self.clear();
        }
    }

    // Sessions.

    pub(crate) fn known_existing(&self, key: &str, agent: &str) -> bool {
        self.existing.contains(&pair(key, agent))
    }

    pub(crate) fn saw_existing(&mut self, key: &str, agent: &str) {
        self.room();
        self.existing.insert(pair(key, agent));
    }

    /// `Some(row or None)` when known.
    pub(crate) fn session(&self, key: &str, agent: &str) -> Option<Option<SessionRow>> {
        self.sessions.get(&pair(key, agent)).cloned()
    }

    /// A row read from the database (or its absence).
    pub(crate) fn saw_session(&mut self, key: &str, agent: &str, row: Option<SessionRow>) {
        self.room();
        self.sessions.insert(pair(key, agent), row);
    }

    /// A row inserted (the insert succeeded).
    pub(crate) fn inserted_session(&mut self, row: &SessionRow) {
        self.touch(&row.key);
        self.room();
        self.sessions
            .insert(pair(&row.key, &row.agent_id), Some(row.clone()));
    }

    /// An `UPDATE` of every column: exact only if the row is known to exist.
    pub(crate) fn updated_session(&mut self, row: &SessionRow) {
        self.touch(&row.key);
        let k = pair(&row.key, &row.agent_id);
        match self.sessions.get_mut(&k) {
            Some(Some(cached)) => *cached = row.clone(),
            Some(None) => {}
            None => {}
        }
    }

    pub(crate) fn deleted_session(&mut self, key: &str, agent: &str) {
        self.touch(key);
        self.sessions.insert(pair(key, agent), None);
        self.turn_counts.insert(pair(key, agent), 0);
    }

    /// A write to many session rows at once.
    pub(crate) fn forget_sessions(&mut self) {
        self.touch_everything();
        self.sessions.clear();
    }

    // Cursors.

    pub(crate) fn cursor(&self, w: &str, tk: &str, ta: &str) -> Option<Option<CursorRow>> {
        self.cursors
            .get(&(w.to_string(), tk.to_string(), ta.to_string()))
            .cloned()
    }

    pub(crate) fn saw_cursor(&mut self, w: &str, tk: &str, ta: &str, row: Option<CursorRow>) {
        self.room();
        self.cursors
            .insert((w.to_string(), tk.to_string(), ta.to_string()), row);
    }

    /// The upsert of `put_cursor`: every column but `created_at` is written, so the cached row
    /// is exact when the previous state (absent, or present with its `created_at`) is known.
    pub(crate) fn put_cursor(&mut self, c: &CursorRow) {
        self.touch(&c.watcher);
        self.touch(&c.target_key);
        let k = (
            c.watcher.clone(),
            c.target_key.clone(),
            c.target_agent.clone(),
        );
        match self.cursors.get(&k) {
            Some(Some(old)) => {
                let mut row = c.clone();
                row.created_at = old.created_at;
                self.cursors.insert(k, Some(row));
            }
            Some(None) => {
                self.cursors.insert(k, Some(c.clone()));
            }
            None => {}
        }
        if let Some(list) = self
            .watchers
            .get_mut(&(c.target_key.clone(), c.target_agent.clone()))
        {
            let at = list.binary_search(&c.watcher);
            match (c.state.muted, at) {
                (false, Err(i)) => list.insert(i, c.watcher.clone()),
                (true, Ok(i)) => {
                    list.remove(i);
                }
                _ => {}
            }
        }
    }

    pub(crate) fn deleted_cursor(&mut self, w: &str, tk: &str, ta: &str) {
        self.touch(w);
        self.touch(tk);
        self.cursors
            .insert((w.to_string(), tk.to_string(), ta.to_string()), None);
        if let Some(list) = self.watchers.get_mut(&pair(tk, ta)) {
            if let Ok(i) = list.binary_search(&w.to_string()) {
                list.remove(i);
            }
        }
    }

    /// A write to many cursors at once.
    pub(crate) fn forget_cursors(&mut self) {
        self.touch_everything();
        self.cursors.clear();
        self.watchers.clear();
    }

    pub(crate) fn live_watchers(&self, tk: &str, ta: &str) -> Option<Vec<String>> {
        self.watchers.get(&pair(tk, ta)).cloned()
    }

    pub(crate) fn saw_live_watchers(&mut self, tk: &str, ta: &str, list: &[String]) {
        // The database orders by byte order (COLLATE "C"), as `String`'s `Ord` does.
        if list.windows(2).all(|w| w[0] < w[1]) {
            self.room();
            self.watchers.insert(pair(tk, ta), list.to_vec());
        }
    }

    // Turns.

    pub(crate) fn turn_count(&self, key: &str, agent: &str) -> Option<i64> {
        self.turn_counts.get(&pair(key, agent)).copied()
    }

    pub(crate) fn saw_turn_count(&mut self, key: &str, agent: &str, n: i64) {
        self.room();
        self.turn_counts.insert(pair(key, agent), n);
    }

    pub(crate) fn inserted_turn(&mut self, key: &str, agent: &str, index: i64) {
        self.touch(key);
        if let Some(n) = self.turn_counts.get_mut(&pair(key, agent)) {
            *n = (*n).max(index + 1);
        }
    }

    pub(crate) fn deleted_turns(&mut self, key: &str, agent: &str) {
        self.touch(key);
        self.turn_counts.insert(pair(key, agent), 0);
    }
}

/// Whether `log` holds exactly one batch for each epoch after `last` and before `epoch`, none
/// of them "everything". Committed epochs are consecutive (a batch that does not commit takes
/// its raise back), so a missing one was pruned from the log or raised without a row
/// (`aware migrate`).
fn accounts_for(last: i64, epoch: i64, log: &[LoggedBatch]) -> bool {
    let Some(expected) = epoch.checked_sub(last).and_then(|d| d.checked_sub(1)) else {
        return false;
    };
    if expected < 0 || log.len() as i64 != expected {
        return false;
    }
    log.iter()
        .zip(last + 1..)
        .all(|(b, e)| b.epoch == e && !b.everything)
}

#[cfg(test)]
mod tests {
    use super::{LoggedBatch, RowCache};

    fn logged(epoch: i64, everything: bool, keys: &[&str]) -> LoggedBatch {
        LoggedBatch {
            epoch,
            everything,
            keys: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    /// A cache that committed epoch 10 knowing turn counts of `x` and `y` and a cursor of
    /// `w` on `x`.
    fn warm() -> RowCache {
        let mut c = RowCache::default();
        c.begin_batch(10, &[]);
        c.saw_turn_count("x", "main", 3);
        c.saw_turn_count("y", "main", 4);
        c.saw_cursor("w", "x", "main", None);
        c.committed(10);
        c
    }

    #[test]
    fn only_the_logged_keys_leave_when_the_log_accounts_for_every_epoch() {
        let mut c = warm();
        c.begin_batch(13, &[logged(11, false, &["x"]), logged(12, false, &[])]);
        assert_eq!(c.turn_count("x", "main"), None);
        assert_eq!(c.cursor("w", "x", "main"), None, "x is the cursor's target");
        assert_eq!(c.turn_count("y", "main"), Some(4));
    }

    #[test]
    fn a_gap_an_everything_row_or_an_unknown_last_epoch_empties_the_cache() {
        for log in [
            vec![logged(12, false, &["x"])],
            vec![logged(11, false, &["x"])],
            vec![logged(11, true, &[]), logged(12, false, &[])],
            vec![logged(11, false, &[]), logged(11, false, &[])],
        ] {
            let mut c = warm();
            c.begin_batch(13, &log);
            assert_eq!(c.turn_count("y", "main"), None);
        }
        let mut c = warm();
        c.begin_batch(14, &[]);
        c.committed(14);
        c.saw_turn_count("y", "main", 4);
        // A batch that did not commit leaves the last epoch unknown.
        c.begin_batch(15, &[]);
        c.begin_batch(16, &[]);
        assert_eq!(c.turn_count("y", "main"), None);
    }

    #[test]
    fn writes_are_logged_whether_or_not_their_rows_were_cached() {
        let mut c = RowCache::default();
        c.begin_batch(1, &[]);
        c.inserted_turn("t", "main", 0);
        c.deleted_cursor("w", "u", "main");
        let (everything, mut keys) = c.touched();
        keys.sort();
        assert!(!everything);
        assert_eq!(keys, ["t", "u", "w"]);
        c.forget_cursors();
        assert_eq!(c.touched(), (true, Vec::new()));
        c.begin_batch(2, &[]);
        assert_eq!(c.touched(), (false, Vec::new()));
    }
}
