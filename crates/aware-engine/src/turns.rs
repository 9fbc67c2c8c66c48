//! Turns, goals, runs and compaction (03 §4), with their signal-log producers (01 §6).

use crate::append::{record, AppendRequest};
use crate::lookup::*;
use crate::types::*;
use crate::{Ctx, Engine, EngineError, Result};
use aware_core::{ActorType, AgentId, EventKind, SessionKey, SessionRef, StoredEvent};
use aware_store::StoreExt;
use aware_store::{GoalRow, RunRow, SessionRow, TurnRow, WriteTx};

impl Engine {
    /// Posts a turn (03 §4.2).
    pub fn post_turn(&self, s: &SessionRef, turn: NewTurn) -> Result<TurnOutcome> {
        check_new_turn(&turn)?;
        let s2 = s.clone();
        self.write(move |tx, ctx| post_turn_in(tx, ctx, &s2, turn.clone()))
    }

    /// [`Engine::post_turn`] for async callers (the gateway's hottest write route): no
    /// blocking-pool thread between the request and the writer. Needs a tokio runtime.
    pub async fn post_turn_async(&self, s: &SessionRef, turn: NewTurn) -> Result<TurnOutcome> {
        check_new_turn(&turn)?;
        let s2 = s.clone();
        self.write_async(move |tx, ctx| post_turn_in(tx, ctx, &s2, turn.clone()))
            .await
    }

    /// Turns with index > `after`, at most `limit`, plus whether more follow.
    pub fn list_turns(
        &self,
        s: &SessionRef,
        after: Option<i64>,
        limit: u32,
    ) -> Result<(Vec<TurnRow>, bool)> {
        self.inner.store.read_as(|tx| {
            load_session(tx, s).and_then(|_| {
                let mut turns = tx.turns(s.key.as_str(), s.agent.as_str(), after, limit + 1)?;
                let more = turns.len() > limit as usize;
                turns.truncate(limit as usize);
                Ok((turns, more))
            })
        })
    }

    /// Turns with index > `after`, at most `limit` and at most about `max_bytes` of text (the
    /// first turn always comes), plus whether more follow and whether the byte cap cut the page.
    pub fn list_turns_capped(
        &self,
        s: &SessionRef,
        after: Option<i64>,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<TurnRow>, bool, bool)> {
        self.inner.store.read_as(|tx| {
            load_session(tx, s).and_then(|_| {
                let (mut turns, cut) = tx.turns_within(
                    s.key.as_str(),
                    s.agent.as_str(),
                    after,
                    limit.saturating_add(1),
                    max_bytes,
                )?;
                let more = cut || turns.len() > limit as usize;
                // Cut by bytes before the page was full (the peek row does not count).
                let truncated = cut && turns.len() < limit as usize;
                turns.truncate(limit as usize);
                Ok((turns, more, truncated))
            })
        })
    }

    /// One snapshot for `sessions_history`: a page (see `ReadTx::turns_page`) and the number of
    /// turns of the incarnation.
    pub fn history_page(
        &self,
        s: &SessionRef,
        from: Option<i64>,
        include_tools: bool,
        limit: u32,
        max_chars: u32,
    ) -> Result<(Vec<TurnRow>, i64)> {
        self.inner.store.read_as(|tx| {
            load_session(tx, s).and_then(|_| {
                let (k, a) = (s.key.as_str(), s.agent.as_str());
                let page = tx.turns_page(k, a, from, include_tools, limit, max_chars)?;
                Ok((page, tx.turn_count(k, a)?))
            })
        })
    }

    /// Sets the goal (03 §4.4).
    pub fn set_goal(
        &self,
        s: &SessionRef,
        text: &str,
        status: GoalStatus,
        actor: Actor,
    ) -> Result<GoalChange> {
        let n = text.chars().count();
        if n == 0 || n > MAX_GOAL_CHARS {
            return Err(EngineError::invalid("text must be 1..=4000 characters"));
        }
        if text.contains('\0') {
            return Err(EngineError::invalid("text must not contain U+0000 (NUL)"));
        }
        let (s2, text) = (s.clone(), text.to_string());
        self.write(move |tx, ctx| {
            let mut row = load_session(tx, &s2)?;
            let action = match &row.goal {
                None => Some("created"),
                Some(g) if g.text == text && g.status == status.as_str() => None,
                Some(g) if g.status == "active" && status == GoalStatus::Complete => {
                    Some("completed")
                }
                Some(_) => Some("updated"),
            };
            let Some(action) = action else {
                return Ok(GoalChange {
                    goal: row.goal,
                    changed: false,
                    event: None,
                });
            };
            row.goal = Some(GoalRow {
                text: text.clone(),
                status: status.as_str().into(),
                updated_at: ctx.now,
            });
            row.updated_at = ctx.now;
            tx.update_session(&row)?;
            let event = record_goal(tx, ctx, &row, action, actor.clone());
            Ok(GoalChange {
                goal: row.goal,
                changed: true,
                event,
            })
        })
    }

