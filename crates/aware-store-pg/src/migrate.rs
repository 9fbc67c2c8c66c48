//! `aware migrate`: copies every table between a SQLite data directory and a PostgreSQL
//! database, either way, keeping sequences (and the sequence counters, so no number is issued
//! again), refusing a target that holds any row, and verifying row counts afterwards.

use crate::conn::pg_err;
use crate::{PgOptions, PgStore};
use aware_store::{Store, StoreError};
use aware_store_sqlite::{SqliteStore, StoreOptions};
use postgres::types::ToSql;
use rusqlite::types::Value as SqlValue;
use std::path::Path;

/// The tables in copy order, each with its columns and whether a column is an integer. The
/// PostgreSQL cursor table's extra `row_id` is left to its default.
const TABLES: &[(&str, &[(&str, bool)])] = &[
    (
        "sessions",
        &[
            ("session_key", false),
            ("agent_id", false),
            ("session_id", false),
            ("kind", false),
            ("label", false),
            ("parent_session_key", false),
            ("created_via", false),
            ("active_run_id", false),
            ("goal_text", false),
            ("goal_status", false),
            ("goal_updated_at", true),
            ("orphaned", true),
            ("upstream_catalog", false),
            ("upstream_host", false),
            ("upstream_thread", false),
            ("created_at", true),
            ("updated_at", true),
        ],
    ),
    (
        "session_state_events",
        &[
            ("sequence", true),
            ("dedupe_key", false),
            ("session_key", false),
            ("session_id", false),
            ("agent_id", false),
            ("kind", false),
            ("actor_type", false),
            ("actor_id", false),
            ("run_id", false),
            ("occurred_at", true),
            ("summary", false),
            ("payload_json", false),
        ],
    ),
    (
        "session_state_heads",
        &[
            ("session_key", false),
            ("agent_id", false),
            ("last_sequence", true),
            ("pruned_max_sequence", true),
            ("updated_at", true),
        ],
    ),
    (
        "session_watch_cursors",
        &[
            ("watcher_session_key", false),
            ("target_session_key", false),
            ("target_agent_id", false),
            ("last_seen_sequence", true),
            ("notified_sequence", true),
            ("material_sequence", true),
            ("muted", true),
            ("origin", false),
            ("notice_opened_at", true),
            ("created_at", true),
            ("updated_at", true),
        ],
    ),
    (
        "session_system_events",
        &[
            ("id", true),
            ("session_key", false),
            ("agent_id", false),
            ("text", false),
            ("context_key", false),
            ("enqueued_at", true),
        ],
    ),
    (
        "session_upstream_links",
        &[
            ("session_key", false),
            ("agent_id", false),
            ("catalog_id", false),
            ("host_id", false),
            ("thread_id", false),
            ("upstream_kind", false),
            ("upstream_ref_json", false),
            ("last_marker_json", false),
            ("last_scanned_at", true),
            ("created_at", true),
            ("updated_at", true),
        ],
    ),
    (
        "turns",
        &[
            ("session_key", false),
            ("agent_id", false),
            ("idx", true),
            ("id", false),
            ("role", false),
            ("text", false),
            ("at", true),
            ("actor_type", false),
            ("actor_id", false),
            ("provenance_json", false),
            ("channel", false),
            ("run_id", false),
            ("origin", false),
            ("upstream_text", false),
            ("idempotency_key", false),
        ],
    ),
    (
        "runs",
        &[
            ("run_id", false),
            ("session_key", false),
            ("agent_id", false),
            ("session_id", false),
            ("started_at", true),
            ("ended_at", true),
            ("outcome", false),
            ("deadline_at", true),
            ("event_sequence", true),
        ],
    ),
];

/// Tables with a counter whose next value must stay above every number ever issued.
const COUNTERS: &[(&str, &str)] = &[
    ("session_state_events", "sequence"),
    ("session_system_events", "id"),
];

/// Rows per progress report.
const PROGRESS_EVERY: u64 = 1000;

/// What a migration copied: rows per table, in copy order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationReport {
    pub tables: Vec<(String, u64)>,
}

/// `progress(table, copied, total)` is called as rows are copied.
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// A refusal or a failure outside the rows (a target that is not empty, a folder that cannot be
/// created): saying "corrupt" there would alarm for nothing.
fn other(msg: String) -> StoreError {
    StoreError::Refused(msg)
}

fn sqlite_path(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("state.db")
}

