//! Driver errors as typed store errors, column reads that cannot panic, quoted identifiers.

use aware_store::{Result, StoreError};
use postgres::Row;

/// Quotes a savepoint name as an identifier.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// SQLSTATE classes that mean "the server or the connection is not usable now", not "this
/// statement is wrong": connection exceptions (08), insufficient resources (53), operator
/// intervention (57: admin shutdown, crash shutdown, cannot connect now, and the query
/// cancellation a `statement_timeout` causes).
fn unavailable_state(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("53") || code.starts_with("57")
}

/// Maps a driver error to a typed store error: connection and server-availability problems
/// become [`StoreError::Unreachable`] (503 `store_unavailable` above), statement errors keep
/// their SQLSTATE, and a value the row mapping could not convert is [`StoreError::Corrupt`].
pub(crate) fn pg_err(e: postgres::Error) -> StoreError {
    if e.is_closed() {
        return StoreError::Unreachable(e.to_string());
    }
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        if unavailable_state(code) {
            return StoreError::Unreachable(format!("{} (SQLSTATE {code})", db.message()));
        }
        return StoreError::Postgres {
            sqlstate: code.to_string(),
            message: db.message().to_string(),
        };
    }
    match std::error::Error::source(&e) {
        // "error connecting to server" alone hides why: keep the cause (connection refused, no
        // route to host, name not known).
        Some(src) if src.downcast_ref::<std::io::Error>().is_some() => {
            StoreError::Unreachable(format!("{e}: {src}"))
        }
        // Conversion errors carry their cause; everything else without a server answer (a
        // timed-out connect, a closed stream) is a connection problem.
        Some(_) if e.to_string().contains("error deserializing") => {
            StoreError::Corrupt(e.to_string())
        }
        _ => StoreError::Unreachable(e.to_string()),
    }
}

/// Reads column `i` of a row, turning a type mismatch into [`StoreError::Corrupt`].
pub(crate) fn col<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i)
        .map_err(|e| StoreError::Corrupt(format!("column {i}: {e}")))
}
