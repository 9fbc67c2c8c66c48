//! The SQLite schema, its migration, and opening connections (owner-only file, WAL, busy
//! timeout, the statement-planner setting).

use super::options::*;
use crate::Sq;
use aware_store::{Result, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

// The counts behind the metrics gauges; constants so the unit test checks the plans of exactly
// these statements.
pub(super) const COUNT_SESSIONS_SQL: &str =
    "SELECT COALESCE(SUM(n), 0) FROM aware_counts WHERE counter = 'sessions'";
pub(super) const COUNT_WATCHERS_SQL: &str =
    "SELECT COUNT(DISTINCT watcher_session_key) FROM session_watch_cursors";
pub(super) const COUNT_PENDING_SQL: &str =
    "SELECT COALESCE(SUM(n), 0) FROM aware_counts WHERE counter = 'pending'";

/// Cursor expiry's batch (01 §9): the day's bound lets it read `…_updated_day`; the exact cut
/// follows. Truncating division is monotonic, so `updated_at < ?1` implies the day's bound.
pub(super) const EXPIRE_CURSORS_SQL: &str =
    "DELETE FROM session_watch_cursors WHERE rowid IN (SELECT rowid FROM session_watch_cursors \
     WHERE updated_at / 86400000 <= ?1 / 86400000 AND updated_at < ?1 AND muted = 0 LIMIT ?2)";

/// Every append runs it; the unit test checks that its plan reads one index range in order.
pub(super) const LIVE_WATCHERS_SQL: &str =
    "SELECT watcher_session_key FROM session_watch_cursors WHERE target_session_key = ?1 \
     AND target_agent_id = ?2 AND muted = 0 ORDER BY watcher_session_key";

/// The two counts of `aware_counts` taken from the rows, for a store made before the table.
const SEED_COUNTS: &str = "\
INSERT INTO aware_counts (counter, agent_id, n) \
    SELECT 'sessions', agent_id, COUNT(*) FROM sessions GROUP BY agent_id;
INSERT INTO aware_counts (counter, agent_id, n) \
    SELECT 'pending', '', COUNT(*) FROM session_watch_cursors \
    WHERE muted = 0 AND notified_sequence > last_seen_sequence HAVING COUNT(*) > 0;";

pub(super) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS session_state_events (
    sequence     INTEGER PRIMARY KEY AUTOINCREMENT,
    dedupe_key   TEXT UNIQUE,
    session_key  TEXT NOT NULL,
    session_id   TEXT,
    agent_id     TEXT NOT NULL,
    kind         TEXT NOT NULL,
    actor_type   TEXT NOT NULL,
    actor_id     TEXT,
    run_id       TEXT,
    occurred_at  INTEGER NOT NULL,
    summary      TEXT NOT NULL,
    payload_json TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS session_state_events_stream
    ON session_state_events (session_key, agent_id, sequence);
CREATE INDEX IF NOT EXISTS session_state_events_age
    ON session_state_events (occurred_at, sequence);

CREATE TABLE IF NOT EXISTS session_state_heads (
    session_key         TEXT NOT NULL,
    agent_id            TEXT NOT NULL,
    last_sequence       INTEGER NOT NULL,
    pruned_max_sequence INTEGER NOT NULL DEFAULT 0,
    updated_at          INTEGER NOT NULL,
    PRIMARY KEY (session_key, agent_id)
) STRICT;

CREATE TABLE IF NOT EXISTS session_watch_cursors (
    watcher_session_key TEXT NOT NULL,
    target_session_key  TEXT NOT NULL,
    target_agent_id     TEXT NOT NULL,
    last_seen_sequence  INTEGER NOT NULL,
    notified_sequence   INTEGER NOT NULL,
    material_sequence   INTEGER NOT NULL,
    muted               INTEGER NOT NULL DEFAULT 0,
    origin              TEXT NOT NULL,
    notice_opened_at    INTEGER,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    PRIMARY KEY (watcher_session_key, target_session_key, target_agent_id)
) STRICT;
-- A target's watchers in watcher order: every append reads them (`live_watchers_of`) as one
-- index range, with no sort (decision D51). Not `muted` as well, which would make it covering:
-- every cursor upsert names `muted`, and SQLite rewrites the entry of an index whose column an
-- UPDATE assigns, changed or not. It replaces the index on the target columns alone, which a
-- store made before it still has until the drop at the end of this script.
CREATE INDEX IF NOT EXISTS session_watch_cursors_target_watcher
    ON session_watch_cursors (target_session_key, target_agent_id, watcher_session_key);
-- Cursor expiry's index, by the day of `updated_at` (then rowid), not by the millisecond
-- (decision D59). Every write of a cursor moves its entry here; by the millisecond, the restart
-- sweep (rowid order, every pending cursor) moved each entry from a scattered place, one leaf
-- page per row once the table outgrows a batch, and its batches grew with the table. By the day,
-- a batch's old entries lie in runs of rowid order, one run per distinct day (at most the
-- expiry's days), and its new ones at the end. Expiry states the same expression, then the exact
-- cut (`EXPIRE_CURSORS_SQL`). It replaces the index by the millisecond, dropped below.
CREATE INDEX IF NOT EXISTS session_watch_cursors_updated_day
    ON session_watch_cursors (updated_at / 86400000);
-- Pending rows only (few at any time): the console counts and sorts by pending notices, and
-- the pending-notices gauge and the watchers-with-pending scan avoid reading the whole table.
CREATE INDEX IF NOT EXISTS session_watch_cursors_pending_target
    ON session_watch_cursors (target_session_key, target_agent_id)
    WHERE muted = 0 AND notified_sequence > last_seen_sequence;
CREATE INDEX IF NOT EXISTS session_watch_cursors_pending_watcher
    ON session_watch_cursors (watcher_session_key)
    WHERE muted = 0 AND notified_sequence > last_seen_sequence;

CREATE TABLE IF NOT EXISTS session_system_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    text        TEXT NOT NULL,
    context_key TEXT,
    enqueued_at INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS session_system_events_session
    ON session_system_events (session_key, agent_id, id);

CREATE TABLE IF NOT EXISTS session_upstream_links (
    session_key       TEXT NOT NULL,
    agent_id          TEXT NOT NULL,
    catalog_id        TEXT NOT NULL,
    host_id           TEXT NOT NULL,
    thread_id         TEXT NOT NULL,
    upstream_kind     TEXT NOT NULL,
    upstream_ref_json TEXT NOT NULL,
    last_marker_json  TEXT,
    last_scanned_at   INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (session_key, agent_id)
) STRICT;

CREATE TABLE IF NOT EXISTS sessions (
    session_key        TEXT NOT NULL,
    agent_id           TEXT NOT NULL,
    session_id         TEXT NOT NULL,
    kind               TEXT NOT NULL,
    label              TEXT,
    parent_session_key TEXT,
    created_via        TEXT NOT NULL,
    active_run_id      TEXT,
    goal_text          TEXT,
    goal_status        TEXT,
    goal_updated_at    INTEGER,
    orphaned           INTEGER NOT NULL DEFAULT 0,
    upstream_catalog   TEXT,
    upstream_host      TEXT,
    upstream_thread    TEXT,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (session_key, agent_id)
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS sessions_label ON sessions (agent_id, label) WHERE label IS NOT NULL;
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions (parent_session_key);
-- A parent's children newest first (the list's parent filter, the console graph's walk) without
-- sorting every child of a parent that has thousands.
CREATE INDEX IF NOT EXISTS sessions_parent_updated
    ON sessions (parent_session_key, updated_at DESC, session_key, agent_id);
CREATE INDEX IF NOT EXISTS sessions_updated ON sessions (updated_at DESC, session_key, agent_id);

CREATE TABLE IF NOT EXISTS turns (
    session_key     TEXT NOT NULL,
    agent_id        TEXT NOT NULL,
    idx             INTEGER NOT NULL,
    id              TEXT NOT NULL UNIQUE,
    role            TEXT NOT NULL,
    text            TEXT NOT NULL,
    at              INTEGER NOT NULL,
    actor_type      TEXT NOT NULL,
    actor_id        TEXT,
    provenance_json TEXT NOT NULL,
    channel         TEXT,
    run_id          TEXT,
    origin          TEXT,
    upstream_text   TEXT,
    idempotency_key TEXT,
    PRIMARY KEY (session_key, agent_id, idx)
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS turns_idempotency
    ON turns (session_key, agent_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS turns_run ON turns (run_id) WHERE run_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS runs (
    run_id         TEXT PRIMARY KEY,
    session_key    TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    started_at     INTEGER NOT NULL,
    ended_at       INTEGER,
    outcome        TEXT,
    deadline_at    INTEGER,
    event_sequence INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS runs_session ON runs (session_key, agent_id);
CREATE INDEX IF NOT EXISTS runs_deadline ON runs (deadline_at) WHERE ended_at IS NULL AND deadline_at IS NOT NULL;

-- Counts kept beside the rows by triggers in the writing transaction, so the console's totals
-- and the gauges read a few rows instead of counting every session or pending cursor (decision
-- D51): `sessions` per agent, `pending` (non-muted cursors with notified > last seen) under
-- agent ''. Triggers, not the store's code, so every writer of the file keeps them (an older
-- binary, `aware migrate`, a bench's SQL fill). No statement here replaces a row with
-- `INSERT OR REPLACE`, whose implicit delete would not fire the delete triggers.
CREATE TABLE IF NOT EXISTS aware_counts (
    counter  TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (counter, agent_id)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS sessions_count_insert AFTER INSERT ON sessions BEGIN
    INSERT INTO aware_counts (counter, agent_id, n) VALUES ('sessions', NEW.agent_id, 1)
    ON CONFLICT (counter, agent_id) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS sessions_count_delete AFTER DELETE ON sessions BEGIN
    UPDATE aware_counts SET n = n - 1 WHERE counter = 'sessions' AND agent_id = OLD.agent_id;
END;
CREATE TRIGGER IF NOT EXISTS sessions_count_update AFTER UPDATE OF agent_id ON sessions
WHEN OLD.agent_id IS NOT NEW.agent_id BEGIN
    UPDATE aware_counts SET n = n - 1 WHERE counter = 'sessions' AND agent_id = OLD.agent_id;
    INSERT INTO aware_counts (counter, agent_id, n) VALUES ('sessions', NEW.agent_id, 1)
    ON CONFLICT (counter, agent_id) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS cursors_pending_insert AFTER INSERT ON session_watch_cursors
WHEN NEW.muted = 0 AND NEW.notified_sequence > NEW.last_seen_sequence BEGIN
    INSERT INTO aware_counts (counter, agent_id, n) VALUES ('pending', '', 1)
    ON CONFLICT (counter, agent_id) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS cursors_pending_delete AFTER DELETE ON session_watch_cursors
WHEN OLD.muted = 0 AND OLD.notified_sequence > OLD.last_seen_sequence BEGIN
    UPDATE aware_counts SET n = n - 1 WHERE counter = 'pending' AND agent_id = '';
END;
CREATE TRIGGER IF NOT EXISTS cursors_pending_update
AFTER UPDATE OF muted, notified_sequence, last_seen_sequence ON session_watch_cursors
WHEN (OLD.muted = 0 AND OLD.notified_sequence > OLD.last_seen_sequence)
  IS NOT (NEW.muted = 0 AND NEW.notified_sequence > NEW.last_seen_sequence) BEGIN
    INSERT INTO aware_counts (counter, agent_id, n) VALUES ('pending', '',
        CASE WHEN NEW.muted = 0 AND NEW.notified_sequence > NEW.last_seen_sequence
        THEN 1 ELSE -1 END)
    ON CONFLICT (counter, agent_id) DO UPDATE SET n = n + excluded.n;
END;

-- Indexes a store made by an earlier aware still has, replaced above (D51: the target columns
-- alone; D59: `updated_at` by the millisecond). An earlier binary opening the file again only
-- re-creates them, and the next open of this one drops them again.
DROP INDEX IF EXISTS session_watch_cursors_target;
DROP INDEX IF EXISTS session_watch_cursors_updated;
"#;

pub(super) fn migrate(conn: &Connection) -> Result<()> {
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .sq()?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    conn.execute_batch("BEGIN IMMEDIATE").sq()?;
    let result = seeds_counts(conn)
        .and_then(|seed| {
            conn.execute_batch(SCHEMA)?;
            if seed {
                conn.execute_batch(SEED_COUNTS)?;
            }
            Ok(())
        })
        .and_then(|_| conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}")));
    match result {
        Ok(()) => conn.execute_batch("COMMIT").sq()?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(crate::sqlite_error(e));
        }
    }
    Ok(())
}

/// Whether this open creates `aware_counts`, and so must fill it from the rows it counts (in the
/// same transaction that creates its triggers).
fn seeds_counts(conn: &Connection) -> rusqlite::Result<bool> {
    let found: i64 = conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'aware_counts'",
        [],
        |r| r.get(0),
    )?;
    Ok(found == 0)
}

/// Statements cached per connection.
const STATEMENT_CACHE: usize = 128;

pub(super) fn open_conn(path: &Path, flags: OpenFlags) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, flags).map_err(|source| StoreError::Open {
        path: path.to_path_buf(),
        source: Box::new(source),
    })?;
    conn.busy_timeout(BUSY_TIMEOUT).sq()?;
    // rusqlite caches 16 statements by default; the writer alone runs more than that on a mixed
    // load (an append is about a dozen, plus turns, drains, prunes), and an evicted statement is
    // parsed and planned again on its next use.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The bundled SQLite has STAT4, under which rebinding a `LIMIT ?` parameter invalidates a
    // prepared statement; the query planner stability guarantee keeps cached statements valid
    // (measured: 40-60 µs saved per 200-event page).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .sq()?;
    Ok(conn)
}

/// Creates the database file owner-only (0600) when it is missing, whatever the umask. SQLite
/// gives the `-wal` and `-shm` files the mode of the database file, so they follow.
pub(super) fn create_private_file(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        let io = |e: std::io::Error| StoreError::Open {
            path: path.to_path_buf(),
            source: Box::new(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(e.to_string()),
            )),
        };
        match created {
            // The mode given to open() is masked by the umask; set it explicitly.
            Ok(f) => f
                .set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Runs a fixed control statement through the statement cache instead of re-parsing it.
pub(super) fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
