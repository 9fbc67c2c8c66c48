//! A team's sessions, its connection, its model and the requests every operation is made of.

use crate::soak::client::Conn;
use crate::soak::model::Model;
use crate::soak::shared::Shared;
use crate::util::Lcg;
use anyhow::{anyhow, bail, Context, Result};
use aware_client::seg;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Workers a team keeps (a retired one is replaced).
const WORKERS: usize = 5;

pub(super) struct Worker {
    pub(super) key: String,
    /// The run `sessions_spawn` started, until it is ended.
    pub(super) run: Option<String>,
}

/// What a team did, for the report.
#[derive(Default)]
pub(crate) struct TeamReport {
    pub(crate) notices: u64,
    pub(crate) drains: u64,
    pub(crate) sessions_created: u64,
}

pub(crate) struct Team {
    pub(super) id: usize,
    pub(super) gen: u64,
    pub(super) conn: Conn,
    pub(super) model: Model,
    pub(super) rng: Lcg,
    pub(super) manager: String,
    pub(super) peer: String,
    pub(super) workers: Vec<Worker>,
    pub(super) counter: u64,
    pub(super) report: TeamReport,
    pub(super) shared: Shared,
    /// Pacing: when the next request may go.
    pub(super) next: Instant,
    pub(super) interval: Duration,
}

impl Team {
    pub(crate) fn new(id: usize, shared: Shared, interval: Duration) -> Result<Team> {
        let conn = Conn::connect(&shared.base, shared.stats.clone())?;
        Ok(Team {
            id,
            gen: 0,
            conn,
            model: Model::default(),
            rng: Lcg(0x50ac_0000 + id as u64),
            manager: String::new(),
            peer: String::new(),
            workers: Vec::new(),
            counter: 0,
            report: TeamReport::default(),
            shared,
            next: Instant::now(),
            interval,
        })
    }

    /// Waits for this team's next slot of the target rate. After a stall it does not try to
    /// catch up more than a second's worth, so a slow gateway is not hit by a wall of requests.
    pub(super) fn pace(&mut self) {
        let now = Instant::now();
        if self.next > now {
            std::thread::sleep(self.next - now);
        } else if now - self.next > Duration::from_secs(1) {
            self.next = now;
        }
        self.next += self.interval;
    }

    pub(super) fn call(
        &mut self,
        route: &'static str,
        method: &str,
        path: &str,
        caller: Option<&str>,
        body: Option<Value>,
        expect: u16,
    ) -> Result<Value> {
        self.pace();
        let body = body.map(|b| b.to_string());
        self.conn
            .call(route, method, path, caller, body.as_deref(), expect)
    }

    /// The event an answer carries, if any, applied to the model.
    pub(super) fn apply_event(&mut self, target: &str, answer: &Value) -> Result<()> {
        let e = &answer["event"];
        if e.is_null() {
            return Ok(());
        }
        let seq = e["sequence"]
            .as_i64()
            .ok_or_else(|| anyhow!("an event without a sequence: {e}"))?;
        let material = matches!(
            e["kind"].as_str(),
            Some("human_direct_message" | "goal_changed" | "upstream_missing")
        );
        self.model
            .event(target, seq, material, e["actorId"].as_str());
        Ok(())
    }

    pub(super) fn start_team(&mut self) -> Result<()> {
        self.manager = format!("agent:main:soak-t{}-g{}-m", self.id, self.gen);
        self.peer = format!("agent:main:soak-t{}-g{}-p", self.id, self.gen);
        for key in [self.manager.clone(), self.peer.clone()] {
            self.call(
                "POST /v1/sessions",
                "POST",
                "/v1/sessions",
                None,
                Some(json!({"key": key})),
                201,
            )?;
            self.model.created(&key, 0, None);
            self.report.sessions_created += 1;
        }
        if let Ok(mut m) = self.shared.managers.lock() {
            if let Some(slot) = m.get_mut(self.id) {
                slot.clone_from(&self.manager);
            }
        }
        while self.workers.len() < WORKERS {
            self.spawn()?;
        }
        Ok(())
    }

