//! The upstream monitor (04 §7): a tick on the engine clock that probes watched, idle, adopted
//! sessions through their providers, records human activity and vanished sources, and moves
//! each link's marker only after the record.

use crate::exec::{ExecError, ProviderExec};
use crate::provider::{Outcome, Probe, Provider};
use aware_core::{ActorType, AgentId, EventKind, SessionKey, SessionRef};
use aware_engine::views::LinkRow;
use aware_engine::{source_key16, AppendRequest, Engine, Settlement};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct MonitorConfig {
    pub first_tick_ms: i64,
    pub interval_ms: i64,
    pub provider_timeout: Duration,
    pub missing_threshold: u32,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            first_tick_ms: 15_000,
            interval_ms: 60_000,
            provider_timeout: Duration::from_secs(45),
            missing_threshold: 3,
        }
    }
}

/// Counters exported as metrics (03 §12).
#[derive(Debug, Default)]
pub struct MonitorMetrics {
    pub ticks: AtomicU64,
    pub ticks_skipped: AtomicU64,
    pub provider_timeouts: AtomicU64,
    pub human_turns: AtomicU64,
    pub missing: AtomicU64,
}

/// The missing streak of one source, in memory only.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Streak {
    count: u32,
    link_updated_at: i64,
    /// The incarnation the streak was counted for: a reset starts it over (04 §7).
    session_id: String,
}

type CounterKey = (String, String, String);

pub struct Monitor {
    engine: Engine,
    /// By `catalog\0host`: the local providers (`gateway:local`) and one per paired node.
    providers: BTreeMap<String, Arc<dyn Provider>>,
    config: MonitorConfig,
    /// Engine time of the next tick; a std mutex, never held across `.await`.
    next_due: Mutex<i64>,
    counters: Mutex<HashMap<CounterKey, Streak>>,
    /// Single flight: held for the whole tick.
    tick_lock: tokio::sync::Mutex<()>,
    stopped: AtomicBool,
    pub metrics: MonitorMetrics,
    /// Where provider checks run: bounded per provider, off the engine's blocking pool.
    exec: Arc<ProviderExec>,
}

struct Snapshot {
    link: LinkRow,
    session: SessionRef,
    session_id: String,
    own: Vec<String>,
    source16: String,
}

