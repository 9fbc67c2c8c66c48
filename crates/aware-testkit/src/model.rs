//! ONE reference model of the signal log and the watch behaviour (spec 01 and 02): heads,
//! pruned watermarks, retention, cursor triples, notices, drain/ack, registration, unwatch,
//! cleanup and the restart sweep, over a fixed universe of five sessions.
//!
//! The engine's model test (`aware-engine` tests, `model`) and the HTTP model test (`aware`
//! tests, `model_http`) both drive their system and this model with the same steps and compare
//! after every step through the [`Driver`] trait ([`run_case`]); each keeps its own operations and
//! observations (what its surface shows).

pub use crate::model_contract::*;
pub use aware_core::KindClass;
use aware_core::{Origin, RetentionPolicy};
use std::collections::{BTreeMap, BTreeSet};

use crate::spec::DAY;

/// The model's sessions: W, X, two children of W, and an unqualified key.
pub const W: usize = 0;
pub const X: usize = 1;
pub const C: usize = 2;
pub const D: usize = 3;
pub const G: usize = 4;
/// How many sessions the universe has.
pub const N: usize = 5;
pub const KEYS: [&str; N] = [
    "agent:main:main",
    "agent:main:coord",
    "agent:main:subagent:c",
    "agent:main:subagent:d",
    "global",
];

/// The retention the model assumes: 1-day age and cursor expiry, 12 rows.
pub fn policy() -> RetentionPolicy {
    RetentionPolicy {
        max_age_days: 1,
        max_rows: 12,
        cursor_expiry_days: 1,
        prune_interval_secs: 3600,
        batch_rows: 5,
    }
}

/// [`policy`] as an `aware serve` configuration (creation notices off, no timer prunes).
pub const SERVER_CONFIG: &str = "notify_on_create = false\n[retention]\nmax_age_days = 1\nmax_rows = 12\ncursor_expiry_days = 1\nprune_interval_secs = 31536000\nbatch_rows = 5\n[monitor]\nenabled = false\n";

/// Whether session `i` has an agent-qualified key (only those can watch).
pub fn qualified(i: usize) -> bool {
    i != G
}

/// 02 §10: only an agent-qualified watcher that is not a subagent is woken (`session-state`).
pub fn wake_eligible(i: usize) -> bool {
    qualified(i) && !KEYS[i].contains(":subagent:")
}

/// The `session-state` coalescing window the model assumes (`[wakes] coalesce_secs`, 20 s).
pub const COALESCE_MS: i64 = 20_000;

/// Which appends fail for the current step (the store's fault seam, 01 §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendFault {
    /// Every append.
    All,
    /// The appends to the stream of one session of the universe.
    Stream(usize),
}

/// The parent recorded on a session row (kept after the parent is deleted).
pub fn parent_of(i: usize) -> Option<usize> {
    matches!(i, C | D).then_some(W)
}

/// The index of a key of the universe.
pub fn index_of(k: &str) -> usize {
    KEYS.iter()
        .position(|x| *x == k)
        .unwrap_or_else(|| panic!("unknown key {k}"))
}

