//! Lookups and input checks shared by the operation modules (sessions, turns, spawn, watch,
//! links). It imports no operation module, so those modules never import each other for them.

use crate::{EngineError, Result};
use aware_core::{AgentId, SessionKey, SessionRef};
use aware_store::{ReadTx, SessionRow};

/// Longest turn or message text (03 §5.1).
pub const MAX_TEXT_BYTES: usize = 256 * 1024;
pub const MAX_GOAL_CHARS: usize = 4000;
pub const MAX_LABEL_CHARS: usize = 128;

pub(crate) fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The parent of a session as a reference: a bare parent key refers to the child's own agent.
pub(crate) fn parent_ref(row: &SessionRow) -> Option<SessionRef> {
    let key = SessionKey::parse(row.parent_key.as_deref()?).ok()?;
    let own = AgentId::parse(&row.agent_id).ok()?;
    Some(SessionRef::with_default(key, &own))
}

/// The producer-passed watcher list of a session: its parent, if any.
pub(crate) fn parent_watchers(row: &SessionRow) -> Vec<String> {
    parent_ref(row)
        .map(|p| vec![p.key.as_str().to_string()])
        .unwrap_or_default()
}

pub(crate) fn load_session(tx: &dyn ReadTx, s: &SessionRef) -> Result<SessionRow> {
    tx.session(s.key.as_str(), s.agent.as_str())?
        .ok_or_else(|| EngineError::SessionNotFound(s.key.as_str().to_string()))
}

pub(crate) fn validate_run_id(run_id: &str) -> Result<()> {
    let ok = !run_id.is_empty()
        && run_id.len() <= 128
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::invalid(
            "runId must be 1..=128 characters of [A-Za-z0-9._:-]",
        ))
    }
}

pub(crate) fn validate_operation_id(op: &str) -> Result<()> {
    let ok = !op.is_empty()
        && op.len() <= 128
        && op
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::invalid(
            "operationId must be 1..=128 characters of [A-Za-z0-9._-]",
        ))
    }
}

pub(crate) fn validate_label(label: &str) -> Result<()> {
    let n = label.chars().count();
    if n == 0 || n > MAX_LABEL_CHARS {
        return Err(EngineError::invalid("label must be 1..=128 characters"));
    }
    if label.contains('\0') {
        return Err(EngineError::invalid("label must not contain U+0000 (NUL)"));
    }
    if aware_core::key::has_invisible_format(label) {
        return Err(EngineError::invalid(
            "label must not contain bidirectional or zero-width formatting characters",
        ));
    }
    Ok(())
}

pub(crate) fn check_text(field: &str, text: &str) -> Result<()> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(EngineError::PayloadTooLarge(format!(
            "{field} must be at most {MAX_TEXT_BYTES} bytes (got {})",
            text.len()
        )));
    }
    // PostgreSQL's text type cannot hold U+0000. Refused on every backend, so a request means
    // the same on SQLite and PostgreSQL (on PostgreSQL it used to fail the commit with a 503).
    if text.contains('\0') {
        return Err(EngineError::invalid(format!(
            "{field} must not contain U+0000 (NUL)"
        )));
    }
    Ok(())
}

/// Imported transcript text (adoption history) with U+0000 replaced by U+FFFD: a hostile or
/// damaged transcript must not stop an import, and PostgreSQL cannot store the NUL.
pub(crate) fn without_nul(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}
