//! The pure domain of aware: session keys, event kinds and privacy rules, cursor transitions,
//! notice text and context keys, wake coalescing and retention policy.
//!
//! Architecture invariant: this crate does no I/O, reads no clock and knows nothing about SQL,
//! HTTP, MCP or JSON field names of the wire protocol. Time is always passed in.

pub mod cursor;
pub mod event;
pub mod hex;
pub mod key;
pub mod notice;
pub mod path;
pub mod retention;
pub mod time;
pub mod wake;

pub use cursor::{CursorState, Origin};
pub use event::{ActorType, CompactEvent, EventKind, KindClass, StoredEvent};
pub use key::{AgentId, KeyError, SessionKey, SessionRef};
pub use retention::RetentionPolicy;
