//! The backend contract suite against SQLite.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_store::Store;
use aware_store_sqlite::{SqliteStore, StoreOptions};

/// A fresh store on a temporary directory, removed when dropped.
struct Fixture {
    store: SqliteStore,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Fixture {
    type Target = dyn Store;
    fn deref(&self) -> &Self::Target {
        &self.store
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).expect("open");
    Fixture { store, _dir: dir }
}

aware_store::contract_suite!(fixture);
