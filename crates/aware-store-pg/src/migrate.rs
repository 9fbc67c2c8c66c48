//! `aware migrate`'s two directions: opens the SQLite store of a data directory and a
//! PostgreSQL store, then copies every table through the `Store` trait
//! (`aware_store::migrate::copy`, decision D50): sequences and counters are kept, a target that
//! holds any row is refused, row counts are verified. Neither side's schema is named here.

use crate::{PgOptions, PgStore};
use aware_store::migrate::{self, CopyReport};
use aware_store::{Store, StoreError};
use aware_store_sqlite::{SqliteStore, StoreOptions};
use std::path::{Path, PathBuf};

/// What a migration copied: rows per table, in copy order.
pub type MigrationReport = CopyReport;

/// `progress(table, copied, total)` is called as rows are copied.
pub type Progress<'a> = migrate::Progress<'a>;

fn sqlite_path(data_dir: &Path) -> PathBuf {
    data_dir.join("state.db")
}

/// Runs the copy and closes both stores, whatever its outcome.
fn copy_and_close(
    source: &dyn Store,
    target: &dyn Store,
    refusal: &str,
    progress: Progress<'_>,
) -> Result<MigrationReport, StoreError> {
    let report = migrate::copy(source, target, refusal, progress);
    source.close();
    target.close();
    report
}

/// Copies the SQLite store of `data_dir` into the empty PostgreSQL database of `target`.
pub fn sqlite_to_postgres(
    data_dir: &Path,
    target: PgOptions,
    progress: Progress<'_>,
) -> Result<MigrationReport, StoreError> {
    let path = sqlite_path(data_dir);
    if !path.exists() {
        return Err(StoreError::Refused(format!(
            "no aware database at {}",
            path.display()
        )));
    }
    // Opening checks (and if needed brings up to date) the source's schema version.
    let source = SqliteStore::open(StoreOptions::new(&path))?;
    let target = match PgStore::open(target) {
        Ok(target) => target,
        Err(e) => {
            source.close();
            return Err(e);
        }
    };
    copy_and_close(
        &source,
        &target,
        "the target database is not empty (table {table} has rows); migrate only into a new database",
        progress,
    )
}

/// Copies the PostgreSQL database of `source` into a new SQLite store in `data_dir`.
pub fn postgres_to_sqlite(
    source: PgOptions,
    data_dir: &Path,
    progress: Progress<'_>,
) -> Result<MigrationReport, StoreError> {
    let source = PgStore::open(source)?;
    // 0700 like the data dir `aware serve` creates: the copy is the whole hub's state.
    if let Err(e) = aware_store::create_private_dir(data_dir) {
        source.close();
        return Err(StoreError::Refused(format!(
            "cannot create {}: {e}",
            data_dir.display()
        )));
    }
    let path = sqlite_path(data_dir);
    let target = match SqliteStore::open(StoreOptions::new(&path)) {
        Ok(target) => target,
        Err(e) => {
            source.close();
            return Err(e);
        }
    };
    let refusal = format!(
        "the target {} is not empty (table {{table}} has rows); migrate only into a new data directory",
        path.display()
    );
    copy_and_close(&source, &target, &refusal, progress)
}
