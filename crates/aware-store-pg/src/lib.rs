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
mod locks;
pub mod migrate;
mod options;
mod schema;
mod stats;
#[cfg(feature = "testing")]
pub mod testing;
mod tx;

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
use stats::Role;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tx::PgTx;

/// The key of the cluster-wide advisory lock of schema migrations ("aware" in ASCII, then 1):
/// gateways starting together migrate once. Write transactions lock the row of
/// `aware_write_epoch` instead, which a role without privileges on the table cannot take.
pub const WRITE_LOCK: i64 = 0x6177_6172_6500_0001;

/// Most ops one commit takes (as the SQLite writer).
const MAX_GROUP: usize = 256;
/// After a failed connect, connections fail at once for this long instead of each waiting for
/// its own connect timeout: a down server answers every caller quickly.
const CONNECT_BACKOFF: Duration = Duration::from_millis(500);

type Hook = Box<dyn FnOnce() + Send>;

struct Job {
    run: WriteOp,
    complete: Completion,
}

/// Makes connections; remembers a recent failure so callers fail fast during an outage.
struct Connector {
    config: tokio_postgres::Config,
    down: Mutex<Option<(Instant, String)>>,
}

impl Connector {
    fn connect(&self, role: Role) -> Result<Conn> {
        if let Ok(down) = self.down.lock() {
            if let Some((until, msg)) = down.as_ref() {
                if Instant::now() < *until {
                    return Err(StoreError::Unreachable(msg.clone()));
                }
            }
        }
        match Conn::connect(&self.config, role) {
            Ok(conn) => {
                if let Ok(mut down) = self.down.lock() {
                    *down = None;
                }
                Ok(conn)
            }
            Err(err) => {
                if let Ok(mut down) = self.down.lock() {
                    *down = Some((Instant::now() + CONNECT_BACKOFF, err.to_string()));
                }
                Err(match err {
                    // No retry fixes a wrong URL or password: the operator must, so say how.
                    StoreError::Postgres { sqlstate, message } if sqlstate == "3D000" => {
                        StoreError::Refused(format!(
                            "cannot connect: {message} (SQLSTATE 3D000); create it (`createdb \
                             NAME` as a PostgreSQL user allowed to) or correct the database in \
                             the URL (--store, [store] url)"
                        ))
                    }
                    StoreError::Postgres { sqlstate, message }
                        if sqlstate == "28P01" || sqlstate == "28000" =>
                    {
                        StoreError::Refused(format!(
                            "cannot connect: {message} (SQLSTATE {sqlstate}); correct the user \
                             or password (the URL, --password-file or PGPASSWORD) or the \
                             server's pg_hba.conf"
                        ))
                    }
                    StoreError::Postgres { sqlstate, message } => StoreError::Unreachable(format!(
                        "cannot connect: {message} (SQLSTATE {sqlstate})"
                    )),
                    other => other,
                })
            }
        }
    }

