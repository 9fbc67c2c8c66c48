//! One PostgreSQL connection with a statement cache, and the mapping of driver errors to
//! [`StoreError`].

use aware_store::{Result, StoreError};
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};
use std::collections::HashMap;

/// Prepared statements kept per connection; the filter-built statements of the session lists
/// vary with their filters, so the cache is emptied when it grows past this.
const MAX_CACHED: usize = 512;

pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

pub(crate) struct Conn {
    client: Client,
    cache: HashMap<String, Statement>,
}

impl Conn {
    pub(crate) fn new(client: Client) -> Self {
        Conn {
            client,
            cache: HashMap::new(),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// A statement prepared once per connection: each later use is one round trip.
    fn stmt(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.cache.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).map_err(pg_err)?;
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.cache.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    pub(crate) fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        let s = self.stmt(sql)?;
        self.client.query(&s, params).map_err(pg_err)
    }

    pub(crate) fn query_opt(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>> {
        let s = self.stmt(sql)?;
        self.client.query_opt(&s, params).map_err(pg_err)
    }

    pub(crate) fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        let s = self.stmt(sql)?;
        self.client.execute(&s, params).map_err(pg_err)
    }

    /// Control statements (BEGIN, SAVEPOINT, COMMIT, …) over the simple protocol.
    pub(crate) fn batch(&mut self, sql: &str) -> Result<()> {
        self.client.batch_execute(sql).map_err(pg_err)
    }
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
        Some(src) if src.downcast_ref::<std::io::Error>().is_some() => {
            StoreError::Unreachable(e.to_string())
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
