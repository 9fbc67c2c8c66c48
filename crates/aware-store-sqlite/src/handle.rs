//! `SqliteStore`: opening, the reader pool, the `Store` implementation, and the SQLite-only
//! test seams.

use super::checkpoint::{record_wal_pages, Checkpointer};
use super::mapping::*;
use super::options::*;
use super::schema::*;
use super::sqltx::*;
use super::writer::*;
use crate::Sq;
use aware_store::rows::*;
use aware_store::FaultPlan;
use aware_store::ReadTx;
use aware_store::StoreMetrics;
use aware_store::{Completion, Store, StoreExt, StoreInfo, WriteOp};
use aware_store::{Result, StoreError};
use rusqlite::{params, Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub(super) struct Inner {
    pub(super) path: PathBuf,
    pub(super) durability: Durability,
    pub(super) writer_state: Arc<Writer>,
    pub(super) writer: Mutex<Option<JoinHandle<()>>>,
    /// The checkpointer thread; its mailbox is the writer's (`Writer::checkpointer`).
    pub(super) checkpoint_thread: Mutex<Option<JoinHandle<()>>>,
    /// Reader connections; each std mutex is held for one read closure, never across `.await`.
    pub(super) readers: Vec<Mutex<Connection>>,
    pub(super) next_reader: AtomicUsize,
    pub(super) faults: Arc<FaultPlan>,
    pub(super) metrics: Arc<StoreMetrics>,
}

/// A cheap, cloneable handle to one SQLite store.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the store, checks the schema version, creates missing tables,
    /// and starts the writer thread.
    pub fn open(options: StoreOptions) -> Result<Self> {
        let path = options.path.clone();
        create_private_file(&path)?;
        let writer_conn = open_conn(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let mode: String = writer_conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .sq()?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "cannot switch {} to WAL (journal mode {mode})",
                path.display()
            )));
        }
        let sync = match options.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        writer_conn
            .execute_batch(&format!(
                "PRAGMA synchronous={sync}; PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY;"
            ))
            .sq()?;
        migrate(&writer_conn)?;
        // Replaces SQLite's automatic checkpoint inside `COMMIT` (decision D60).
        writer_conn.wal_hook(Some(record_wal_pages));

        let readers = (0..options.readers.clamp(1, 8))
            .map(|_| {
                let c = open_conn(
                    &path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                c.execute_batch("PRAGMA query_only=1;").sq()?;
                Ok(Mutex::new(c))
            })
            .collect::<Result<Vec<_>>>()?;

        let checkpointer = Arc::new(Checkpointer::default());
        let checkpoint_thread = {
            let conn = open_conn(
                &path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            let c = checkpointer.clone();
            std::thread::Builder::new()
                .name("aware-checkpoint".into())
                .spawn(move || c.run(&conn))
                .map_err(|e| StoreError::Corrupt(format!("cannot start checkpoint thread: {e}")))?
        };
        let faults = Arc::new(FaultPlan::default());
        let metrics = Arc::new(StoreMetrics::default());
        let writer_state = Arc::new(Writer {
            state: Mutex::new(WriterState::default()),
            work: Condvar::new(),
            conn: Mutex::new(writer_conn),
            faults: faults.clone(),
            metrics: metrics.clone(),
            checkpointer,
        });
        let writer = {
            let w = writer_state.clone();
            std::thread::Builder::new()
                .name("aware-writer".into())
                .spawn(move || writer_loop(&w))
                .map_err(|e| StoreError::Corrupt(format!("cannot start writer thread: {e}")))?
        };
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                durability: options.durability,
                writer_state,
                writer: Mutex::new(Some(writer)),
                checkpoint_thread: Mutex::new(Some(checkpoint_thread)),
                readers,
                next_reader: AtomicUsize::new(0),
                faults,
                metrics,
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }
    /// The first idle reader connection, else (all busy) one picked round-robin to wait for.
    /// Lowest-first rather than round-robin: a lone caller then always gets the same
    /// connection, whose page cache is warm (measured on W4: round-robin over the pool made
    /// every page read re-fetch its pages through `pread`).
    fn reader(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        let readers = &self.inner.readers;
        if let Some(guard) = readers.iter().find_map(|r| r.try_lock().ok()) {
            return Ok(guard);
        }
        let start = self.inner.next_reader.fetch_add(1, Ordering::Relaxed);
        readers[start % readers.len()]
            .lock()
            .map_err(|_| StoreError::Corrupt("reader connection poisoned".into()))
    }
}

impl Store for SqliteStore {
    fn submit(&self, op: WriteOp, done: Completion) -> Result<()> {
        let w = &self.inner.writer_state;
        let mut s = w.state();
        if s.closed {
            return Err(StoreError::WriterGone);
        }
        s.queue.push_back(Job {
            run: op,
            complete: done,
        });
        let wake = !s.leading;
        drop(s);
        if wake {
            w.work.notify_one();
        }
        Ok(())
    }

