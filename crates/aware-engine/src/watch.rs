//! Registration, unwatch, drain/peek/ack and the system-event FIFO (02 §7–§9).

use crate::lookup::{load_session, parent_ref};
use crate::types::*;
use crate::{Ctx, Engine, EngineError, Result};
use aware_core::notice::{decode_context_key, render_prompt, SystemEventLine};
use aware_core::{cursor, SessionRef};
use aware_store::StoreExt;
use aware_store::{CursorRow, ReadTx, WriteTx};

/// Registration inside an op (02 §7). Visibility is checked by the caller's surface.
pub(crate) fn register_in(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    watcher: &SessionRef,
    target: &SessionRef,
) -> Result<CursorRow> {
    if !watcher.key.is_agent_qualified() {
        return Err(EngineError::invalid(
            "watcher must be an agent-qualified session key",
        ));
    }
    if watcher == target {
        return Err(EngineError::invalid("a session cannot watch itself"));
    }
    load_session(tx, watcher)?;
    load_session(tx, target)?;
    let (w, k, a) = (
        watcher.key.as_str(),
        target.key.as_str(),
        target.agent.as_str(),
    );
    let existing = tx.cursor(w, k, a)?;
    let head = tx.head(k, a)?.map_or(0, |h| h.last_sequence);
    let state = cursor::register(existing.as_ref().map(|c| &c.state), head, ctx.now);
    let row = CursorRow {
        watcher: w.into(),
        target_key: k.into(),
        target_agent: a.into(),
        state,
        created_at: existing.map_or(ctx.now, |c| c.created_at),
    };
    tx.put_cursor(&row)?;
    Ok(row)
}

/// The first `limit` items of the drain answer in its order (FIFO entries by id, then notices
/// by notified sequence, target key, target agent), and whether more items follow.
type Snapshot = (Vec<aware_store::SystemEventRow>, Vec<CursorRow>, bool);

fn pending_snapshot(tx: &dyn ReadTx, s: &SessionRef, limit: Option<u32>) -> Result<Snapshot> {
    load_session(tx, s)?;
    let (key, agent) = (s.key.as_str(), s.agent.as_str());
    let Some(limit) = limit else {
        let fifo = tx.system_events(key, agent)?;
        // A bare session never watches, so it never has notices.
        let pending = if s.key.is_agent_qualified() {
            tx.pending_by_watcher(key)?
        } else {
            Vec::new()
        };
        return Ok((fifo, pending, false));
    };
    // One row past the limit tells whether more follow, without loading the rest.
    let mut fifo = tx.system_events_limit(key, agent, limit.saturating_add(1))?;
    if fifo.len() > limit as usize {
        fifo.truncate(limit as usize);
        return Ok((fifo, Vec::new(), true));
    }
    let room = limit - fifo.len() as u32;
    let mut pending = if s.key.is_agent_qualified() {
        tx.pending_by_watcher_limit(key, room.saturating_add(1))?
    } else {
        Vec::new()
    };
    let more = pending.len() > room as usize;
    pending.truncate(room as usize);
    Ok((fifo, pending, more))
}

fn build_drain(
    s: &SessionRef,
    fifo: Vec<aware_store::SystemEventRow>,
    notices: Vec<Notice>,
    pending_after: u64,
    has_more: bool,
) -> Drain {
    let prompt = render_prompt(
        fifo.iter()
            .map(|e| (e.enqueued_at, e.text.as_str()))
            .chain(notices.iter().map(|n| (n.opened_at, n.text.as_str()))),
    );
    Drain {
        session_key: s.key.as_str().into(),
        agent_id: s.agent.as_str().into(),
        system_events: fifo,
        notices,
        pending_after,
        prompt,
        has_more,
    }
}

impl Engine {
    /// Registers `watcher` on `target` (02 §7); returns the cursor.
    pub fn register_watch(&self, watcher: &SessionRef, target: &SessionRef) -> Result<CursorRow> {
        let (w, t) = (watcher.clone(), target.clone());
        self.write(move |tx, ctx| register_in(tx, ctx, &w, &t))
    }

    /// Unwatch (02 §7): `true` when the pair was muted now.
    pub fn unwatch(&self, watcher: &SessionRef, target: &SessionRef) -> Result<bool> {
        let (w, t) = (watcher.clone(), target.clone());
        self.write(move |tx, ctx| {
            let target_row = load_session(tx, &t)?;
            if !w.key.is_agent_qualified() {
                return Ok(false);
            }
            // A watcher is an existing session (02 §1): a deleted parent must not leave a muted
            // row that a session re-created under its key would inherit.
            load_session(tx, &w)?;
            let (wk, k, a) = (w.key.as_str(), t.key.as_str(), t.agent.as_str());
            let existing = tx.cursor(wk, k, a)?;
            if existing.as_ref().is_some_and(|c| c.state.muted) {
                return Ok(false);
            }
            let is_parent = parent_ref(&target_row).is_some_and(|p| p == w);
            if existing.is_none() && !is_parent {
                return Ok(false);
            }
            let head = tx.head(k, a)?.map_or(0, |h| h.last_sequence);
            let state = cursor::mute(existing.as_ref().map(|c| &c.state), head, ctx.now);
            tx.put_cursor(&CursorRow {
                watcher: wk.into(),
                target_key: k.into(),
                target_agent: a.into(),
                state,
                created_at: existing.map_or(ctx.now, |c| c.created_at),
            })?;
            Ok(true)
        })
    }

