//! The black-box harness (real `aware serve` gateways on loopback) and the scenarios' names,
//! from `aware-testkit` (one copy for every crate).
#![allow(dead_code, unused_imports)]

pub use aware_testkit::server::*;
pub use aware_testkit::wakes::*;

/// The `aware` binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_aware")
}
