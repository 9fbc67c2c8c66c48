use aware_core::KeyError;
use aware_store::StoreError;

/// Errors of engine operations. Each maps to one HTTP status and `code` at the edge; messages
/// say what was wrong and what is accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("{0}")]
    InvalidKey(#[from] KeyError),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("session {0} does not exist")]
    SessionNotFound(String),
    #[error("run {0:?} does not exist")]
    RunNotFound(String),
    #[error("session {0} has an active run")]
    RunActive(String),
    #[error("{0}")]
    RunConflict(String),
    #[error("label {0:?} is already used by another session of this agent")]
    LabelTaken(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("store unavailable: {0}")]
    Store(#[from] StoreError),
}

impl EngineError {
    /// The stable error code of the HTTP API (03 §5.1).
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::InvalidKey(_) => "invalid_session_key",
            EngineError::InvalidArgument(_) => "invalid_argument",
            EngineError::SessionNotFound(_) => "session_not_found",
            EngineError::RunNotFound(_) => "run_not_found",
            EngineError::RunActive(_) => "run_active",
            EngineError::RunConflict(_) => "run_conflict",
            EngineError::LabelTaken(_) => "label_taken",
            EngineError::PayloadTooLarge(_) => "payload_too_large",
            EngineError::Store(_) => "store_unavailable",
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        EngineError::InvalidArgument(msg.into())
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
