//! The backend seam: what the engine needs from any store, as one object-safe trait.
//!
//! A backend runs write ops in its own transactions (SQLite: one writer thread with group
//! commit; PostgreSQL: a writer per gateway under a cluster-wide lock) and read closures on
//! consistent snapshots. The engine holds an `Arc<dyn Store>` and never names a backend; the
//! typed, generic conveniences live in [`StoreExt`], implemented once for every backend.

use crate::faults::FaultPlan;
use crate::metrics::StoreMetrics;
use crate::rows::{CursorRow, StatePage};
use crate::tx::{ReadTx, WriteTx};
use crate::{Result, StoreError};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// One write op. It runs inside the backend's transaction under a savepoint of its own and
/// returns the text of its failure, if it failed; the backend then rolls its savepoint back and
/// drops its after-commit hooks. The op's typed result travels beside it (see [`StoreExt`]).
///
/// `FnMut`, not `FnOnce`: a backend may roll an op back to its savepoint and run it again in a
/// later transaction (PostgreSQL's keyed locks, write-scaling.md: an op that cannot get a lock
/// key without waiting is run first in the next batch). Only the last run's effects, result
/// and after-commit hooks count; an op must therefore take its inputs by clone or reference,
/// never move them out. SQLite runs every op exactly once.
pub type WriteOp = Box<dyn FnMut(&mut dyn WriteTx) -> Option<String> + Send>;

/// Called exactly once per submitted op with the outcome of the commit that carried it, after
/// the op's after-commit hooks ran.
pub type Completion = Box<dyn FnOnce(Result<()>) + Send>;

/// What a store is, for `/health`, metrics and logs. `location` never carries a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The database file, or the server URL with any password removed.
    pub location: String,
    /// The durability setting in the backend's own words (`full`, `normal`, `synchronous_commit=on`).
    pub durability: String,
    /// What callers may rely on, instead of branching on `backend`.
    pub capabilities: Capabilities,
}

/// What a backend's callers may rely on. Callers ask these, never the backend's name, so a
/// third backend says what it can do here and nothing else changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// A short read is a local call that never waits on the network (a file and the OS
    /// cache): an async caller may run it inline instead of on a blocking thread.
    pub inline_reads: bool,
    /// Other processes may commit to the same store (several gateways): a change this process
    /// did not make can appear at any time, and its in-process signals may not come.
    pub shared: bool,
}

/// A storage backend. Implementations must keep the promises written on [`ReadTx`] and
/// [`WriteTx`]; `aware_store::contract` (feature `contract`) checks them.
pub trait Store: Send + Sync + 'static {
    /// Queues `op`; `done` is called once with the commit's outcome. Fails only when the store
    /// no longer takes writes (then neither `op` nor `done` runs).
    fn submit(&self, op: WriteOp, done: Completion) -> Result<()>;

    /// [`Store::submit`] for a caller that blocks until `done` has run (the sync `write`
    /// forms), so the backend may run the op on the calling thread (SQLite does when its
    /// writer is idle, saving two thread hand-offs). Never called from an async task.
    fn submit_blocking(&self, op: WriteOp, done: Completion) -> Result<()> {
        self.submit(op, done)
    }

    /// Runs `f` once on a consistent read snapshot.
    fn read_with(&self, f: &mut dyn FnMut(&dyn ReadTx) -> Result<()>) -> Result<()>;

    /// Whether the session exists: the check before most requests, so a backend with a round
    /// trip per statement answers it with one statement and no transaction around it.
    fn session_exists(&self, key: &str, agent: &str) -> Result<bool> {
        let mut found = false;
        self.read_with(&mut |tx| {
            found = tx.session_exists(key, agent)?;
            Ok(())
        })?;
        Ok(found)
    }

    /// One `changesSince` page: up to `limit` events after `after`, with the stream's head and
    /// earliest retained sequence, all from one snapshot.
    fn state_page(&self, key: &str, agent: &str, after: i64, limit: u32) -> Result<StatePage>;

    /// Every pending, unmuted cursor grouped by watcher (watcher order; within a watcher, the
    /// order of [`ReadTx::pending_by_watcher`]), for the restart sweep.
    fn pending_cursors_by_watcher(&self) -> Result<Vec<(String, Vec<CursorRow>)>>;

    fn metrics(&self) -> &StoreMetrics;
    /// Test seams (injected failures); a production store never has a fault set.
    fn faults(&self) -> &FaultPlan;
    fn info(&self) -> StoreInfo;

    /// Housekeeping after a prune pass (SQLite: a passive WAL checkpoint). Never blocks writers.
    fn maintain(&self) -> Result<()> {
        Ok(())
    }

    /// Stops taking writes after every op already queued has finished.
    fn close(&self);
}

