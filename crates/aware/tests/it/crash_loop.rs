//! Crash loop (decision D1; 01 §3, §8, §12; 02 §12): a real `aware serve` at `durability = "full"`
//! under 64 concurrent clients is `kill -9`ed at a random point while requests are in flight,
//! restarted on the same data dir, and checked against everything it had answered.
//!
//! Per iteration: 64 client threads (each at most [`REQUESTS_PER_CLIENT`] requests, stopping at
//! a deadline or at the first transport error) post human turns on 16 children of W that X also
//! watches, change goals, drain W and X, and spawn children of W. The main thread kills the
//! server once a seeded random number of requests was answered, joins the clients, restarts,
//! and checks:
//!
//! - every sequence answered before the kill is in its stream (paged through `session_status`
//!   `changesSince`, limit 200), and every answered turn is in its transcript;
//! - sequences are unique and strictly increasing per stream, belong to one stream for good,
//!   and every sequence first seen after a restart is above everything seen before it (never
//!   reused across restarts); a sequence is never answered twice;
//! - heads never go down (`stateVersion` ≥ the previous one) and equal the newest event;
//! - a turn cut by the kill is whole or absent (every stored user turn is a text sent);
//! - every cursor of W and X satisfies `lastSeen ≤ notified ≤ material = head`, the expected
//!   cursors exist, and every answered drain's acknowledgement survived (`lastSeen` moved past
//!   the drained notice's `lastSeen`);
//! - every pending notice of W and X can be drained (the drain returns exactly what a peek
//!   listed, nothing stays pending, and afterwards `lastSeen = material` for every cursor), and
//!   no `(watcher, target, lastSeen)` triple is ever returned by two drain answers.
//!
//! `AWARE_CRASH_ITERATIONS` (default 3) sets the number of kills, `AWARE_CRASH_SEED` replays a
//! run's choices (the seed is printed first; thread timing still varies), and
//! `AWARE_CRASH_DURABILITY=normal` runs the loop at `normal`, which must survive a process
//! crash too. See docs/testing.md.

use crate::common::*;
use aware_testkit::rng::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;
const CHILDREN: usize = 16;
const DEFAULT_ITERATIONS: usize = 3;
const REQUESTS_PER_CLIENT: usize = 40;
const CLIENT_DEADLINE: Duration = Duration::from_secs(30);

fn child_key(i: usize) -> String {
    format!("agent:main:subagent:crash{i:02}")
}

/// A drained notice: `(watcher, target key, target agent, lastSeen)`.
type Triple = (String, String, String, i64);

/// What one client thread saw answered.
#[derive(Default)]
struct ClientLog {
    /// `(stream, sequence)` of every event in an answer.
    events: Vec<(String, i64)>,
    /// `(session, turn id)` of every answered turn.
    turns: Vec<(String, String)>,
    drains: Vec<Triple>,
    spawned: Vec<String>,
    /// `(session, text)` of every turn sent, answered or not: a cut turn is whole or absent.
    sent_turns: Vec<(String, String)>,
    answered: u64,
    /// Requests that got no answer because the server died under them.
    cut: u64,
    /// Requests refused at connect (the server was already gone).
    refused: u64,
    unexpected: Vec<String>,
}

