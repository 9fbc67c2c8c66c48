//! ONE reference model of the signal log and the watch behaviour (spec 01 and 02): heads,
//! pruned watermarks, retention, cursor triples, notices, drain/ack, registration, unwatch,
//! cleanup and the restart sweep, over a fixed universe of five sessions.
//!
//! The engine's model test (`aware-engine` tests, `model`) and the HTTP model test (`aware`
//! tests, `model_http`) both drive their system and this model with the same steps and compare
//! after every step through the [`Driver`] trait ([`run_case`]); each keeps its own operations and
//! observations (what its surface shows).

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
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct MPrune {
    pub age: u64,
    pub cap: u64,
    pub cursors: u64,
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
        }
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
        follow
    }

    pub fn delete(&mut self, s: usize) {
        self.sessions[s] = None;
        self.cursors.retain(|&(w, t), _| w != s && t != s);
        self.events.retain(|_, e| e.stream != s);
        self.heads[s] = None;
        for child in 0..N {
            if parent_of(child) == Some(s) {
                if let Some(cs) = self.sessions[child].as_mut() {
                    cs.orphaned = true;
                }
            }
        }
    }

    /// 01 §9 phases 1–3.
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
        report
    }

    pub fn prune_one(&mut self, seq: i64) {
        let e = self.events.remove(&seq).unwrap();
        if let Some(h) = self.heads[e.stream].as_mut() {
            h.pruned = h.pruned.max(seq);
        }
    }

    /// 02 §12 steps 1–2; returns the number of re-frozen rows.
    pub fn sweep(&mut self) -> u64 {
        let now = self.now;
        let exists: Vec<bool> = (0..N).map(|i| self.exists(i)).collect();
        let mut n = 0;
        for (&(w, _), c) in self.cursors.iter_mut() {
            if c.pending() && exists[w] {
                c.n = c.m;
                c.updated = now;
                c.opened = Some(c.opened.unwrap_or(now));
                n += 1;
            }
        }
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
/// checking the system against `model` after every step.
pub fn run_case<S: Driver>(system: &mut S, model: &mut Model, ops: &[S::Op]) {
    let mut obs = S::Observed::default();
    for s in [W, X, G, C, D] {
        let op = S::create(s);
        let ctx = format!("setup {op:?}");
        system.apply(model, &op, &ctx);
        obs = system.check(model, &obs, Some(&op), &ctx);
    }
    for (i, op) in ops.iter().enumerate() {
        let ctx = format!("step {i} {op:?}");
        system.apply(model, op, &ctx);
        obs = system.check(model, &obs, Some(op), &ctx);
    }
    system.finish();
}
