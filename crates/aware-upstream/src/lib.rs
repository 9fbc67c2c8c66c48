//! Upstream awareness (spec 04): notice the human who types directly into an adopted Claude Code
//! session.
//!
//! - [`classify`]: the Claude row classifier (04 §9), pure.
//! - [`scan`]: the window scanner over transcript bytes (04 §8) and node items (04 §10), pure.
//! - [`provider`]: the catalog provider seam; [`local`]: local Claude Code transcripts;
//!   [`node`]: paired nodes, both ends of the protocol for the Claude and Codex catalogs
//!   (protocol types, the node's item builder and answers, the gateway's check and client).
//! - [`codex`]: Codex CLI rollouts (classifier, window scan, local provider).
//! - [`monitor`]: the tick on the engine clock (04 §7); [`exec`]: the bounded executor that
//!   provider calls run on.
//!
//! Architecture invariant: classification and scanning do no I/O and never panic on any input;
//! providers never write the store; only the monitor records, through the engine.

pub mod bigrow;
pub mod classify;
pub mod codex;
pub mod exec;
pub mod local;
pub mod monitor;
pub mod node;
mod probe;
pub mod provider;
pub mod scan;
