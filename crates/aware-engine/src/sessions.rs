//! Sessions, turns, goals, runs, compaction, spawn and send dispatch (03 §2–§4, §6.1, §6.5),
//! with their signal-log producers (01 §6).

use crate::append::{record, AppendRequest};
use crate::model::*;
use crate::{Ctx, Engine, EngineError, Result, Wake, WakeReason};
use aware_core::notice::session_created_context_key;
use aware_core::{ActorType, AgentId, EventKind, SessionKey, SessionRef, StoredEvent};
use aware_store::StoreExt;
use aware_store::{GoalRow, ReadTx, RunRow, SessionFilter, SessionRow, TurnRow, WriteTx};

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
fn parent_watchers(row: &SessionRow) -> Vec<String> {
    parent_ref(row)
        .map(|p| vec![p.key.as_str().to_string()])
        .unwrap_or_default()
}

pub(crate) fn load_session(tx: &dyn ReadTx, s: &SessionRef) -> Result<SessionRow> {
    tx.session(s.key.as_str(), s.agent.as_str())?
        .ok_or_else(|| EngineError::SessionNotFound(s.key.as_str().to_string()))
}

fn validate_run_id(run_id: &str) -> Result<()> {
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

fn validate_operation_id(op: &str) -> Result<()> {
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

fn validate_label(label: &str) -> Result<()> {
    let n = label.chars().count();
    if n == 0 || n > MAX_LABEL_CHARS {
        return Err(EngineError::invalid("label must be 1..=128 characters"));
    }
    if aware_core::key::has_invisible_format(label) {
        return Err(EngineError::invalid(
            "label must not contain bidirectional or zero-width formatting characters",
        ));
    }
    Ok(())
}

fn check_text(field: &str, text: &str) -> Result<()> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(EngineError::PayloadTooLarge(format!(
            "{field} must be at most {MAX_TEXT_BYTES} bytes (got {})",
            text.len()
        )));
    }
    Ok(())
}

impl Engine {
    /// Resolves a reference: agent-qualified keys carry their agent (a different explicit agent
    /// is refused); bare keys take `agent`, else the default agent.
    pub fn resolve(&self, key: &SessionKey, agent: Option<&AgentId>) -> Result<SessionRef> {
        match (key.qualified_agent(), agent) {
            (Some(own), Some(a)) if &own != a => Err(EngineError::invalid(format!(
                "agentId {:?} does not match the agent of session key {:?}",
                a.as_str(),
                key.as_str()
            ))),
            (Some(own), _) => Ok(SessionRef {
                key: key.clone(),
                agent: own,
            }),
            (None, Some(a)) => Ok(SessionRef {
                key: key.clone(),
                agent: a.clone(),
            }),
            (None, None) => Ok(SessionRef {
                key: key.clone(),
                agent: self.inner.config.default_agent.clone(),
            }),
        }
    }

    /// A session with its state version; a failed head read degrades to 0 (01 §12).
    fn session_view(&self, tx: &dyn ReadTx, row: SessionRow) -> Result<Session> {
        let state_version = match tx.head(&row.key, &row.agent_id) {
            Ok(h) => h.map_or(0, |h| h.last_sequence),
            Err(e) => {
                self.read_failed("version", &e);
                0
            }
        };
        let link = match row.upstream {
            Some(_) => tx.link(&row.key, &row.agent_id)?,
            None => None,
        };
        Ok(Session {
            row,
            state_version,
            link,
        })
    }

    pub fn get_session(&self, s: &SessionRef) -> Result<Session> {
        self.inner
            .store
            .read_as(|tx| load_session(tx, s).and_then(|row| self.session_view(tx, row)))
    }

    pub fn session_exists(&self, s: &SessionRef) -> Result<bool> {
        Ok(self
            .inner
            .store
            .read_as(|tx| tx.session_exists(s.key.as_str(), s.agent.as_str()))?)
    }

    /// Sessions matching `filter`, newest `updated_at` first, with their state versions.
    pub fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>> {
        self.inner.store.read_as(|tx| {
            let rows = tx.list_sessions(filter)?;
            rows.into_iter()
                .map(|row| self.session_view(tx, row))
                .collect::<Result<Vec<_>>>()
        })
    }

