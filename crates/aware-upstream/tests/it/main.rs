//! The integration tests of `aware-upstream` in one binary (one link instead of one per file);
//! one module per topic. Test names keep the scenario ids (`s012_...`), so
//! `cargo test -p aware-upstream --test it it:: s012` and `--test it scenarios_` still select them.

mod codex_fixtures;
mod fixtures;
mod monitor;
