//! The integration tests of `aware-upstream` in one binary (one link instead of one per file),
//! one module per topic. Select a module with its path (`cargo test -p aware-upstream --test it
//! monitor::`) and a scenario with its id (`cargo test -p aware-upstream --test it s137`).
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod codex_fixtures;
mod fixtures;
mod monitor;