    /// Creates a session (03 §3.4, §4.1, §4.5). Returns `(created, session)`; an existing
    /// session is returned unchanged.
    pub fn create_session(&self, req: CreateSession) -> Result<(bool, Session)> {
        // The caller's agent is only a default for bare keys; an agent-qualified key names its
        // own agent, whoever calls.
        let caller_default = req
            .caller
            .session()
            .map(|c| &c.agent)
            .filter(|_| !req.key.is_agent_qualified());
        let target = self.resolve(&req.key, req.agent.as_ref().or(caller_default))?;
        if let Some(label) = &req.label {
            validate_label(label)?;
        }
        if let Some(k) = req.kind {
            if !matches!(
                k,
                SessionKind::Group | SessionKind::Cron | SessionKind::Other
            ) {
                return Err(EngineError::invalid(
                    "kind must be one of group, cron, other",
                ));
            }
        }
        let engine = self.clone();
        let created = self.write(move |tx, ctx| {
            if let Some(row) = tx.session(target.key.as_str(), target.agent.as_str())? {
                return Ok((false, row));
            }
            let row = create_in(tx, ctx, &target, &req, None)?;
            Ok((true, row))
        })?;
        let session = engine
            .inner
            .store
            .read_as(|tx| self.session_view(tx, created.1))?;
        Ok((created.0, session))
    }

    /// Starts a new incarnation (03 §3.5).
    pub fn reset_session(&self, s: &SessionRef) -> Result<(Session, String)> {
        let s2 = s.clone();
        let (row, previous) = self.write(move |tx, ctx| {
            let mut row = load_session(tx, &s2)?;
            if row.active_run_id.is_some() {
                return Err(EngineError::RunActive(s2.key.as_str().to_string()));
            }
            let previous = std::mem::replace(&mut row.session_id, new_uuid());
            row.updated_at = ctx.now;
            tx.update_session(&row)?;
            tx.delete_turns(&row.key, &row.agent_id)?;
            tx.fifo_clear(&row.key, &row.agent_id)?;
            if s2.key.is_agent_qualified() {
                tx.delete_cursors_of_watcher(&row.key)?;
            }
            Ok((row, previous))
        })?;
        let session = self.inner.store.read_as(|tx| self.session_view(tx, row))?;
        Ok((session, previous))
    }

    /// Deletes a session and everything it owns (03 §3.6, 02 §11).
    pub fn delete_session(&self, s: &SessionRef) -> Result<()> {
        let s2 = s.clone();
        self.write(move |tx, ctx| {
            load_session(tx, &s2)?;
            let (key, agent) = (s2.key.as_str(), s2.agent.as_str());
            if s2.key.is_agent_qualified() {
                tx.delete_cursors_of_watcher(key)?;
                ctx.effects.forget.push(key.to_string());
            }
            tx.delete_cursors_of_target(key, agent)?;
            tx.delete_session(key, agent)?;
            // Children name their parent by key. A bare parent key means "in the child's own
            // agent", so only that agent's children lose their parent; an agent-qualified key
            // names one session whatever the child's agent.
            let scope = (!s2.key.is_agent_qualified()).then_some(agent);
            tx.mark_children_orphaned(key, scope)?;
            Ok(())
        })
    }

    /// Posts a turn (03 §4.2).
    pub fn post_turn(&self, s: &SessionRef, turn: NewTurn) -> Result<TurnOutcome> {
        check_text("text", &turn.text)?;
        if let Some(t) = &turn.upstream_text {
            check_text("upstreamText", t)?;
        }
        if let Some(c) = &turn.channel {
            aware_core::event::validate_channel(c)
                .map_err(|e| EngineError::invalid(e.to_string()))?;
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
        let s2 = s.clone();
        self.write(move |tx, ctx| post_turn_in(tx, ctx, &s2, turn))
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
                text,
                status: status.as_str().into(),
                updated_at: ctx.now,
            });
            row.updated_at = ctx.now;
            tx.update_session(&row)?;
            let event = record_goal(tx, ctx, &row, action, actor);
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
            let event = record_goal(tx, ctx, &row, "cleared", actor);
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
        self.write(move |tx, ctx| start_run_in(tx, ctx, &s2, run_id, timeout_secs))
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
                    text: summary.unwrap_or_else(|| "[compacted]".into()),
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