enum Op {
    Turn(String),
    Goal(String),
    Drain(&'static str),
    Spawn,
}

fn client(base: String, seed: u64, deadline: Instant, answered_total: Arc<AtomicU64>) -> ClientLog {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let mut rng = Rng(seed);
    let mut log = ClientLog::default();
    for i in 0..REQUESTS_PER_CLIENT {
        if Instant::now() >= deadline {
            break;
        }
        let child = child_key(rng.below(CHILDREN as u64) as usize);
        let op = match rng.below(100) {
            0..=79 => Op::Turn(child),
            80..=86 => Op::Goal(child),
            87..=92 => Op::Drain(W),
            93..=98 => Op::Drain(X),
            _ => Op::Spawn,
        };
        let (method, path, caller, body) = match &op {
            Op::Turn(c) => (
                "POST",
                format!("/v1/sessions/{}/turns", seg(c)),
                None,
                json!({"role": "user", "text": format!("crash loop turn {seed:x}/{i}"), "channel": "telegram"}),
            ),
            Op::Goal(c) => (
                "PUT",
                format!("/v1/sessions/{}/goal", seg(c)),
                None,
                json!({"text": format!("goal {seed:x}/{i}")}),
            ),
            Op::Drain(w) => (
                "POST",
                format!("/v1/sessions/{}/drain", seg(w)),
                None,
                json!({}),
            ),
            Op::Spawn => (
                "POST",
                "/v1/tools/sessions_spawn".to_string(),
                Some(W),
                json!({"task": format!("crash loop task {seed:x}/{i}")}),
            ),
        };
        if let Op::Turn(c) = &op {
            let text = body["text"].as_str().unwrap_or("").to_string();
            log.sent_turns.push((c.clone(), text));
        }
        let mut req = agent.request(method, &format!("{base}{path}"));
        if let Some(c) = caller {
            req = req.set("X-Aware-Session", &seg(c));
        }
        let result = req
            .set("Content-Type", "application/json")
            .send_string(&body.to_string());
        let resp = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => {
                if e.kind() == ureq::ErrorKind::ConnectionFailed {
                    log.refused += 1;
                } else {
                    log.cut += 1;
                }
                break; // the server is gone: this client is done for the iteration
            }
        };
        let status = resp.status();
        let text = match resp.into_string() {
            Ok(t) => t,
            Err(_) => {
                log.cut += 1; // answer cut off mid-body: not an answer
                break;
            }
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            log.cut += 1;
            break;
        };
        log.answered += 1;
        answered_total.fetch_add(1, Ordering::Relaxed);
        match (&op, status) {
            (Op::Turn(c), 201) => {
                match v["event"]["sequence"].as_i64() {
                    Some(s) => log.events.push((c.clone(), s)),
                    None => log
                        .unexpected
                        .push(format!("turn on {c} recorded no event: {v}")),
                }
                if let Some(id) = v["turn"]["id"].as_str() {
                    log.turns.push((c.clone(), id.to_string()));
                }
            }
            (Op::Goal(c), 200) => {
                if let Some(s) = v["event"]["sequence"].as_i64() {
                    log.events.push((c.clone(), s));
                }
            }
            (Op::Drain(w), 200) => {
                for n in v["notices"].as_array().into_iter().flatten() {
                    log.drains.push((
                        w.to_string(),
                        n["targetSessionKey"].as_str().unwrap_or("").to_string(),
                        n["targetAgentId"].as_str().unwrap_or("").to_string(),
                        n["lastSeen"].as_i64().unwrap_or(-1),
                    ));
                }
            }
            (Op::Spawn, 200) => match v["childSessionKey"].as_str() {
                Some(k) => log.spawned.push(k.to_string()),
                None => log
                    .unexpected
                    .push(format!("spawn answer without a child: {v}")),
            },
            _ => log
                .unexpected
                .push(format!("{method} {path}: {status} {v}")),
        }
    }
    log
}

/// Everything known across iterations, and the checks.
struct Verifier {
    seed: u64,
    /// `full` (default) or `normal` (`AWARE_CRASH_DURABILITY`): both must survive `kill -9`.
    durability: String,
    /// Every sequence ever seen (answered or listed) and the stream it belongs to.
    owner: HashMap<i64, String>,
    /// Sequences in answers, per stream.
    answered_events: BTreeMap<String, BTreeSet<i64>>,
    answered_turns: BTreeMap<String, HashSet<String>>,
    /// Texts of every turn sent per session, answered or cut.
    sent_texts: HashMap<String, HashSet<String>>,
    /// The highest `stateVersion` seen per stream.
    heads: HashMap<String, i64>,
    drained: HashSet<Triple>,
    /// Highest drained `lastSeen` per `(watcher, target, agent)`.
    acked: HashMap<(String, String, String), i64>,
    spawned: BTreeSet<String>,
    /// The highest sequence in the store at the last check.
    max_seq: i64,
    // Counts for the closing line.
    requests_answered: u64,
    requests_cut: u64,
    events_checked: u64,
    turns_checked: u64,
    cursors_checked: u64,
    notices_drained: u64,
    restarts: u64,
}