    /// `sessions_spawn` as the manager, then a `session_status` of the child for its head (the
    /// `child_spawned` sequence that seeded the manager's cursor).
    pub(super) fn spawn(&mut self) -> Result<()> {
        self.counter += 1;
        let m = self.manager.clone();
        let a = self.call(
            "tool sessions_spawn",
            "POST",
            "/v1/tools/sessions_spawn",
            Some(&m),
            Some(json!({"task": format!("soak task {}", self.counter)})),
            200,
        )?;
        let child = a["childSessionKey"]
            .as_str()
            .ok_or_else(|| anyhow!("sessions_spawn without childSessionKey: {a}"))?
            .to_string();
        let run = a["runId"].as_str().map(str::to_string);
        let s = self.call(
            "tool session_status",
            "POST",
            "/v1/tools/session_status",
            Some(&m),
            Some(json!({"sessionKey": child})),
            200,
        )?;
        let head = s["stateVersion"]
            .as_i64()
            .ok_or_else(|| anyhow!("session_status without stateVersion: {s}"))?;
        self.model.created(&child, head, Some(&m));
        self.workers.push(Worker { key: child, run });
        self.report.sessions_created += 1;
        Ok(())
    }

    pub(super) fn pick_worker(&mut self) -> usize {
        (self.rng.next() % self.workers.len().max(1) as u64) as usize
    }

    pub(super) fn delete(&mut self, key: &str) -> Result<()> {
        let a = self.call(
            "DELETE /v1/sessions/{key}",
            "DELETE",
            &format!("/v1/sessions/{}", seg(key)),
            None,
            None,
            200,
        )?;
        if a["deleted"] != true {
            bail!("deleting {key} answered {a}");
        }
        self.model.deleted(key);
        Ok(())
    }

    /// Reads that change nothing: the worker, the manager's pending notices (their count must
    /// be the model's), the manager's list.
    pub(super) fn peek(&mut self, w: &str) -> Result<()> {
        let m = self.manager.clone();
        self.call(
            "GET /v1/sessions/{key}",
            "GET",
            &format!("/v1/sessions/{}", seg(w)),
            None,
            None,
            200,
        )?;
        let a = self.call(
            "GET pending",
            "GET",
            &format!("/v1/sessions/{}/pending", seg(&m)),
            None,
            None,
            200,
        )?;
        let got = a["notices"].as_array().map_or(0, Vec::len);
        let want = self.model.pending_count(&m);
        if got != want {
            bail!("model violation: {m} has {got} pending notices, the model {want}: {a}");
        }
        Ok(())
    }

    /// Drains `watcher` and checks the notices against the model.
    pub(super) fn drain(&mut self, watcher: &str) -> Result<()> {
        let a = self.call(
            "POST drain",
            "POST",
            &format!("/v1/sessions/{}/drain", seg(watcher)),
            None,
            None,
            200,
        )?;
        if a["hasMore"] == true {
            bail!("a drain of {watcher} was cut by its limit: {a}");
        }
        let mut got = Vec::new();
        for n in a["notices"].as_array().map_or(&[][..], Vec::as_slice) {
            let target = n["targetSessionKey"]
                .as_str()
                .ok_or_else(|| anyhow!("a notice without targetSessionKey: {n}"))?;
            let last_seen = n["lastSeen"]
                .as_i64()
                .ok_or_else(|| anyhow!("a notice without lastSeen: {n}"))?;
            let text = n["text"].as_str().unwrap_or_default();
            if !text.ends_with(&format!("changesSince {last_seen}.")) {
                bail!("model violation: notice text {text:?} does not end with its lastSeen");
            }
            got.push((target.to_string(), last_seen));
        }
        self.model
            .drained(watcher, &got)
            .map_err(|e| anyhow!("model violation: {e}"))
    }

    /// Drains the manager and the peer: after the load stops (or before a team is retired),
    /// nothing the model expects may be left, and nothing else may come.
    pub(super) fn final_drains(&mut self) -> Result<()> {
        let (m, p) = (self.manager.clone(), self.peer.clone());
        for w in [&m, &p] {
            self.drain(w)
                .with_context(|| format!("the final drain of {w}"))?;
            if self.model.pending_count(w) > 0 {
                // Follow-ups opened by the ack: one more drain takes them.
                self.drain(w)
                    .with_context(|| format!("the follow-up drain of {w}"))?;
            }
            if self.model.pending_count(w) > 0 {
                bail!("{w} still has pending notices after two drains with no new events");
            }
        }
        Ok(())
    }
}
