//! The engine world and the scenarios' names, from `aware-testkit` (one copy for every crate).
#![allow(unused_imports)]

pub use aware_testkit::engine::*;