impl Verifier {
    fn fail(&self, what: String) -> ! {
        panic!("crash_loop (seed {}): {what}", self.seed)
    }

    fn ensure(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.fail(what())
        }
    }

    fn record_drain(&mut self, t: Triple) {
        if !self.drained.insert(t.clone()) {
            self.fail(format!("notice drained twice: {t:?}"));
        }
        let k = (t.0.clone(), t.1.clone(), t.2.clone());
        let e = self.acked.entry(k).or_insert(t.3);
        *e = (*e).max(t.3);
        self.notices_drained += 1;
    }

    /// Folds one client's answers in; sequences answered after a restart must be new.
    fn absorb(&mut self, log: ClientLog, answered_seqs: &mut HashSet<i64>) {
        self.requests_answered += log.answered;
        self.requests_cut += log.cut;
        if let Some(u) = log.unexpected.first() {
            self.fail(format!(
                "{} unexpected answers, first: {u}",
                log.unexpected.len()
            ));
        }
        for (stream, seq) in log.events {
            self.ensure(answered_seqs.insert(seq), || {
                format!("sequence {seq} answered twice")
            });
            self.ensure(seq > self.max_seq, || {
                format!(
                    "sequence {seq} answered on {stream} is not above {} (the highest before \
                     the restart): reissued",
                    self.max_seq
                )
            });
            self.answered_events.entry(stream).or_default().insert(seq);
        }
        for (s, text) in log.sent_turns {
            self.sent_texts.entry(s).or_default().insert(text);
        }
        for (s, id) in log.turns {
            self.answered_turns.entry(s).or_default().insert(id);
        }
        for t in log.drains {
            self.record_drain(t);
        }
        self.spawned.extend(log.spawned);
    }

    /// Every event of a stream, paged 200 at a time through `session_status`.
    fn list_stream(&self, s: &Server, key: &str) -> (i64, Vec<i64>) {
        let mut out = Vec::new();
        let mut after = 0;
        let mut head = None;
        loop {
            let r = s.tool(
                W,
                "session_status",
                json!({"sessionKey": key, "changesSince": after, "limit": 200}),
            );
            self.ensure(r.status == 200, || {
                format!("session_status {key}: {} {}", r.status, r.body)
            });
            let version = r.body["stateVersion"].as_i64().unwrap();
            // The head only rises, also between the pages of one listing.
            self.ensure(head.is_none_or(|h| version >= h), || {
                format!("{key}: stateVersion went down between pages")
            });
            head.get_or_insert(version);
            let ch = &r.body["stateChanges"];
            self.ensure(ch["historyGap"] == false, || {
                format!("{key}: history gap without retention: {ch}")
            });
            let page: Vec<i64> = ch["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["sequence"].as_i64().unwrap())
                .collect();
            out.extend(&page);
            if ch["truncated"] != true {
                return (head.unwrap_or(0), out);
            }
            after = *page.last().unwrap();
        }
    }

    /// The ids of a transcript's turns, and the texts of its user turns.
    fn turn_ids(&self, s: &Server, key: &str) -> (HashSet<String>, Vec<String>) {
        let mut ids = HashSet::new();
        let mut texts = Vec::new();
        let mut after: Option<i64> = None;
        loop {
            let q = match after {
                Some(a) => format!("?after={a}&limit=500"),
                None => "?limit=500".to_string(),
            };
            let r = s.get(&format!("/v1/sessions/{}/turns{q}", seg(key)));
            self.ensure(r.status == 200, || {
                format!("turns of {key}: {} {}", r.status, r.body)
            });
            let turns = r.body["turns"].as_array().unwrap();
            for t in turns {
                ids.insert(t["id"].as_str().unwrap().to_string());
                if t["role"] == "user" {
                    texts.push(t["text"].as_str().unwrap_or("").to_string());
                }
            }
            if r.body["hasMore"] != true || turns.is_empty() {
                return (ids, texts);
            }
            after = turns.last().unwrap()["index"].as_i64();
        }
    }

    /// The post-restart (or baseline) check; drains W and X at the end.
    fn check(&mut self, s: &Server, children: &[String], label: &str) {
        let health = s.get("/health");
        self.ensure(
            health.body["durability"] == self.durability.as_str(),
            || format!("not at durability {}: {}", self.durability, health.body),
        );

        let w_watches = self.watches(s, W);
        let x_watches = self.watches(s, X);
        let mut streams: BTreeSet<String> = children.iter().cloned().collect();
        streams.extend([W.to_string(), X.to_string()]);
        streams.extend(self.spawned.iter().cloned());
        streams.extend(self.answered_events.keys().cloned());
        for c in w_watches.iter().chain(&x_watches) {
            streams.insert(c["targetSessionKey"].as_str().unwrap().to_string());
        }

        // Streams: order, ownership, no reuse, heads, answered events present.
        let prev_max = self.max_seq;
        let mut max_seq = prev_max;
        let mut listed: HashMap<String, BTreeSet<i64>> = HashMap::new();
        for key in &streams {
            let (head, seqs) = self.list_stream(s, key);
            self.ensure(seqs.windows(2).all(|p| p[0] < p[1]), || {
                format!("{label}: {key} not strictly increasing: {seqs:?}")
            });
            self.ensure(head == seqs.last().copied().unwrap_or(0), || {
                format!(
                    "{label}: {key} head {head} is not its newest event {:?}",
                    seqs.last()
                )
            });
            let prev_head = self.heads.get(key).copied().unwrap_or(0);
            self.ensure(head >= prev_head, || {
                format!("{label}: head of {key} went down from {prev_head} to {head}")
            });
            self.heads.insert(key.clone(), head);
            for &q in &seqs {
                match self.owner.get(&q) {
                    Some(o) if o != key => self.fail(format!(
                        "{label}: sequence {q} is in {key} but was in {o} before"
                    )),
                    Some(_) => {}
                    None => {
                        self.ensure(q > prev_max, || {
                            format!(
                                "{label}: new sequence {q} in {key} is not above {prev_max}, \
                                 the highest before: reused"
                            )
                        });
                        self.owner.insert(q, key.clone());
                    }
                }
                max_seq = max_seq.max(q);
            }
            self.events_checked += seqs.len() as u64;
            listed.insert(key.clone(), seqs.into_iter().collect());
        }
        for (key, want) in &self.answered_events {
            let have = &listed[key];
            let lost: Vec<i64> = want.difference(have).copied().collect();
            self.ensure(lost.is_empty(), || {
                format!(
                    "{label}: {} answered sequences of {key} lost, e.g. {:?}",
                    lost.len(),
                    &lost[..lost.len().min(10)]
                )
            });
        }
        self.max_seq = max_seq;

        // Transcripts: every answered turn is there.
        let mut turns_checked = 0;
        for (key, want) in &self.answered_turns {
            let (have, _) = self.turn_ids(s, key);
            let lost = want.iter().filter(|id| !have.contains(*id)).count();
            self.ensure(lost == 0, || {
                format!("{label}: {lost} answered turns of {key} lost")
            });
            turns_checked += want.len() as u64;
        }
        // A turn cut by the kill is whole or absent: every stored user turn is, byte for byte,
        // a text some client sent to that session.
        for (key, sent) in &self.sent_texts {
            let (_, texts) = self.turn_ids(s, key);
            for t in texts {
                self.ensure(sent.contains(&t), || {
                    format!(
                        "{label}: a user turn of {key} is no text any client sent (torn?): {t:?}"
                    )
                });
            }
        }
        self.turns_checked += turns_checked;

        // Spawned children exist.
        for k in &self.spawned {
            let r = s.get(&format!("/v1/sessions/{}", seg(k)));
            self.ensure(r.status == 200, || {
                format!("{label}: spawned child {k} lost: {} {}", r.status, r.body)
            });
        }

        // Cursors: invariant, bounded by the head, expected ones present, acks survived.
        for (w, cursors) in [(W, &w_watches), (X, &x_watches)] {
            let mut targets = HashSet::new();
            for c in cursors.iter() {
                let t = c["targetSessionKey"].as_str().unwrap().to_string();
                let a = c["targetAgentId"].as_str().unwrap().to_string();
                let (ls, n, m) = (
                    c["lastSeen"].as_i64().unwrap(),
                    c["notified"].as_i64().unwrap(),
                    c["material"].as_i64().unwrap(),
                );
                self.ensure(ls <= n && n <= m, || {
                    format!("{label}: cursor ({w}, {t}) breaks lastSeen ≤ notified ≤ material: {c}")
                });
                self.ensure(c["pending"] == (n > ls), || {
                    format!("{label}: cursor ({w}, {t}) pending flag wrong: {c}")
                });
                let head = self.heads.get(&t).copied().unwrap_or(0);
                // Every event of this workload is material (turns, goals, spawns), so the
                // cursor's material change is the target's newest event, restarts included.
                self.ensure(m == head, || {
                    format!("{label}: cursor ({w}, {t}) material {m} is not the head {head}")
                });
                if let Some(&acked) = self.acked.get(&(w.to_string(), t.clone(), a)) {
                    self.ensure(ls > acked, || {
                        format!(
                            "{label}: drained notice ({w}, {t}, lastSeen {acked}) was answered \
                             but its ack is gone: {c}"
                        )
                    });
                }
                targets.insert(t);
                self.cursors_checked += 1;
            }
            let mut want: Vec<&String> = children.iter().collect();
            if w == W {
                want.extend(self.spawned.iter());
            }
            for t in want {
                self.ensure(targets.contains(t), || {
                    format!("{label}: cursor ({w}, {t}) lost")
                });
            }
        }

        // Every pending notice can be drained, once.
        for w in [W, X] {
            let peek = s.pending(w);
            let peeked = triples(w, &peek);
            let d = s.post(&format!("/v1/sessions/{}/drain", seg(w)), json!({}));
            self.ensure(d.status == 200, || {
                format!("{label}: drain {w}: {} {}", d.status, d.body)
            });
            let drained = triples(w, &d.body);
            self.ensure(drained == peeked, || {
                format!("{label}: drain of {w} returned {drained:?}, the peek listed {peeked:?}")
            });
            self.ensure(d.body["pendingAfter"] == 0, || {
                format!("{label}: follow-ups after a quiet drain of {w}: {}", d.body)
            });
            for t in drained {
                self.record_drain(t);
            }
            let after = s.pending(w);
            self.ensure(
                after["notices"].as_array().is_some_and(|n| n.is_empty()),
                || format!("{label}: {w} still has pending notices after draining: {after}"),
            );
            // Nothing lost: the quiet drain acknowledged every change of every target.
            for c in self.watches(s, w) {
                let (ls, m) = (c["lastSeen"].as_i64(), c["material"].as_i64());
                self.ensure(ls.is_some() && ls == m, || {
                    format!("{label}: after the final drain of {w}, lastSeen is not material: {c}")
                });
            }
        }
    }

    /// Every cursor of `w`, page by page (a long run spawns more children than one page holds).
    fn watches(&self, s: &Server, w: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut offset = 0;
        loop {
            let r = s.get(&format!(
                "/v1/sessions/{}/watches?limit=500&offset={offset}",
                seg(w)
            ));
            self.ensure(r.status == 200, || {
                format!("watches of {w}: {} {}", r.status, r.body)
            });
            all.extend(r.body["watches"].as_array().unwrap().iter().cloned());
            match r.body["nextOffset"].as_u64() {
                Some(next) if r.body["hasMore"] == true => offset = next,
                _ => return all,
            }
        }
    }
}

