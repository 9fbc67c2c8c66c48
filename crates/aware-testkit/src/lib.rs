//! Test setup shared by the workspace's integration tests (a dev-dependency only).
//!
//! - [`spec`]: the constants and names of the scenarios' conventions (T0, the named sessions,
//!   the NT notice text), written once.
//! - [`engine`]: [`engine::World`], an engine on a real SQLite file with a manual clock.
//! - [`server`]: [`server::Server`], real `aware serve --test-clock` gateways on loopback, and
//!   [`server::Wakes`], a `GET /v1/wakes` subscription.
//! - [`rng`]: the seeded generator of the randomised tests.
//! - [`transcript`]: builders of Claude Code transcript rows and the keys derived from them.

pub mod engine;
pub mod model;
pub mod options;
pub mod rng;
pub mod server;
pub mod spec;
pub mod transcript;
pub mod wakes;
