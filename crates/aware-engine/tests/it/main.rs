//! The integration tests of `aware-engine` in one binary (one link instead of one per file);
//! one module per topic. Test names keep the scenario ids (`s012_...`), so
//! `cargo test -p aware-engine --test it it:: s012` and `--test it scenarios_` still select them.

mod common;

mod bad_input;
mod concurrency;
mod console;
mod faults;
mod links;
mod model;
mod scenarios;