    /// Clears the goal (03 §4.4).
    pub fn clear_goal(&self, s: &SessionRef, actor: Actor) -> Result<GoalChange> {
        let s2 = s.clone();
        self.write(move |tx, ctx| {
            let mut row = load_session(tx, &s2)?;
            if row.goal.is_none() {
                return Ok(GoalChange {
                    goal: None,
                    changed: false,
                    event: None,
                });
            }
            row.goal = None;
            row.updated_at = ctx.now;
            tx.update_session(&row)?;
            let event = record_goal(tx, ctx, &row, "cleared", actor.clone());
            Ok(GoalChange {
                goal: None,
                changed: true,
                event,
            })
        })
    }

    /// Starts a run (03 §4.3).
    pub fn start_run(
        &self,
        s: &SessionRef,
        run_id: Option<String>,
        timeout_secs: Option<u32>,
    ) -> Result<RunRow> {
        if let Some(r) = &run_id {
            validate_run_id(r)?;
        }
        let s2 = s.clone();
        self.write(move |tx, ctx| start_run_in(tx, ctx, &s2, run_id.clone(), timeout_secs))
    }

    /// Ends a run (03 §4.3): idempotent for the same outcome, a conflict for another.
    pub fn end_run(&self, s: &SessionRef, run_id: &str, outcome: RunOutcome) -> Result<RunEnd> {
        let (s2, run_id) = (s.clone(), run_id.to_string());
        self.write(move |tx, ctx| {
            load_session(tx, &s2)?;
            end_run_in(tx, ctx, Some(&s2), &run_id, outcome)
        })
    }

    /// Ends every active run whose deadline passed with outcome `timeout`.
    pub(crate) fn expire_runs(&self, now: i64) -> Result<u64> {
        let due = self.inner.store.read_as(|tx| tx.due_runs(now))?;
        let mut n = 0;
        for run in due {
            let run_id = run.run_id.clone();
            let ended = self.write(move |tx, ctx| match tx.run(&run_id)? {
                Some(r) if r.ended_at.is_none() => {
                    end_run_in(tx, ctx, None, &run_id, RunOutcome::Timeout).map(|_| true)
                }
                _ => Ok(false),
            });
            match ended {
                Ok(true) => n += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(event = "run_timeout_failed", run_id = %run.run_id, error = %e,
                    "could not end a timed-out run")
                }
            }
        }
        Ok(n)
    }

    /// Records a compaction marker (03 §4.6).
    pub fn compaction(
        &self,
        s: &SessionRef,
        operation_id: &str,
        summary: Option<&str>,
    ) -> Result<CompactionOutcome> {
        validate_operation_id(operation_id)?;
        if let Some(t) = summary {
            check_text("summary", t)?;
        }
        let (s2, op, summary) = (
            s.clone(),
            operation_id.to_string(),
            summary.map(str::to_string),
        );
        self.write(move |tx, ctx| {
            let row = load_session(tx, &s2)?;
            let dedupe = format!("compacted:{}:{}:{}", row.agent_id, row.key, op);
            if let Some(existing) = tx.event_by_dedupe(&dedupe)? {
                return Ok(CompactionOutcome {
                    event: Some(existing),
                    duplicate: true,
                });
            }
            let index = tx.turn_count(&row.key, &row.agent_id)?;
            tx.insert_turn(
                &row.key,
                &row.agent_id,
                &TurnRow {
                    id: new_uuid(),
                    index,
                    role: Role::Compaction.as_str().into(),
                    text: summary.clone().unwrap_or_else(|| "[compacted]".into()),
                    at: ctx.now,
                    actor_type: ActorType::System,
                    actor_id: None,
                    provenance_json: r#"{"kind":"internal_system"}"#.into(),
                    channel: None,
                    run_id: None,
                    origin: None,
                    upstream_text: None,
                    idempotency_key: None,
                },
            )?;
            let mut req = AppendRequest::new(s2.clone(), EventKind::Compacted, ActorType::System);
            req.session_id = Some(row.session_id.clone());
            req.dedupe_key = Some(dedupe);
            req.summary = "session compacted".into();
            let event = record(tx, ctx, req).into_event();
            Ok(CompactionOutcome {
                event,
                duplicate: false,
            })
        })
    }
}

