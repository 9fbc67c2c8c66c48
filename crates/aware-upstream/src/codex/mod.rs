//! Codex CLI sessions (`catalogId = "codex"`): rollout files under `$CODEX_HOME/sessions`.
//!
//! - [`classify`]: the rollout row classifier (docs/codex-rows.md), pure.
//! - [`scan`]: the window scan with the Claude scanner's newline rule, pure.
//! - [`provider`]: [`provider::LocalCodex`], the catalog, adoption and check over local rollouts.

pub mod classify;
pub mod provider;
pub mod scan;

pub use provider::LocalCodex;