/// Typed conveniences over [`Store`]; implemented for every store, trait objects included.
/// `write`/`write_async`/`read` speak [`StoreError`]; the `_as` forms let an op fail with the
/// caller's own error type (the engine's), which comes back unchanged.
pub trait StoreExt: Store {
    /// Runs `op` as one write op and returns its result after the commit. Blocks the thread.
    /// An `Err` from `op` rolls back everything `op` wrote.
    fn write<R: Send + 'static>(
        &self,
        op: impl FnMut(&mut dyn WriteTx) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.write_as(op)
    }

    /// [`StoreExt::write`] for async callers: the runtime thread is not blocked.
    fn write_async<R: Send + 'static>(
        &self,
        op: impl FnMut(&mut dyn WriteTx) -> Result<R> + Send + 'static,
    ) -> impl Future<Output = Result<R>> + Send {
        self.write_async_as(op)
    }

    /// [`StoreExt::write_async`] with the op's own error type.
    fn write_async_as<R, E>(
        &self,
        op: impl FnMut(&mut dyn WriteTx) -> Result<R, E> + Send + 'static,
    ) -> impl Future<Output = Result<R, E>> + Send
    where
        R: Send + 'static,
        E: From<StoreError> + std::fmt::Display + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let submitted = submit_typed(self, false, op, move |r| {
            let _ = tx.send(r);
        });
        async move {
            submitted?;
            rx.await.map_err(|_| E::from(StoreError::WriterGone))?
        }
    }

    /// Runs `f` on a consistent snapshot.
    fn read<R>(&self, f: impl FnOnce(&dyn ReadTx) -> Result<R>) -> Result<R> {
        self.read_as(f)
    }

    /// [`StoreExt::write`] with the op's own error type.
    fn write_as<R, E>(
        &self,
        op: impl FnMut(&mut dyn WriteTx) -> Result<R, E> + Send + 'static,
    ) -> Result<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + std::fmt::Display + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        submit_typed(self, true, op, move |r| {
            let _ = tx.send(r);
        })?;
        rx.recv().map_err(|_| StoreError::WriterGone)?
    }

    /// [`StoreExt::read`] with the closure's own error type.
    fn read_as<R, E>(&self, f: impl FnOnce(&dyn ReadTx) -> Result<R, E>) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let mut f = Some(f);
        let mut out: Option<Result<R, E>> = None;
        self.read_with(&mut |r| {
            if let Some(f) = f.take() {
                out = Some(f(r));
            }
            Ok(())
        })?;
        out.unwrap_or(Err(E::from(StoreError::Corrupt(
            "the store did not run the read".into(),
        ))))
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

/// Wraps a typed op into a [`WriteOp`]: its result waits in a slot the completion empties, and
/// a panic inside it fails only this op.
/// With `blocking`, the caller waits for `reply` (see [`Store::submit_blocking`]).
fn submit_typed<S, R, E>(
    store: &S,
    blocking: bool,
    op: impl FnMut(&mut dyn WriteTx) -> Result<R, E> + Send + 'static,
    reply: impl FnOnce(Result<R, E>) + Send + 'static,
) -> Result<()>
where
    S: Store + ?Sized,
    R: Send + 'static,
    E: From<StoreError> + std::fmt::Display + Send + 'static,
{
    let slot: Arc<Mutex<Option<Result<R, E>>>> = Arc::new(Mutex::new(None));
    let run_slot = slot.clone();
    let mut op = op;
    let run: WriteOp = Box::new(move |tx: &mut dyn WriteTx| {
        let result = match catch_unwind(AssertUnwindSafe(|| op(tx))) {
            Ok(r) => r,
            Err(panic) => Err(E::from(StoreError::Panicked(panic_text(&panic)))),
        };
        let failed = result.as_ref().err().map(|e| e.to_string());
        if let Ok(mut s) = run_slot.lock() {
            *s = Some(result);
        }
        failed
    });
    let done: Completion = Box::new(move |commit: Result<()>| {
        let result = slot.lock().ok().and_then(|mut s| s.take());
        reply(match (commit, result) {
            // A failed commit wins: it also says the batch (and this op) is gone.
            (Err(e), _) => Err(E::from(e)),
            (Ok(()), Some(r)) => r,
            (Ok(()), None) => Err(E::from(StoreError::WriterGone)),
        });
    });
    if blocking {
        store.submit_blocking(run, done)
    } else {
        store.submit(run, done)
    }
}

pub(crate) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
