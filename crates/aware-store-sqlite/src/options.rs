//! Store options: durability, reader count, and the writer's limits.

use std::path::PathBuf;
use std::time::Duration;

/// Schema version kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 1;
/// Most ops one commit takes (01 §8).
pub(super) const MAX_GROUP: usize = 256;
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// When a committed transaction survives what (01 §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: survives process crashes, OS crashes and power loss; a sequence once
    /// answered is never issued again.
    #[default]
    Full,
    /// `synchronous=NORMAL`: survives process crashes only; after an OS crash or power loss the
    /// last commits may roll back and their sequences may be issued again.
    Normal,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Full => "full",
            Durability::Normal => "normal",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "full" => Some(Durability::Full),
            "normal" => Some(Durability::Normal),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub path: PathBuf,
    pub durability: Durability,
    /// Reader connections (2..=4 is sensible).
    pub readers: usize,
}

impl StoreOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreOptions {
            path: path.into(),
            durability: Durability::Full,
            readers: 3,
        }
    }
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
}
