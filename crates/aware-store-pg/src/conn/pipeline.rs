//! The bookkeeping of one transaction's pipeline, apart from the connection that sends it: the
//! writes queued to travel with the next exchange, each statement's position, the savepoints
//! set (queued or sent) and the first failure no rollback has undone. Nothing here talks to the
//! server; [`super::Conn`] sends what this holds and reports back what failed where.

use aware_store::StoreError;
use postgres::types::ToSql;
use postgres::Statement;

/// A parameter of a queued write, owned because it is sent after the call returns.
pub(crate) type Owned = Box<dyn ToSql + Sync + Send>;

/// A write queued to travel with the next exchange, and its position on the connection.
pub(crate) enum Deferred {
    /// Control statements (`SAVEPOINT`, `RELEASE`, `BEGIN`, …) over the simple protocol.
    Simple(u64, String),
    /// A prepared write, its parameters, and the table it may be fused on (see `fusion`).
    Prepared(u64, Statement, Vec<Owned>, Option<String>, String),
}

impl Deferred {
    pub(super) fn position(&self) -> u64 {
        match self {
            Deferred::Simple(p, _) | Deferred::Prepared(p, ..) => *p,
        }
    }
}

#[derive(Default)]
pub(super) struct Pipeline {
    deferred: Vec<Deferred>,
    /// Statements queued or sent in the current transaction; positions order savepoints and
    /// failures.
    position: u64,
    /// Savepoints set in the current transaction, innermost last, with their positions.
    savepoints: Vec<(String, u64)>,
    /// The first failed statement of the current transaction not undone by a rollback to a
    /// savepoint set before it: while it stands, the transaction may not commit.
    failure: Option<(u64, String)>,
}

impl Pipeline {
    pub(super) fn next_position(&mut self) -> u64 {
        self.position += 1;
        self.position
    }

    pub(super) fn queue(&mut self, d: impl FnOnce(u64) -> Deferred) {
        let position = self.next_position();
        self.deferred.push(d(position));
    }

    /// The queued writes, to be sent now.
    pub(super) fn take_queued(&mut self) -> Vec<Deferred> {
        std::mem::take(&mut self.deferred)
    }

    /// Records the failure of the statement at `position` unless an earlier one stands.
    pub(super) fn fail_at(&mut self, position: u64, e: &StoreError) {
        if self.failure.is_none() {
            self.failure = Some((position, e.to_string()));
        }
    }

    /// Queues `SAVEPOINT name` and remembers where it was set.
    pub(super) fn set_savepoint(&mut self, name: &str, statement: String) {
        self.queue(|p| Deferred::Simple(p, statement));
        self.savepoints.push((name.to_string(), self.position));
    }

    fn forget_savepoint(&mut self, name: &str) -> Option<u64> {
        let i = self.savepoints.iter().rposition(|(n, _)| n == name)?;
        let position = self.savepoints[i].1;
        self.savepoints.truncate(i);
        Some(position)
    }

    /// Where the queued statement set at `position` waits, if it was not sent.
    fn unsent(&self, position: u64) -> Option<usize> {
        self.deferred.iter().position(|d| d.position() == position)
    }

    /// Releases savepoint `name`: a queued one is dropped (its writes stay queued, now the
    /// enclosing transaction's); a sent one gets `release` queued.
    pub(super) fn release(&mut self, name: &str, release: String) {
        let Some(position) = self.forget_savepoint(name) else {
            return;
        };
        match self.unsent(position) {
            Some(i) => {
                self.deferred.remove(i);
            }
            None => self.queue(|p| Deferred::Simple(p, release)),
        }
    }

    /// Rolls back to savepoint `name` if it is still queued: it is dropped with every write
    /// queued after it, none of which reached the server. Answers false when it was sent (the
    /// server must roll back; then [`Pipeline::rolled_back`]).
    pub(super) fn rollback_unsent(&mut self, name: &str) -> bool {
        let pending = self
            .savepoints
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, p)| *p);
        let Some(i) = pending.and_then(|p| self.unsent(p)) else {
            return false;
        };
        self.deferred.truncate(i);
        self.forget_savepoint(name);
        true
    }

    /// The server rolled back to savepoint `name` and released it: a failure recorded after it
    /// was set is undone with it.
    pub(super) fn rolled_back(&mut self, name: &str) {
        if let Some(position) = self.forget_savepoint(name) {
            if self.failure.as_ref().is_some_and(|(f, _)| *f > position) {
                self.failure = None;
            }
        }
    }

    /// The standing failure, if any.
    pub(super) fn failure(&self) -> Option<&str> {
        self.failure.as_ref().map(|(_, m)| m.as_str())
    }

    /// Forgets the transaction: queued writes, savepoints, the failure, the positions.
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The table a queued write may be fused on: `INSERT INTO t`, `UPDATE t` or `DELETE FROM t`
/// without any `SELECT` in it (a CTE that only reads would not run, and one that reads
/// another table of the run would not see that table's write).
pub(crate) fn fusible_table(sql: &str) -> Option<&str> {
    if sql.contains("SELECT") {
        return None;
    }
    let rest = sql
        .strip_prefix("INSERT INTO ")
        .or_else(|| sql.strip_prefix("UPDATE "))
        .or_else(|| sql.strip_prefix("DELETE FROM "))?;
    rest.split([' ', '(']).next().filter(|t| !t.is_empty())
}
