//! The engine world of the scenario tests: a real SQLite file in a temp dir, a manual clock at
//! [`T0`], the scenario server's defaults, and the scenarios' verbs (hdm, watch, drain, ...).

pub use crate::spec::*;
use aware_core::{AgentId, SessionKey, SessionRef};
use aware_engine::*;
use aware_store::StoreExt;
pub use aware_store_sqlite::{Durability, SqliteStore, StoreOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Opens a SQLite store at `db` and the engine on it, as `aware serve` does on SQLite; the
/// store handle comes back too, for SQLite-only test seams.
pub fn open_sqlite(
    db: &Path,
    durability: Durability,
    config: EngineConfig,
    clock: Arc<dyn Clock>,
) -> Result<(SqliteStore, Engine)> {
    let store = SqliteStore::open(StoreOptions::new(db).durability(durability))?;
    let engine = Engine::open(Arc::new(store.clone()), config, clock)?;
    Ok((store, engine))
}

/// [`open_sqlite`] without the store handle.
pub fn open_sqlite_engine(
    db: &Path,
    durability: Durability,
    config: EngineConfig,
    clock: Arc<dyn Clock>,
) -> Result<Engine> {
    open_sqlite(db, durability, config, clock).map(|(_, engine)| engine)
}
impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub engine: Engine,
    pub config: EngineConfig,
    /// The database file and how the store was opened: a restart opens it the same way.
    pub db: PathBuf,
    pub durability: Durability,
    /// The engine's store, for SQLite-only test seams (`set_writer_query_only`, ...).
    pub sqlite: SqliteStore,
}

pub fn key(s: &str) -> SessionKey {
    SessionKey::parse(s).expect("valid key")
}

pub fn sref(s: &str) -> SessionRef {
    let k = key(s);
    let agent = k
        .qualified_agent()
        .unwrap_or_else(|| AgentId::parse("main").unwrap());
    SessionRef { key: k, agent }
}

pub fn sref_of(s: &str, agent: &str) -> SessionRef {
    SessionRef {
        key: key(s),
        agent: AgentId::parse(agent).unwrap(),
    }
}

impl World {
    /// The scenario server's defaults: notify_on_create off, long prune interval.
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    pub fn with(tweak: impl FnOnce(&mut EngineConfig)) -> Self {
        Self::with_durability(Durability::Full, tweak)
    }

    pub fn with_durability(durability: Durability, tweak: impl FnOnce(&mut EngineConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let mut config = EngineConfig::new();
        config.notify_on_create = false;
        config.retention.prune_interval_secs = 31_536_000;
        tweak(&mut config);
        let clock = Arc::new(ManualClock::new(T0));
        let (sqlite, engine) = open_sqlite(&db, durability, config.clone(), clock.clone()).unwrap();
        engine.start().unwrap();
        World {
            dir,
            clock,
            engine,
            config,
            db,
            durability,
            sqlite,
        }
    }

    /// A second engine on the world's file, opened as the first was (not started).
    pub fn reopen(&self) -> Engine {
        open_sqlite_engine(
            &self.db,
            self.durability,
            self.config.clone(),
            self.clock.clone(),
        )
        .unwrap()
    }

    /// Stops the engine and opens it again on the same file (a graceful restart).
    pub fn restart(&mut self) {
        self.engine.close();
        let (sqlite, engine) = open_sqlite(
            &self.db,
            self.durability,
            self.config.clone(),
            self.clock.clone(),
        )
        .unwrap();
        (self.sqlite, self.engine) = (sqlite, engine);
        self.engine.start().unwrap();
    }

    pub fn set_time(&self, t: i64) {
        self.clock.set(t).unwrap();
        self.engine.run_timers().unwrap();
    }

    pub fn create(&self, s: &str) -> Session {
        self.engine
            .create_session(CreateSession::new(key(s)))
            .unwrap()
            .1
    }

    pub fn create_child(&self, s: &str, parent: &str) -> Session {
        self.engine
            .create_session(CreateSession::new(key(s)).parent(key(parent)))
            .unwrap()
            .1
    }

    /// F: W, then C with parent W (sequence 1).
    pub fn family() -> Self {
        let w = Self::new();
        w.create(W);
        w.create_child(C, W);
        w
    }

    /// hdm(S): a human user turn with channel telegram.
    pub fn hdm(&self, s: &str) -> TurnOutcome {
        self.engine
            .post_turn(&sref(s), NewTurn::user("hello").channel("telegram"))
            .unwrap()
    }

    pub fn hdm_seq(&self, s: &str) -> i64 {
        self.hdm(s).event.expect("event recorded").sequence
    }

    pub fn cursor(&self, w: &str, t: &str) -> Option<aware_store::CursorRow> {
        self.engine
            .watches(&sref(w))
            .unwrap()
            .into_iter()
            .find(|c| c.target_key == t)
    }

    pub fn triple(&self, w: &str, t: &str) -> (i64, i64, i64) {
        triple(&self.cursor(w, t).expect("cursor exists").state)
    }

    pub fn pending(&self, w: &str) -> Drain {
        self.engine.peek(&sref(w)).unwrap()
    }

    pub fn notice_texts(&self, w: &str) -> Vec<String> {
        self.pending(w)
            .notices
            .into_iter()
            .map(|n| n.text)
            .collect()
    }

    pub fn drain(&self, w: &str) -> Drain {
        self.engine.drain(&sref(w)).unwrap()
    }

    pub fn watch(&self, w: &str, t: &str) -> aware_store::CursorRow {
        self.engine.register_watch(&sref(w), &sref(t)).unwrap()
    }

    pub fn changes(&self, s: &str, after: i64) -> StateChanges {
        self.engine.list_since(&sref(s), after, 200).unwrap()
    }

    pub fn seqs(&self, s: &str, after: i64) -> Vec<i64> {
        self.changes(s, after)
            .events
            .iter()
            .map(|e| e.sequence)
            .collect()
    }

    pub fn end_run(&self, s: &str, run: &str, outcome: RunOutcome) -> RunEnd {
        let r = sref(s);
        if self
            .engine
            .store()
            .read(|tx| tx.run(run))
            .unwrap()
            .is_none()
        {
            self.engine.start_run(&r, Some(run.into()), None).unwrap();
        }
        self.engine.end_run(&r, run, outcome).unwrap()
    }
}
