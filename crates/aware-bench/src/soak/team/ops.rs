//! The mix and its operations, one arm each; every answer is checked against the model.

use super::state::{Team, TeamReport};
use anyhow::{anyhow, bail, Result};
use aware_client::seg;
use serde_json::json;

/// The operations and their weights (per mille of the requests' choices).
const MIX: &[(u32, Op)] = &[
    (240, Op::HumanTurn),
    (60, Op::AssistantTurn),
    (110, Op::DrainManager),
    (50, Op::DrainPeer),
    (120, Op::Reconcile),
    (90, Op::SendWatchPeer),
    (30, Op::SendWatchManager),
    (40, Op::GoalAsManager),
    (40, Op::GoalAsSystem),
    (20, Op::GoalClear),
    (30, Op::UnwatchPeer),
    (20, Op::UnwatchManager),
    (30, Op::RunEnd),
    (30, Op::FinishWorker),
    (10, Op::DeleteWorker),
    (10, Op::Recreate),
    (25, Op::Peek),
    (3, Op::RetireTeam),
];

#[derive(Clone, Copy)]
enum Op {
    HumanTurn,
    AssistantTurn,
    DrainManager,
    DrainPeer,
    Reconcile,
    SendWatchPeer,
    SendWatchManager,
    GoalAsManager,
    GoalAsSystem,
    GoalClear,
    UnwatchPeer,
    UnwatchManager,
    RunEnd,
    FinishWorker,
    DeleteWorker,
    Recreate,
    Peek,
    RetireTeam,
}

