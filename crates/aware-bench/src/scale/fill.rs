//! Populating big stores fast: plain SQL on the store's own schema (created by opening the
//! store first), one statement per table over a generated series, in one transaction. Going
//! through the engine's API would take hours at 5,000,000 events or 1,000,000 sessions; the rows
//! are the ones the engine would write (same columns, same keys, heads that match the events).

use crate::prelude::*;
use crate::raw_sqlite::now_ms;
use crate::store_seam::create_schema;
use crate::util::AGENT;
use aware_store_pg::postgres;
use aware_store_pg::testing::PgCluster;

/// Where a scale point's store lives.
pub(crate) enum Db {
    Sqlite(PathBuf),
    Pg(String),
}

/// Hot watchers of the drain workload, each with [`HOT_TARGETS`] pending notices.
pub(crate) const HOT_WATCHERS: u64 = 200;
pub(crate) const HOT_TARGETS: u64 = 10;

impl Db {
    /// A fresh empty store with the schema: a file in `dir`, or a database of `cluster`.
    pub(crate) fn create(dir: &Path, name: &str, cluster: Option<&PgCluster>) -> Result<Db> {
        match cluster {
            None => {
                let path = dir.join(format!("{name}.db"));
                create_schema(&path, Durability::Normal)?;
                Ok(Db::Sqlite(path))
            }
            Some(c) => {
                let url = c
                    .database()
                    .map_err(|e| anyhow!("creating a PostgreSQL database: {e}"))?;
                // The schema is the store's: open and close it once.
                crate::store_seam::create_pg_schema(&url)?;
                Ok(Db::Pg(url))
            }
        }
    }

    /// A series `g(i)` of `0..n` as a CTE prefix, in this store's dialect.
    fn series(&self, n: u64) -> String {
        let last = n.saturating_sub(1);
        match self {
            Db::Sqlite(_) => format!(
                "WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < {last}) "
            ),
            Db::Pg(_) => format!("WITH g(i) AS (SELECT generate_series(0, {last})::bigint) "),
        }
    }

    /// Runs `statements` in one transaction; on PostgreSQL then `ANALYZE`, as autovacuum would
    /// soon after a load this size (without it the planner guesses from empty tables).
    fn run(&self, statements: &[String]) -> Result<()> {
        match self {
            Db::Sqlite(path) => {
                let conn = Connection::open(path)?;
                conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; BEGIN")?;
                for s in statements {
                    conn.execute_batch(s).with_context(|| s.clone())?;
                }
                conn.execute_batch("COMMIT; PRAGMA wal_checkpoint(TRUNCATE)")?;
                Ok(())
            }
            Db::Pg(url) => {
                let mut client = postgres::Client::connect(url, postgres::NoTls)?;
                let mut tx = client.transaction()?;
                for s in statements {
                    tx.batch_execute(s).with_context(|| s.clone())?;
                }
                tx.commit()?;
                client.batch_execute("VACUUM ANALYZE")?;
                Ok(())
            }
        }
    }

    /// `rows` human messages over `rows / 50` streams `agent:main:s<k>` (row r in stream
    /// r mod streams, so each stream's 50 events are spread over the whole table) and their heads.
    pub(crate) fn fill_events(&self, rows: u64) -> Result<u64> {
        let streams = (rows / 50).max(1);
        let now = now_ms();
        let g = self.series(rows);
        self.run(&[
            format!(
                "{g}INSERT INTO session_state_events (dedupe_key, session_key, session_id, agent_id, \
                 kind, actor_type, actor_id, run_id, occurred_at, summary, payload_json) \
                 SELECT NULL, 'agent:main:s' || (i % {streams}), NULL, '{AGENT}', \
                 'human_direct_message', 'human', 'operator', NULL, {now}, \
                 'human message via bench', NULL FROM g"
            ),
            format!(
                "INSERT INTO session_state_heads (session_key, agent_id, last_sequence, \
                 pruned_max_sequence, updated_at) SELECT session_key, agent_id, MAX(sequence), 0, \
                 {now} FROM session_state_events GROUP BY session_key, agent_id"
            ),
        ])?;
        Ok(streams)
    }

    /// `n` sessions `agent:main:w<i>` (updated at scattered times), each watching the next one
    /// with one pending cursor; plus [`HOT_WATCHERS`] sessions `agent:main:h<j>` with
    /// [`HOT_TARGETS`] pending cursors each (the drain workload).
    pub(crate) fn fill_sessions(&self, n: u64) -> Result<()> {
        let now = now_ms();
        let g = self.series(n);
        let hot = self.series(HOT_WATCHERS * HOT_TARGETS);
        let session = |key: &str, from: &str| {
            format!(
                "INSERT INTO sessions (session_key, agent_id, session_id, kind, label, \
                 parent_session_key, created_via, active_run_id, goal_text, goal_status, \
                 goal_updated_at, orphaned, created_at, updated_at) \
                 SELECT {key}, '{AGENT}', 'sid-' || {key}, 'other', NULL, NULL, 'api', NULL, NULL, \
                 NULL, NULL, 0, {now}, {now} - ((i * 7919) % {n}) FROM {from}"
            )
        };
        let cursor = |watcher: &str, target: &str, seq: &str| {
            format!(
                "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key, \
                 target_agent_id, last_seen_sequence, notified_sequence, material_sequence, muted, \
                 origin, notice_opened_at, created_at, updated_at) \
                 SELECT {watcher}, {target}, '{AGENT}', 0, {seq}, {seq}, 0, 'parent', {now}, {now}, \
                 {now} - ((i * 7919) % {n})"
            )
        };
        self.run(&[
            format!("{g}{}", session("'agent:main:w' || i", "g")),
            format!(
                "{g}{} FROM g",
                cursor(
                    "'agent:main:w' || i",
                    &format!("'agent:main:w' || ((i + 1) % {n})"),
                    "i + 1"
                )
            ),
            format!(
                "{hot}{}",
                session(
                    "'agent:main:h' || i",
                    &format!("g WHERE i < {HOT_WATCHERS}")
                )
            ),
            format!(
                "{hot}{} FROM g",
                cursor(
                    &format!("'agent:main:h' || (i % {HOT_WATCHERS})"),
                    &format!("'agent:main:w' || ((i * 7919) % {n})"),
                    "i + 1"
                )
            ),
        ])
    }
}
