//! The integration tests of `aware` in one binary (one link instead of one per file), one
//! module per topic. Select a module with its path (`cargo test -p aware --test it
//! upstream_node::`) and a scenario with its id (`cargo test -p aware --test it s012`).
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test reads as one scenario, top to bottom: its steps share the state they check.
#![allow(clippy::too_many_lines)]

// Also reachable as `mod common;` from a test file of its own next to `it/`.
#[path = "../common/mod.rs"]
mod common;

mod bad_requests;
mod batch_failure;
mod cli;
mod cli_first_hour;
mod cli_ux;
mod cluster_key;
mod console;
mod crash_loop;
mod docs_runnable;
mod effects_order;
mod gateway_boundaries;
mod gemini;
mod hardening;
mod hook;
mod hook_and_init_boundaries;
mod hook_codex_wake;
mod hook_events;
mod http_smoke;
mod init;
mod load;
mod mcp;
mod messages;
mod metrics;
mod metrics_spec;
mod model_cluster;
mod model_http;
mod node_edge_and_roles;
mod outage;
mod preview;
mod scenarios_lifecycle_and_api;
mod scenarios_log_and_watchers;
mod scenarios_notices_wakes_retention;
mod security;
mod stalls;
mod tls;
mod tools_contract;
mod upstream_codex;
mod upstream_local;
mod upstream_node;
mod webhook_faults;
mod wire_types;
mod write_mode;
