//! One PostgreSQL connection with a statement cache and a pipeline, and the mapping of driver
//! errors to [`StoreError`].
//!
//! Writes whose answer nobody reads (a turn inserted, a head raised, a cursor stored, a
//! savepoint set) are not waited for one by one: they are queued and sent together with the
//! next statement whose answer is needed, in order, on the same connection, so a run of such
//! writes costs one round trip instead of one each (docs/performance.md, "PostgreSQL write
//! path"). The server runs them in the order sent, so reads see them. A queued write that fails
//! is not lost: its error is the answer of the exchange that carried it, and the connection
//! remembers it until a `ROLLBACK TO` a savepoint set before it undoes it; the writer fails an
//! op that ends with such a failure standing (see [`Conn::healthy`]).

mod errors;
mod fusion;
mod pipeline;
mod sequence;

pub(crate) use pipeline::Owned;
use pipeline::{Deferred, Pipeline};
use sequence::LocalNumbers;

pub(crate) use errors::{col, ident, pg_err};

use crate::stats::{self, Role};
use aware_store::{Result, StoreError};
use postgres::types::ToSql;
use postgres::{Row, Statement};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

/// After a missed deadline, new connections fail at once for this long: the path just proved
/// dead, and the requests queued behind the one that waited get their 503 without waiting again.
const DOWN_AFTER_DEADLINE: Duration = Duration::from_secs(1);

/// Prepared statements kept per connection; the filter-built statements of the session lists
/// vary with their filters, so the cache is emptied when it grows past this.
const MAX_CACHED: usize = 512;

pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// The statement whose answer an exchange waits for.
enum Last<'p> {
    Rows(&'p Statement, &'p [Param<'p>]),
    Count(&'p Statement, &'p [Param<'p>]),
    Simple(&'p str),
}

enum Answer {
    Rows(Vec<Row>),
    Count(u64),
    Done,
}

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = std::result::Result<T, postgres::Error>> + 'a>>;

/// How long a client waits for PostgreSQL, beyond what the server's own timeouts bound.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    /// The whole connection set-up: TCP connect, startup and authentication. The driver's
    /// `connect_timeout` covers only the TCP connect, so a server (or a proxy in front of it:
    /// pgbouncer, a cloud SQL proxy) that accepts the connection and then never answers would
    /// hold the caller for as long as the kernel keeps the socket.
    pub(crate) connect: Duration,
    /// One exchange (the queued writes and the statement whose answer is awaited). Longer than
    /// `statement_timeout`, so a slow statement ends with the server's own error; past it the
    /// server or the path to it is gone. Kernel keep-alives and `tcp_user_timeout` catch a dead
    /// peer only when nothing in between acknowledges for it, which a proxy does.
    pub(crate) exchange: Duration,
}

pub(crate) struct Conn {
    /// Drives the connection: a current-thread runtime, so an exchange runs entirely on the
    /// calling thread (write, wait, read) with no hop to another thread.
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    /// Prepared statements by SQL text, each with the table a queued use of it may be fused on
    /// (worked out once, when it is prepared).
    cache: HashMap<String, (Statement, Option<String>)>,
    role: Role,
    /// The current transaction's queued writes, savepoints and standing failure.
    pipe: Pipeline,
    /// The writer's row cache (empty on reader connections); dies with the connection.
    pub(crate) rows: crate::cache::RowCache,
    /// The lock keys of the writer's current batch (keyed mode; see `keys`).
    pub(crate) keys: crate::keys::KeyLocks,
    /// The writer's write-lock mode is claimed on this connection (`epoch::claim_mode`).
    pub(crate) mode_claimed: bool,
    /// Event numbers given in this transaction without a round trip each.
    numbers: LocalNumbers,
    deadlines: Deadlines,
    /// An exchange overran its deadline: the stream may hold a late answer or a half-sent
    /// request, so the connection is never used again (see [`Conn::is_closed`]).
    broken: bool,
    /// The store's connection generation when this one was made, and the current one: a missed
    /// deadline on any connection moves it on, which retires every connection made before
    /// (idle ones in the pool would each wait out their own deadline on the same dead path).
    generation: u64,
    shared: Arc<Shared>,
}

/// What the connections of one store share about the path to the server.
#[derive(Default)]
pub(crate) struct Shared {
    /// The connection generation (see [`Conn::is_closed`]).
    pub(crate) generation: AtomicU64,
    /// Until when new connections fail at once, and why: set by a failed connect and by a
    /// missed deadline, so callers queued behind a dead path get their 503 at once instead of
    /// each waiting for its own connect timeout.
    pub(crate) down: Mutex<Option<(Instant, String)>>,
}

impl Shared {
    pub(crate) fn mark_down(&self, until: Instant, why: String) {
        if let Ok(mut down) = self.down.lock() {
            *down = Some((until, why));
        }
    }
}

/// The identity sequence of `session_state_events.sequence`.
const EVENT_SEQUENCE: &str = "pg_get_serial_sequence('session_state_events', 'sequence')";

impl Conn {
    pub(crate) fn connect(
        config: &tokio_postgres::Config,
        tls: &crate::tls::PgTls,
        role: Role,
        deadlines: Deadlines,
        shared: Arc<Shared>,
    ) -> Result<Self> {
        let generation = shared.generation.load(Ordering::SeqCst);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unreachable(format!("cannot start a runtime: {e}")))?;
        let (client, connection) = rt
            .block_on(async {
                tokio::time::timeout(deadlines.connect, config.connect(tls.clone())).await
            })
            .map_err(|_| {
                StoreError::Unreachable(format!(
                    "no answer from PostgreSQL within {:?} while connecting",
                    deadlines.connect
                ))
            })?
            .map_err(pg_err)?;
        // The connection task runs whenever this thread waits in `block_on`.
        rt.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL connection ended");
            }
        });
        Ok(Conn {
            rt,
            client,
            cache: HashMap::new(),
            role,
            pipe: Pipeline::default(),
            rows: crate::cache::RowCache::default(),
            keys: crate::keys::KeyLocks::default(),
            mode_claimed: false,
            numbers: LocalNumbers::default(),
            deadlines,
            broken: false,
            generation,
            shared,
        })
    }

    /// Lets the connection's task read what the server sent while the connection sat idle in
    /// a pool (its runtime runs only while this thread waits on it). A server that restarted or
    /// closed the connection has sent EOF or a termination notice, and after this the
    /// connection knows it is closed ([`Conn::is_closed`]) before a request is put on it. No
    /// round trip: it only drains what already arrived.
    pub(crate) fn catch_up_idle(&mut self) {
        self.rt.block_on(async {
            // Twice: the first turn lets the I/O driver deliver readiness, the second lets the
            // woken connection task run to its end.
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
        });
    }

    /// Whether the connection may not be used any more: closed by the server or the network,
    /// broken by a missed deadline, or made before another connection missed one.
    pub(crate) fn is_closed(&self) -> bool {
        self.broken
            || self.generation < self.shared.generation.load(Ordering::SeqCst)
            || self.client.is_closed()
    }

    /// The error of an exchange that overran its deadline; marks the connection broken and
    /// retires every connection made before it.
    fn overran(&mut self, what: &str) -> StoreError {
        self.broken = true;
        self.shared
            .generation
            .fetch_max(self.generation + 1, Ordering::SeqCst);
        let message = format!(
            "no answer from PostgreSQL within {:?} ({what}); the connection is dropped",
            self.deadlines.exchange
        );
        self.shared
            .mark_down(Instant::now() + DOWN_AFTER_DEADLINE, message.clone());
        StoreError::Unreachable(message)
    }

    /// The error of any use of a connection that may not be used (see [`Conn::is_closed`]):
    /// answered at once, never by waiting on the dead path again (a `ROLLBACK` after a missed
    /// deadline, say).
    fn unusable(&self) -> Option<StoreError> {
        self.is_closed()
            .then(|| StoreError::Unreachable("the connection to PostgreSQL was dropped".into()))
    }

    /// A statement prepared once per connection: each later use is part of an exchange.
    fn stmt(&mut self, sql: &str) -> Result<Statement> {
        self.prepared(sql).map(|(s, _)| s)
    }

    /// [`Conn::stmt`] and the table a queued use of it may be fused on.
    fn prepared(&mut self, sql: &str) -> Result<(Statement, Option<String>)> {
        if let Some(e) = self.unusable() {
            return Err(e);
        }
        if let Some(s) = self.cache.get(sql) {
            return Ok(s.clone());
        }
        stats::exchange(self.role, 1);
        let deadline = self.deadlines.exchange;
        let prepared = self
            .rt
            .block_on(async { tokio::time::timeout(deadline, self.client.prepare(sql)).await });
        let s = match prepared {
            Ok(r) => r.map_err(pg_err)?,
            Err(_) => return Err(self.overran("prepare")),
        };
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        let entry = (s, pipeline::fusible_table(sql).map(str::to_string));
        self.cache.insert(sql.to_string(), entry.clone());
        Ok(entry)
    }

    /// Sends the queued writes and `last`, in order, and waits for all their answers. The
    /// answer is the first queued write's failure if one failed, else `last`'s.
    fn exchange(&mut self, last: Last<'_>, own_answer_only: bool) -> Result<Answer> {
        if let Some(e) = self.unusable() {
            return Err(e);
        }
        let deferred = self.pipe.take_queued();
        let deferred = self.fuse(deferred);
        let last_position = self.pipe.next_position();
        stats::exchange(self.role, deferred.len() as u64 + 1);
        let client = &self.client;
        let deadline = self.deadlines.exchange;
        // The timer is made inside `block_on`: it needs the runtime's context.
        let outcome = self.rt.block_on(async {
            tokio::time::timeout(deadline, async {
                let queued: Vec<BoxFut<'_, ()>> = deferred
                    .iter()
                    .map(|d| -> BoxFut<'_, ()> {
                        match d {
                            Deferred::Simple(_, sql) => Box::pin(client.batch_execute(sql)),
                            Deferred::Prepared(_, st, params, ..) => Box::pin(async move {
                                let refs: Vec<Param<'_>> =
                                    params.iter().map(|p| &**p as Param<'_>).collect();
                                client.execute(st, &refs).await.map(|_| ())
                            }),
                        }
                    })
                    .collect();
                let last: BoxFut<'_, Answer> = match last {
                    Last::Rows(st, params) => {
                        Box::pin(async move { client.query(st, params).await.map(Answer::Rows) })
                    }
                    Last::Count(st, params) => {
                        Box::pin(async move { client.execute(st, params).await.map(Answer::Count) })
                    }
                    Last::Simple(sql) => {
                        Box::pin(
                            async move { client.batch_execute(sql).await.map(|_| Answer::Done) },
                        )
                    }
                };
                in_order(queued, last).await
            })
            .await
        });
        let Ok((queued, answer)) = outcome else {
            // Whether the server ran any of it is unknown; the caller's transaction fails
            // (`Unreachable`, or `CommitFailed` for a `COMMIT`) and nothing is reused.
            let e = self.overran("exchange");
            self.fail_at(last_position, &e);
            return Err(e);
        };
        let mut first_failure = None;
        for (d, r) in deferred.iter().zip(queued) {
            if let Err(e) = r {
                let e = pg_err(e);
                self.fail_at(d.position(), &e);
                first_failure.get_or_insert(e);
            }
        }
        let answer = answer.map_err(pg_err);
        if let Err(e) = &answer {
            self.fail_at(last_position, e);
        }
        match first_failure {
            Some(e) if !own_answer_only => Err(e),
            _ => answer,
        }
    }

    fn fail_at(&mut self, position: u64, e: &StoreError) {
        self.pipe.fail_at(position, e);
    }

    pub(crate) fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        let s = self.stmt(sql)?;
        match self.exchange(Last::Rows(&s, params), false)? {
            Answer::Rows(rows) => Ok(rows),
            _ => Err(StoreError::Corrupt("a query gave no rows".into())),
        }
    }

    pub(crate) fn query_opt(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>> {
        let mut rows = self.query(sql, params)?;
        if rows.len() > 1 {
            return Err(StoreError::Corrupt(format!(
                "a query expected to give at most one row gave {}",
                rows.len()
            )));
        }
        Ok(rows.pop())
    }

    pub(crate) fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        let s = self.stmt(sql)?;
        match self.exchange(Last::Count(&s, params), false)? {
            Answer::Count(n) => Ok(n),
            _ => Err(StoreError::Corrupt("a statement gave no row count".into())),
        }
    }

    /// Queues a write whose row count nobody needs; it travels with the next exchange.
    pub(crate) fn defer(&mut self, sql: &str, params: Vec<Owned>) -> Result<()> {
        let (s, table) = self.prepared(sql)?;
        self.pipe
            .queue(|p| Deferred::Prepared(p, s, params, table, sql.to_string()));
        Ok(())
    }

    /// Queues control statements (simple protocol).
    pub(crate) fn defer_simple(&mut self, sql: impl Into<String>) {
        let sql = sql.into();
        self.pipe.queue(|p| Deferred::Simple(p, sql));
    }

    /// Control statements (BEGIN, COMMIT, …) over the simple protocol, after the queued writes.
    pub(crate) fn batch(&mut self, sql: &str) -> Result<()> {
        self.exchange(Last::Simple(sql), false).map(|_| ())
    }

    /// Sets a savepoint, lazily: it is queued like a write, so it reaches the server only
    /// when an exchange sends the queue, i.e. when something inside it was sent. Released or
    /// rolled back to while still queued, it never reaches the server: a release drops it (its
    /// writes stay queued, now the enclosing transaction's), a rollback drops it with every
    /// write queued after it. So an op that only queues writes costs no savepoint statements.
    pub(crate) fn savepoint(&mut self, name: &str) {
        self.keys.savepoint(name);
        self.pipe
            .set_savepoint(name, format!("SAVEPOINT {}", ident(name)));
    }

    /// Releases a savepoint without waiting: a queued one is dropped, a sent one gets a queued
    /// `RELEASE`. A failure of anything inside it is then reported by the exchange that carries
    /// it, which fails the op or the batch (see [`Conn::healthy`]).
    pub(crate) fn release_queued(&mut self, name: &str) {
        self.keys.release(name);
        self.pipe.release(name, format!("RELEASE {}", ident(name)));
    }

    /// Rolls back to a savepoint and releases it. Still queued, it is dropped with every write
    /// queued after it, none of which reached the server. Sent, the queued writes are sent
    /// first (their failures are what is being undone) with `ROLLBACK TO`; a failure recorded
    /// after the savepoint was set is undone with it. The row cache is emptied either way,
    /// since it may hold rows of the undone writes.
    pub(crate) fn rollback_to(&mut self, name: &str) -> Result<()> {
        // PostgreSQL releases the locks taken inside a rolled-back savepoint: forget them.
        self.keys.rolled_back(name);
        if self.pipe.rollback_unsent(name) {
            self.rows.clear();
            return Ok(());
        }
        let n = ident(name);
        self.exchange(Last::Simple(&format!("ROLLBACK TO {n}; RELEASE {n}")), true)?;
        self.rows.clear();
        self.pipe.rolled_back(name);
        Ok(())
    }

    /// Whether no failed statement stands in the current transaction.
    pub(crate) fn healthy(&self) -> bool {
        self.pipe.failure().is_none()
    }

    /// The standing failure, if any.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.pipe.failure()
    }

    /// The next event sequence of the writer's transaction. The first of a transaction comes
    /// from `nextval` (one exchange); the next ones are numbered on from it (see `sequence`),
    /// and [`Conn::queue_sequence_catch_up`] moves the sequence past them before `COMMIT`.
    /// Numbers of a transaction that does not commit were never visible nor answered (as with
    /// `nextval` itself, the sequence then skips or reissues only numbers nobody saw).
    pub(crate) fn next_sequence(&mut self) -> Result<i64> {
        // Keyed batches number concurrently: only a number drawn after the stream's key was
        // granted is above every number an earlier holder of the key committed, so each
        // event draws its own (write-scaling.md, "Numbering").
        let local = self.keys.mode() != crate::keys::Mode::Shared;
        if let Some(n) = self.numbers.next().filter(|_| local) {
            return Ok(n);
        }
        let rows = self.query(&format!("SELECT nextval({EVENT_SEQUENCE})"), &[])?;
        let n: i64 = match rows.first() {
            Some(row) => col(row, 0)?,
            None => return Err(StoreError::Corrupt("nextval gave no row".into())),
        };
        if local {
            self.numbers.drew(n);
        }
        Ok(n)
    }

    /// Queues the `setval` that moves the event sequence past the numbers given locally (to
    /// travel with `COMMIT`, so it runs before it).
    pub(crate) fn queue_sequence_catch_up(&mut self) -> Result<()> {
        if let Some(last) = self.numbers.catch_up() {
            self.defer(
                &format!("SELECT setval({EVENT_SEQUENCE}, $1)"),
                vec![Box::new(last)],
            )?;
        }
        Ok(())
    }

    /// Forgets queued writes (the transaction is being rolled back) and the transaction's
    /// savepoints, failure and local numbers.
    pub(crate) fn end_transaction(&mut self) {
        self.numbers.clear();
        self.pipe.clear();
    }
}

