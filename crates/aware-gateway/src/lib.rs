//! The aware gateway: the HTTP/JSON API of 03 §5, the agent tools of 03 §6, wakes (SSE and
//! webhooks, 02 §10), Prometheus metrics and the test-mode admin routes.
//!
//! Architecture invariant: handlers only translate between the wire and engine requests; every
//! behaviour lives in `aware-engine`. Wire JSON is written by hand in `wire/`.
//!
//! Folders by layer (no module imports one above it; `scripts/modcycles.py` checks there are
//! no cycles), with `config`, `state` and `wire` (all response JSON) beneath them all:
//! - `http/`: connections, the edge checks (host, origin, tokens), the typed route table,
//!   strict bodies, extraction, authorization and visibility, errors, stream caps, request
//!   counters; on top `dispatch` (edge checks, route, body, then the handler) and `server`
//!   (start-up, timers, shutdown);
//! - `api/`: one handler module per resource, the agent tools, wakes (SSE) and webhooks;
//! - `ops/`: `/health` and its probes, `/metrics`, the test-mode admin routes, the cluster.
//!
//! `node_server` is the paired node's own small service.
//! `fuzzing` (hidden) re-exports the request parsers for the fuzz targets in `fuzz/`; it adds no
//! code of its own.

mod api;
pub mod config;
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod node_server;
mod ops;
mod state;
mod wire;

pub use api::tools;
pub use config::{GatewayConfig, Overrides};
pub use http::error::ApiError;
pub use http::server::{check_bind_policy, create_private_dir, run, RunError};
pub use node_server::{run_node, NodeServerConfig};
