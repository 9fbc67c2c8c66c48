//! The backend contract suite against PostgreSQL (a throw-away cluster, one database per test),
//! and the PostgreSQL-specific promises: schema versions, outages, passwords never shown.

use aware_store::Store;
use aware_store_pg::testing::PgCluster;
use aware_store_pg::{PgOptions, PgStore};

/// A fresh store on its own database of the shared test cluster.
struct Fixture {
    store: PgStore,
}

impl std::ops::Deref for Fixture {
    type Target = dyn Store;
    fn deref(&self) -> &Self::Target {
        &self.store
    }
}

fn fixture() -> Fixture {
    let url = PgCluster::shared().database().expect("test database");
    let store = PgStore::open(PgOptions::new(url)).expect("open");
    Fixture { store }
}

aware_store::contract_suite!(fixture);
