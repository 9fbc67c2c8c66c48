//! Sessions: resolve, read, create, reset, delete (03 §2, §3), with their signal-log producers
//! (01 §6).

use crate::append::{record, AppendRequest};
use crate::lookup::*;
use crate::types::*;
use crate::{Ctx, Engine, EngineError, Result};
use aware_core::notice::session_created_context_key;
use aware_core::{ActorType, AgentId, EventKind, SessionKey, SessionRef};
use aware_store::StoreExt;
use aware_store::{ReadTx, SessionFilter, SessionRow, WriteTx};

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
            .session_exists(s.key.as_str(), s.agent.as_str())?)
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
}

/// Creation inside an op; `spawn_run` is the run id of a `sessions_spawn`.
pub(crate) fn create_in(
    tx: &mut dyn WriteTx,
    ctx: &mut Ctx,
    target: &SessionRef,
    req: &CreateSession,
    spawn_run: Option<&str>,
) -> Result<SessionRow> {
    // Every creation path (API, spawn, hook, adoption) passes here, so no new session gets a
    // key that could break out of a notice's quotes.
    target.key.check_new()?;
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
                aware_core::notice::quote_key(target.key.as_str()),
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
