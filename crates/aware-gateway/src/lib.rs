//! The aware gateway: the HTTP/JSON API of 03 §5, the agent tools of 03 §6, wakes (SSE and
//! webhooks, 02 §10), Prometheus metrics and the test-mode admin routes.
//!
//! Architecture invariant: handlers only translate between the wire and engine requests; every
//! behaviour lives in `aware-engine`. Wire JSON is written by hand in `wire/`.
//!
//! Layers (no module imports one above it; `scripts/modcycles.py` checks there are no cycles):
//! - the lower layer: `config`, `error`, `body`, `edge` (host, origin, tokens), `request`
//!   (extraction), `access` (authorization and visibility), `state`, `wire` (all response
//!   JSON), `routes` (the typed route table), `http_stats`, `lanes`, `health` (probes), `conn`,
//!   `streams` (caps on long-lived streams);
//! - one handler module per resource: `sessions`, `turns`, `notices`, `watches`, `tools`,
//!   `wakes`, `catalog`, `admin`, `metrics`, `status` (`/health`), `console`;
//! - on top: `dispatch` (edge checks, route, body, then the handler) and `server` (start-up,
//!   timers, shutdown). `node_server` is the paired node's own small service.
//!
//! `fuzzing` (hidden) re-exports the request parsers for the fuzz targets in `fuzz/`; it adds no
//! code of its own.

mod access;
mod admin;
mod body;
mod catalog;
mod cluster;
pub mod config;
mod conn;
mod console;
mod dispatch;
mod edge;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod http_stats;
mod lanes;
mod metrics;
mod node_server;
mod notices;
mod probes;
mod request;
mod routes;
mod server;
mod sessions;
mod state;
mod streams;
pub mod tools;
mod turns;
mod wakes;
mod watches;
mod webhook;
mod wire;

pub use config::{GatewayConfig, Overrides};
pub use error::ApiError;
pub use node_server::{run_node, NodeServerConfig};
pub use server::{check_bind_policy, create_private_dir, run, RunError};