#[derive(Debug, Clone)]
pub struct MSession {
    pub orphaned: bool,
    pub goal: Option<(u8, bool)>,
    pub run: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MCursor {
    pub ls: i64,
    pub n: i64,
    pub m: i64,
    pub muted: bool,
    pub origin: Origin,
    pub opened: Option<i64>,
    pub updated: i64,
}

impl MCursor {
    pub fn settled(at: i64, muted: bool, origin: Origin, now: i64) -> Self {
        MCursor {
            ls: at,
            n: at,
            m: at,
            muted,
            origin,
            opened: None,
            updated: now,
        }
    }
    pub fn pending(&self) -> bool {
        !self.muted && self.n > self.ls
    }
}

#[derive(Debug, Clone, Copy)]
pub struct MHead {
    pub last: i64,
    pub pruned: i64,
}

#[derive(Debug, Clone)]
pub struct MEvent {
    pub stream: usize,
    pub dedupe: Option<String>,
    pub at: i64,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub now: i64,
    pub sessions: [Option<MSession>; N],
    pub heads: [Option<MHead>; N],
    pub events: BTreeMap<i64, MEvent>,
    /// `(watcher, target)`; every target agent is `main`.
    pub cursors: BTreeMap<(usize, usize), MCursor>,
    pub max_seq: i64,
    pub runs: u64,
    /// Each session's system-event FIFO (02 §8.3), oldest first.
    pub fifo: [Vec<MSysEvent>; N],
    /// The in-memory `session-state` coalescing (02 §10); a restart forgets it.
    pub coalescer: MCoalescer,
    /// `session-state` wake requests of the current step, in the order they were made; they
    /// are decided after the step's commit ([`Model::commit_effects`]).
    pub wake_requests: Vec<usize>,
    /// The wakes the system must have delivered during the current step (cleared by
    /// [`run_case`] after the step's check).
    pub wakes: Vec<MWake>,
    /// Appends that fail during the current step.
    pub append_fault: Option<AppendFault>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct MPrune {
    pub age: u64,
    pub cap: u64,
    pub cursors: u64,
    pub system_events: u64,
}

impl Model {
    pub fn new(now: i64) -> Self {
        Model {
            now,
            sessions: Default::default(),
            heads: [None; N],
            events: BTreeMap::new(),
            cursors: BTreeMap::new(),
            max_seq: 0,
            runs: 0,
            fifo: Default::default(),
            coalescer: MCoalescer::new(COALESCE_MS),
            wake_requests: Vec::new(),
            wakes: Vec::new(),
            append_fault: None,
        }
    }

    /// Whether an append to `stream` fails now (01 §12: the action that caused it stands, the
    /// event leaves no trace: no sequence, no head, no cursor, no wake).
    pub fn append_fails(&self, stream: usize) -> bool {
        match self.append_fault {
            Some(AppendFault::All) => true,
            Some(AppendFault::Stream(s)) => s == stream,
            None => false,
        }
    }

    /// A sequence the system issued outside the universe (a spawned child's stream): it must
    /// still be above every earlier one (01 §3).
    pub fn issued(&mut self, seq: i64, ctx: &str) {
        assert!(
            seq > self.max_seq,
            "{ctx}: sequence {seq} reused or not increasing (max issued so far {})",
            self.max_seq
        );
        self.max_seq = seq;
    }

    /// 03 §4.1: an operator's creation of `s` (created via `api`) is announced in the main
    /// session's FIFO when the main session exists and `s` is not it and has no parent.
    pub fn announce_creation(&mut self, s: usize) {
        if s == W || parent_of(s).is_some() || !self.exists(W) {
            return;
        }
        let (text, key) = spec_created_line(KEYS[s], "api");
        fifo_push(&mut self.fifo[W], &text, Some(&key), self.now);
    }

    /// 03 §3.5 / 02 §11: a reset drops the cursors the session watches with and its FIFO.
    pub fn reset(&mut self, s: usize) {
        self.cursors.retain(|&(w, _), _| w != s);
        self.fifo[s].clear();
    }

    /// The prompt of a drain or peek of `w` (02 §8.4) from the model's FIFO and notices.
    pub fn prompt_of(&self, w: usize) -> String {
        let mut items: Vec<(i64, String)> = self.fifo[w]
            .iter()
            .map(|e| (e.at, e.text.clone()))
            .collect();
        for (t, c) in self.pending_of(w) {
            let opened = c.opened.unwrap_or(c.updated);
            items.push((opened, spec_notice_text(KEYS[t], c.ls)));
        }
        spec_prompt(&items)
    }

    /// A `message` or `spawn` wake (02 §10): immediate, never coalesced.
    pub fn direct_wake(&mut self, session: &str, reason: MWakeReason, run_id: &str, from: usize) {
        self.wakes.push(MWake {
            session: session.to_string(),
            reason,
            targets: Vec::new(),
            run_id: Some(run_id.to_string()),
            from: Some(KEYS[from].to_string()),
            at: self.now,
        });
    }

