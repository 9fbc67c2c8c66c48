//! Upstream awareness (spec 04): notice the human who types directly into an adopted Claude Code
//! session.
//!
//! - [`claude`]: Claude Code: the row classifier (04 §9) and the window scanner over transcript
//!   bytes (04 §8) and node items (04 §10), both pure, and the local transcripts' provider. The
//!   row class, the window input and output and the safe file reads live there too and
//!   [`codex`] uses them.
//! - [`provider`]: the catalog provider seam;
//!   [`node`]: paired nodes, both ends of the protocol for the Claude and Codex catalogs
//!   (protocol types, the node's item builder and answers, the gateway's check and client).
//! - [`codex`]: Codex CLI rollouts (classifier, window scan, local provider).
//! - [`monitor`]: the tick on the engine clock (04 §7); [`exec`]: the bounded executor that
//!   provider calls run on.
//!
//! Architecture invariant: classification and scanning do no I/O and never panic on any input;
//! providers never write the store; only the monitor records, through the engine.

pub mod bigrow;
pub mod claude;
pub mod codex;
pub mod exec;
pub mod monitor;
pub mod node;
pub mod provider;