impl Team {
    /// Runs until the stop flag, then drains every watcher once more: nothing may be left.
    pub(crate) fn run(mut self) -> Result<TeamReport> {
        self.start_team()?;
        let total: u32 = MIX.iter().map(|m| m.0).sum();
        while !self.shared.stopped() {
            let mut pick = (self.rng.next() % u64::from(total)) as u32;
            let op = MIX
                .iter()
                .find(|(w, _)| {
                    if pick < *w {
                        true
                    } else {
                        pick -= w;
                        false
                    }
                })
                .map_or(Op::Peek, |m| m.1);
            self.op(op)?;
        }
        self.final_drains()?;
        self.report.notices = self.model.notices_checked;
        self.report.drains = self.model.drains_checked;
        Ok(self.report)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per operation of the team's script, each checked against the model"
    )]
    fn op(&mut self, op: Op) -> Result<()> {
        if self.workers.is_empty() {
            return self.spawn();
        }
        let i = self.pick_worker();
        let w = self.workers[i].key.clone();
        let (m, p) = (self.manager.clone(), self.peer.clone());
        let sp = seg(&w);
        self.counter += 1;
        let n = self.counter;
        match op {
            Op::HumanTurn | Op::AssistantTurn => {
                let (role, route) = match op {
                    Op::HumanTurn => ("user", "POST turns (human)"),
                    _ => ("assistant", "POST turns (assistant)"),
                };
                let body = json!({"role": role, "text": format!("soak turn {n}"),
                                  "channel": "soak"});
                let a = self.call(
                    route,
                    "POST",
                    &format!("/v1/sessions/{sp}/turns"),
                    None,
                    Some(body),
                    201,
                )?;
                self.apply_event(&w, &a)?;
            }
            Op::DrainManager => self.drain(&m)?,
            Op::DrainPeer => self.drain(&p)?,
            Op::Reconcile => {
                let since = self.model.last_seen(&m, &w).unwrap_or(0);
                let a = self.call(
                    "tool session_status changesSince",
                    "POST",
                    "/v1/tools/session_status",
                    Some(&m),
                    Some(json!({"sessionKey": w, "changesSince": since, "limit": 50})),
                    200,
                )?;
                let head = self.model.head(&w);
                if a["stateVersion"].as_i64() != head {
                    bail!(
                        "model violation: session_status of {w} says stateVersion {}, the \
                         model's head is {head:?}",
                        a["stateVersion"]
                    );
                }
            }
            Op::SendWatchPeer | Op::SendWatchManager => {
                let from = if matches!(op, Op::SendWatchPeer) {
                    &p
                } else {
                    &m
                };
                let a = self.call(
                    "tool sessions_send watch",
                    "POST",
                    "/v1/tools/sessions_send",
                    Some(from),
                    Some(
                        json!({"sessionKey": w, "message": format!("soak message {n}"),
                                "timeoutSeconds": 0, "watch": true}),
                    ),
                    200,
                )?;
                if a["watched"] != true {
                    bail!("sessions_send with watch from {from} to {w} answered {a}");
                }
                self.model.register(from, &w);
            }
            Op::GoalAsManager | Op::GoalAsSystem => {
                let caller = matches!(op, Op::GoalAsManager).then_some(m.as_str());
                let a = self.call(
                    "PUT goal",
                    "PUT",
                    &format!("/v1/sessions/{sp}/goal"),
                    caller,
                    Some(json!({"text": format!("soak goal {n}")})),
                    200,
                )?;
                if a["changed"] != true {
                    bail!("a new goal text on {w} answered {a}");
                }
                self.apply_event(&w, &a)?;
            }
            Op::GoalClear => {
                let a = self.call(
                    "DELETE goal",
                    "DELETE",
                    &format!("/v1/sessions/{sp}/goal"),
                    None,
                    None,
                    200,
                )?;
                self.apply_event(&w, &a)?;
            }
            Op::UnwatchPeer | Op::UnwatchManager => {
                let from = if matches!(op, Op::UnwatchPeer) {
                    &p
                } else {
                    &m
                };
                let a = self.call(
                    "tool sessions_unwatch",
                    "POST",
                    "/v1/tools/sessions_unwatch",
                    Some(from),
                    Some(json!({"sessionKey": w})),
                    200,
                )?;
                let expected = self.model.unwatch(from, &w);
                if a["unwatched"].as_bool() != Some(expected) {
                    bail!(
                        "model violation: sessions_unwatch {from} -> {w} answered {a}, the model \
                         says unwatched {expected}"
                    );
                }
            }
            Op::RunEnd => {
                let Some(run) = self.workers[i].run.take() else {
                    return Ok(());
                };
                let a = self.call(
                    "POST runs end",
                    "POST",
                    &format!("/v1/sessions/{sp}/runs/{}/end", seg(&run)),
                    None,
                    Some(json!({"outcome": "ok"})),
                    200,
                )?;
                self.apply_event(&w, &a)?;
            }
            Op::FinishWorker => {
                // A new session per task is the normal use: the finished worker stays in the
                // store (and in the model: its parent's cursor may still be pending), and a new
                // one is spawned. So the store grows as a long-running gateway's does.
                self.workers.remove(i);
                self.spawn()?;
            }
            Op::DeleteWorker => {
                self.delete(&w)?;
                self.workers.remove(i);
                self.spawn()?;
            }
            Op::Recreate => {
                self.delete(&w)?;
                let a = self.call(
                    "POST /v1/sessions",
                    "POST",
                    "/v1/sessions",
                    None,
                    Some(json!({"key": w, "parentSessionKey": m})),
                    201,
                )?;
                let head = a["session"]["stateVersion"]
                    .as_i64()
                    .ok_or_else(|| anyhow!("a created session without stateVersion: {a}"))?;
                self.model.created(&w, head, Some(&m));
                self.workers[i].run = None;
                self.report.sessions_created += 1;
            }
            Op::Peek => self.peek(&w)?,
            Op::RetireTeam => {
                self.final_drains()?;
                for w in std::mem::take(&mut self.workers) {
                    self.delete(&w.key)?;
                }
                self.delete(&m)?;
                self.delete(&p)?;
                self.gen += 1;
                self.start_team()?;
            }
        }
        Ok(())
    }
}