    /// The connection in `slot`, made (again) when missing or broken.
    fn ensure<'a>(&self, slot: &'a mut Option<Conn>, role: Role) -> Result<&'a mut Conn> {
        if slot.as_ref().is_some_and(Conn::is_closed) {
            *slot = None;
        }
        if slot.is_none() {
            *slot = Some(self.connect(role)?);
        }
        slot.as_mut()
            .ok_or_else(|| StoreError::Unreachable("no connection".into()))
    }
}

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
            down: Mutex::new(None),
        });
        let mut first = connector.connect(Role::Writer)?;
        schema::migrate(&mut first)?;
        let faults = Arc::new(FaultPlan::default());
        let metrics = Arc::new(StoreMetrics::default());
        let (tx, rx) = mpsc::channel::<Job>();
        let writer = {
            let (faults, metrics, connector) = (faults.clone(), metrics.clone(), connector.clone());
            std::thread::Builder::new()
                .name("aware-pg-writer".into())
                .spawn(move || writer_loop(Some(first), &connector, rx, &faults, &metrics))
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
            .connect(postgres::NoTls)
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
        let mut guard = self.reader()?;
        let conn = self.inner.connector.ensure(&mut guard, Role::Reader)?;
        stats::read();
        let result = f(conn);
        if conn.is_closed() || matches!(result, Err(StoreError::Unreachable(_))) {
            *guard = None;
        }
        result
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
        let rows = self.with_reader(|conn| {
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
        let rows = self.with_reader(|conn| {
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
        let rows = self.with_reader(|conn| {
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

    fn as_any(&self) -> &dyn std::any::Any {
        self
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

/// The writer: wait for one op, take every op already queued (≤ 256), run them in one
/// transaction under the cluster-wide lock with a savepoint each, commit once, then answer and
/// run after-commit hooks. Mirrors the SQLite writer; a broken connection is dropped and made
/// again for the next batch.
/// Batches kept in `aware_write_log`: a writer whose last commit is older finds a gap and
/// empties its whole cache, which is always right.
const WRITE_LOG_KEPT: i64 = 1_024;

/// Queues this batch's `aware_write_log` row (it commits or rolls back with the batch), and
/// now and then the pruning of rows no writer still needs.
fn log_batch(conn: &mut conn::Conn, epoch: i64) -> Result<()> {
    let (everything, keys) = conn.rows.touched();
    conn.defer(
        "INSERT INTO aware_write_log (epoch, everything, keys) VALUES ($1, $2, $3)",
        vec![Box::new(epoch), Box::new(everything), Box::new(keys)],
    )?;
    if epoch % 128 == 0 {
        conn.defer(
            "DELETE FROM aware_write_log WHERE epoch < $1",
            vec![Box::new(epoch - WRITE_LOG_KEPT)],
        )?;
    }
    Ok(())
}

fn writer_loop(
    mut slot: Option<Conn>,
    connector: &Connector,
    rx: mpsc::Receiver<Job>,
    faults: &FaultPlan,
    metrics: &StoreMetrics,
) {
    while let Ok(first) = rx.recv() {
        while faults.writer_stalled() {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SQLite-only seams (page counts, query_only) have no meaning here.
        let _ = faults.take_writer_pragmas();
        let mut batch = vec![first];
        while batch.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let conn = match connector.ensure(&mut slot, Role::Writer) {
            Ok(conn) => conn,
            Err(e) => {
                for job in batch {
                    (job.complete)(Err(StoreError::Unreachable(e.to_string())));
                }
                continue;
            }
        };
        // One round trip: the transaction; the lock that orders it among all gateways (the
        // row lock of the epoch's UPDATE, held to the commit: an advisory lock any connecting
        // role could hold, decision D33); the write epoch, which says whether another writer
        // committed since this one's last batch; and the log of those batches (the keys they
        // wrote, so only those rows leave the row cache), read once the lock is held so it sees
        // the last holder's batch. Each op's savepoint release travels with the next op's.
        conn.end_transaction();
        conn.defer_simple(
            "BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE aware_write_epoch SET epoch = epoch + 1",
        );
        let since = conn.rows.last_epoch().unwrap_or(i64::MAX);
        let begun_with = conn
            .query(
                "SELECT e.epoch, l.epoch, l.everything, l.keys FROM aware_write_epoch e \
                 LEFT JOIN aware_write_log l ON l.epoch > $1 AND l.epoch < e.epoch \
                 WHERE e.id = 1 ORDER BY l.epoch",
                &[&since],
            )
            .and_then(|rows| {
                let mut epoch = None;
                let mut log = Vec::new();
                for row in &rows {
                    epoch = Some(col::<i64>(row, 0)?);
                    if let Some(e) = col::<Option<i64>>(row, 1)? {
                        log.push(cache::LoggedBatch {
                            epoch: e,
                            everything: col::<Option<bool>>(row, 2)?.unwrap_or(true),
                            keys: col::<Option<Vec<String>>>(row, 3)?.unwrap_or_default(),
                        });
                    }
                }
                match epoch {
                    Some(epoch) => Ok((epoch, log)),
                    None => Err(StoreError::Corrupt("aware_write_epoch has no row".into())),
                }
            });
        let epoch = match begun_with {
            Ok((epoch, log)) => {
                conn.rows.begin_batch(epoch, &log);
                epoch
            }
            Err(e) => {
                let _ = conn.batch("ROLLBACK");
                conn.end_transaction();
                conn.rows.clear();
                if conn.is_closed() || matches!(e, StoreError::Unreachable(_)) {
                    slot = None;
                }
                let msg = e.to_string();
                for job in batch {
                    (job.complete)(Err(StoreError::CommitFailed(msg.clone())));
                }
                continue;
            }
        };
        let begun = started.elapsed();
        // (completion, hooks, a failure of this op alone that the commit does not undo)
        let mut done: Vec<(Completion, Vec<Hook>, Option<String>)> =
            Vec::with_capacity(batch.len());
        // Set when the transaction can no longer be used (the connection broke): ops not run
        // yet are failed without running and the batch is rolled back.
        let mut lost: Option<String> = None;
        for job in batch {
            if let Some(msg) = &lost {
                (job.complete)(Err(StoreError::CommitFailed(msg.clone())));
                continue;
            }
            conn.savepoint("op");
            let (failed, mut hooks) = {
                let mut tx = PgTx::new(conn, faults, false);
                let failed = (job.run)(&mut tx);
                (failed, tx.take_hooks())
            };
            // The op's queued writes are not waited for: they travel with the next exchange
            // (a later op's read, or the COMMIT), so ops stream to the server without a round
            // trip each. A queued write that the server refuses is found by that exchange and
            // fails the batch (see `Conn`), unless it is found within its own op.
            let clean = failed.is_none() && conn.healthy();
            let settled = if clean {
                conn.release_queued("op");
                Ok(None)
            } else {
                hooks.clear();
                // The op failed, or swallowed a failed statement (PostgreSQL then refuses
                // everything until a rollback): undo the op, and in the second case say so,
                // instead of a COMMIT that PostgreSQL would turn into a silent rollback of the
                // whole batch. (A failed rollback loses the batch: the safe side.)
                let why = conn.failure().unwrap_or("a statement failed").to_string();
                conn.rollback_to("op").map(|()| {
                    failed
                        .is_none()
                        .then(|| format!("the op's writes were rolled back: {why}"))
                })
            };
            match settled {
                Ok(own_failure) => done.push((job.complete, hooks, own_failure)),
                Err(e) => {
                    lost = Some(e.to_string());
                    done.push((job.complete, Vec::new(), None));
                }
            }
        }
        let committing = Instant::now();
        let commit = if let Some(msg) = lost {
            Err(StoreError::CommitFailed(msg))
        } else if let Some(why) = conn.failure() {
            // Every op ends healthy or rolled back; this is the last guard before a COMMIT
            // that PostgreSQL would turn into a rollback.
            Err(StoreError::CommitFailed(format!(
                "a failed statement stands: {why}"
            )))
        } else if faults.take_commit_failure() {
            Err(StoreError::CommitFailed("injected commit failure".into()))
        } else {
            conn.queue_sequence_catch_up()
                .and_then(|()| log_batch(conn, epoch))
                .and_then(|()| conn.batch("COMMIT"))
                .map_err(|e| StoreError::CommitFailed(e.to_string()))
        };
        conn.end_transaction();
        match commit {
            Ok(()) => {
                conn.rows.committed(epoch);
                let total = started.elapsed().as_micros() as u64;
                metrics.record_commit(done.len() as u64, total);
                stats::batch(
                    done.len() as u64,
                    begun.as_micros() as u64,
                    committing.elapsed().as_micros() as u64,
                    total,
                );
                for (complete, hooks, own_failure) in done {
                    match own_failure {
                        Some(msg) => complete(Err(StoreError::CommitFailed(msg))),
                        None => {
                            for hook in hooks {
                                hook();
                            }
                            complete(Ok(()));
                        }
                    }
                }
            }
            Err(e) => {
                // The outcome may be unknown (a lost answer to COMMIT): the cache is not kept.
                conn.rows.clear();
                let broken = conn.batch("ROLLBACK").is_err() || conn.is_closed();
                conn.end_transaction();
                if broken {
                    slot = None;
                }
                metrics.commit_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(event = "commit_failed", error = %e, ops = done.len(), "commit failed");
                let msg = match e {
                    StoreError::CommitFailed(m) => m,
                    other => other.to_string(),
                };
                for (complete, _, _) in done {
                    complete(Err(StoreError::CommitFailed(msg.clone())));
                }
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