pub(crate) fn post_turn_in(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    s: &SessionRef,
    turn: NewTurn,
) -> Result<TurnOutcome> {
    let mut row = load_session(tx, s)?;
    if let Some(ik) = &turn.idempotency_key {
        if let Some(first) = tx.turn_by_idempotency(&row.key, &row.agent_id, ik)? {
            return Ok(TurnOutcome {
                turn: first,
                event: None,
                duplicate: true,
            });
        }
    }
    let provenance = turn.provenance.clone().unwrap_or_else(Provenance::human);
    let (actor_type, actor_id) = match turn.role {
        Role::Assistant | Role::Tool => (ActorType::Agent, Some(row.key.clone())),
        _ => match provenance.kind {
            ProvenanceKind::Human => (ActorType::Human, provenance.human_id.clone()),
            ProvenanceKind::InterSession => (
                ActorType::Agent,
                provenance
                    .source_session_key
                    .as_ref()
                    .map(|k| k.as_str().to_string()),
            ),
            ProvenanceKind::InternalSystem => (ActorType::System, None),
        },
    };
    let mut prov = serde_json::Map::new();
    prov.insert("kind".into(), provenance.kind.as_str().into());
    if let Some(h) = &provenance.human_id {
        prov.insert("humanId".into(), h.as_str().into());
    }
    if let Some(k) = &provenance.source_session_key {
        prov.insert("sourceSessionKey".into(), k.as_str().into());
    }
    if let Some(t) = &provenance.source_tool {
        prov.insert("sourceTool".into(), t.as_str().into());
    }
    let index = tx.turn_count(&row.key, &row.agent_id)?;
    let stored = TurnRow {
        id: new_uuid(),
        index,
        role: turn.role.as_str().into(),
        text: turn.text,
        // A turn recorded late (a prompt the hook kept while the gateway was down) keeps the
        // time it happened, clamped as its event's is (01 §4 step 4).
        at: aware_core::event::clamp_occurred_at(turn.occurred_at, ctx.now),
        actor_type,
        actor_id: actor_id.clone(),
        provenance_json: serde_json::Value::Object(prov).to_string(),
        channel: turn.channel.clone(),
        run_id: turn.run_id.clone(),
        origin: turn.origin.clone(),
        upstream_text: turn.upstream_text,
        idempotency_key: turn.idempotency_key,
    };
    tx.insert_turn(&row.key, &row.agent_id, &stored)?;
    if turn.role == Role::Assistant {
        if let Some(r) = &turn.run_id {
            ctx.effects.replies.push(r.clone());
        }
    }
    row.updated_at = ctx.now;
    tx.update_session(&row)?;
    let mut event = None;
    if turn.role == Role::User && actor_type == ActorType::Human {
        let watchers = parent_watchers(&row);
        let mut ev = AppendRequest::new(s.clone(), EventKind::HumanDirectMessage, ActorType::Human);
        ev.session_id = Some(row.session_id.clone());
        ev.actor_id = actor_id;
        ev.dedupe_key = Some(format!("turn:{}", stored.id));
        // `stored.id` is a UUID made above, and the turn insert with it just succeeded.
        ev.fresh_dedupe_key = true;
        ev.summary = format!(
            "human message via {}",
            turn.channel.as_deref().unwrap_or("unknown")
        );
        ev.occurred_at = turn.occurred_at;
        ev.only_if_watched = watchers.is_empty();
        ev.watchers = watchers;
        event = record(tx, ctx, ev).into_event();
    }
    Ok(TurnOutcome {
        turn: stored,
        event,
        duplicate: false,
    })
}

pub(crate) fn record_goal(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    row: &SessionRow,
    action: &str,
    actor: Actor,
) -> Option<StoredEvent> {
    let (Ok(key), Ok(agent)) = (SessionKey::parse(&row.key), AgentId::parse(&row.agent_id)) else {
        return None;
    };
    let mut ev = AppendRequest::new(
        SessionRef { key, agent },
        EventKind::GoalChanged,
        actor.actor_type,
    );
    ev.session_id = Some(row.session_id.clone());
    ev.actor_id = actor.actor_id;
    ev.summary = format!("goal {action}");
    ev.watchers = parent_watchers(row);
    record(tx, ctx, ev).into_event()
}

