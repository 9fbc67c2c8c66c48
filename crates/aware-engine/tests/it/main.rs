//! The integration tests of `aware-engine` in one binary (one link instead of one per file), one
//! module per topic. Select a module with its path (`cargo test -p aware-engine --test it
//! model::`) and a scenario with its id (`cargo test -p aware-engine --test it s012`).
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test reads as one scenario, top to bottom: its steps share the state they check.
#![allow(clippy::too_many_lines)]

// Also reachable as `mod common;` from a test file of its own next to `it/`.
#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod concurrency;
mod console;
mod faults;
mod links;
mod model;
mod scenarios;
