//! Upstream awareness (spec 04): notice the human who types directly into an adopted Claude Code
//! session.
//!
//! - [`classify`]: the Claude row classifier (04 §9), pure.
//! - [`scan`]: the window scanner over transcript bytes (04 §8) and node items (04 §10), pure.
//!
//! Architecture invariant: classification and scanning do no I/O and never panic on any input.

pub mod classify;
pub mod scan;
