//! Model-based test on a cluster (decision D10): three real `aware serve` gateways on one throw-away
//! PostgreSQL, [`CLIENTS`] client threads sending the reference model's operations to random
//! gateways, a `kill -9` of one gateway (the leader) mid-run and its restart, and a `kill -9` of
//! the PostgreSQL postmaster mid-run followed by its start; the gateways must recover from the
//! database restart by themselves.
//!
//! Each client thread owns five sessions of its own (the model's universe, keys suffixed
//! `-k<thread>`, which keeps the model's key order), so its operations on them are sequential and
//! its copy of [`aware_testkit::model::Model`] is exact even though the threads run concurrently
//! on a shared sequence counter. Operations: human turns (each with a text of its own), goal
//! changes as the operator and as a session, compaction markers (dedupe), watch, unwatch, drain,
//! ack and reset. Global operations (clock, prune, restart of every gateway) are left out: they
//! would act on every thread's sessions at once.
//!
//! **Acknowledged** requests (any HTTP answer other than 503 `store_unavailable`) are checked
//! exactly against the model, as in `model_http`: status, event presence and kind, sequence,
//! notices drained, ack counts, the registration cursor.
//!
//! **Unacknowledged** requests (a transport error: refused, reset, timed out; or 503
//! `store_unavailable`) may or may not have committed. The thread then waits until the cluster
//! answers again (bounded), reads every observable fact of its five sessions (every retained
//! event sequence and head through `session_status changesSince`, every cursor triple and muted
//! flag, the exact pending notices, every turn text), and requires that state to equal exactly
//! one of two models: the model without the operation, or the model with the operation applied
//! whole (its event, if it records one, taking the one new sequence of its stream, which must be
//! above every sequence seen before). So an in-doubt write is atomic (never half applied: a turn
//! stored without its event, a drain that acked some notices only), is never applied twice, and
//! nothing else changed. When both models look the same (say a drain with nothing pending) the
//! operation had no observable effect and either answer is right.
//!
//! Every 25 operations, and once at the end, each thread compares the whole observable state of
//! its sessions with its model; at the end every acknowledged (or resolved) event sequence must
//! be in its stream, and the sequences of all threads must be distinct (never reused across the
//! restarts). The seed is printed; `AWARE_TEST_SEED=<n>` repeats the operation streams (thread
//! timing still varies).

use crate::common::{seg, try_request, Pick, Resp, Server, ServerOptions, StoreChoice};
use crate::model_http::{spec_context_key, spec_notice_text};
use aware_core::Origin;
use aware_store_pg::testing::{ClusterOptions, PgCluster};
use aware_testkit::model::{
    parent_of, qualified, KindClass as Class, MCursor, MSession, Model, C, D, G, KEYS, N, W, X,
};
use aware_testkit::rng::Rng;
use aware_testkit::spec::T0;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Nothing is pruned or expires: the test clock stays at its start and the retention bounds are
/// far away, so the model needs no retention.
const CONFIG: &str = "notify_on_create = false\n[retention]\nmax_age_days = 30\nmax_rows = 1000000\ncursor_expiry_days = 30\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n";

const CLIENTS: usize = 4;
const GATEWAYS: usize = 3;
/// The sessions that can watch (agent-qualified): W, X, C, D.
const WATCHERS: usize = 4;
/// How long the cluster may stay unanswering before the test gives up.
const RECOVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
enum Op {
    Turn {
        t: usize,
        text: String,
    },
    /// Goal PUT; `actor` is the calling session (`X-Aware-Session`), else the operator.
    Goal {
        t: usize,
        text: u8,
        complete: bool,
        actor: Option<usize>,
    },
    /// A compaction marker with the dedupe key `op` and a transcript entry `summary`.
    Compaction {
        t: usize,
        op: u8,
        summary: String,
    },
    Watch {
        w: usize,
        t: usize,
    },
    Unwatch {
        w: usize,
        t: usize,
    },
    Drain {
        s: usize,
    },
    /// Ack of the pair's notice, with its current `lastSeen` or without one.
    Ack {
        w: usize,
        t: usize,
        last_seen: bool,
    },
    Reset {
        s: usize,
    },
}

/// A watcher other than `w`.
fn other_than(rng: &mut Rng, w: usize) -> usize {
    (w + 1 + rng.index(N - 1)) % N
}

