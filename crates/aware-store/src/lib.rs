//! The storage boundary of aware.
//!
//! The engine expresses every operation as a closure over a [`WriteTx`] (writes) or a
//! [`ReadTx`] (reads). The traits are the seam: they speak rows, not SQL, so each backend
//! (`aware-store-sqlite`, `aware-store-pg`) implements them without the engine or the core
//! changing. This crate names no database driver.
//!
//! Architecture invariant: this crate makes no decisions of the spec (who is notified, what a
//! notice says); it stores and returns rows. Cursor states come from `aware_core::cursor`.

#[cfg(feature = "contract")]
pub mod contract;
pub mod dump;
mod error;
mod faults;
mod metrics;
pub mod migrate;
pub mod rows;
mod store;
mod tx;

pub use error::StoreError;
pub use faults::FaultPlan;
pub use metrics::{StoreMetrics, COMMIT_BUCKETS_US, GROUP_BUCKETS};
pub use rows::*;
pub use store::{Capabilities, Completion, Store, StoreExt, StoreInfo, WriteOp};
pub use tx::{ReadTx, WriteTx};

/// Creates a directory (and its parents) readable by its owner only: a data dir holds the hub's
/// state and must not be readable by other local users whatever the umask. `aware serve` and
/// `aware migrate --to DIR` both create data dirs through it.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