    fn state_wake(&self, w: usize) -> MWake {
        MWake {
            session: KEYS[w].to_string(),
            reason: MWakeReason::SessionState,
            targets: self
                .pending_of(w)
                .iter()
                .map(|(t, _)| KEYS[*t].to_string())
                .collect(),
            run_id: None,
            from: None,
            at: self.now,
        }
    }

    /// After the step's commit: each `session-state` request of the step, in order, through
    /// the coalescer (02 §10); a wake delivered at once lists the watcher's pending targets as
    /// they are after the commit. Also ends the step's append fault.
    pub fn commit_effects(&mut self) {
        let now = self.now;
        for w in std::mem::take(&mut self.wake_requests) {
            if wake_eligible(w) && self.coalescer.request(w, now) {
                let wake = self.state_wake(w);
                self.wakes.push(wake);
            }
        }
        self.append_fault = None;
    }

    /// The engine clock moves by `ms`; the merged deliveries that fell due go out when the
    /// watcher still has something pending, else nothing is sent (02 §10).
    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
        for w in self.coalescer.take_due(self.now) {
            if !self.pending_of(w).is_empty() {
                let wake = self.state_wake(w);
                self.wakes.push(wake);
                self.coalescer.delivered(w, self.now);
            }
        }
    }

    /// 02 §10 catch-up: one `session-state` wake per eligible watcher with pending notices, in
    /// key order.
    pub fn catch_up(&self) -> Vec<MWake> {
        let mut ws: Vec<usize> = (0..N)
            .filter(|&w| wake_eligible(w) && self.exists(w) && !self.pending_of(w).is_empty())
            .collect();
        ws.sort_by_key(|&w| KEYS[w]);
        ws.into_iter().map(|w| self.state_wake(w)).collect()
    }

    pub fn exists(&self, i: usize) -> bool {
        self.sessions[i].is_some()
    }

    pub fn head(&self, i: usize) -> i64 {
        self.heads[i].map_or(0, |h| h.last)
    }

    pub fn pruned(&self, i: usize) -> i64 {
        self.heads[i].map_or(0, |h| h.pruned)
    }

    pub fn orphaned(&self, i: usize) -> bool {
        self.sessions[i].as_ref().is_some_and(|s| s.orphaned)
    }

    /// 03 §4.2: a human user turn records when the session has a parent, else when at least one
    /// non-muted cursor targets it.
    pub fn human_turn_records(&self, t: usize) -> bool {
        parent_of(t).is_some() || self.cursors.iter().any(|(&(_, tt), c)| tt == t && !c.muted)
    }

    pub fn retained(&self, i: usize) -> Vec<i64> {
        self.events
            .iter()
            .filter(|(_, e)| e.stream == i)
            .map(|(s, _)| *s)
            .collect()
    }

    pub fn event_by_dedupe(&self, dedupe: &str) -> Option<i64> {
        self.events
            .iter()
            .find(|(_, e)| e.dedupe.as_deref() == Some(dedupe))
            .map(|(s, _)| *s)
    }