fn gen(rng: &mut Rng, k: usize, n: u64) -> Op {
    let s = rng.index(N);
    let w = rng.index(WATCHERS);
    match rng.index(34) {
        0..=9 => Op::Turn {
            t: s,
            text: format!("client {k} turn {n}"),
        },
        10..=14 => Op::Goal {
            t: s,
            text: rng.index(3) as u8,
            complete: rng.index(2) == 1,
            actor: (rng.index(3) > 0).then(|| rng.index(WATCHERS)),
        },
        15..=16 => Op::Compaction {
            t: s,
            op: rng.index(4) as u8,
            summary: format!("client {k} compaction {n}"),
        },
        17..=21 => Op::Watch {
            w,
            t: other_than(rng, w),
        },
        22..=23 => Op::Unwatch {
            w,
            t: other_than(rng, w),
        },
        24..=28 => Op::Drain { s: w },
        29..=32 => Op::Ack {
            w,
            t: other_than(rng, w),
            last_seen: rng.index(2) == 1,
        },
        _ => Op::Reset { s: w },
    }
}

/// The thread-local key of session `i` of the model's universe. No key of the universe is a
/// prefix of another, so a common suffix keeps their order (the order of notices).
fn key_of(k: usize, i: usize) -> String {
    format!("{}-k{k}", KEYS[i])
}

fn goal_text(text: u8) -> String {
    format!("goal text {text}")
}

fn dedupe_of(k: usize, t: usize, op: u8) -> String {
    format!("compacted:main:{}:op{op}", key_of(k, t))
}

/// The operation's effect on the model, its event (if the model says it records one) taking
/// sequence `seq`. False when the model says it records an event and `seq` is `None`: then the
/// operation cannot have been applied.
fn effect(
    k: usize,
    m: &mut Model,
    turns: &mut [Vec<String>; N],
    op: &Op,
    seq: Option<i64>,
    ctx: &str,
) -> bool {
    let passed = |t: usize| -> Vec<usize> { parent_of(t).into_iter().collect() };
    match op {
        Op::Turn { t, text } => {
            if m.human_turn_records(*t) {
                let Some(seq) = seq else { return false };
                m.record(*t, seq, None, Class::Material, None, &passed(*t), ctx);
            }
            turns[*t].push(text.clone());
        }
        Op::Goal {
            t,
            text,
            complete,
            actor,
        } => {
            let sess = m.sessions[*t].as_mut().expect("every session exists");
            if sess.goal != Some((*text, *complete)) {
                let Some(seq) = seq else { return false };
                sess.goal = Some((*text, *complete));
                let actor = actor.map(|a| KEYS[a]);
                m.record(*t, seq, None, Class::Material, actor, &passed(*t), ctx);
            }
        }
        Op::Compaction { t, op, summary } => {
            let dedupe = dedupe_of(k, *t, *op);
            if m.event_by_dedupe(&dedupe).is_none() {
                let Some(seq) = seq else { return false };
                m.record(*t, seq, Some(dedupe), Class::LogOnly, None, &[], ctx);
                turns[*t].push(summary.clone());
            }
        }
        Op::Watch { w, t } => {
            let (now, head) = (m.now, m.head(*t));
            m.cursors
                .entry((*w, *t))
                .and_modify(|c| {
                    if c.muted {
                        *c = MCursor::settled(head, false, Origin::Watch, now);
                    } else {
                        c.updated = now;
                    }
                })
                .or_insert(MCursor::settled(head, false, Origin::Watch, now));
        }
        Op::Unwatch { w, t } => {
            if unwatch_applies(m, *w, *t) {
                let existing = m.cursors.get(&(*w, *t)).copied();
                let origin = existing.map_or(Origin::Spawn, |c| c.origin);
                let c = MCursor::settled(m.head(*t), true, origin, m.now);
                m.cursors.insert((*w, *t), c);
            }
        }
        Op::Drain { s } => {
            for (t, _) in m.pending_of(*s) {
                m.ack(*s, t);
            }
        }
        Op::Ack { w, t, .. } => {
            if m.cursors.get(&(*w, *t)).is_some_and(MCursor::pending) {
                m.ack(*w, *t);
            }
        }
        Op::Reset { s } => {
            // A new incarnation: the watcher's cursors and the old incarnation's turns go.
            m.cursors.retain(|&(w, _), _| w != *s);
            turns[*s].clear();
        }
    }
    true
}

