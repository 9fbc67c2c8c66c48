use std::path::PathBuf;

/// Errors of the store. Messages name the numbers and paths involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A SQLite statement failed (the driver's error, boxed: this crate names no driver).
    #[error("sqlite: {0}")]
    Sqlite(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot open store at {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("database schema version {found} is newer than this aware supports ({supported}); upgrade aware")]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("injected fault: {0}")]
    InjectedFault(&'static str),
    #[error("commit failed: {0}")]
    CommitFailed(String),
    #[error("the writer thread has stopped")]
    WriterGone,
    #[error("stored row is corrupt: {0}")]
    Corrupt(String),
    /// The operation was refused for the reason the message gives (a migration into a target
    /// that is not empty, a source that does not exist); nothing was changed. Not corruption.
    #[error("{0}")]
    Refused(String),
    #[error("operation panicked: {0}")]
    Panicked(String),
    /// A PostgreSQL statement failed on the server (not a connection problem).
    #[error("postgres: {message} (SQLSTATE {sqlstate})")]
    Postgres { sqlstate: String, message: String },
    /// The database server cannot be reached, the connection broke, or a statement ran past its
    /// timeout: the op did not happen, a retry later may succeed.
    #[error("database unreachable: {0}")]
    Unreachable(String),
}

impl StoreError {
    /// A failure that means the store is unusable for this op (503 `store_unavailable`).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::CommitFailed(_)
                | StoreError::WriterGone
                | StoreError::Open { .. }
                | StoreError::Unreachable(_)
        )
    }
}