    /// 01 §4 steps 5–7 and 02 §2–§6 for an event the engine recorded with sequence `seq`.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        stream: usize,
        seq: i64,
        dedupe: Option<String>,
        class: KindClass,
        actor_id: Option<&str>,
        passed: &[usize],
        ctx: &str,
    ) {
        assert!(
            seq > self.max_seq,
            "{ctx}: sequence {seq} reused or not increasing (max issued so far {})",
            self.max_seq
        );
        self.max_seq = seq;
        self.events.insert(
            seq,
            MEvent {
                stream,
                dedupe,
                at: self.now,
            },
        );
        let head = self.heads[stream].get_or_insert(MHead { last: 0, pruned: 0 });
        assert!(seq > head.last, "{ctx}: head would be lowered");
        head.last = seq;

        if class == KindClass::LogOnly {
            return;
        }
        // 02 §2: candidates = P, then registered (material only); duplicates removed; drops.
        let mut candidates: Vec<usize> = passed.to_vec();
        if class == KindClass::Material {
            candidates.extend(
                self.cursors
                    .iter()
                    .filter(|(&(_, t), c)| t == stream && !c.muted)
                    .map(|(&(w, _), _)| w),
            );
        }
        // The orphaned target's parent leaves the producer-passed list before duplicates are
        // removed, so an explicit registration by a re-created parent is honoured (the
        // documented reading of 02 §2 step 3, see ARCHITECTURE.md).
        let orphan_parent = if self.orphaned(stream) {
            parent_of(stream)
        } else {
            None
        };
        let n_passed = passed.len();
        let mut index = 0;
        candidates.retain(|w| {
            index += 1;
            !(index <= n_passed && orphan_parent == Some(*w))
        });
        let mut seen = BTreeSet::new();
        candidates.retain(|w| seen.insert(*w));
        candidates.retain(|&w| qualified(w) && self.exists(w) && w != stream);
        let now = self.now;
        for w in candidates {
            let existing = self.cursors.get(&(w, stream)).copied();
            match class {
                KindClass::Seeds => {
                    if existing.is_some_and(|c| c.muted) {
                        continue;
                    }
                    self.cursors.insert(
                        (w, stream),
                        MCursor::settled(seq, false, Origin::Spawn, now),
                    );
                }
                KindClass::Material => {
                    if existing.is_some_and(|c| c.muted) || actor_id == Some(KEYS[w]) {
                        continue;
                    }
                    let mut c = existing.unwrap_or(MCursor::settled(0, false, Origin::Parent, now));
                    if c.n == c.ls {
                        c.n = seq;
                        c.opened = Some(now);
                        self.wake_requests.push(w);
                    }
                    c.m = seq;
                    c.updated = now;
                    self.cursors.insert((w, stream), c);
                }
                KindClass::LogOnly => unreachable!(),
            }
        }
    }

    /// Pending notices of `w` in 02 §8.1 order: notified, then target key, then agent.
    pub fn pending_of(&self, w: usize) -> Vec<(usize, MCursor)> {
        let mut v: Vec<(usize, MCursor)> = self
            .cursors
            .iter()
            .filter(|(&(ww, _), c)| ww == w && c.pending())
            .map(|(&(_, t), c)| (t, *c))
            .collect();
        v.sort_by(|a, b| (a.1.n, KEYS[a.0]).cmp(&(b.1.n, KEYS[b.0])));
        v
    }

    /// 02 §7 registration of `(w, t)` that the system accepted: a new or muted row settles at
    /// the target's head (origin `watch`), an unmuted one only refreshes `updated_at`.
    pub fn register(&mut self, w: usize, t: usize) -> MCursor {
        let now = self.now;
        let head = self.head(t);
        *self
            .cursors
            .entry((w, t))
            .and_modify(|c| {
                if c.muted {
                    *c = MCursor::settled(head, false, Origin::Watch, now);
                } else {
                    c.updated = now;
                }
            })
            .or_insert(MCursor::settled(head, false, Origin::Watch, now))
    }

    /// Whether registering `(w, t)` is accepted (02 §7 step 1).
    pub fn may_register(&self, w: usize, t: usize) -> bool {
        qualified(w) && w != t && self.exists(w) && self.exists(t)
    }

    /// 02 §9 step 3; returns whether a follow-up opened.
    pub fn ack(&mut self, w: usize, t: usize) -> bool {
        let now = self.now;
        let c = self.cursors.get_mut(&(w, t)).unwrap();
        let (n, m) = (c.n, c.m);
        c.ls = n;
        c.n = m.max(n);
        c.updated = now;
        let follow = m > n;
        c.opened = follow.then_some(now);
        if follow {
            self.wake_requests.push(w);
        }
        follow
    }

    pub fn delete(&mut self, s: usize) {
        self.sessions[s] = None;
        self.cursors.retain(|&(w, t), _| w != s && t != s);
        self.events.retain(|_, e| e.stream != s);
        self.heads[s] = None;
        self.fifo[s].clear();
        self.coalescer.forget(s);
        for child in 0..N {
            if parent_of(child) == Some(s) {
                if let Some(cs) = self.sessions[child].as_mut() {
                    cs.orphaned = true;
                }
            }
        }
    }

