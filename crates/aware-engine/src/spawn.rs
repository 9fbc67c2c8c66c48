//! Spawn and send dispatch (03 §6.1, §6.5).

use crate::lookup::*;
use crate::sessions::create_in;
use crate::turns::{post_turn_in, start_run_in};
use crate::types::*;
use crate::{Engine, EngineError, Result, Wake, WakeReason};
use aware_core::{AgentId, SessionKey, SessionRef};
use aware_store::StoreExt;

impl Engine {
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
                label: label.clone(),
                parent: Some(caller.key.clone()),
                caller: Caller::Session(caller.clone()),
                created_via: CreatedVia::Spawn,
            };
            create_in(tx, ctx, &child2, &req, Some(&run2))?;
            let mut turn = NewTurn::user(task.clone());
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
            let target_row = load_session(tx, &t)?;
            let mut turn = NewTurn::user(m.clone());
            turn.provenance = Some(Provenance::inter_session(c.key.clone(), Some("sessions_send")));
            turn.run_id = Some(r.clone());
            post_turn_in(tx, ctx, &t, turn)?;
            // A CLI hears only what its hook hands over: queue the message for its next drain.
            crate::messages::queue_in(tx, ctx, &target_row, c.key.as_str(), &r, &m)?;
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
