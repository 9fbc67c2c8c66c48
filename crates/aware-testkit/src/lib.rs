//! Test setup shared by the workspace's integration tests (a dev-dependency only).
//!
//! - [`spec`]: the constants and names of the scenarios' conventions (T0, the named sessions,
//!   the NT notice text), written once.
//! - [`engine`]: [`engine::World`], an engine on a real SQLite file with a manual clock.
//! - [`server`]: [`server::Server`], real `aware serve --test-clock` gateways on loopback, and
//!   [`server::Wakes`], a `GET /v1/wakes` subscription.
//! - [`rng`]: the seeded generator of the randomised tests.
//! - [`transcript`]: builders of Claude Code transcript rows and the keys derived from them.
//! - [`model_server`]: a scripted local model server (Anthropic Messages and OpenAI Responses,
//!   streamed) for the real agent CLIs; [`agent_cli`]: runners for those CLIs (pinned in
//!   `clients/agent-clis`) in a fresh `$HOME`, with a deadline, headless or under tmux.
//! - [`fault_proxy`]: a loopback TCP proxy that blackholes, delays, resets or half-opens the
//!   path to PostgreSQL at run time (the network fault tests of the cluster).
// Test support only (a dev-dependency): a panic is a test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The SQLite driver, for tests that read a gateway's `state.db` with raw SQL: the scans that no
/// message text reached the log, and rows no API shows. Production code reaches SQLite only
/// through `aware-store-sqlite`.
pub use rusqlite;

pub mod agent_cli;
pub mod engine;
pub mod fault_proxy;
pub mod model;
pub mod model_contract;
pub mod model_runner;
pub mod model_server;
pub mod options;
pub mod rng;
mod scenario;
pub mod server;
pub mod spec;
pub mod transcript;
pub mod wakes;