    /// 01 §9 phases 1–4.
    pub fn prune(&mut self) -> MPrune {
        let p = policy();
        let mut report = MPrune::default();
        let cutoff = self.now - i64::from(p.max_age_days) * DAY;
        let by_age: Vec<i64> = self
            .events
            .iter()
            .filter(|(_, e)| e.at < cutoff)
            .map(|(s, _)| *s)
            .collect();
        for s in by_age {
            self.prune_one(s);
            report.age += 1;
        }
        while self.events.len() as u64 > p.max_rows {
            let lowest = *self.events.keys().next().unwrap();
            self.prune_one(lowest);
            report.cap += 1;
        }
        let ccut = self.now - i64::from(p.cursor_expiry_days) * DAY;
        let before = self.cursors.len();
        self.cursors.retain(|_, c| c.muted || c.updated >= ccut);
        report.cursors = (before - self.cursors.len()) as u64;
        for fifo in self.fifo.iter_mut() {
            let before = fifo.len();
            fifo.retain(|e| e.at >= cutoff);
            report.system_events += (before - fifo.len()) as u64;
        }
        report
    }

    pub fn prune_one(&mut self, seq: i64) {
        let e = self.events.remove(&seq).unwrap();
        if let Some(h) = self.heads[e.stream].as_mut() {
            h.pruned = h.pruned.max(seq);
        }
    }

    /// 02 §12 steps 1–3 after a restart (which forgets the coalescing state); returns the
    /// number of re-frozen rows. One wake request per distinct watcher with a re-frozen row.
    pub fn sweep(&mut self) -> u64 {
        let now = self.now;
        self.coalescer = MCoalescer::new(self.coalescer.window);
        let exists: Vec<bool> = (0..N).map(|i| self.exists(i)).collect();
        let mut n = 0;
        let mut woken = BTreeSet::new();
        for (&(w, _), c) in self.cursors.iter_mut() {
            if c.pending() && exists[w] {
                c.n = c.m;
                c.updated = now;
                c.opened = Some(c.opened.unwrap_or(now));
                n += 1;
                woken.insert(KEYS[w]);
            }
        }
        self.wake_requests.extend(woken.into_iter().map(index_of));
        n
    }
}

/// A system compared with the reference [`Model`]: the engine in process, or `aware serve` over
/// HTTP. Each driver has its own steps (what its surface offers) and its own observations; the
/// model and the way a case runs are shared.
pub trait Driver {
    /// The steps this driver can take.
    type Op: std::fmt::Debug;
    /// What [`Driver::check`] carries from one step to the next (heads and sequences seen, ...).
    type Observed: Default;
    /// The step that creates session `s` of the universe.
    fn create(s: usize) -> Self::Op;
    /// Performs `op` on the system and on `model`, asserting the system's answer.
    fn apply(&mut self, model: &mut Model, op: &Self::Op, ctx: &str);
    /// Compares the system's observable state with `model` after `op`, and the cross-step
    /// properties (heads never lowered, sequences never reused, ...) against `prev`.
    fn check(
        &self,
        model: &Model,
        prev: &Self::Observed,
        op: Option<&Self::Op>,
        ctx: &str,
    ) -> Self::Observed;
    /// Called once after the last step.
    fn finish(&mut self) {}
}

/// Runs one case: creates every session of the universe (W, X, G, C, D), then takes `ops`,
/// checking the system against `model` after every step. The model's after-commit effects
/// (wake decisions) are settled between `apply` and `check`; a driver that observes wakes
/// compares them with [`Model::wakes`] in `check`.
pub fn run_case<S: Driver>(system: &mut S, model: &mut Model, ops: &[S::Op]) {
    let mut obs = S::Observed::default();
    for s in [W, X, G, C, D] {
        let op = S::create(s);
        let ctx = format!("setup {op:?}");
        system.apply(model, &op, &ctx);
        model.commit_effects();
        obs = system.check(model, &obs, Some(&op), &ctx);
        model.wakes.clear();
    }
    for (i, op) in ops.iter().enumerate() {
        let ctx = format!("step {i} {op:?}");
        system.apply(model, op, &ctx);
        model.commit_effects();
        obs = system.check(model, &obs, Some(op), &ctx);
        model.wakes.clear();
    }
    system.finish();
}
