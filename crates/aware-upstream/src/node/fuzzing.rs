//! The fuzzing seam: the gateway side's pure steps over a paired node's answers, which
//! [`super::NodeClient`] runs after each HTTP request, for the `node_answers` cargo-fuzz target
//! in `fuzz/`. The generic check is private (its item trait names the private scanner), so each
//! catalog's instance is a plain function here. Not an API: nothing outside `fuzz/` may use it.

use super::check::{baseline, check_paged, NodeItem, Paged};
use super::protocol::{CodexItem, ItemsPage, NodeError};
use crate::provider::{Outcome, Probe};
use aware_engine::ImportTurn;
use serde_json::Value;
use std::time::Instant;

/// The paged check of a Claude thread (`check_paged::<Value>`).
pub fn check_paged_claude(
    probe: &Probe,
    now_ms: i64,
    until: Instant,
    fetch: impl FnMut(Option<&str>) -> Result<ItemsPage<Value>, NodeError>,
) -> Paged {
    check_paged(probe, now_ms, until, fetch)
}

/// The paged check of a Codex thread (`check_paged::<CodexItem>`).
pub fn check_paged_codex(
    probe: &Probe,
    now_ms: i64,
    until: Instant,
    fetch: impl FnMut(Option<&str>) -> Result<ItemsPage<CodexItem>, NodeError>,
) -> Paged {
    check_paged(probe, now_ms, until, fetch)
}

/// The link baseline of a Claude thread from its newest items.
pub fn baseline_claude(items: &[Value]) -> Option<Value> {
    baseline(items)
}

/// The link baseline of a Codex thread from its newest items.
pub fn baseline_codex(items: &[CodexItem]) -> Option<Value> {
    baseline(items)
}

/// A Claude item's uuid, as the check reads it (`None` when absent or empty).
pub fn claude_uuid(item: &Value) -> Option<&str> {
    NodeItem::uuid(item)
}

/// A Codex item's uuid, as the check reads it (`None` when empty).
pub fn codex_uuid(item: &CodexItem) -> Option<&str> {
    NodeItem::uuid(item)
}

/// The check of a Codex thread whose node does not know the marker.
pub fn codex_unknown_marker(probe: &Probe, newest: &[CodexItem], now_ms: i64) -> Option<Outcome> {
    <CodexItem as NodeItem>::unknown_marker(probe, newest, now_ms)
}

/// The history imported at adoption from a Codex thread's newest items.
pub fn codex_history(items: &[CodexItem]) -> Vec<ImportTurn> {
    <CodexItem as NodeItem>::history(items)
}
