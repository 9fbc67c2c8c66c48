//! The PostgreSQL backend of aware's store.
//!
//! Writes run on one writer thread per gateway with group commit, as in the SQLite store: the
//! writer takes every op already queued (≤ 256), runs them in one transaction with a savepoint
//! each and commits once. Every write transaction first locks the one row of
//! `aware_write_epoch` (it raises the epoch), so write transactions of all gateways run one at a
//! time, sequences are
//! assigned in commit order and `changesSince` has no out-of-order-commit hole (see
//! ARCHITECTURE.md, "PostgreSQL"). Reads run on a small pool, each read closure in one
//! `REPEATABLE READ READ ONLY` transaction. Connections are made lazily and remade after an
//! outage; connect, statement and keep-alive timeouts make an unreachable server fail fast with
//! [`StoreError::Unreachable`] (503 `store_unavailable` above) instead of hanging.

mod cache;
mod conn;
mod connector;
mod epoch;
mod keys;
mod locks;
pub mod migrate;
mod options;
mod schema;
mod stats;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
mod tx;
mod writer;

pub use locks::{stranger_holding, LockHolder, STRANGER_HOLDING_SQL};
pub use options::{redact_url, url_has_password, PgOptions};
pub use postgres;
pub use schema::SCHEMA_VERSION;
pub use stats::PathStats;

use aware_core::CursorState;
use aware_store::{
    Completion, CursorRow, FaultPlan, HeadRow, Result, StatePage, Store, StoreError, StoreInfo,
    StoreMetrics, WriteOp,
};
use conn::{col, pg_err, Conn};
use connector::Connector;
use stats::Role;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use tx::PgTx;
use writer::{writer_loop, Job};

/// The key of the cluster-wide advisory lock of schema migrations ("aware" in ASCII, then 1):
/// gateways starting together migrate once. Write transactions lock the row of
/// `aware_write_epoch` instead, which a role without privileges on the table cannot take.
pub const WRITE_LOCK: i64 = 0x6177_6172_6500_0001;

/// Held in shared mode by every writer connection for its life, one key per write-lock mode
/// (`PgOptions::keyed_locks`): a writer refuses to write while the other mode's is held, since
/// the two modes do not see each other's writes in their row caches (decision D56).
pub const MODE_DEFAULT_LOCK: i64 = 0x6177_6172_6500_0010;
/// See [`MODE_DEFAULT_LOCK`].
pub const MODE_KEYED_LOCK: i64 = 0x6177_6172_6500_0011;

struct Inner {
    location: String,
    connector: Arc<Connector>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Reader connections, made on first use; each std mutex is held for one read.
    readers: Vec<Mutex<Option<Conn>>>,
    next_reader: AtomicUsize,
    faults: Arc<FaultPlan>,
    metrics: Arc<StoreMetrics>,
}

/// A cheap, cloneable handle to one PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.inner.location)
            .finish()
    }
}