fn sqlite_count(conn: &rusqlite::Connection, table: &str) -> Result<u64, StoreError> {
    let n: i64 = conn
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .sq()?;
    Ok(n.max(0) as u64)
}

fn pg_count(client: &mut postgres::Client, table: &str) -> Result<u64, StoreError> {
    let row = client
        .query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])
        .map_err(pg_err)?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

/// The highest number a SQLite `AUTOINCREMENT` table ever issued (a deleted top row included).
fn sqlite_counter(conn: &rusqlite::Connection, table: &str, col: &str) -> Result<i64, StoreError> {
    let seq: Option<i64> = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = ?1",
            [table],
            |r| r.get(0),
        )
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
        .sq()?;
    let max: Option<i64> = conn
        .query_row(&format!("SELECT MAX({col}) FROM {table}"), [], |r| r.get(0))
        .sq()?;
    Ok(seq.unwrap_or(0).max(max.unwrap_or(0)))
}

/// Copies the SQLite store of `data_dir` into the empty PostgreSQL database of `target`.
pub fn sqlite_to_postgres(
    data_dir: &Path,
    target: PgOptions,
    progress: Progress<'_>,
) -> Result<MigrationReport, StoreError> {
    let path = sqlite_path(data_dir);
    if !path.exists() {
        return Err(other(format!("no aware database at {}", path.display())));
    }
    // Opening checks (and if needed brings up to date) the source's schema version.
    SqliteStore::open(StoreOptions::new(&path))?.close();
    let src =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .sq()?;
    let store = PgStore::open(target)?;
    let mut client = store.connect()?;
    store.close();
    for (table, _) in TABLES {
        if pg_count(&mut client, table)? > 0 {
            return Err(other(format!(
                "the target database is not empty (table {table} has rows); migrate only into a new database"
            )));
        }
    }
    src.execute_batch("BEGIN").sq()?;
    let mut tx = client.transaction().map_err(pg_err)?;
    let mut report = MigrationReport::default();
    for (table, cols) in TABLES {
        let total = sqlite_count(&src, table)?;
        let names: Vec<&str> = cols.iter().map(|(c, _)| *c).collect();
        let marks: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
        // Identity columns are given explicitly: the numbers are kept.
        let insert = tx
            .prepare(&format!(
                "INSERT INTO {table} ({}) OVERRIDING SYSTEM VALUE VALUES ({})",
                names.join(", "),
                marks.join(", ")
            ))
            .map_err(pg_err)?;
        let mut stmt = src
            .prepare(&format!("SELECT {} FROM {table}", names.join(", ")))
            .sq()?;
        let mut rows = stmt.query([]).sq()?;
        let mut copied = 0u64;
        while let Some(row) = rows.next().sq()? {
            let mut ints: Vec<Option<i64>> = Vec::with_capacity(cols.len());
            let mut texts: Vec<Option<String>> = Vec::with_capacity(cols.len());
            for (i, (_, is_int)) in cols.iter().enumerate() {
                if *is_int {
                    ints.push(row.get(i).sq()?);
                    texts.push(None);
                } else {
                    ints.push(None);
                    texts.push(row.get(i).sq()?);
                }
            }
            let params: Vec<&(dyn ToSql + Sync)> = cols
                .iter()
                .enumerate()
                .map(|(i, (_, is_int))| {
                    if *is_int {
                        &ints[i] as &(dyn ToSql + Sync)
                    } else {
                        &texts[i] as &(dyn ToSql + Sync)
                    }
                })
                .collect();
            tx.execute(&insert, &params).map_err(pg_err)?;
            copied += 1;
            if copied.is_multiple_of(PROGRESS_EVERY) {
                progress(table, copied, total);
            }
        }
        progress(table, copied, total);
        report.tables.push((table.to_string(), copied));
    }
    for (table, col) in COUNTERS {
        let top = sqlite_counter(&src, table, col)?;
        if top > 0 {
            tx.execute(
                &format!("SELECT setval(pg_get_serial_sequence('{table}', '{col}'), $1)"),
                &[&top],
            )
            .map_err(pg_err)?;
        }
    }
    // A gateway already running on this database must not trust rows its writer cached.
    tx.execute("UPDATE aware_write_epoch SET epoch = epoch + 1", &[])
        .map_err(pg_err)?;
    tx.commit().map_err(pg_err)?;
    src.execute_batch("COMMIT").sq()?;
    for (table, copied) in &report.tables {
        let (a, b) = (sqlite_count(&src, table)?, pg_count(&mut client, table)?);
        if a != b || a != *copied {
            return Err(other(format!(
                "count mismatch in {table}: source {a}, target {b}, copied {copied}"
            )));
        }
    }
    Ok(report)
}

