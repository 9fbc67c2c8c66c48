//! The raw-SQLite floors: the same row writes and SELECTs as the engine, with plain SQL on a
//! plain WAL connection. This is the one module that knows the store's table and column names;
//! it also seeds large stores directly (fill_events, fill_pending) because going through the
//! engine would make the set-up longer than the measurement.

use crate::engine::setup::*;
use crate::prelude::*;
use crate::store_seam::*;
use crate::util::*;

pub(crate) fn sync_pragma(d: Durability) -> &'static str {
    match d {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    }
}

/// A plain connection on `path`; the schema is created first by opening (and closing) an
/// `aware_store_sqlite::SqliteStore` on it.
pub(crate) fn floor_conn(path: &Path, durability: Durability) -> Result<Connection> {
    if !path.exists() {
        create_schema(path, durability)?;
    }
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        bail!("floor: journal mode {mode}, expected wal");
    }
    conn.execute_batch(&format!(
        "PRAGMA synchronous={}; PRAGMA temp_store=MEMORY;",
        sync_pragma(durability)
    ))?;
    Ok(conn)
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One target stream of the floor and the cursors its appends update.
pub(crate) struct FloorStream {
    key: String,
    /// `(watcher, last_seen, notified, notice_opened_at, created_at)`.
    cursors: Vec<(String, i64, i64, Option<i64>, i64)>,
}

impl FloorStream {
    pub(crate) fn new(key: &str, watchers: Vec<String>) -> Self {
        let now = now_ms();
        FloorStream {
            key: key.to_string(),
            cursors: watchers.into_iter().map(|w| (w, 0, 0, None, now)).collect(),
        }
    }
}

pub(crate) const INSERT_EVENT: &str = "INSERT INTO session_state_events (dedupe_key, session_key, \
     session_id, agent_id, kind, actor_type, actor_id, run_id, occurred_at, summary, payload_json) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
pub(crate) const UPSERT_HEAD: &str = "INSERT INTO session_state_heads (session_key, agent_id, \
     last_sequence, pruned_max_sequence, updated_at) VALUES (?1, ?2, ?3, 0, ?4) \
     ON CONFLICT (session_key, agent_id) DO UPDATE SET \
     last_sequence = MAX(last_sequence, excluded.last_sequence), updated_at = excluded.updated_at";
pub(crate) const UPSERT_CURSOR: &str = "INSERT INTO session_watch_cursors (watcher_session_key, \
     target_session_key, target_agent_id, last_seen_sequence, notified_sequence, \
     material_sequence, muted, origin, notice_opened_at, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
     ON CONFLICT (watcher_session_key, target_session_key, target_agent_id) DO UPDATE SET \
     last_seen_sequence = excluded.last_seen_sequence, notified_sequence = excluded.notified_sequence, \
     material_sequence = excluded.material_sequence, muted = excluded.muted, origin = excluded.origin, \
     notice_opened_at = excluded.notice_opened_at, updated_at = excluded.updated_at";