    /// Leads on the calling thread when the writer is idle (see [`Writer`]); otherwise queues
    /// like [`Store::submit`]. The op has then run and `done` been called on return.
    fn submit_blocking(&self, op: WriteOp, done: Completion) -> Result<()> {
        let w = &self.inner.writer_state;
        let mut s = w.state();
        if s.closed {
            return Err(StoreError::WriterGone);
        }
        let job = Job {
            run: op,
            complete: done,
        };
        if s.leading || !s.queue.is_empty() {
            s.queue.push_back(job);
            let wake = !s.leading;
            drop(s);
            if wake {
                w.work.notify_one();
            }
            return Ok(());
        }
        s.leading = true;
        drop(s);
        let _lead = CallerLead(w);
        w.lead(vec![job]);
        Ok(())
    }

    fn faults(&self) -> &FaultPlan {
        &self.inner.faults
    }

    fn metrics(&self) -> &StoreMetrics {
        &self.inner.metrics
    }

    fn info(&self) -> StoreInfo {
        StoreInfo {
            backend: "sqlite",
            location: self.inner.path.display().to_string(),
            durability: self.inner.durability.as_str().to_string(),
            // One process owns the file (an exclusive lock), and its reads are local.
            capabilities: aware_store::Capabilities {
                inline_reads: true,
                shared: false,
            },
        }
    }

    fn maintain(&self) -> Result<()> {
        self.checkpoint()
    }

    /// One `listSince` page (01 §10) in a single statement: up to `limit` events after
    /// `after`, plus the stream's head and earliest retained sequence. One statement is one
    /// snapshot, so no BEGIN/COMMIT is needed, and rows become compact events directly.
    fn state_page(&self, key: &str, agent: &str, after: i64, limit: u32) -> Result<StatePage> {
        if self.inner.faults.reads_fail() {
            return Err(StoreError::InjectedFault("signal-log reads fail"));
        }
        let guard = self.reader()?;
        let conn: &Connection = &guard;
        // Column 0 tells page rows (0) from the one head row (1); the head row carries
        // last_sequence, pruned_max_sequence and the earliest sequence in columns 1, 6, 7.
        let mut stmt = conn
            .prepare_cached(
                "SELECT 0, sequence, kind, actor_type, actor_id, run_id, occurred_at, summary, \
             payload_json FROM (SELECT sequence, kind, actor_type, actor_id, run_id, \
             occurred_at, summary, payload_json FROM session_state_events \
             WHERE session_key = ?1 AND agent_id = ?2 AND sequence > ?3 \
             ORDER BY sequence LIMIT ?4) \
             UNION ALL \
             SELECT 1, h.last_sequence, NULL, NULL, NULL, NULL, h.pruned_max_sequence, \
             (SELECT sequence FROM session_state_events \
              WHERE session_key = ?1 AND agent_id = ?2 ORDER BY sequence LIMIT 1), NULL \
             FROM (SELECT 1) LEFT JOIN session_state_heads h \
             ON h.session_key = ?1 AND h.agent_id = ?2",
            )
            .sq()?;
        let mut page = StatePage::default();
        let mut rows = stmt
            .query(params![key, agent, after, i64::from(limit)])
            .sq()?;
        while let Some(row) = rows.next().sq()? {
            let tag: i64 = row.get(0).sq()?;
            if tag == 1 {
                let last: Option<i64> = row.get(1).sq()?;
                page.head = match last {
                    Some(last_sequence) => Some(HeadRow {
                        last_sequence,
                        pruned_max_sequence: row.get(6).sq()?,
                        updated_at: 0,
                    }),
                    None => None,
                };
                page.earliest = row.get(7).sq()?;
            } else {
                page.events.push(compact_from_row(row).sq()?);
            }
        }
        // Compound-select output order is not promised; pages are (cheap when sorted).
        page.events.sort_by_key(|e| e.sequence);
        Ok(page)
    }