fn unwatch_applies(m: &Model, w: usize, t: usize) -> bool {
    let existing = m.cursors.get(&(w, t)).copied();
    qualified(w)
        && !existing.is_some_and(|c| c.muted)
        && (existing.is_some() || parent_of(t) == Some(w))
}

/// Everything a client can read about its five sessions.
#[derive(Debug, PartialEq, Eq)]
struct Obs {
    /// Per session: head (`stateVersion`) and every retained sequence.
    streams: Vec<(i64, Vec<i64>)>,
    /// Per watcher: target → (lastSeen, notified, material, muted).
    cursors: Vec<BTreeMap<usize, (i64, i64, i64, bool)>>,
    /// Per watcher: (target key, lastSeen, contextKey, text) of each pending notice, in order.
    pending: Vec<Vec<(String, i64, String, String)>>,
    /// Per session: every turn text.
    turns: Vec<BTreeSet<String>>,
}

/// What `m` (with the turn texts `turns`) says a client reads.
fn expected(k: usize, m: &Model, turns: &[Vec<String>; N]) -> Obs {
    Obs {
        streams: (0..N).map(|i| (m.head(i), m.retained(i))).collect(),
        cursors: (0..WATCHERS)
            .map(|w| {
                m.cursors
                    .iter()
                    .filter(|(&(ww, _), _)| ww == w)
                    .map(|(&(_, t), c)| (t, (c.ls, c.n, c.m, c.muted)))
                    .collect()
            })
            .collect(),
        pending: (0..WATCHERS)
            .map(|w| {
                m.pending_of(w)
                    .into_iter()
                    .map(|(t, c)| notice(&key_of(k, t), c.ls))
                    .collect()
            })
            .collect(),
        turns: turns.iter().map(|v| v.iter().cloned().collect()).collect(),
    }
}

fn notice(target: &str, last_seen: i64) -> (String, i64, String, String) {
    (
        target.to_string(),
        last_seen,
        spec_context_key(target),
        spec_notice_text(target, last_seen),
    )
}

