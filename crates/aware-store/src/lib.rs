//! The storage boundary of aware and its SQLite implementation.
//!
//! The engine expresses every operation as a closure over a [`WriteTx`] (writes) or a
//! [`ReadTx`] (reads). The traits are the seam: they speak rows, not SQL, so another backend
//! (PostgreSQL) implements them without the engine or the core changing. [`SqliteStore`] runs
//! writes on one writer thread with group commit (spec 01 §8) and reads on a small pool.
//!
//! Architecture invariant: this crate makes no decisions of the spec (who is notified, what a
//! notice says); it stores and returns rows. Cursor states come from `aware_core::cursor`.

#[cfg(feature = "contract")]
pub mod contract;
mod error;
mod faults;
mod metrics;
mod rows;
mod sqlite;
mod store;
mod tx;

pub use error::StoreError;
pub use faults::FaultPlan;
pub use metrics::{StoreMetrics, COMMIT_BUCKETS_US, GROUP_BUCKETS};
pub use rows::*;
pub use sqlite::{Durability, SqliteStore, StoreOptions, SCHEMA_VERSION};
pub use store::{Completion, Store, StoreExt, StoreInfo, WriteOp};
pub use tx::{ReadTx, WriteTx};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