impl PgStore {
    /// Connects, migrates the schema (refusing a newer one with [`StoreError::SchemaTooNew`])
    /// and starts the writer thread. Fails with [`StoreError::Unreachable`] when the server
    /// cannot be reached within the connect timeout.
    pub fn open(options: PgOptions) -> Result<Self> {
        let config = options.driver_config()?;
        let location = options.location();
        let connector = Arc::new(Connector {
            config,
            tls: options.tls()?,
            deadlines: options.deadlines(),
            shared: Arc::default(),
        });
        let mut first = connector.connect(Role::Writer)?;
        schema::migrate(&mut first)?;
        // At start, so a gateway of the wrong mode refuses to serve instead of answering 503.
        epoch::claim_mode(&mut first, options.keyed_locks)?;
        let faults = Arc::new(FaultPlan::default());
        let metrics = Arc::new(StoreMetrics::default());
        let (tx, rx) = mpsc::channel::<Job>();
        let writer = {
            let (faults, metrics, connector) = (faults.clone(), metrics.clone(), connector.clone());
            let modes = (options.batch_after_lock, options.keyed_locks);
            std::thread::Builder::new()
                .name("aware-pg-writer".into())
                .spawn(move || writer_loop(Some(first), &connector, rx, &faults, &metrics, modes))
                .map_err(|e| StoreError::Corrupt(format!("cannot start writer thread: {e}")))?
        };
        Ok(PgStore {
            inner: Arc::new(Inner {
                location,
                connector,
                jobs: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(writer)),
                readers: (0..options.readers.clamp(1, 16))
                    .map(|_| Mutex::new(None))
                    .collect(),
                next_reader: AtomicUsize::new(0),
                faults,
                metrics,
            }),
        })
    }

    /// A new connection with this store's settings (timeouts, keep-alives, password), for work
    /// beside the store: `LISTEN`, session-level advisory locks of leadership, the migration
    /// tool. The caller owns it.
    pub fn connect(&self) -> Result<postgres::Client> {
        postgres::Config::from(self.inner.connector.config.clone())
            .connect(self.inner.connector.tls.clone())
            .map_err(pg_err)
    }

    /// The server URL without its password.
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    /// The first idle reader connection, else one picked round-robin to wait for.
    fn reader(&self) -> Result<MutexGuard<'_, Option<Conn>>> {
        let readers = &self.inner.readers;
        if let Some(guard) = readers.iter().find_map(|r| r.try_lock().ok()) {
            return Ok(guard);
        }
        let start = self.inner.next_reader.fetch_add(1, Ordering::Relaxed);
        readers[start % readers.len()]
            .lock()
            .map_err(|_| StoreError::Corrupt("reader connection poisoned".into()))
    }

    /// Runs `f` on a reader connection (made if needed); a connection that broke is dropped so
    /// the next read makes a new one.
    fn with_reader<R>(&self, f: impl FnOnce(&mut Conn) -> Result<R>) -> Result<R> {
        self.on_reader(f).0
    }

    /// [`PgStore::with_reader`], and whether the connection used had served an earlier read.
    fn on_reader<R>(&self, f: impl FnOnce(&mut Conn) -> Result<R>) -> (Result<R>, bool) {
        let mut guard = match self.reader() {
            Ok(g) => g,
            Err(e) => return (Err(e), false),
        };
        let reused = guard.is_some();
        let conn = match self.inner.connector.ensure(&mut guard, Role::Reader) {
            Ok(c) => c,
            Err(e) => return (Err(e), false),
        };
        stats::read();
        let result = f(conn);
        if conn.is_closed() || matches!(result, Err(StoreError::Unreachable(_))) {
            *guard = None;
        }
        (result, reused)
    }

    /// A read of one statement, run once more on a new connection when a pooled one turns out
    /// dead on use. A failed read degrades to an empty answer (01 §12: `session_status` then
    /// shows no changes), so a pooled connection the server dropped must not answer a read.
    /// `Connector::ensure` already drops one that was told so while it sat idle (EOF, a
    /// termination notice); this covers a close that lands between that check and the
    /// statement. A single statement is safe to run again; a server that is really down fails
    /// the second try at once (the connector remembers a failed connect).
    fn with_reader_once_more<R>(&self, f: impl Fn(&mut Conn) -> Result<R>) -> Result<R> {
        match self.on_reader(&f) {
            (Err(StoreError::Unreachable(_)), true) => self.with_reader(&f),
            (result, _) => result,
        }
    }
}

impl Store for PgStore {
    fn submit(&self, op: WriteOp, done: Completion) -> Result<()> {
        let guard = self.inner.jobs.lock().map_err(|_| StoreError::WriterGone)?;
        let sender = guard.as_ref().ok_or(StoreError::WriterGone)?;
        sender
            .send(Job {
                run: op,
                complete: done,
            })
            .map_err(|_| StoreError::WriterGone)
    }