fn parse_json(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

impl Monitor {
    pub fn new(
        engine: Engine,
        providers: Vec<Arc<dyn Provider>>,
        config: MonitorConfig,
        started_at: i64,
    ) -> Self {
        Monitor {
            engine,
            providers: providers
                .into_iter()
                .map(|p| (format!("{}\0{}", p.catalog_id(), p.host_id()), p))
                .collect(),
            config,
            next_due: Mutex::new(started_at + config.first_tick_ms),
            counters: Mutex::new(HashMap::new()),
            tick_lock: tokio::sync::Mutex::new(()),
            stopped: AtomicBool::new(false),
            metrics: MonitorMetrics::default(),
            exec: Arc::new(ProviderExec::default()),
        }
    }

    /// Runs checks on `exec`, shared with the catalog routes so one provider's cap covers both.
    pub fn with_exec(mut self, exec: Arc<ProviderExec>) -> Self {
        self.exec = exec;
        self
    }

    pub fn next_due(&self) -> i64 {
        self.next_due.lock().map(|d| *d).unwrap_or(i64::MAX)
    }

    /// The misses in a row counted so far for a session's current link (the link's
    /// `updated_at` tells a re-continued link from the old one), and the threshold at which
    /// `upstream_missing` is recorded. Read-only, for the console.
    pub fn missing_streak(
        &self,
        session_key: &str,
        agent: &str,
        link_updated_at: i64,
    ) -> (u32, u32) {
        let count = self
            .counters()
            .iter()
            .filter(|((k, a, _), s)| {
                k == session_key && a == agent && s.link_updated_at == link_updated_at
            })
            .map(|(_, s)| s.count)
            .max()
            .unwrap_or(0);
        (count, self.config.missing_threshold.max(1))
    }

    /// Runs a tick when one fell due at `now` (once, however many were missed). A tick due
    /// while the previous one still runs is skipped, not queued.
    pub async fn run_due(&self, now: i64) {
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        let due = {
            let Ok(mut next) = self.next_due.lock() else {
                return;
            };
            if now < *next {
                return;
            }
            let missed = (now - *next) / self.config.interval_ms.max(1);
            *next += (missed + 1) * self.config.interval_ms.max(1);
            true
        };
        if due {
            match self.tick_lock.try_lock() {
                Ok(_guard) => self.tick().await,
                Err(_) => {
                    self.metrics.ticks_skipped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Stops the monitor: waits for the tick in flight; whatever it learns after this point is
    /// discarded (no event, no settle, no counter change).
    pub async fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _wait = self.tick_lock.lock().await;
    }

    fn live(&self) -> bool {
        !self.stopped.load(Ordering::SeqCst)
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, HashMap<CounterKey, Streak>> {
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One tick (04 §7).
    pub async fn tick(&self) {
        self.metrics.ticks.fetch_add(1, Ordering::Relaxed);
        let engine = self.engine.clone();
        let groups = tokio::task::spawn_blocking(move || engine.links_watched())
            .await
            .unwrap_or_default();
        let listed: std::collections::HashSet<CounterKey> = groups
            .values()
            .flatten()
            .map(|l| (l.session_key.clone(), l.agent_id.clone(), link_source16(l)))
            .collect();
        self.counters().retain(|k, _| listed.contains(k));
        for links in groups.values() {
            for provider in self.providers.values() {
                let (host, catalog) = (provider.host_id(), provider.catalog_id());
                let mine: Vec<&LinkRow> = links
                    .iter()
                    .filter(|l| l.host_id == host && l.catalog_id == catalog)
                    .collect();
                if mine.is_empty() || !self.live() {
                    continue;
                }
                self.check_provider(provider.clone(), mine).await;
            }
        }
    }

    async fn snapshot(&self, link: &LinkRow) -> Option<Snapshot> {
        let key = SessionKey::parse(&link.session_key).ok()?;
        let agent = AgentId::parse(&link.agent_id).ok()?;
        let session = SessionRef { key, agent };
        let engine = self.engine.clone();
        let s2 = session.clone();
        let (row, own) = tokio::task::spawn_blocking(move || {
            let s = engine.get_session(&s2).ok()?;
            let own = engine.own_recent_user_texts(&s2).ok()?;
            Some((s.row, own))
        })
        .await
        .ok()??;
        if row.active_run_id.is_some() {
            return None;
        }
        Some(Snapshot {
            source16: link_source16(link),
            link: link.clone(),
            session,
            session_id: row.session_id,
            own,
        })
    }

    async fn check_provider(&self, provider: Arc<dyn Provider>, links: Vec<&LinkRow>) {
        let mut snaps: Vec<Snapshot> = Vec::new();
        for l in links {
            if let Some(s) = self.snapshot(l).await {
                snaps.push(s);
            }
        }
        if snaps.is_empty() {
            return;
        }
        let probes: Vec<Probe> = snaps
            .iter()
            .map(|s| Probe {
                session_key: s.link.session_key.clone(),
                agent_id: s.link.agent_id.clone(),
                host_id: s.link.host_id.clone(),
                thread_id: s.link.thread_id.clone(),
                upstream_kind: s.link.upstream_kind.clone(),
                upstream_ref: parse_json(Some(&s.link.upstream_ref_json)),
                marker: parse_json(s.link.last_marker_json.as_deref()),
                own_recent_user_texts: s.own.clone(),
            })
            .collect();
        let host = provider.host_id();
        let engine = self.engine.clone();
        let call = self.exec.run(&host, self.config.provider_timeout, move || {
            // The test seams of `POST /v1/admin/faults` (test mode only): a provider that never
            // answers, or one that fails. The real providers bound their own I/O and turn their
            // errors into "no outcome" per probe (04 §10), so otherwise only a stuck system call
            // or a panic reaches the timeout and failure paths below.
            let faults = engine.store_faults();
            while faults.provider_checks_stalled() {
                std::thread::sleep(Duration::from_millis(5));
            }
            if faults.provider_checks_fail() {
                return Err(crate::provider::ProviderError::Io(
                    "injected provider failure".into(),
                ));
            }
            provider.check(&probes)
        });
        let outcomes = match call.await {
            Err(ExecError::Timeout(_)) => {
                tracing::warn!(event = "upstream_check_timeout", host = %host, "provider did not answer in time; the batch counts as no outcome");
                self.metrics
                    .provider_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                tracing::warn!(event = "upstream_check_failed", host = %host, error = %e, "provider task failed");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(event = "upstream_check_failed", host = %host, error = %e, "provider check failed");
                return;
            }
            Ok(Ok(o)) => o,
        };
        if !self.live() {
            return;
        }
        // Streak reset: every probe without a `missing` outcome.
        {
            let mut counters = self.counters();
            for s in &snaps {
                let got_missing = outcomes.iter().any(|o| matches!(o, Outcome::Missing { session_key } if *session_key == s.link.session_key));
                if !got_missing {
                    counters.remove(&(
                        s.link.session_key.clone(),
                        s.link.agent_id.clone(),
                        s.source16.clone(),
                    ));
                }
            }
        }
        for outcome in outcomes {
            if !self.live() {
                return;
            }
            let Some(snap) = snaps
                .iter()
                .find(|s| s.link.session_key == outcome.session_key())
            else {
                continue;
            };
            match outcome {
                Outcome::Missing { .. } => self.on_missing(snap).await,
                Outcome::Activity {
                    human_turns,
                    next_marker,
                    occurred_at,
                    dedupe_id,
                    ..
                } => {
                    self.on_activity(snap, human_turns, next_marker, occurred_at, dedupe_id)
                        .await
                }
            }
        }
    }

    async fn current(
        &self,
        snap: &Snapshot,
    ) -> Option<(
        Option<LinkRow>,
        Option<aware_engine::views::SessionRow>,
        Vec<String>,
    )> {
        let engine = self.engine.clone();
        let s = snap.session.clone();
        tokio::task::spawn_blocking(move || {
            let link = engine.link(&s).ok()?;
            let row = engine.get_session(&s).ok().map(|x| x.row);
            let own = engine.own_recent_user_texts(&s).unwrap_or_default();
            Some((link, row, own))
        })
        .await
        .ok()?
    }

    async fn on_missing(&self, snap: &Snapshot) {
        let ckey = (
            snap.link.session_key.clone(),
            snap.link.agent_id.clone(),
            snap.source16.clone(),
        );
        let Some((link, row, _)) = self.current(snap).await else {
            return;
        };
        if link.as_ref() != Some(&snap.link) {
            self.counters().remove(&ckey);
            return;
        }
        let Some(row) = row.filter(|r| r.session_id == snap.session_id) else {
            self.counters().remove(&ckey);
            return;
        };
        if row.active_run_id.is_some() {
            return;
        }
        let threshold = self.config.missing_threshold.max(1);
        let count = {
            let mut counters = self.counters();
            let prev = counters.get(&ckey);
            let base = match prev {
                Some(p)
                    if p.link_updated_at == snap.link.updated_at
                        && p.session_id == snap.session_id =>
                {
                    p.count
                }
                _ => 0,
            };
            let count = (base + 1).min(threshold);
            counters.insert(
                ckey.clone(),
                Streak {
                    count,
                    link_updated_at: snap.link.updated_at,
                    session_id: snap.session_id.clone(),
                },
            );
            count
        };
        if count < threshold || !self.live() {
            return;
        }
        let mut req = AppendRequest::new(
            snap.session.clone(),
            EventKind::UpstreamMissing,
            ActorType::System,
        );
        req.dedupe_key = Some(format!(
            "upstream-missing:{}:{}:{}",
            snap.link.session_key, snap.source16, snap.link.updated_at
        ));
        req.summary = format!("upstream missing via {}", snap.link.catalog_id);
        req.payload = Some(serde_json::json!({"channel": snap.link.catalog_id}));
        let engine = self.engine.clone();
        let (l, sid) = (snap.link.clone(), snap.session_id.clone());
        let recorded = tokio::task::spawn_blocking(move || engine.record_upstream(&l, &sid, req))
            .await
            .ok()
            .and_then(|r| r.ok())
            .and_then(|o| o.into_event());
        if recorded.is_none() {
            if let Some(s) = self.counters().get_mut(&ckey) {
                s.count = threshold - 1;
            }
            return;
        }
        self.metrics.missing.fetch_add(1, Ordering::Relaxed);
        let engine = self.engine.clone();
        let l = snap.link.clone();
        let settled =
            tokio::task::spawn_blocking(move || engine.link_settle(&l, Settlement::Missing))
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or(false);
        if settled {
            self.counters().remove(&ckey);
        }
    }

    async fn on_activity(
        &self,
        snap: &Snapshot,
        human_turns: u32,
        next_marker: Value,
        occurred_at: Option<i64>,
        dedupe_id: Option<String>,
    ) {
        let ckey = (
            snap.link.session_key.clone(),
            snap.link.agent_id.clone(),
            snap.source16.clone(),
        );
        self.counters().remove(&ckey);
        // Provenance re-check: same idle incarnation, same self-echo list.
        let Some((_, row, own)) = self.current(snap).await else {
            return;
        };
        let same = row
            .is_some_and(|r| r.session_id == snap.session_id && r.active_run_id.is_none())
            && own == snap.own;
        if !same || !self.live() {
            return;
        }
        if human_turns > 0 {
            let (Some(at), Some(id)) = (occurred_at, dedupe_id.filter(|d| !d.is_empty())) else {
                return;
            };
            let mut req = AppendRequest::new(
                snap.session.clone(),
                EventKind::HumanDirectMessage,
                ActorType::Human,
            );
            req.dedupe_key = Some(format!(
                "upstream:{}:{}:{}",
                snap.link.session_key, snap.source16, id
            ));
            req.summary = format!("human message via {}", snap.link.catalog_id);
            if human_turns > 1 {
                req.payload = Some(serde_json::json!({"turns": human_turns}));
            }
            req.occurred_at = Some(at);
            let engine = self.engine.clone();
            let (l, sid) = (snap.link.clone(), snap.session_id.clone());
            let recorded =
                tokio::task::spawn_blocking(move || engine.record_upstream(&l, &sid, req))
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .and_then(|o| o.into_event());
            // Record, then advance: nothing recorded, nothing consumed.
            if recorded.is_none() || !self.live() {
                return;
            }
            self.metrics
                .human_turns
                .fetch_add(u64::from(human_turns), Ordering::Relaxed);
        }
        let engine = self.engine.clone();
        let l = snap.link.clone();
        let _ = tokio::task::spawn_blocking(move || {
            engine.link_settle(&l, Settlement::Activity(next_marker))
        })
        .await;
    }
}

fn link_source16(l: &LinkRow) -> String {
    source_key16(
        &l.host_id,
        &l.thread_id,
        &parse_json(Some(&l.upstream_ref_json)),
    )
}