    /// `sessions_spawn` (03 §6.5): child, `created` + `child_spawned`, task turn and run in one op.
    pub fn spawn(
        &self,
        caller: &SessionRef,
        task: &str,
        label: Option<String>,
        agent: Option<AgentId>,
        run_timeout_secs: Option<u32>,
    ) -> Result<SpawnResult> {
        if task.is_empty() {
            return Err(EngineError::invalid("task must be 1 byte..=256 KiB"));
        }
        check_text("task", task)?;
        if let Some(l) = &label {
            validate_label(l)?;
        }
        if let Some(t) = run_timeout_secs {
            if !(1..=86_400).contains(&t) {
                return Err(EngineError::invalid(
                    "runTimeoutSeconds must be an integer between 1 and 86400",
                ));
            }
        }
        let child_agent = agent.unwrap_or_else(|| caller.agent.clone());
        let child_key = SessionKey::qualified(&child_agent, &format!("subagent:{}", new_uuid()))?;
        let child = SessionRef {
            key: child_key,
            agent: child_agent,
        };
        let (caller, task) = (caller.clone(), task.to_string());
        let run_id = new_uuid();
        let child2 = child.clone();
        let run2 = run_id.clone();
        self.write(move |tx, ctx| {
            load_session(tx, &caller)?;
            let req = CreateSession {
                key: child2.key.clone(),
                agent: Some(child2.agent.clone()),
                kind: None,
                label,
                parent: Some(caller.key.clone()),
                caller: Caller::Session(caller.clone()),
                created_via: CreatedVia::Spawn,
            };
            create_in(tx, ctx, &child2, &req, Some(&run2))?;
            let mut turn = NewTurn::user(task);
            turn.provenance = Some(Provenance::inter_session(caller.key.clone(), None));
            turn.run_id = Some(run2.clone());
            post_turn_in(tx, ctx, &child2, turn)?;
            start_run_in(tx, ctx, &child2, Some(run2.clone()), run_timeout_secs)?;
            ctx.effects.direct_wakes.push(Wake {
                id: 0,
                session_key: child2.key.as_str().into(),
                agent_id: child2.agent.as_str().into(),
                reason: WakeReason::Spawn,
                targets: Vec::new(),
                run_id: Some(run2.clone()),
                from: Some(caller.key.as_str().into()),
                at: ctx.now,
                remote: false,
            });
            Ok(())
        })?;
        Ok(SpawnResult {
            run_id,
            child_key: child.key.as_str().into(),
            child_agent: child.agent.as_str().into(),
        })
    }

    /// The dispatch step of `sessions_send` (03 §6.1): the message as an inter-session user turn
    /// with a fresh run id, the optional registration, and a `message` wake after commit.
    pub fn send_dispatch(
        &self,
        caller: &SessionRef,
        target: &SessionRef,
        message: &str,
        watch: bool,
    ) -> Result<SendDispatch> {
        if message.is_empty() {
            return Err(EngineError::invalid("message must be 1 byte..=256 KiB"));
        }
        check_text("message", message)?;
        if caller == target {
            return Err(EngineError::invalid(
                "cannot send a message to the caller's own session",
            ));
        }
        let run_id = new_uuid();
        let (c, t, m, r) = (
            caller.clone(),
            target.clone(),
            message.to_string(),
            run_id.clone(),
        );
        let watched = self.write(move |tx, ctx| {
            load_session(tx, &c)?;
            load_session(tx, &t)?;
            let mut turn = NewTurn::user(m);
            turn.provenance = Some(Provenance::inter_session(c.key.clone(), Some("sessions_send")));
            turn.run_id = Some(r.clone());
            post_turn_in(tx, ctx, &t, turn)?;
            let watched = if watch {
                // A failed registration does not undo the send.
                tx.savepoint("register")?;
                match crate::watch::register_in(tx, ctx, &c, &t) {
                    Ok(_) => {
                        tx.release("register")?;
                        Some(true)
                    }
                    Err(e) => {
                        tx.rollback_to("register")?;
                        tracing::warn!(event = "register_failed", error = %e, "registration after send failed");
                        Some(false)
                    }
                }
            } else {
                None
            };
            ctx.effects.direct_wakes.push(Wake {
                id: 0,
                session_key: t.key.as_str().into(),
                agent_id: t.agent.as_str().into(),
                reason: WakeReason::Message,
                targets: Vec::new(),
                run_id: Some(r.clone()),
                from: Some(c.key.as_str().into()),
                at: ctx.now,
                remote: false,
            });
            Ok(watched)
        })?;
        Ok(SendDispatch {
            run_id,
            target: target.clone(),
            watched,
        })
    }