    fn read_with(&self, f: &mut dyn FnMut(&dyn aware_store::ReadTx) -> Result<()>) -> Result<()> {
        self.with_reader(|conn| {
            // BEGIN travels with the closure's first statement.
            conn.end_transaction();
            conn.defer_simple("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
            let result = {
                let tx = PgTx::new(conn, &self.inner.faults, true);
                f(&tx)
            };
            let end = match &result {
                Ok(()) => conn.batch("COMMIT"),
                Err(_) => conn.batch("ROLLBACK").or(Ok(())),
            };
            conn.end_transaction();
            end?;
            result
        })
    }

    /// One statement outside a transaction (a statement is its own snapshot): one round trip
    /// where `read_with` takes two (the queued `BEGIN` with the statement, then `COMMIT`).
    fn session_exists(&self, key: &str, agent: &str) -> Result<bool> {
        let rows = self.with_reader_once_more(|conn| {
            conn.query(
                "SELECT 1 FROM sessions WHERE session_key = $1 AND agent_id = $2",
                &[&key, &agent],
            )
        })?;
        Ok(!rows.is_empty())
    }

    /// One `listSince` page in a single statement (one statement is one snapshot): the page
    /// rows, then one row with the head and the earliest retained sequence.
    fn state_page(&self, key: &str, agent: &str, after: i64, limit: u32) -> Result<StatePage> {
        if self.inner.faults.reads_fail() {
            return Err(StoreError::InjectedFault("signal-log reads fail"));
        }
        let limit = i64::from(limit);
        let rows = self.with_reader_once_more(|conn| {
            conn.query(
                "SELECT * FROM (SELECT 0::BIGINT AS tag, sequence, kind, actor_type, actor_id, \
                 run_id, occurred_at, summary, payload_json, NULL::BIGINT AS earliest \
                 FROM session_state_events \
                 WHERE session_key = $1 AND agent_id = $2 AND sequence > $3 \
                 ORDER BY sequence LIMIT $4) page \
                 UNION ALL \
                 SELECT 1::BIGINT, h.last_sequence, NULL, NULL, NULL, NULL, h.pruned_max_sequence, \
                 NULL, NULL, (SELECT sequence FROM session_state_events \
                  WHERE session_key = $1 AND agent_id = $2 ORDER BY sequence LIMIT 1) \
                 FROM (SELECT 1) one LEFT JOIN session_state_heads h \
                 ON h.session_key = $1 AND h.agent_id = $2",
                &[&key, &agent, &after, &limit],
            )
        })?;
        let mut page = StatePage::default();
        for row in &rows {
            let tag: i64 = col(row, 0)?;
            if tag == 1 {
                let last: Option<i64> = col(row, 1)?;
                page.head = match last {
                    Some(last_sequence) => Some(HeadRow {
                        last_sequence,
                        pruned_max_sequence: col::<Option<i64>>(row, 6)?.unwrap_or(0),
                        updated_at: 0,
                    }),
                    None => None,
                };
                page.earliest = col(row, 9)?;
            } else {
                page.events.push(tx::compact_from_row(row)?);
            }
        }
        page.events.sort_by_key(|e| e.sequence);
        Ok(page)
    }

    fn pending_cursors_by_watcher(&self) -> Result<Vec<(String, Vec<CursorRow>)>> {
        let rows = self.with_reader_once_more(|conn| {
            conn.query(
                &format!(
                    "SELECT {} FROM session_watch_cursors \
                     WHERE muted = 0 AND notified_sequence > last_seen_sequence \
                     ORDER BY watcher_session_key, notified_sequence, target_session_key, \
                     target_agent_id",
                    tx::CURSOR_COLS
                ),
                &[],
            )
        })?;
        let mut out: Vec<(String, Vec<CursorRow>)> = Vec::new();
        for row in &rows {
            let c = tx::cursor_from_row(row)?;
            match out.last_mut() {
                Some((w, list)) if *w == c.watcher => list.push(c),
                _ => out.push((c.watcher.clone(), vec![c])),
            }
        }
        Ok(out)
    }

    fn metrics(&self) -> &StoreMetrics {
        &self.inner.metrics
    }

    fn faults(&self) -> &FaultPlan {
        &self.inner.faults
    }

    fn info(&self) -> StoreInfo {
        StoreInfo {
            backend: "postgres",
            location: self.inner.location.clone(),
            durability: "synchronous_commit=on".into(),
            capabilities: aware_store::Capabilities {
                inline_reads: false,
                shared: true,
            },
        }
    }

    fn close(&self) {
        if let Ok(mut jobs) = self.inner.jobs.lock() {
            jobs.take();
        }
        if let Ok(mut writer) = self.inner.writer.lock() {
            if let Some(handle) = writer.take() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        if let Ok(mut writer) = self.writer.lock() {
            if let Some(handle) = writer.take() {
                let _ = handle.join();
            }
        }
    }
}

/// Checks the cursor invariant the way the SQLite store does, in debug builds.
pub(crate) fn debug_check(state: &CursorState) {
    debug_assert!(
        state.invariant_holds(),
        "cursor invariant broken: {state:?}"
    );
}
