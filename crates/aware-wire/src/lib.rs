//! The typed wire format of aware's agent tools (docs/api.md §3) and of what a session is told
//! (drains, acknowledgements, wakes: `notices`) and the objects of the session routes (sessions,
//! turns, events, runs, cursors: `sessions`) and the catalog of adoptable threads (`catalog`), shared by the gateway (its tool list), the MCP
//! server (titles, hints, input and output schemas), the CLI and the hook (typed arguments and
//! answers) and the tests that check both sides agree.
//!
//! Each tool's name is spelled once ([`Tool::name`]); its arguments and its answer are serde
//! types, and the JSON schemas the gateway and the MCP server publish are generated from them
//! ([`Tool::input_schema`], [`Tool::output_schema`]), so a renamed field is one edit here and
//! the compiler finds every reader. The gateway keeps its own field-by-field parser of the
//! arguments, because its error messages (what was wrong, what is accepted) are part of the
//! API; `tests/schemas.rs` checks the generated schemas against docs/api.md's tables, and the
//! `it` suite's `wire_types` test checks that every answer of a real gateway reads into these
//! types and writes back to the same JSON (decision D49).

pub mod catalog;
pub mod notices;
pub mod sessions;
pub mod tools;

pub use notices::{
    AckAnswer, AckArgs, AckNotice, DrainAnswer, NoticeItem, SystemEventItem, Wake, WakeReason,
    WakeTarget,
};

pub use tools::{
    HistoryMessage, SendStatus, SessionGoal, SessionKind, SessionRow, SessionStatusArgs,
    SessionStatusResult, SessionsHistoryArgs, SessionsHistoryResult, SessionsListArgs,
    SessionsListResult, SessionsSendArgs, SessionsSendResult, SessionsSpawnArgs,
    SessionsSpawnResult, SessionsUnwatchArgs, SessionsUnwatchResult, StateChangeEvent,
    StateChanges, Tool, ToolHints,
};