pub(crate) fn seed_cursors(conn: &Connection, streams: &[FloorStream]) -> Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    {
        let mut stmt = conn.prepare_cached(UPSERT_CURSOR)?;
        for s in streams {
            for (w, ls, nt, opened, created) in &s.cursors {
                stmt.execute(params![
                    w, s.key, AGENT, ls, nt, nt, 0i64, "parent", opened, created, created
                ])?;
            }
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// The row writes of one append: event insert, head upsert, one cursor upsert per watcher;
/// in its own transaction when `own_tx`.
pub(crate) fn floor_append(conn: &Connection, s: &mut FloorStream, own_tx: bool) -> Result<()> {
    let now = now_ms();
    if own_tx {
        conn.execute_batch("BEGIN IMMEDIATE")?;
    }
    let result = (|| -> Result<()> {
        insert_event(&mut conn.prepare_cached(INSERT_EVENT)?, &s.key, now)?;
        let seq = conn.last_insert_rowid();
        conn.prepare_cached(UPSERT_HEAD)?
            .execute(params![s.key, AGENT, seq, now])?;
        let mut stmt = conn.prepare_cached(UPSERT_CURSOR)?;
        for (w, last_seen, notified, opened, created) in &mut s.cursors {
            if *notified == *last_seen {
                *notified = seq;
                *opened = Some(now);
            }
            stmt.execute(params![
                *w, s.key, AGENT, *last_seen, *notified, seq, 0i64, "parent", *opened, *created,
                now
            ])?;
        }
        Ok(())
    })();
    if own_tx {
        match &result {
            Ok(()) => conn.execute_batch("COMMIT")?,
            Err(_) => {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
    }
    result
}

/// One human message of `key` through a prepared [`INSERT_EVENT`].
fn insert_event(stmt: &mut rusqlite::CachedStatement<'_>, key: &str, now: i64) -> Result<()> {
    stmt.execute(params![
        None::<String>,
        key,
        None::<String>,
        AGENT,
        EventKind::HumanDirectMessage.as_str(),
        ActorType::Human.as_str(),
        ACTOR,
        None::<String>,
        now,
        SUMMARY,
        None::<String>
    ])?;
    Ok(())
}

/// Inserts events (stream `keys[order[r]]` for row r) and their heads in one transaction.
pub(crate) fn fill_events(conn: &Connection, keys: &[String], order: &[usize]) -> Result<()> {
    let now = now_ms();
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let mut heads: HashMap<usize, i64> = HashMap::new();
    {
        let mut stmt = conn.prepare_cached(INSERT_EVENT)?;
        for &i in order {
            insert_event(&mut stmt, &keys[i], now)?;
            heads.insert(i, conn.last_insert_rowid());
        }
        let mut stmt = conn.prepare_cached(UPSERT_HEAD)?;
        for (i, seq) in heads {
            stmt.execute(params![keys[i], AGENT, seq, now])?;
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// `n` watcher sessions, `n` target sessions (children of their watcher) and one pending
/// cursor per pair.
pub(crate) fn fill_pending(conn: &Connection, n: u64) -> Result<()> {
    let now = now_ms();
    conn.execute_batch("BEGIN IMMEDIATE")?;
    {
        let mut session = conn.prepare_cached(
            "INSERT INTO sessions (session_key, agent_id, session_id, kind, label, \
             parent_session_key, created_via, active_run_id, goal_text, goal_status, \
             goal_updated_at, orphaned, created_at, updated_at) \
             VALUES (?1, ?2, ?3, 'other', NULL, ?4, 'api', NULL, NULL, NULL, NULL, 0, ?5, ?5)",
        )?;
        let mut cursor = conn.prepare_cached(UPSERT_CURSOR)?;
        for i in 0..n {
            let (w, t) = (format!("agent:main:w{i}"), format!("agent:main:t{i}"));
            session.execute(params![w, AGENT, format!("sid-w{i}"), None::<String>, now])?;
            session.execute(params![t, AGENT, format!("sid-t{i}"), Some(&w), now])?;
            let seq = i as i64 + 1;
            cursor.execute(params![
                w,
                t,
                AGENT,
                0i64,
                seq,
                seq,
                0i64,
                "parent",
                Some(now),
                now,
                now
            ])?;
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// The row-cap prune with plain SQL: batches of `batch` rows, each one transaction. Returns
/// the batches and the longest batch in nanoseconds.
pub(crate) fn floor_prune(conn: &Connection, cap: u64, batch: u64) -> Result<(u64, u64)> {
    let count: i64 = conn.query_row("SELECT COUNT(*) FROM session_state_events", [], |r| {
        r.get(0)
    })?;
    let mut excess = (count as u64).saturating_sub(cap);
    let (mut batches, mut longest) = (0u64, 0u64);
    while excess > 0 {
        let n = excess.min(batch);
        let now = now_ms();
        let t = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let rows: Vec<(i64, String, String)> = conn
            .prepare_cached(
                "SELECT sequence, session_key, agent_id FROM session_state_events \
                 ORDER BY sequence LIMIT ?1",
            )?
            .query_map(params![n as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut per_stream: HashMap<(&str, &str), i64> = HashMap::new();
        for (seq, k, a) in &rows {
            let e = per_stream.entry((k.as_str(), a.as_str())).or_insert(*seq);
            *e = (*e).max(*seq);
        }
        {
            let mut up = conn.prepare_cached(
                "UPDATE session_state_heads SET pruned_max_sequence = ?3, updated_at = ?4 \
                 WHERE session_key = ?1 AND agent_id = ?2 AND pruned_max_sequence < ?3",
            )?;
            for ((k, a), max) in per_stream {
                up.execute(params![k, a, max, now])?;
            }
            let mut del =
                conn.prepare_cached("DELETE FROM session_state_events WHERE sequence = ?1")?;
            for (seq, _, _) in &rows {
                del.execute(params![seq])?;
            }
        }
        conn.execute_batch("COMMIT")?;
        longest = longest.max(t.elapsed().as_nanos() as u64);
        batches += 1;
        excess -= n;
    }
    Ok((batches, longest))
}

/// The restart sweep with plain SQL: the same SELECT/UPDATE batches. Returns the cursors
/// re-frozen and the distinct watchers.
pub(crate) fn floor_sweep(conn: &Connection, batch: i64) -> Result<(u64, usize)> {
    let now = now_ms();
    let (mut after, mut swept) = (0i64, 0u64);
    let mut watchers: HashSet<String> = HashSet::new();
    loop {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let rows: Vec<(i64, String)> = conn
            .prepare_cached(
                "SELECT c.rowid, c.watcher_session_key FROM session_watch_cursors c \
                 WHERE c.rowid > ?1 AND c.muted = 0 AND c.notified_sequence > c.last_seen_sequence \
                 AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key) \
                 ORDER BY c.rowid LIMIT ?2",
            )?
            .query_map(params![after, batch], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        {
            let mut up = conn.prepare_cached(
                "UPDATE session_watch_cursors SET notified_sequence = material_sequence, \
                 updated_at = ?2, notice_opened_at = COALESCE(notice_opened_at, ?2) \
                 WHERE rowid = ?1",
            )?;
            for (rowid, _) in &rows {
                up.execute(params![rowid, now])?;
            }
        }
        conn.execute_batch("COMMIT")?;
        swept += rows.len() as u64;
        match rows.last() {
            Some((rowid, _)) => after = *rowid,
            None => break,
        }
        watchers.extend(rows.into_iter().map(|(_, w)| w));
    }
    Ok((swept, watchers.len()))
}

/// Rows of `table`, read with a plain read-only connection.
pub(crate) fn count_rows(db: &Path, table: &str) -> Result<u64> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
    Ok(n as u64)
}
