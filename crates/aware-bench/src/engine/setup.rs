//! Arguments, plan, sizes and engine helpers shared by the engine workloads.

use crate::prelude::*;
use crate::util::*;

/// Arguments of `aware-bench engine`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Print a JSON report of every figure and target on stdout (the text goes to stderr), for
    /// `aware-bench engine --compare A.json B.json`.
    #[arg(long)]
    pub json: bool,
    /// Events per append workload (W1, W2, W3); retained rows of W4 and W5; W6 sweeps
    /// events/5 pending cursors.
    #[arg(long, default_value_t = 50_000)]
    pub events: u64,
    /// Concurrent callers of W3.
    #[arg(long, default_value_t = 64)]
    pub writers: usize,
    /// `synchronous` of every workload. Default: normal, except full for W3.
    #[arg(long, value_enum)]
    pub durability: Option<BenchDurability>,
    /// Directory for the database files (a fresh temporary directory is made inside it and
    /// removed afterwards). Default: the system temporary directory.
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<PathBuf>,
    /// Run only these workloads, e.g. `--only W1,W3`.
    #[arg(long, value_delimiter = ',', value_name = "W1,W2,...")]
    pub only: Vec<String>,
    /// Divide every count by 10 (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Compare two reports written with `--json` (by `engine` or `http`): prints B / A
    /// per figure and workload, and the targets whose verdict changed. Runs nothing.
    #[arg(long, num_args = 2, value_names = ["A.json", "B.json"])]
    pub compare: Vec<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchDurability {
    Full,
    Normal,
}

impl From<BenchDurability> for Durability {
    fn from(d: BenchDurability) -> Self {
        match d {
            BenchDurability::Full => Durability::Full,
            BenchDurability::Normal => Durability::Normal,
        }
    }
}

pub(crate) const ALL: [&str; 7] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"];
/// Sessions (streams) of W1, W3 and W5 before `--quick`.
pub(crate) const SESSIONS: u64 = 1000;
/// Watchers of the one target of W2.
pub(crate) const W2_WATCHERS: usize = 10;
/// Calls per listSince measurement before `--quick`.
pub(crate) const READ_CALLS: usize = 2000;
/// Rows of the hot stream of W4 (read with a 200-event page).
pub(crate) const W4_HOT_ROWS: u64 = 1000;
pub(crate) const SUMMARY: &str = "human message via bench";
pub(crate) const ACTOR: &str = "operator";

pub(crate) struct Plan {
    pub(crate) scale: u64,
    pub(crate) events: u64,
    pub(crate) sessions: u64,
    pub(crate) writers: usize,
    pub(crate) durability: Option<Durability>,
    pub(crate) dir: PathBuf,
}

impl Plan {
    pub(crate) fn durability(&self, default: Durability) -> Durability {
        self.durability.unwrap_or(default)
    }
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

// ---------------------------------------------------------------------------------------------
// Engine helpers
// ---------------------------------------------------------------------------------------------

pub(crate) fn create(engine: &Engine, s: &SessionRef, parent: Option<&SessionRef>) -> Result<()> {
    let mut req = CreateSession::new(s.key.clone());
    if let Some(p) = parent {
        req = req.parent(p.key.clone());
    }
    engine.create_session(req)?;
    Ok(())
}

/// A child session and the key of its parent (its watcher).
pub(crate) type Pair = (SessionRef, String);

/// `n` parent/child pairs; the child's `child_spawned` event seeds the parent's cursor.
pub(crate) fn create_pairs(engine: &Engine, n: u64) -> Result<Vec<Pair>> {
    (0..n)
        .map(|i| {
            let parent = session_ref(&format!("agent:main:p{i}"))?;
            let child = session_ref(&format!("agent:main:c{i}"))?;
            create(engine, &parent, None)?;
            create(engine, &child, Some(&parent))?;
            Ok((child, parent.key.as_str().to_string()))
        })
        .collect()
}

/// Like [`create_pairs`], from `threads` threads so setup at `full` rides on group commit.
pub(crate) fn create_pairs_concurrent(
    engine: &Engine,
    n: u64,
    threads: usize,
) -> Result<Vec<Pair>> {
    let threads = threads.clamp(1, 16);
    let handles: Vec<Worker<(u64, Pair)>> = (0..threads)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in (t as u64..n).step_by(threads) {
                    let parent = session_ref(&format!("agent:main:p{i}"))?;
                    let child = session_ref(&format!("agent:main:c{i}"))?;
                    create(&engine, &parent, None)?;
                    create(&engine, &child, Some(&parent))?;
                    out.push((i, (child, parent.key.as_str().to_string())));
                }
                Ok(out)
            })
        })
        .collect();
    let mut all = join_all(handles)?;
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, p)| p).collect())
}

/// One `human_direct_message` from an operator, with the given producer-passed watchers.
pub(crate) fn append_hdm(
    engine: &Engine,
    target: &SessionRef,
    watchers: Vec<String>,
) -> Result<()> {
    let mut req = AppendRequest::new(
        target.clone(),
        EventKind::HumanDirectMessage,
        ActorType::Human,
    );
    req.actor_id = Some(ACTOR.into());
    req.summary = SUMMARY.into();
    req.watchers = watchers;
    match engine.append(req)? {
        AppendOutcome::Recorded(_) => Ok(()),
        other => bail!("append not recorded: {other:?}"),
    }
}