/// Polls `queued` and then `last` in order, each to its end: a request is sent on its future's
/// first poll, so they go out in this order (tokio-postgres answers them in order too).
async fn in_order<'a>(
    queued: Vec<BoxFut<'a, ()>>,
    last: BoxFut<'a, Answer>,
) -> (
    Vec<std::result::Result<(), postgres::Error>>,
    std::result::Result<Answer, postgres::Error>,
) {
    let mut queued: Vec<Option<BoxFut<'a, ()>>> = queued.into_iter().map(Some).collect();
    let mut results: Vec<Option<std::result::Result<(), postgres::Error>>> =
        (0..queued.len()).map(|_| None).collect();
    let mut last = Some(last);
    let mut answer = None;
    std::future::poll_fn(|cx| {
        for (slot, result) in queued.iter_mut().zip(results.iter_mut()) {
            if let Some(f) = slot {
                if let Poll::Ready(r) = f.as_mut().poll(cx) {
                    *result = Some(r);
                    *slot = None;
                }
            }
        }
        if let Some(f) = &mut last {
            if let Poll::Ready(r) = f.as_mut().poll(cx) {
                answer = Some(r);
                last = None;
            }
        }
        if last.is_none() && queued.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    let results = results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect();
    let answer = answer.unwrap_or(Ok(Answer::Done));
    (results, answer)
}