    /// Cursors where the session is the watcher.
    pub fn watches(&self, s: &SessionRef) -> Result<Vec<CursorRow>> {
        self.inner.store.read_as(|tx| {
            load_session(tx, s).and_then(|_| {
                if !s.key.is_agent_qualified() {
                    return Ok(Vec::new());
                }
                Ok(tx.cursors_by_watcher(s.key.as_str())?)
            })
        })
    }

    /// Cursors where the session is the target.
    pub fn watchers(&self, s: &SessionRef) -> Result<Vec<CursorRow>> {
        self.inner.store.read_as(|tx| {
            load_session(tx, s)
                .and_then(|_| Ok(tx.cursors_by_target(s.key.as_str(), s.agent.as_str())?))
        })
    }

    /// Drain (02 §9): returns the FIFO and pending notices and acks them in the same op.
    pub fn drain(&self, s: &SessionRef) -> Result<Drain> {
        self.drain_up_to(s, None)
    }

    /// Drain of at most `limit` items, in the answer's order (FIFO entries, then notices). Only
    /// the returned items are deleted or acked; the rest stay pending, exactly as they were, for
    /// the next drain.
    pub fn drain_up_to(&self, s: &SessionRef, limit: Option<u32>) -> Result<Drain> {
        let s2 = s.clone();
        self.write(move |tx, ctx| {
            let (fifo, pending, more) = pending_snapshot(tx, &s2, limit)?;
            let ids: Vec<i64> = fifo.iter().map(|e| e.id).collect();
            tx.fifo_delete(s2.key.as_str(), s2.agent.as_str(), &ids)?;
            let notices: Vec<Notice> = pending.iter().map(Notice::from_cursor).collect();
            let mut follow_ups = 0;
            for row in &pending {
                if ack_row(tx, ctx, row)? {
                    follow_ups += 1;
                }
            }
            Ok(build_drain(&s2, fifo, notices, follow_ups, more))
        })
    }

    /// Peek (02 §9): the drain answer without writing anything.
    pub fn peek(&self, s: &SessionRef) -> Result<Drain> {
        self.peek_up_to(s, None)
    }

    /// Peek at the items a `drain_up_to` with the same limit would return now.
    pub fn peek_up_to(&self, s: &SessionRef, limit: Option<u32>) -> Result<Drain> {
        self.inner.store.read_as(|tx| {
            pending_snapshot(tx, s, limit).map(|(fifo, pending, more)| {
                let notices: Vec<Notice> = pending.iter().map(Notice::from_cursor).collect();
                let n = notices.len() as u64;
                build_drain(s, fifo, notices, n, more)
            })
        })
    }

    /// Explicit ack (02 §9) for hosts that peeked and injected the prompt themselves.
    pub fn ack(
        &self,
        s: &SessionRef,
        notices: Vec<AckNotice>,
        system_event_ids: Vec<i64>,
    ) -> Result<AckResult> {
        let s2 = s.clone();
        self.write(move |tx, ctx| {
            load_session(tx, &s2)?;
            let mut result = AckResult::default();
            let pending = if s2.key.is_agent_qualified() {
                tx.pending_by_watcher(s2.key.as_str())?
            } else {
                Vec::new()
            };
            let mut acked: std::collections::HashSet<(String, String)> = Default::default();
            for n in notices.iter().cloned() {
                let Some(target) = decode_context_key(&n.context_key) else {
                    result.ignored.push(n.context_key);
                    continue;
                };
                let mut stale = false;
                for row in pending.iter().filter(|c| {
                    c.target_key == target
                        && n.target_agent.as_ref().is_none_or(|a| *a == c.target_agent)
                }) {
                    let id = (row.target_key.clone(), row.target_agent.clone());
                    if acked.contains(&id) {
                        continue;
                    }
                    if n.last_seen.is_some_and(|ls| ls != row.state.last_seen) {
                        stale = true;
                        continue;
                    }
                    acked.insert(id);
                    result.acked += 1;
                    if ack_row(tx, ctx, row)? {
                        result.follow_ups += 1;
                    }
                }
                if stale {
                    result.ignored.push(n.context_key);
                }
            }
            result.removed_system_events =
                tx.fifo_delete(s2.key.as_str(), s2.agent.as_str(), &system_event_ids)?;
            Ok(result)
        })
    }

    /// Enqueues a system event (02 §8.3). Returns the id, or `None` for a dedupe hit.
    pub fn enqueue_system_event(
        &self,
        s: &SessionRef,
        text: &str,
        context_key: Option<&str>,
    ) -> Result<Option<i64>> {
        let line = SystemEventLine::new(text, context_key)
            .map_err(|e| EngineError::invalid(e.to_string()))?;
        let s2 = s.clone();
        self.write(move |tx, ctx| {
            load_session(tx, &s2)?;
            crate::fifo::push(
                tx,
                s2.key.as_str(),
                s2.agent.as_str(),
                &line.text,
                line.context_key.as_deref(),
                ctx.now,
            )
        })
    }
}

/// Acks one pending cursor; returns whether a follow-up opened.
fn ack_row(tx: &mut dyn WriteTx, ctx: &mut Ctx, row: &CursorRow) -> Result<bool> {
    let step = cursor::ack(&row.state, ctx.now);
    tx.put_cursor(&CursorRow {
        state: step.state,
        ..row.clone()
    })?;
    ctx.effects.acked += 1;
    if step.follow_up {
        ctx.effects.follow_ups += 1;
        ctx.effects.state_wakes.push(row.watcher.clone());
    }
    Ok(step.follow_up)
}