/// Copies the PostgreSQL database of `source` into a new SQLite store in `data_dir`.
pub fn postgres_to_sqlite(
    source: PgOptions,
    data_dir: &Path,
    progress: Progress<'_>,
) -> Result<MigrationReport, StoreError> {
    let store = PgStore::open(source)?;
    let mut client = store.connect()?;
    store.close();
    // 0700 like the data dir `aware serve` creates: the copy is the whole hub's state.
    aware_store::create_private_dir(data_dir)
        .map_err(|e| other(format!("cannot create {}: {e}", data_dir.display())))?;
    let path = sqlite_path(data_dir);
    SqliteStore::open(StoreOptions::new(&path))?.close();
    let mut dst = rusqlite::Connection::open(&path).sq()?;
    for (table, _) in TABLES {
        if sqlite_count(&dst, table)? > 0 {
            return Err(other(format!(
                "the target {} is not empty (table {table} has rows); migrate only into a new data directory",
                path.display()
            )));
        }
    }
    // One snapshot of the source for every table.
    let mut src = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(pg_err)?;
    let tx = dst.transaction().sq()?;
    let mut report = MigrationReport::default();
    for (table, cols) in TABLES {
        let total = {
            let row = src
                .query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])
                .map_err(pg_err)?;
            row.get::<_, i64>(0).max(0) as u64
        };
        let names: Vec<&str> = cols.iter().map(|(c, _)| *c).collect();
        let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
        let mut insert = tx
            .prepare(&format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                names.join(", "),
                marks.join(", ")
            ))
            .sq()?;
        let mut copied = 0u64;
        let rows = src
            .query_raw(
                &format!("SELECT {} FROM {table}", names.join(", ")),
                std::iter::empty::<i64>(),
            )
            .map_err(pg_err)?;
        let mut rows = rows;
        use postgres::fallible_iterator::FallibleIterator;
        while let Some(row) = rows.next().map_err(pg_err)? {
            let values: Vec<SqlValue> = cols
                .iter()
                .enumerate()
                .map(|(i, (_, is_int))| {
                    if *is_int {
                        row.try_get::<_, Option<i64>>(i)
                            .map(|v| v.map_or(SqlValue::Null, SqlValue::Integer))
                    } else {
                        row.try_get::<_, Option<String>>(i)
                            .map(|v| v.map_or(SqlValue::Null, SqlValue::Text))
                    }
                })
                .collect::<Result<_, _>>()
                .map_err(|e| StoreError::Corrupt(format!("{table}: {e}")))?;
            insert.execute(rusqlite::params_from_iter(values)).sq()?;
            copied += 1;
            if copied.is_multiple_of(PROGRESS_EVERY) {
                progress(table, copied, total);
            }
        }
        progress(table, copied, total);
        report.tables.push((table.to_string(), copied));
    }
    for (table, col) in COUNTERS {
        let top = {
            let row = src
                .query_one(
                    &format!(
                        "SELECT GREATEST(COALESCE(pg_sequence_last_value(pg_get_serial_sequence('{table}', \
                         '{col}')::regclass), 0), COALESCE((SELECT MAX({col}) FROM {table}), 0))::BIGINT"
                    ),
                    &[],
                )
                .map_err(pg_err)?;
            row.get::<_, i64>(0)
        };
        // AUTOINCREMENT issues above `seq`: recording the source's counter keeps numbers unique.
        tx.execute("DELETE FROM sqlite_sequence WHERE name = ?1", [table])
            .sq()?;
        tx.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
            rusqlite::params![table, top],
        )
        .sq()?;
    }
    tx.commit().sq()?;
    src.commit().map_err(pg_err)?;
    for (table, copied) in &report.tables {
        let (a, b) = (pg_count(&mut client, table)?, sqlite_count(&dst, table)?);
        if a != b || a != *copied {
            return Err(other(format!(
                "count mismatch in {table}: source {a}, target {b}, copied {copied}"
            )));
        }
    }
    Ok(report)
}

/// `?` for rusqlite results: `StoreError` names no driver, so there is no `From`.
trait Sq<T> {
    fn sq(self) -> Result<T, StoreError>;
}

impl<T> Sq<T> for rusqlite::Result<T> {
    fn sq(self) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Sqlite(Box::new(e)))
    }
}