pub(crate) fn start_run_in(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    s: &SessionRef,
    run_id: Option<String>,
    timeout_secs: Option<u32>,
) -> Result<RunRow> {
    let mut row = load_session(tx, s)?;
    if row.active_run_id.is_some() {
        return Err(EngineError::RunActive(row.key));
    }
    let run_id = run_id.unwrap_or_else(new_uuid);
    if tx.run(&run_id)?.is_some() {
        return Err(EngineError::RunConflict(format!(
            "runId {run_id:?} is already used"
        )));
    }
    let run = RunRow {
        run_id: run_id.clone(),
        session_key: row.key.clone(),
        agent_id: row.agent_id.clone(),
        session_id: row.session_id.clone(),
        started_at: ctx.now,
        ended_at: None,
        outcome: None,
        deadline_at: timeout_secs.map(|t| ctx.now + i64::from(t) * 1000),
        event_sequence: None,
    };
    tx.insert_run(&run)?;
    row.active_run_id = Some(run_id);
    row.updated_at = ctx.now;
    tx.update_session(&row)?;
    Ok(run)
}

pub(crate) fn end_run_in(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    s: Option<&SessionRef>,
    run_id: &str,
    outcome: RunOutcome,
) -> Result<RunEnd> {
    let mut run = tx
        .run(run_id)?
        .filter(|r| {
            s.is_none_or(|s| r.session_key == s.key.as_str() && r.agent_id == s.agent.as_str())
        })
        .ok_or_else(|| EngineError::RunNotFound(run_id.to_string()))?;
    if let Some(previous) = &run.outcome {
        if previous == outcome.as_str() {
            let event = match run.event_sequence {
                Some(seq) => tx.event_by_sequence(seq)?,
                None => None,
            };
            return Ok(RunEnd { run, event });
        }
        return Err(EngineError::RunConflict(format!(
            "run {run_id:?} already ended with outcome {previous}"
        )));
    }
    run.ended_at = Some(ctx.now);
    run.outcome = Some(outcome.as_str().into());
    let session = tx.session(&run.session_key, &run.agent_id)?;
    let mut event = None;
    if let Some(mut row) = session {
        if row.active_run_id.as_deref() == Some(run_id) {
            row.active_run_id = None;
        }
        row.updated_at = ctx.now;
        tx.update_session(&row)?;
        if row.parent_key.is_some() {
            let (Ok(key), Ok(agent)) = (SessionKey::parse(&row.key), AgentId::parse(&row.agent_id))
            else {
                return Err(EngineError::invalid("stored session key is invalid"));
            };
            let (kind, summary) = match outcome {
                RunOutcome::Ok => (EventKind::RunCompleted, "child run completed"),
                RunOutcome::Error => (EventKind::RunFailed, "child run failed"),
                RunOutcome::Timeout => (EventKind::RunFailed, "child run timed out"),
                RunOutcome::Cancelled => (EventKind::RunFailed, "child run cancelled"),
            };
            let mut ev = AppendRequest::new(SessionRef { key, agent }, kind, ActorType::System);
            ev.session_id = Some(row.session_id.clone());
            ev.run_id = Some(run_id.to_string());
            ev.dedupe_key = Some(format!("run-terminal:{run_id}"));
            ev.summary = summary.into();
            if outcome != RunOutcome::Ok {
                ev.payload = Some(serde_json::json!({ "outcome": outcome.as_str() }));
            }
            ev.watchers = parent_watchers(&row);
            event = record(tx, ctx, ev).into_event();
        }
    }
    run.event_sequence = event.as_ref().map(|e| e.sequence);
    tx.update_run(&run)?;
    ctx.effects.replies.push(run_id.to_string());
    Ok(RunEnd { run, event })
}

/// The checks of a new turn that need no store (03 §4.2), before it goes to the writer.
fn check_new_turn(turn: &NewTurn) -> Result<()> {
    check_text("text", &turn.text)?;
    if let Some(t) = &turn.upstream_text {
        check_text("upstreamText", t)?;
    }
    if let Some(c) = &turn.channel {
        aware_core::event::validate_channel(c).map_err(|e| EngineError::invalid(e.to_string()))?;
    }
    if let Some(r) = &turn.run_id {
        validate_run_id(r)?;
    }
    if turn.role == Role::Compaction {
        return Err(EngineError::invalid(
            "role must be one of user, assistant, tool",
        ));
    }
    if let Some(p) = &turn.provenance {
        if p.kind == ProvenanceKind::InterSession && p.source_session_key.is_none() {
            return Err(EngineError::invalid(
                "provenance.sourceSessionKey is required when provenance.kind is inter_session",
            ));
        }
    }
    Ok(())
}
