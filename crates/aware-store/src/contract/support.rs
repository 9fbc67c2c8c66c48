//! Helpers of the contract checks: typed writes and reads, and row builders.

use crate::rows::*;
use crate::store::{Store, StoreExt};
use crate::tx::{ReadTx, WriteTx};
use crate::Result;
use aware_core::{ActorType, CursorState, EventKind, Origin};

pub(super) fn write<R: Send + 'static>(
    store: &dyn Store,
    op: impl FnMut(&mut dyn WriteTx) -> Result<R> + Send + 'static,
) -> R {
    match store.write(op) {
        Ok(r) => r,
        Err(e) => panic!("write op failed: {e}"),
    }
}

pub(super) fn read<R>(store: &dyn Store, f: impl FnOnce(&dyn ReadTx) -> Result<R>) -> R {
    match store.read(f) {
        Ok(r) => r,
        Err(e) => panic!("read failed: {e}"),
    }
}

/// An event of stream (`key`, `agent`) at time `at`.
pub fn event(key: &str, agent: &str, at: i64) -> NewEvent {
    NewEvent {
        dedupe_key: None,
        session_key: key.into(),
        session_id: Some(format!("sid-{key}")),
        agent_id: agent.into(),
        kind: EventKind::HumanDirectMessage,
        actor_type: ActorType::Human,
        actor_id: Some("human-1".into()),
        run_id: None,
        occurred_at: at,
        summary: format!("event at {at}"),
        payload: None,
    }
}

pub(super) fn append(tx: &mut dyn WriteTx, key: &str, agent: &str, at: i64) -> Result<i64> {
    let seq = tx.insert_event(&event(key, agent, at))?;
    tx.upsert_head(key, agent, seq, at)?;
    Ok(seq)
}

pub(super) fn cursor(
    watcher: &str,
    target: &str,
    agent: &str,
    st: (i64, i64, i64),
    at: i64,
) -> CursorRow {
    let (last_seen, notified, material) = st;
    CursorRow {
        watcher: watcher.into(),
        target_key: target.into(),
        target_agent: agent.into(),
        state: CursorState {
            last_seen,
            notified,
            material,
            muted: false,
            origin: Origin::Watch,
            notice_opened_at: (notified > last_seen).then_some(at),
            updated_at: at,
        },
        created_at: at,
    }
}

pub(super) fn muted(mut c: CursorRow) -> CursorRow {
    c.state.muted = true;
    c.state.last_seen = c.state.material;
    c.state.notified = c.state.material;
    c.state.notice_opened_at = None;
    c
}

/// A session row of `agent` with `key`.
pub fn session(key: &str, agent: &str, updated_at: i64) -> SessionRow {
    SessionRow {
        key: key.into(),
        agent_id: agent.into(),
        session_id: format!("sid-{key}"),
        kind: "main".into(),
        label: None,
        parent_key: None,
        created_via: "api".into(),
        active_run_id: None,
        goal: None,
        orphaned: false,
        created_at: 1,
        updated_at,
        upstream: None,
    }
}

pub(super) fn turn(index: i64, role: &str, text: &str) -> TurnRow {
    TurnRow {
        id: format!("turn-{index}-{text}"),
        index,
        role: role.into(),
        text: text.into(),
        at: 100 + index,
        actor_type: ActorType::Human,
        actor_id: None,
        provenance_json: r#"{"kind":"human"}"#.into(),
        channel: None,
        run_id: None,
        origin: None,
        upstream_text: None,
        idempotency_key: None,
    }
}