fn notices_of(ctx: &str, body: &Value) -> Vec<(String, i64, String, String)> {
    body["notices"]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: no notices array: {body}"))
        .iter()
        .map(|n| {
            (
                n["targetSessionKey"].as_str().unwrap_or("").to_string(),
                n["lastSeen"].as_i64().unwrap_or(-1),
                n["contextKey"].as_str().unwrap_or("").to_string(),
                n["text"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The first difference between two observations, for a failure message.
fn diff(want: &Obs, got: &Obs) -> Option<String> {
    for (i, name) in KEYS.iter().enumerate() {
        if want.streams[i] != got.streams[i] {
            return Some(format!(
                "stream of {name}: (head, sequences) want {:?}, got {:?}",
                want.streams[i], got.streams[i]
            ));
        }
        if want.turns[i] != got.turns[i] {
            return Some(format!(
                "turns of {name}: want {:?}, got {:?}",
                want.turns[i], got.turns[i]
            ));
        }
    }
    for (w, name) in KEYS.iter().enumerate().take(WATCHERS) {
        if want.cursors[w] != got.cursors[w] {
            return Some(format!(
                "cursors of {name} (target index → lastSeen, notified, material, muted): want \
                 {:?}, got {:?}",
                want.cursors[w], got.cursors[w]
            ));
        }
        if want.pending[w] != got.pending[w] {
            return Some(format!(
                "pending notices of {name}: want {:?}, got {:?}",
                want.pending[w], got.pending[w]
            ));
        }
    }
    None
}

#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    answered: u64,
    in_doubt_applied: u64,
    in_doubt_not_applied: u64,
    checks: u64,
}

/// What the client threads and the controller share.
struct Shared {
    /// The gateways' base URLs; a killed gateway keeps its address (refused) until restarted.
    bases: RwLock<Vec<String>>,
    answered: AtomicU64,
    unacknowledged: AtomicU64,
    stop: AtomicBool,
    failed: AtomicBool,
    seed: u64,
}

struct Client {
    k: usize,
    ops: Rng,
    picks: Rng,
    shared: Arc<Shared>,
    m: Model,
    turns: [Vec<String>; N],
    stats: Stats,
}

impl Client {
    fn key(&self, i: usize) -> String {
        key_of(self.k, i)
    }

    fn path(&self, s: usize, rest: &str) -> String {
        format!("/v1/sessions/{}{rest}", seg(&self.key(s)))
    }

    /// One request to a random gateway. `Err` when unacknowledged: a transport error or 503
    /// `store_unavailable`.
    fn send(
        &mut self,
        method: &str,
        path: &str,
        caller: Option<usize>,
        body: Option<Value>,
    ) -> Result<Resp, String> {
        let base = {
            let bases = self.shared.bases.read().unwrap_or_else(|e| e.into_inner());
            bases[self.picks.index(bases.len())].clone()
        };
        let headers: Vec<(&str, String)> = caller
            .map(|c| vec![("X-Aware-Session", seg(&self.key(c)))])
            .unwrap_or_default();
        let body = body.map(|b| b.to_string());
        let r = try_request(&base, None, method, path, &headers, body.as_deref())?;
        if r.status == 503 && r.code() == "store_unavailable" {
            return Err(format!("{method} {base}{path}: 503 {}", r.body));
        }
        Ok(r)
    }

    /// A read, sent again (to a random gateway) until it is answered 200 or [`RECOVERY`] ends:
    /// reads change nothing, and a gateway may be down or the database restarting.
    fn read(&mut self, method: &str, path: &str, caller: usize, body: Option<Value>) -> Value {
        let deadline = Instant::now() + RECOVERY;
        loop {
            let last = match self.send(method, path, Some(caller), body.clone()) {
                Ok(r) if r.status == 200 => return r.body,
                Ok(r) => format!("{} {}", r.status, r.body),
                Err(e) => e,
            };
            assert!(
                Instant::now() < deadline,
                "client {}: {method} {path} not answered within {RECOVERY:?} (seed {}): {last}",
                self.k,
                self.shared.seed
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn observe(&mut self) -> Obs {
        let mut obs = Obs {
            streams: Vec::new(),
            cursors: Vec::new(),
            pending: Vec::new(),
            turns: Vec::new(),
        };
        for i in 0..N {
            let key = self.key(i);
            let (mut after, mut seqs, mut head) = (0i64, Vec::new(), None);
            let deadline = Instant::now() + RECOVERY;
            loop {
                let b = self.read(
                    "POST",
                    "/v1/tools/session_status",
                    i,
                    Some(json!({"sessionKey": key, "changesSince": after, "limit": 200})),
                );
                // 01 §12: a page read that fails degrades to "no changes" instead of an error.
                // A page that says the stream is past `after` yet holds no event and no gap is
                // such a read (a reader connection lost with a gateway or PostgreSQL, a missed
                // deadline on a loaded machine): read it again, as a 503 would be.
                let version = b["stateVersion"].as_i64().unwrap_or(-1);
                let degraded = version > after
                    && b["stateChanges"]["events"]
                        .as_array()
                        .is_some_and(Vec::is_empty)
                    && b["stateChanges"]["historyGap"] == false;
                if degraded {
                    assert!(
                        Instant::now() < deadline,
                        "client {}: session_status of {key} kept answering an empty page at \
                         version {version} for {RECOVERY:?} (seed {}): {b}",
                        self.k,
                        self.shared.seed
                    );
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                head.get_or_insert(version);
                let ch = &b["stateChanges"];
                assert_eq!(
                    ch["historyGap"], false,
                    "history gap without retention: {b}"
                );
                let page: Vec<i64> = ch["events"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|e| e["sequence"].as_i64()).collect())
                    .unwrap_or_default();
                seqs.extend(&page);
                match page.last() {
                    Some(&last) if ch["truncated"] == true => after = last,
                    _ => break,
                }
            }
            obs.streams.push((head.unwrap_or(-1), seqs));
            let mut texts = BTreeSet::new();
            let mut after: Option<i64> = None;
            loop {
                let q = after.map_or("?limit=500".to_string(), |a| {
                    format!("?after={a}&limit=500")
                });
                let b = self.read("GET", &self.path(i, &format!("/turns{q}")), i, None);
                let page = b["turns"].as_array().cloned().unwrap_or_default();
                texts.extend(
                    page.iter()
                        .filter_map(|t| t["text"].as_str().map(str::to_string)),
                );
                if b["hasMore"] != true || page.is_empty() {
                    break;
                }
                after = page.last().and_then(|t| t["index"].as_i64());
            }
            obs.turns.push(texts);
        }
        for w in 0..WATCHERS {
            let b = self.read("GET", &self.path(w, "/watches"), w, None);
            let mut got = BTreeMap::new();
            for row in b["watches"].as_array().cloned().unwrap_or_default() {
                let target = row["targetSessionKey"].as_str().unwrap_or("");
                let t = (0..N).find(|&i| self.key(i) == target).unwrap_or_else(|| {
                    panic!("a cursor of {} on a foreign session: {row}", self.key(w))
                });
                let c = (
                    row["lastSeen"].as_i64().unwrap_or(-1),
                    row["notified"].as_i64().unwrap_or(-1),
                    row["material"].as_i64().unwrap_or(-1),
                    row["muted"] == true,
                );
                assert!(c.0 <= c.1 && c.1 <= c.2, "cursor invariant broken: {row}");
                assert_eq!(row["pending"], !c.3 && c.1 > c.0, "pending flag: {row}");
                assert!(got.insert(t, c).is_none(), "two rows for one pair: {b}");
            }
            obs.cursors.push(got);
            let b = self.read("GET", &self.path(w, "/pending"), w, None);
            obs.pending.push(notices_of("pending", &b));
        }
        obs
    }

    fn full_check(&mut self, ctx: &str) {
        let obs = self.observe();
        self.stats.checks += 1;
        if let Some(d) = diff(&expected(self.k, &self.m, &self.turns), &obs) {
            panic!("{ctx}: the cluster differs from the model: {d}");
        }
    }

    fn create_all(&mut self) {
        for s in [W, X, G, C, D] {
            let ctx = format!("client {} setup of {}", self.k, self.key(s));
            let mut body = json!({"key": self.key(s)});
            if let Some(p) = parent_of(s) {
                body["parentSessionKey"] = self.key(p).into();
            }
            let r = self
                .send("POST", "/v1/sessions", None, Some(body))
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(r.status, 201, "{ctx}: {}", r.body);
            self.m.sessions[s] = Some(MSession {
                orphaned: false,
                goal: None,
                run: None,
            });
            let version = r.body["session"]["stateVersion"].as_i64().unwrap_or(-1);
            if let Some(p) = parent_of(s) {
                self.m
                    .record(s, version, None, Class::Seeds, None, &[p], &ctx);
            }
        }
    }

    /// Sends `op`; `Err` when it was not acknowledged.
    fn send_op(&mut self, op: &Op) -> Result<Resp, String> {
        match op {
            Op::Turn { t, text } => self.send(
                "POST",
                &self.path(*t, "/turns"),
                None,
                Some(json!({"role": "user", "text": text, "channel": "telegram"})),
            ),
            Op::Goal {
                t,
                text,
                complete,
                actor,
            } => {
                let status = if *complete { "complete" } else { "active" };
                self.send(
                    "PUT",
                    &self.path(*t, "/goal"),
                    *actor,
                    Some(json!({"text": goal_text(*text), "status": status})),
                )
            }
            Op::Compaction { t, op, summary } => self.send(
                "POST",
                &self.path(*t, "/compaction"),
                None,
                Some(json!({"operationId": format!("op{op}"), "summary": summary})),
            ),
            Op::Watch { w, t } => self.send(
                "POST",
                &self.path(*w, "/watches"),
                None,
                Some(json!({"target": self.key(*t)})),
            ),
            Op::Unwatch { w, t } => {
                let p = self.path(*w, &format!("/watches/{}", seg(&self.key(*t))));
                self.send("DELETE", &p, None, None)
            }
            Op::Drain { s } => self.send("POST", &self.path(*s, "/drain"), None, Some(json!({}))),
            Op::Ack { w, t, last_seen } => {
                let mut n = json!({"contextKey": spec_context_key(&self.key(*t))});
                if *last_seen {
                    let ls = self.m.cursors.get(&(*w, *t)).map_or(0, |c| c.ls);
                    n["lastSeen"] = ls.into();
                }
                self.send(
                    "POST",
                    &self.path(*w, "/ack"),
                    None,
                    Some(json!({"notices": [n]})),
                )
            }
            Op::Reset { s } => self.send("POST", &self.path(*s, "/reset"), None, Some(json!({}))),
        }
    }

    /// Checks an acknowledged answer against the model and applies the operation to it.
    fn answered(&mut self, op: &Op, r: &Resp, ctx: &str) {
        let want = match op {
            Op::Turn { .. } | Op::Compaction { .. } => &[200u16, 201][..],
            _ => &[200u16][..],
        };
        assert!(
            want.contains(&r.status),
            "{ctx}: status {} (wanted {want:?}): {}",
            r.status,
            r.body
        );
        self.stats.answered += 1;
        let ev = r.body.get("event").filter(|e| !e.is_null());
        let seq = ev.and_then(|e| e["sequence"].as_i64());
        let m = &self.m;
        match op {
            Op::Turn { t, text } => {
                assert_eq!(r.status, 201, "{ctx}: {}", r.body);
                assert_eq!(r.body["turn"]["text"], text.as_str(), "{ctx}: turn text");
                assert_eq!(
                    ev.is_some(),
                    m.human_turn_records(*t),
                    "{ctx}: recorded? {}",
                    r.body
                );
                if let Some(ev) = ev {
                    assert_eq!(ev["kind"], "human_direct_message", "{ctx}");
                }
            }
            Op::Goal {
                t,
                text,
                complete,
                actor,
            } => {
                let changed =
                    m.sessions[*t].as_ref().and_then(|s| s.goal) != Some((*text, *complete));
                assert_eq!(
                    r.body["changed"], changed,
                    "{ctx}: goal changed? {}",
                    r.body
                );
                assert_eq!(ev.is_some(), changed, "{ctx}: goal event? {}", r.body);
                if let Some(ev) = ev {
                    let actor = actor.map(|a| self.key(a));
                    assert_eq!(
                        ev["actorId"].as_str(),
                        actor.as_deref(),
                        "{ctx}: goal actor"
                    );
                }
            }
            Op::Compaction { t, op, .. } => match m.event_by_dedupe(&dedupe_of(self.k, *t, *op)) {
                Some(first) => {
                    assert_eq!(r.status, 200, "{ctx}: {}", r.body);
                    assert_eq!(r.body["duplicate"], true, "{ctx}: not a duplicate");
                    assert_eq!(
                        seq,
                        Some(first),
                        "{ctx}: a duplicate answers the first event"
                    );
                    return;
                }
                None => {
                    assert_eq!(r.status, 201, "{ctx}: {}", r.body);
                    assert_eq!(ev.map(|e| &e["kind"]), Some(&json!("compacted")), "{ctx}");
                }
            },
            Op::Unwatch { w, t } => {
                let want = unwatch_applies(m, *w, *t);
                assert_eq!(r.body["unwatched"], want, "{ctx}: unwatched? {}", r.body);
            }
            Op::Drain { s } => {
                let want: Vec<_> = m
                    .pending_of(*s)
                    .into_iter()
                    .map(|(t, c)| notice(&self.key(t), c.ls))
                    .collect();
                assert_eq!(notices_of(ctx, &r.body), want, "{ctx}: drained notices");
                let follow = m.pending_of(*s).iter().filter(|(_, c)| c.m > c.n).count();
                assert_eq!(r.body["pendingAfter"], follow, "{ctx}: drain pendingAfter");
            }
            Op::Ack { w, t, .. } => {
                let acks = m.cursors.get(&(*w, *t)).copied().filter(MCursor::pending);
                let acked = u64::from(acks.is_some());
                let follow = u64::from(acks.is_some_and(|c| c.m > c.n));
                assert_eq!(
                    (&r.body["acked"], &r.body["followUps"], &r.body["ignored"]),
                    (&json!(acked), &json!(follow), &json!([])),
                    "{ctx}: ack answer"
                );
            }
            Op::Watch { .. } | Op::Reset { .. } => {}
        }
        assert!(
            effect(self.k, &mut self.m, &mut self.turns, op, seq, ctx),
            "{ctx}: the model expects an event: {}",
            r.body
        );
        if let Op::Watch { w, t } = op {
            let c = self.m.cursors[&(*w, *t)];
            let got = &r.body["cursor"];
            assert_eq!(
                (
                    got["lastSeen"].as_i64(),
                    got["notified"].as_i64(),
                    got["material"].as_i64()
                ),
                (Some(c.ls), Some(c.n), Some(c.m)),
                "{ctx}: registration cursor"
            );
        }
    }

    /// Settles an unacknowledged operation: the state must be the model without it or with it
    /// applied whole (module comment).
    fn resolve(&mut self, op: &Op, why: &str, ctx: &str) {
        let obs = self.observe();
        let not_applied = diff(&expected(self.k, &self.m, &self.turns), &obs);
        let Some(not_applied) = not_applied else {
            self.stats.in_doubt_not_applied += 1;
            return;
        };
        let target = match op {
            Op::Turn { t, .. } | Op::Goal { t, .. } | Op::Compaction { t, .. } => Some(*t),
            _ => None,
        };
        // The one sequence of the operation's stream the model does not know.
        let seq = target.and_then(|t| {
            let known = self.m.retained(t);
            let new: Vec<i64> = obs.streams[t]
                .1
                .iter()
                .copied()
                .filter(|s| !known.contains(s))
                .collect();
            (new.len() == 1).then(|| new[0])
        });
        let (mut m1, mut t1) = (self.m.clone(), self.turns.clone());
        let applied = if effect(self.k, &mut m1, &mut t1, op, seq, ctx) {
            diff(&expected(self.k, &m1, &t1), &obs)
        } else {
            Some("the model records an event but no single new sequence is in the stream".into())
        };
        match applied {
            None => {
                self.m = m1;
                self.turns = t1;
                self.stats.in_doubt_applied += 1;
            }
            Some(applied) => panic!(
                "{ctx}: unacknowledged ({why}), and the state is neither the model without the \
                 operation ({not_applied}) nor with it applied whole ({applied})"
            ),
        }
    }

    fn run(&mut self) {
        self.create_all();
        let mut n = 0u64;
        while !self.shared.stop.load(Ordering::SeqCst) {
            let op = gen(&mut self.ops, self.k, n);
            let ctx = format!(
                "client {} op {n} {op:?} (seed {})",
                self.k, self.shared.seed
            );
            match self.send_op(&op) {
                Ok(r) => {
                    self.answered(&op, &r, &ctx);
                    self.shared.answered.fetch_add(1, Ordering::SeqCst);
                }
                Err(why) => {
                    self.shared.unacknowledged.fetch_add(1, Ordering::SeqCst);
                    self.resolve(&op, &why, &ctx);
                }
            }
            n += 1;
            if n.is_multiple_of(25) {
                self.full_check(&ctx);
            }
        }
        let ctx = format!("client {} at the end (seed {})", self.k, self.shared.seed);
        self.full_check(&ctx);
    }
}

/// Waits for `cond`, bounded; stops early (returning false) when a client failed.
fn wait_for(shared: &Shared, what: &str, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + RECOVERY;
    while !cond() {
        if shared.failed.load(Ordering::SeqCst) {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what} (seed {})",
            shared.seed
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn health(base: &str) -> Option<Value> {
    try_request(base, None, "GET", "/health", &[], None)
        .ok()
        .filter(|r| r.status == 200)
        .map(|r| r.body)
}

#[test]
fn model_cluster_three_gateways_kill9_and_postgres_restart() {
    let seed = match std::env::var("AWARE_TEST_SEED") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("AWARE_TEST_SEED={v:?}: an unsigned 64-bit integer")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };
    eprintln!("model_cluster: seed {seed} (AWARE_TEST_SEED={seed} repeats the operations)");
    let started = Instant::now();
    // A cluster of its own: the test kills it.
    let pg = PgCluster::start_new(ClusterOptions::default()).expect("a PostgreSQL cluster");
    let url = pg.database().expect("a database");
    let mut server = Server::with_options(ServerOptions {
        config: CONFIG.to_string(),
        args: Vec::new(),
        gateways: GATEWAYS,
        store: StoreChoice::PostgresAt(url),
        pick: Pick::First,
    });
    let shared = Arc::new(Shared {
        bases: RwLock::new(
            (0..GATEWAYS)
                .map(|i| server.gateway_base(i).to_string())
                .collect(),
        ),
        answered: AtomicU64::new(0),
        unacknowledged: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        seed,
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut c = Client {
                    k,
                    ops: Rng(seed ^ (k as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407)),
                    picks: Rng(seed.rotate_left(17) ^ k as u64),
                    shared: shared.clone(),
                    m: Model::new(T0),
                    turns: Default::default(),
                    stats: Stats::default(),
                };
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.run()));
                if let Err(e) = out {
                    shared.failed.store(true, Ordering::SeqCst);
                    std::panic::resume_unwind(e);
                }
                (c.m, c.stats)
            })
        })
        .collect();
    let answered = |n: u64| {
        let shared = shared.clone();
        move || shared.answered.load(Ordering::SeqCst) >= n
    };

    // Phase 1: load, then kill -9 the gateway that leads (its singletons must move).
    let mut ok = wait_for(&shared, "answered requests before the kill", answered(80));
    let mut leader = None;
    ok = ok
        && wait_for(&shared, "a leader", || {
            leader = (0..GATEWAYS).find(|&i| {
                health(server.gateway_base(i)).is_some_and(|h| h["cluster"]["leader"] == true)
            });
            leader.is_some()
        });
    if ok {
        let g = leader.unwrap_or(0);
        let before = shared.answered.load(Ordering::SeqCst);
        server.kill9_gateway(g);
        eprintln!("model_cluster: kill -9 of gateway {g} (the leader) after {before} answers");
        ok = wait_for(&shared, "answers after the kill", answered(before + 60))
            && wait_for(&shared, "a surviving gateway to lead", || {
                (0..GATEWAYS).filter(|&i| i != g).any(|i| {
                    health(server.gateway_base(i)).is_some_and(|h| h["cluster"]["leader"] == true)
                })
            });
        if ok {
            // Restarted only once another gateway leads, so it does not run the restart sweep
            // (the gateway leading at its start-up sweeps, which would move pending notices).
            server.start_gateway(g);
            shared.bases.write().unwrap_or_else(|e| e.into_inner())[g] =
                server.gateway_base(g).to_string();
        }
    }
    // Phase 2: kill -9 of the postmaster with clients running, then start it again.
    if ok {
        let before = shared.answered.load(Ordering::SeqCst);
        ok = wait_for(
            &shared,
            "answers before the database restart",
            answered(before + 60),
        );
    }
    if ok {
        let cut = shared.unacknowledged.load(Ordering::SeqCst);
        pg.kill().expect("kill -9 PostgreSQL");
        eprintln!(
            "model_cluster: kill -9 of PostgreSQL after {} answers",
            shared.answered.load(Ordering::SeqCst)
        );
        // The outage lasts until a client met it (a refusal or a 503).
        ok = wait_for(&shared, "a request refused during the outage", || {
            shared.unacknowledged.load(Ordering::SeqCst) > cut
        });
        pg.start().expect("start PostgreSQL again");
        // The gateways were not restarted: they must come back by themselves.
        ok = ok
            && wait_for(
                &shared,
                "every gateway healthy after the database restart",
                || (0..GATEWAYS).all(|i| health(server.gateway_base(i)).is_some()),
            );
    }
    if ok {
        let before = shared.answered.load(Ordering::SeqCst);
        ok = wait_for(
            &shared,
            "answers after the database restart",
            answered(before + 60),
        );
    }
    let _ = ok;
    shared.stop.store(true, Ordering::SeqCst);
    let mut results = Vec::new();
    let mut failure = None;
    for (k, h) in clients.into_iter().enumerate() {
        match h.join() {
            Ok(r) => results.push(r),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failure.get_or_insert(format!("client {k} failed (seed {seed}): {msg}"));
            }
        }
    }
    if let Some(f) = failure {
        panic!("{f}");
    }
    // No sequence belongs to two threads' streams: never reused across the kills.
    let mut all = BTreeSet::new();
    for (m, _) in &results {
        for s in m.events.keys() {
            assert!(all.insert(*s), "sequence {s} in two streams (seed {seed})");
        }
    }
    let total = results.iter().fold(Stats::default(), |a, (_, s)| Stats {
        answered: a.answered + s.answered,
        in_doubt_applied: a.in_doubt_applied + s.in_doubt_applied,
        in_doubt_not_applied: a.in_doubt_not_applied + s.in_doubt_not_applied,
        checks: a.checks + s.checks,
    });
    assert!(
        total.in_doubt_applied + total.in_doubt_not_applied > 0,
        "no request met an outage (seed {seed})"
    );
    eprintln!(
        "model_cluster: seed {seed}: {} answered operations checked, {} unacknowledged ({} \
         applied, {} not), {} full comparisons, {} events, in {:.1} s",
        total.answered,
        total.in_doubt_applied + total.in_doubt_not_applied,
        total.in_doubt_applied,
        total.in_doubt_not_applied,
        total.checks,
        all.len(),
        started.elapsed().as_secs_f64()
    );
}
