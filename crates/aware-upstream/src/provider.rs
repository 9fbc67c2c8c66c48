//! The catalog provider seam (04 §1–§2): one trait, implemented by the local Claude Code
//! transcripts, the local Codex rollouts, and a paired node's client once per catalog it serves.

use aware_engine::ImportTurn;
use serde_json::Value;

/// One request to a provider: "has anything happened after this marker?".
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub session_key: String,
    pub agent_id: String,
    pub host_id: String,
    pub thread_id: String,
    pub upstream_kind: String,
    pub upstream_ref: Value,
    pub marker: Value,
    /// Normalised texts of the session's 10 newest non-imported user turns (04 §6).
    pub own_recent_user_texts: Vec<String>,
}

/// A provider's answer for one probe; "no outcome" is simply absent.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Activity {
        session_key: String,
        human_turns: u32,
        next_marker: Value,
        occurred_at: Option<i64>,
        dedupe_id: Option<String>,
        rebased: bool,
    },
    Missing {
        session_key: String,
    },
}

impl Outcome {
    /// The marker moves to `next_marker` and nothing is counted: the source was rewritten or
    /// shrank below the old marker (04 §10 rebase).
    pub fn rebase(session_key: &str, next_marker: Value) -> Outcome {
        Outcome::Activity {
            session_key: session_key.to_string(),
            human_turns: 0,
            next_marker,
            occurred_at: None,
            dedupe_id: None,
            rebased: true,
        }
    }

    pub fn session_key(&self) -> &str {
        match self {
            Outcome::Activity { session_key, .. } | Outcome::Missing { session_key } => session_key,
        }
    }
}

/// A browsable thread (not a signal-log event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogItem {
    pub thread_id: String,
    pub updated_at: i64,
    pub size_bytes: Option<u64>,
    pub cwd: Option<String>,
    pub title: Option<String>,
}

/// What adoption needs from a provider about one thread.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadInfo {
    pub upstream_kind: String,
    pub upstream_ref: Value,
    /// The link's starting marker; `None` declines the link (04 §3 step 6).
    pub baseline: Option<Value>,
    /// Bounded history, oldest first (only read when asked for).
    pub history: Vec<ImportTurn>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    #[error("transcript unavailable")]
    ThreadNotFound,
    #[error("node unavailable: {0}")]
    Unavailable(String),
    #[error("cursor is invalid")]
    InvalidCursor,
    #[error("{0}")]
    Io(String),
}

/// A catalog provider. Calls are blocking; the monitor bounds each one with a timeout.
pub trait Provider: Send + Sync + 'static {
    /// `gateway:local` or `node:<id>`.
    fn host_id(&self) -> String;
    /// The session catalog this provider serves (`claude`, `codex`); links and probes are
    /// routed to a provider by catalog and host.
    fn catalog_id(&self) -> &'static str {
        "claude"
    }
    /// Catalog page, newest first, with an opaque cursor for the next page.
    fn list(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<CatalogItem>, Option<String>), ProviderError>;
    /// Thread details for adoption; `with_history` also reads the bounded history.
    fn open_thread(&self, thread_id: &str, with_history: bool)
        -> Result<ThreadInfo, ProviderError>;
    /// Checks a batch of probes; an error for one probe never affects the others.
    fn check(&self, probes: &[Probe]) -> Result<Vec<Outcome>, ProviderError>;
}