fn triples(w: &str, answer: &Value) -> Vec<Triple> {
    answer["notices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                w.to_string(),
                n["targetSessionKey"].as_str().unwrap().to_string(),
                n["targetAgentId"].as_str().unwrap().to_string(),
                n["lastSeen"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

#[test]
fn kill9_under_concurrent_load_loses_and_reissues_nothing() {
    let started = Instant::now();
    let iterations = env_u64("AWARE_CRASH_ITERATIONS").unwrap_or(DEFAULT_ITERATIONS as u64);
    let seed = env_u64("AWARE_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let durability = std::env::var("AWARE_CRASH_DURABILITY").unwrap_or_else(|_| "full".into());
    assert!(
        durability == "full" || durability == "normal",
        "AWARE_CRASH_DURABILITY must be full or normal"
    );
    eprintln!(
        "crash_loop: seed {seed} ({iterations} iterations at durability {durability}; replay \
         with AWARE_CRASH_SEED={seed})"
    );

    let mut server =
        Server::with_config(&format!("durability = \"{durability}\"\n{DEFAULT_CONFIG}"));
    server.create(W);
    server.create(X);
    let children: Vec<String> = (0..CHILDREN).map(child_key).collect();
    for c in &children {
        server.create_child(c, W);
        let r = server.watch(X, c);
        assert_eq!(r.status, 200, "register X on {c}: {}", r.body);
        assert_eq!(r.body["watched"], true, "register X on {c}: {}", r.body);
    }

    let mut v = Verifier {
        seed,
        durability,
        owner: HashMap::new(),
        answered_events: BTreeMap::new(),
        answered_turns: BTreeMap::new(),
        sent_texts: HashMap::new(),
        heads: HashMap::new(),
        drained: HashSet::new(),
        acked: HashMap::new(),
        spawned: BTreeSet::new(),
        max_seq: 0,
        requests_answered: 0,
        requests_cut: 0,
        events_checked: 0,
        turns_checked: 0,
        cursors_checked: 0,
        notices_drained: 0,
        restarts: 0,
    };
    v.check(&server, &children, "baseline");
    let mut answered_seqs: HashSet<i64> = HashSet::new();
    let mut rng = Rng(seed);

    for it in 0..iterations {
        let total = (CLIENTS * REQUESTS_PER_CLIENT) as u64;
        // Kill once between 10 % and 90 % of the planned requests were answered.
        let kill_at = total / 10 + rng.below(total * 8 / 10);
        let answered = Arc::new(AtomicU64::new(0));
        let running = Arc::new(AtomicUsize::new(CLIENTS));
        let deadline = Instant::now() + CLIENT_DEADLINE;
        let handles: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let base = server.base.clone();
                let client_seed = rng.next_u64() ^ t as u64;
                let (answered, running) = (answered.clone(), running.clone());
                std::thread::spawn(move || {
                    let log = client(base, client_seed, deadline, answered);
                    running.fetch_sub(1, Ordering::Relaxed);
                    log
                })
            })
            .collect();
        while answered.load(Ordering::Relaxed) < kill_at
            && running.load(Ordering::Relaxed) > 0
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        let at_kill = answered.load(Ordering::Relaxed);
        let running_at_kill = running.load(Ordering::Relaxed);
        let mut child = server.child.take().expect("server running");
        child.kill().expect("kill -9"); // SIGKILL
        let _ = child.wait();

        let mut cut = 0;
        let mut refused = 0;
        let mut iter_answered = 0;
        for h in handles {
            let log = h.join().expect("client thread");
            cut += log.cut;
            refused += log.refused;
            iter_answered += log.answered;
            v.absorb(log, &mut answered_seqs);
        }
        // The kill must hit a busy server: clients still running when it fell, and some of their
        // requests cut in flight or refused afterwards (an idle kill proves nothing).
        assert!(
            running_at_kill > 0 && cut + refused > 0,
            "seed {seed}: kill {} hit an idle server: {running_at_kill} clients running, {cut} \
             requests cut, {refused} refused ({at_kill} answered, target {kill_at})",
            it + 1
        );
        server.kill9_restart(); // the child is gone already: this only starts it again
        v.restarts += 1;
        v.check(&server, &children, &format!("after kill {}", it + 1));
        eprintln!(
            "crash_loop: kill {} at {at_kill} answered (target {kill_at}); {iter_answered} \
             answered, {cut} cut in flight, {refused} refused after the kill; max sequence {}",
            it + 1,
            v.max_seq
        );
    }

    eprintln!(
        "crash_loop: seed {seed}: {} restarts survived; {} requests answered ({} cut in flight); \
         {} answered events and {} answered turns verified present ({} listed events checked, {} turn \
         checks over all restarts); {} cursors checked; {} notices drained exactly \
         once; {} children spawned; {:.1} s",
        v.restarts,
        v.requests_answered,
        v.requests_cut,
        answered_seqs.len(),
        v.answered_turns.values().map(|s| s.len()).sum::<usize>(),
        v.events_checked,
        v.turns_checked,
        v.cursors_checked,
        v.notices_drained,
        v.spawned.len(),
        started.elapsed().as_secs_f64()
    );
}