    /// Every pending, unmuted cursor in one statement, grouped by watcher (in watcher order)
    /// and, within a watcher, in the order of `pending_by_watcher`. For the restart sweep,
    /// which wakes every watcher with pending cursors: one scan instead of a lookup each.
    fn pending_cursors_by_watcher(&self) -> Result<Vec<(String, Vec<CursorRow>)>> {
        let guard = self.reader()?;
        let conn: &Connection = &guard;
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {CURSOR_COLS} FROM session_watch_cursors \
             WHERE muted = 0 AND notified_sequence > last_seen_sequence \
             ORDER BY watcher_session_key, notified_sequence, target_session_key, target_agent_id"
            ))
            .sq()?;
        let mut out: Vec<(String, Vec<CursorRow>)> = Vec::new();
        let mut rows = stmt.query([]).sq()?;
        while let Some(row) = rows.next().sq()? {
            let c = cursor_from_row(row).sq()?;
            match out.last_mut() {
                Some((w, list)) if *w == c.watcher => list.push(c),
                _ => out.push((c.watcher.clone(), vec![c])),
            }
        }
        Ok(out)
    }

    /// Runs `f` on a consistent snapshot from the reader pool.
    fn read_with(&self, f: &mut dyn FnMut(&dyn ReadTx) -> Result<()>) -> Result<()> {
        let guard = self.reader()?;
        let conn: &Connection = &guard;
        run_cached(conn, "BEGIN DEFERRED").sq()?;
        let tx = SqlTx {
            conn,
            faults: &self.inner.faults,
            reader: true,
            hooks: Vec::new(),
        };
        let result = f(&tx);
        let _ = run_cached(conn, "COMMIT");
        result
    }

    /// Stops the writer after it finished every op already queued. Later writes fail with
    /// [`StoreError::WriterGone`]. Dropping the last handle does the same.
    fn close(&self) {
        self.inner.writer_state.state().closed = true;
        self.inner.writer_state.work.notify_all();
        if let Ok(mut writer) = self.inner.writer.lock() {
            if let Some(handle) = writer.take() {
                let _ = handle.join();
            }
        }
        self.inner.stop_checkpointer();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.writer_state.state().closed = true;
        self.writer_state.work.notify_all();
        if let Ok(mut writer) = self.writer.lock() {
            if let Some(handle) = writer.take() {
                let _ = handle.join();
            }
        }
        self.stop_checkpointer();
    }
}

impl Inner {
    /// After the writer: its last commits may still ask for a checkpoint, which the thread's
    /// close makes moot (the next open's first checkpoint, or SQLite's at the last close, takes it).
    fn stop_checkpointer(&self) {
        self.writer_state.checkpointer.close();
        if let Ok(mut thread) = self.checkpoint_thread.lock() {
            if let Some(handle) = thread.take() {
                let _ = handle.join();
            }
        }
    }
}

/// Test seams of the failure-model tests (01 §12); aware itself never calls them. Each queues a
/// pragma for the writer's own connection, which runs it before its next batch (outside any
/// transaction), then pushes an empty op through so the pragma is in force on return.
impl SqliteStore {
    /// Simulates a full disk: `PRAGMA max_page_count = pages` on the writer's connection
    /// (SQLite never lowers it below the current size, so `1` means "no room from now on").
    /// Writes that need a new page then fail with `database or disk is full`; pass a large value
    /// (e.g. `u32::MAX - 1`) to lift the limit again.
    #[doc(hidden)]
    pub fn set_max_page_count(&self, pages: u32) {
        self.inner
            .faults
            .queue_writer_pragma(format!("PRAGMA max_page_count = {pages}"));
        let _ = self.write(|_| Ok::<(), StoreError>(()));
    }

    /// Simulates a data dir that became read-only under a running server (root ignores file
    /// modes, so tests cannot use chmod): `PRAGMA query_only` on the writer's connection, under
    /// which every batch fails to begin its transaction.
    #[doc(hidden)]
    pub fn set_writer_query_only(&self, on: bool) {
        self.inner
            .faults
            .queue_writer_pragma(format!("PRAGMA query_only = {}", u8::from(on)));
        let _ = self.write(|_| Ok::<(), StoreError>(()));
    }

    /// Holds the checkpointer thread's checkpoints back (requests are kept) or lets them run
    /// again, so a test can see what the writer does alone.
    #[doc(hidden)]
    pub fn pause_checkpoints(&self, on: bool) {
        self.inner.writer_state.checkpointer.pause(on);
    }

    /// WAL checkpoints run so far: (by the checkpointer thread, inline by the writer).
    #[doc(hidden)]
    pub fn checkpoint_runs(&self) -> (u64, u64) {
        self.inner.writer_state.checkpointer.runs()
    }

    /// Waits until the checkpointer thread has run `n` checkpoints or `limit` passed; answers
    /// whether it has.
    #[doc(hidden)]
    pub fn wait_background_checkpoints(&self, n: u64, limit: std::time::Duration) -> bool {
        self.inner
            .writer_state
            .checkpointer
            .wait_background(n, limit)
    }
}

impl SqliteStore {
    /// Passive WAL checkpoint, run between batches on the writer's connection.
    pub fn checkpoint(&self) -> Result<()> {
        // The writer's connection is busy inside its loop; a reader connection may run a
        // passive checkpoint just as well (it never blocks writers).
        let guard = self.inner.readers[0]
            .lock()
            .map_err(|_| StoreError::Corrupt("reader connection poisoned".into()))?;
        guard
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .sq()?;
        Ok(())
    }
}
