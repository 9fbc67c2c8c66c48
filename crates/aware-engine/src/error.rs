use aware_core::KeyError;
use aware_store::StoreError;

/// Errors of engine operations. Each has one [`ErrorKind`] (the edge maps kinds to its own
/// statuses and codes); messages say what was wrong and what is accepted.
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

/// What kind of failure an [`EngineError`] is, without any protocol's codes: the gateway maps
/// each kind to its HTTP status and error code, another front end may map it otherwise. Not
/// `non_exhaustive`, so a new kind (a backend's own failure) is a compile error at every
/// mapping until it is given one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidKey,
    InvalidArgument,
    SessionNotFound,
    RunNotFound,
    RunActive,
    RunConflict,
    LabelTaken,
    PayloadTooLarge,
    /// The store failed the op (cannot open, commit failed, writer gone, a read error).
    StoreUnavailable,
}

impl ErrorKind {
    /// A stable snake_case name for logs and tests. It is not a protocol code: the gateway's
    /// error codes come from its own mapping (`aware-gateway/src/http/error.rs`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidKey => "invalid_session_key",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::SessionNotFound => "session_not_found",
            ErrorKind::RunNotFound => "run_not_found",
            ErrorKind::RunActive => "run_active",
            ErrorKind::RunConflict => "run_conflict",
            ErrorKind::LabelTaken => "label_taken",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::StoreUnavailable => "store_unavailable",
        }
    }
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::InvalidKey(_) => ErrorKind::InvalidKey,
            EngineError::InvalidArgument(_) => ErrorKind::InvalidArgument,
            EngineError::SessionNotFound(_) => ErrorKind::SessionNotFound,
            EngineError::RunNotFound(_) => ErrorKind::RunNotFound,
            EngineError::RunActive(_) => ErrorKind::RunActive,
            EngineError::RunConflict(_) => ErrorKind::RunConflict,
            EngineError::LabelTaken(_) => ErrorKind::LabelTaken,
            EngineError::PayloadTooLarge(_) => ErrorKind::PayloadTooLarge,
            EngineError::Store(_) => ErrorKind::StoreUnavailable,
        }
    }

    /// Shorthand for `self.kind().name()` (logs and tests).
    pub fn kind_name(&self) -> &'static str {
        self.kind().name()
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        EngineError::InvalidArgument(msg.into())
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
