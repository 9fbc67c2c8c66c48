//! Reconciliation reads (01 §10): version, versions, listSince. Failures degrade (01 §12).

use crate::types::StateChanges;
use crate::{Engine, EngineError, EngineMetrics, Result};
use aware_core::SessionRef;
use aware_store::StoreExt;

/// The largest `limit` of a `listSince` page.
pub const MAX_PAGE: u32 = 200;

impl Engine {
    pub(crate) fn read_failed(&self, what: &str, e: &dyn std::fmt::Display) {
        tracing::warn!(event = "read_failed", read = what, error = %e, "signal-log read failed");
        EngineMetrics::inc(&self.inner.metrics.read_failures, 1);
    }

    /// The stream's head, or 0 (also when the read fails).
    pub fn version(&self, s: &SessionRef) -> i64 {
        match self
            .inner
            .store
            .read_as(|tx| tx.head(s.key.as_str(), s.agent.as_str()))
        {
            Ok(h) => h.map_or(0, |h| h.last_sequence),
            Err(e) => {
                self.read_failed("version", &e);
                0
            }
        }
    }

    /// Heads of many streams in one snapshot; an empty map when the read fails.
    pub fn versions(&self, refs: &[SessionRef]) -> std::collections::HashMap<SessionRef, i64> {
        let pairs: Vec<(String, String)> = refs
            .iter()
            .map(|r| (r.key.as_str().to_string(), r.agent.as_str().to_string()))
            .collect();
        match self.inner.store.read_as(|tx| tx.heads(&pairs)) {
            Ok(heads) => refs
                .iter()
                .cloned()
                .zip(heads.into_iter().map(|h| h.map_or(0, |h| h.last_sequence)))
                .collect(),
            Err(e) => {
                self.read_failed("versions", &e);
                Default::default()
            }
        }
    }

    /// Checks `changesSince`/`limit` as the API does (03 §6.2).
    pub fn validate_page(after: i64, limit: u32) -> Result<()> {
        if after < 0 {
            return Err(EngineError::invalid(
                "changesSince must be a non-negative integer",
            ));
        }
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(EngineError::invalid(
                "limit must be an integer between 1 and 200",
            ));
        }
        Ok(())
    }

    /// The exact delta of a stream after `after` (01 §10). Never touches a cursor. A failed read
    /// degrades to the empty page.
    pub fn list_since(&self, s: &SessionRef, after: i64, limit: u32) -> Result<StateChanges> {
        Self::validate_page(after, limit)?;
        // One statement (events, head and earliest sequence), so one snapshot without
        // BEGIN/COMMIT; `limit + 1` rows say whether the page is truncated.
        let page = self
            .inner
            .store
            .state_page(s.key.as_str(), s.agent.as_str(), after, limit + 1)
            .map(|mut p| {
                let truncated = p.events.len() > limit as usize;
                p.events.truncate(limit as usize);
                let earliest = match p.earliest {
                    Some(seq) => seq,
                    None => p
                        .head
                        .filter(|h| h.last_sequence > 0)
                        .map_or(0, |h| h.last_sequence + 1),
                };
                StateChanges {
                    events: p.events,
                    truncated,
                    earliest_available_sequence: earliest,
                    history_gap: p.head.is_some_and(|h| after < h.pruned_max_sequence),
                }
            });
        Ok(page.unwrap_or_else(|e| {
            self.read_failed("listSince", &e);
            StateChanges::default()
        }))
    }
}