    /// The reply state of a sent message: the first assistant turn with the run id, or the
    /// run's non-ok outcome.
    pub fn reply_state(
        &self,
        target: &SessionRef,
        run_id: &str,
    ) -> Result<Option<std::result::Result<String, RunOutcome>>> {
        self.inner.store.read_as(|tx| -> Result<_> {
            if let Some(turn) =
                tx.reply_for_run(target.key.as_str(), target.agent.as_str(), run_id)?
            {
                return Ok(Some(Ok(turn.text)));
            }
            Ok(tx
                .run(run_id)?
                .and_then(|r| r.outcome)
                .and_then(|o| RunOutcome::parse(&o))
                .filter(|o| *o != RunOutcome::Ok)
                .map(Err))
        })
    }
}

/// Creation inside an op; `spawn_run` is the run id of a `sessions_spawn`.
pub(crate) fn create_in(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    target: &SessionRef,
    req: &CreateSession,
    spawn_run: Option<&str>,
) -> Result<SessionRow> {
    let parent = match &req.parent {
        None => None,
        Some(p) => {
            let pref = SessionRef::with_default(p.clone(), &target.agent);
            if &pref == target {
                return Err(EngineError::invalid(
                    "parentSessionKey must differ from the new session",
                ));
            }
            if !tx.session_exists(pref.key.as_str(), pref.agent.as_str())? {
                return Err(EngineError::SessionNotFound(pref.key.as_str().to_string()));
            }
            Some(pref)
        }
    };
    if let Some(label) = &req.label {
        if tx.session_by_label(target.agent.as_str(), label)?.is_some() {
            return Err(EngineError::LabelTaken(label.clone()));
        }
    }
    let inner = ctx.inner.clone();
    let config = &inner.config;
    let kind = if target.key.is_subagent() {
        SessionKind::Subagent
    } else if target.key.is_agent_qualified() && target.key.rest() == config.main_key {
        SessionKind::Main
    } else if req.created_via == CreatedVia::Adoption {
        SessionKind::Adopted
    } else {
        req.kind.unwrap_or(SessionKind::Other)
    };
    let row = SessionRow {
        key: target.key.as_str().into(),
        agent_id: target.agent.as_str().into(),
        session_id: new_uuid(),
        kind: kind.as_str().into(),
        label: req.label.clone(),
        parent_key: parent.as_ref().map(|p| p.key.as_str().to_string()),
        created_via: req.created_via.as_str().into(),
        active_run_id: None,
        goal: None,
        orphaned: false,
        upstream: None,
        created_at: ctx.now,
        updated_at: ctx.now,
    };
    tx.insert_session(&row)?;
    let caller = req.caller.session();
    // Hook and adoption creations record no `created` even with a caller (03 §4.1).
    let records_created = matches!(req.created_via, CreatedVia::Api | CreatedVia::Spawn);
    if let Some(c) = caller.filter(|_| records_created) {
        let mut ev = AppendRequest::new(target.clone(), EventKind::Created, ActorType::Agent);
        ev.session_id = Some(row.session_id.clone());
        ev.actor_id = Some(c.key.as_str().into());
        ev.dedupe_key = Some(format!("created:{}", row.session_id));
        ev.summary = "session created".into();
        record(tx, ctx, ev);
    }
    if let Some(p) = &parent {
        let (actor_type, actor_id) = match caller {
            Some(c) => (ActorType::Agent, Some(c.key.as_str().to_string())),
            None => (ActorType::System, None),
        };
        let mut ev = AppendRequest::new(target.clone(), EventKind::ChildSpawned, actor_type);
        ev.session_id = Some(row.session_id.clone());
        ev.actor_id = actor_id;
        ev.run_id = spawn_run.map(str::to_string);
        ev.dedupe_key = Some(format!("child-spawned:{}", row.session_id));
        ev.summary = "child session spawned".into();
        ev.watchers = vec![p.key.as_str().into()];
        record(tx, ctx, ev);
    }
    // "Session created" line for the agent's main session (03 §4.1).
    if config.notify_on_create && parent.is_none() {
        let main = SessionKey::qualified(&target.agent, &config.main_key)?;
        let created_by_main = caller.is_some_and(|c| c.key == main);
        if main != target.key
            && !created_by_main
            && tx.session_exists(main.as_str(), target.agent.as_str())?
        {
            let text = format!(
                "New session \"{}\" created via {}.",
                target.key,
                req.created_via.as_str()
            );
            let ctxk = session_created_context_key(target.key.as_str());
            crate::fifo::push(
                tx,
                main.as_str(),
                target.agent.as_str(),
                &text,
                Some(&ctxk),
                ctx.now,
            )?;
        }
    }
    Ok(row)
}

fn post_turn_in(
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
        at: ctx.now,
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

fn record_goal(
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

fn start_run_in(
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

fn end_run_in(
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
