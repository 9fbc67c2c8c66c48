//! The aware gateway: the HTTP/JSON API of 03 §5, the agent tools of 03 §6, wakes (SSE and
//! webhooks, 02 §10), Prometheus metrics and the test-mode admin routes.
//!
//! Architecture invariant: handlers only translate between the wire and engine requests; every
//! behaviour lives in `aware-engine`. Wire JSON is written by hand in `wire.rs`.

mod admin;
mod body;
mod catalog;
pub mod config;
mod conn;
mod console;
mod edge;
mod error;
mod health;
mod metrics;
mod node_server;
mod routes;
mod server;
pub mod tools;
mod wakes;
mod wire;

pub use config::{GatewayConfig, Overrides};
pub use error::ApiError;
pub use node_server::{run_node, NodeServerConfig};
pub use server::{check_bind_policy, create_private_dir, run, RunError};
