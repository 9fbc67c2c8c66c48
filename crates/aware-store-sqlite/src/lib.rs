//! The SQLite backend of aware's store: schema, the writer (leader-follower group commit with a
//! writer thread), the reader pool, and the row primitives of `aware_store`'s `ReadTx` and
//! `WriteTx`. Only the crate that wires `aware serve` (and tests and benches) names it; the
//! engine holds any backend as an `Arc<dyn aware_store::Store>`.

mod checkpoint;
mod console;
mod dump;
mod handle;
mod mapping;
mod options;
mod read;
mod schema;
mod sqltx;
#[cfg(test)]
mod tests;
mod write;
mod writer;

pub use handle::SqliteStore;
pub use options::{Durability, StoreOptions, SCHEMA_VERSION};

/// `?` for rusqlite results inside functions that answer [`aware_store::StoreError`]: the error
/// type lives in `aware-store`, which knows no driver, so the conversion cannot be a `From`.
pub(crate) trait Sq<T> {
    fn sq(self) -> aware_store::Result<T>;
}

impl<T> Sq<T> for rusqlite::Result<T> {
    fn sq(self) -> aware_store::Result<T> {
        self.map_err(sqlite_error)
    }
}

pub(crate) fn sqlite_error(e: rusqlite::Error) -> aware_store::StoreError {
    aware_store::StoreError::Sqlite(Box::new(e))
}
