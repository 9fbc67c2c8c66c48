//! SQLite implementation: schema, the writer (leader-follower group commit with a writer
//! thread), the reader pool, and the row primitives of [`ReadTx`]/[`WriteTx`].

mod console;
mod handle;
mod mapping;
mod options;
mod read;
mod schema;
mod sqltx;
#[cfg(test)]
mod tests;
mod write;
mod writer;

pub use handle::SqliteStore;
pub use options::{Durability, StoreOptions, SCHEMA_VERSION};
