//! The system-event FIFO rules (02 §8.3), kept here rather than in a backend's SQL so every
//! store behaves the same: an entry equal to a queued one (same text, same context key) is not
//! queued again, and only the newest `FIFO_CAP` entries are kept.

use crate::Result;
use aware_core::notice::FIFO_CAP;
use aware_store::WriteTx;

/// Queues `text` unless an identical entry is queued; trims the FIFO to its cap. Returns the
/// new id, or `None` for a dedupe hit.
pub(crate) fn push(
    tx: &mut dyn WriteTx,
    key: &str,
    agent: &str,
    text: &str,
    context_key: Option<&str>,
    now: i64,
) -> Result<Option<i64>> {
    // The FIFO holds at most FIFO_CAP short lines, so reading it whole is cheap.
    let queued = tx.system_events(key, agent)?;
    if queued
        .iter()
        .any(|e| e.text == text && e.context_key.as_deref() == context_key)
    {
        return Ok(None);
    }
    let id = tx.fifo_insert(key, agent, text, context_key, now)?;
    let len = queued.len() + 1;
    if len > FIFO_CAP {
        // `system_events` is in ascending id order: the oldest come first.
        let oldest: Vec<i64> = queued.iter().take(len - FIFO_CAP).map(|e| e.id).collect();
        tx.fifo_delete(key, agent, &oldest)?;
    }
    Ok(Some(id))
}
