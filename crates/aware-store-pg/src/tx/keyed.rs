//! The keyed mode's side of the row primitives (`PgOptions::keyed_locks`, see `crate::keys`):
//! which key each read or write takes, and reads of rows found by something other than their
//! key.

use super::PgTx;
use crate::conn::Param;
use crate::keys::{key_of, Mode, Need};
use aware_store::{CursorRow, ReadTx, Result, StoreError};

/// What an op meets when it cannot go on in this batch; the writer rolls it back and runs it
/// again, whatever the op made of this error.
fn key_busy() -> StoreError {
    StoreError::CommitFailed("a lock key is held by another batch: the op runs again".into())
}

impl PgTx<'_> {
    /// Takes the lock key of `parts` for this batch (keyed mode, share mode of the cluster key;
    /// otherwise nothing to do). The batch's first key is waited for; a later one is a
    /// try-lock, and when another batch holds it the op is marked blocked and fails here, to be
    /// rolled back and run first in the next batch (see `keys`).
    pub(super) fn lock(&self, parts: &[&str]) -> Result<()> {
        if self.reader {
            return Ok(());
        }
        let mut conn = self.conn.borrow_mut();
        if conn.keys.mode() != Mode::Shared {
            return Ok(());
        }
        if conn.keys.blocked().is_some() {
            return Err(key_busy());
        }
        let k = key_of(parts);
        if conn.keys.holds(k) {
            return Ok(());
        }
        let wait = conn.keys.holds_none();
        let got = crate::epoch::take_key(&mut conn, k, wait)?;
        if got {
            Ok(())
        } else {
            conn.keys.block(Need::Key(k));
            Err(key_busy())
        }
    }

    /// [`PgTx::lock`] of the stream `(key, agent)`: its session row, turns, runs, FIFO, link,
    /// events, head, and the cursors that name it as target.
    pub(super) fn stream(&self, key: &str, agent: &str) -> Result<()> {
        self.lock(&[key, agent])
    }

    /// Whether the writer's batch holds the stream's key, or needs none.
    pub(super) fn holds_stream(&self, key: &str, agent: &str) -> bool {
        let conn = self.conn.borrow();
        self.reader || conn.keys.mode() != Mode::Shared || conn.keys.holds(key_of(&[key, agent]))
    }

    /// Work on rows of keys it cannot name (bulk writes, reads across the store): in keyed
    /// mode only under the cluster key held exclusively; in share mode the op is marked blocked,
    /// to run first in a batch that takes it so.
    pub(super) fn exclusive(&self) -> Result<()> {
        if self.reader {
            return Ok(());
        }
        let mut conn = self.conn.borrow_mut();
        if conn.keys.mode() != Mode::Shared {
            return Ok(());
        }
        conn.keys.block(Need::Exclusive);
        Err(key_busy())
    }

    /// Rows found by something other than their key (a watcher's cursors, a label, a run id):
    /// each row's key is taken, and the rows are read again until every key was held before
    /// the read, since a row of a key granted after the read may have changed in between.
    pub(super) fn keyed_read<T>(
        &self,
        read: impl Fn() -> Result<Vec<T>>,
        key: impl Fn(&T) -> (String, String),
    ) -> Result<Vec<T>> {
        loop {
            let rows = read()?;
            let mut fresh = false;
            for row in &rows {
                let (k, a) = key(row);
                if !self.holds_stream(&k, &a) {
                    self.stream(&k, &a)?;
                    fresh = true;
                }
            }
            if !fresh {
                return Ok(rows);
            }
        }
    }

    /// [`PgTx::keyed_read`] of cursors: their keys are their targets'.
    pub(super) fn keyed_cursors(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<CursorRow>> {
        self.keyed_read(
            || self.map_vec(sql, params, super::cursor_from_row),
            |c| (c.target_key.clone(), c.target_agent.clone()),
        )
    }

    /// [`PgTx::keyed_read`] of at most one row.
    pub(super) fn keyed_read_opt<T>(
        &self,
        read: impl Fn() -> Result<Option<T>>,
        key: impl Fn(&T) -> (String, String),
    ) -> Result<Option<T>> {
        Ok(self
            .keyed_read(|| Ok(read()?.into_iter().collect()), key)?
            .pop())
    }

    /// The keys of a session row's writes: its stream's, and its label's (labels are unique
    /// per agent, and two creators of one label must not race on the unique index while
    /// holding other keys).
    pub(super) fn session_keys(&self, s: &aware_store::SessionRow) -> Result<()> {
        self.stream(&s.key, &s.agent_id)?;
        if let Some(label) = &s.label {
            self.lock(&["\u{1}label", &s.agent_id, label])?;
        }
        Ok(())
    }

    // The watchers' existence is read without their keys in keyed mode: a session appears
    // only under its own key and disappears only under the cluster key held exclusively, so
    // the answer cannot change within the batch, and appends on many children of one watcher
    // must not contend on the watcher's key. Read past the row cache, which holds only rows of
    // keys the batch holds.
    pub(super) fn watcher_cursors_keyed(
        &self,
        target_key: &str,
        target_agent: &str,
        watchers: &[(&str, &str)],
    ) -> Result<Vec<(bool, Option<CursorRow>)>> {
        watchers
            .iter()
            .map(|(key, agent)| {
                let exists = if self.holds_stream(key, agent) {
                    self.session_exists(key, agent)?
                } else if self.with_cache(|c| c.known_existing(key, agent)) == Some(true) {
                    true
                } else {
                    let found = self
                        .map_opt(
                            "SELECT 1 FROM sessions WHERE session_key = $1 AND agent_id = $2",
                            &[key, agent],
                            |_| Ok(()),
                        )?
                        .is_some();
                    if found {
                        self.with_cache(|c| c.saw_existing(key, agent));
                    }
                    found
                };
                let cursor = if exists {
                    self.cursor(key, target_key, target_agent)?
                } else {
                    None
                };
                Ok((exists, cursor))
            })
            .collect()
    }
}
