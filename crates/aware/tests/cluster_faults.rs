//! Network faults between gateways and PostgreSQL (decision D43): three real `aware serve` gateways
//! on one PostgreSQL database, each reaching it through its own
//! [`aware_testkit::fault_proxy::FaultProxy`], so one gateway (or all) can be partitioned,
//! delayed or healed while the others go on.
//!
//! Each case runs under a light load: on every gateway one writer posting human turns (unique
//! texts) to four children of W, and one drainer draining W. Each case then checks:
//! - **no acknowledged write lost**: every turn answered 201 is in its session's transcript,
//!   with the sequence it was answered with; no text is stored twice; nothing is stored that
//!   was never sent;
//! - **no notice delivered twice or lost**: no `(target, lastSeen)` notice comes out of two
//!   answered drains, and after a final drain every cursor of W stands at `lastSeen == notified
//!   == material`, above every acknowledged turn of its target;
//! - **one leader at a time**: one poller per gateway reads `/health` (`leader`, `epoch`; the
//!   leader flag already accounts for the lease); no gateway is seen leading under an epoch
//!   after another gateway was seen leading under a newer one, and two gateways never report
//!   the same epoch;
//! - and prints the time to recover.
//!
//! The only timing assertions are the leadership bound, the feature itself, with 2x slack:
//! another gateway leads within 2 x [`aware_cluster::TAKEOVER_BOUND`] of a partition, and the old
//! leader reports it does not lead within 2 x the lease.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A check reads as one scenario, top to bottom: its steps share the state they check.
#![allow(clippy::too_many_lines)]

mod common;

use aware_store_pg::testing::PgCluster;
use aware_testkit::fault_proxy::{Fault, FaultProxy};
use common::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const CONFIG: &str = "notify_on_create = false\n[retention]\nmax_age_days = 30\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n";
const GATEWAYS: usize = 3;
const TARGETS: [&str; 4] = [
    "agent:main:subagent:f1",
    "agent:main:subagent:f2",
    "agent:main:subagent:f3",
    "agent:main:subagent:f4",
];
/// The lease of the default cluster options (aware-cluster's module doc).
const LEASE: Duration = Duration::from_secs(5);
/// How long a gateway may take to answer again after a fault heals before the test gives up.
const RECOVERY: Duration = Duration::from_secs(60);
/// How long case (d) keeps its latency on.
const LATENCY_FOR: Duration = Duration::from_secs(20);
/// The PostgreSQL outage of case (c), as the issue asks.
const OUTAGE: Duration = Duration::from_secs(30);

fn health(base: &str) -> Option<(u16, Value)> {
    try_request(base, None, "GET", "/health", &[], None)
        .ok()
        .map(|r| (r.status, r.body))
}

/// Polls `f` every 50 ms until it holds; panics after `limit`. Returns how long it took.
fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// One `/health` answer about leadership.
#[derive(Debug, Clone)]
struct Seen {
    gateway: usize,
    sent: Instant,
    answered: Instant,
    leader: bool,
    epoch: i64,
}

struct Rig {
    proxies: Vec<FaultProxy>,
    gateways: Vec<Server>,
    bases: Vec<String>,
}

impl Rig {
    /// Three gateways on a fresh database, each through its own proxy; W with four children.
    fn start() -> Rig {
        let pg = PgCluster::shared();
        let url = pg.database().expect("test database");
        let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], pg.port()));
        let proxies: Vec<FaultProxy> = (0..GATEWAYS)
            .map(|_| FaultProxy::start(upstream).expect("fault proxy"))
            .collect();
        let gateways: Vec<Server> = proxies
            .iter()
            .map(|p| Server::with_args(CONFIG, &["--store", &p.url_through(&url)]))
            .collect();
        let bases = gateways.iter().map(|g| g.base.clone()).collect();
        let rig = Rig {
            proxies,
            gateways,
            bases,
        };
        rig.gateways[0].create(W);
        for t in TARGETS {
            rig.gateways[0].create_child(t, W);
        }
        wait_until("a leader", RECOVERY, || rig.leader().is_some());
        rig
    }

    /// The gateway that reports leading now, with its epoch (the first found).
    fn leader(&self) -> Option<(usize, i64)> {
        self.bases.iter().enumerate().find_map(|(i, b)| {
            let (_, h) = health(b)?;
            (h["cluster"]["leader"] == true)
                .then(|| (i, h["cluster"]["epoch"].as_i64().unwrap_or(0)))
        })
    }

    fn leads(&self, i: usize) -> Option<i64> {
        let (_, h) = health(&self.bases[i])?;
        (h["cluster"]["leader"] == true).then(|| h["cluster"]["epoch"].as_i64().unwrap_or(0))
    }

    /// Whether gateway `i` takes a write now.
    fn writes(&self, i: usize) -> bool {
        try_request(
            &self.bases[i],
            None,
            "POST",
            &format!("/v1/sessions/{}/turns", seg(W)),
            &[],
            Some(&json!({"role": "assistant", "text": "probe"}).to_string()),
        )
        .is_ok_and(|r| r.status == 201)
    }
}

/// A request not answered 2xx: (gateway, when sent, how long, status or 0 for a transport
/// error).
type Failure = (usize, Instant, Duration, u16);

/// The load and the leadership pollers of one case, and what they saw.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Turns answered 201: (target, sequence, text).
    acked: Arc<Mutex<Vec<(usize, i64, String)>>>,
    /// Turns not answered 201 (503, transport error): they may or may not be stored.
    doubtful: Arc<Mutex<Vec<(usize, String)>>>,
    /// Notices of answered drains: (target, lastSeen).
    notices: Arc<Mutex<Vec<(String, i64)>>>,
    drains_in_doubt: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<Failure>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Load {
    fn start(rig: &Rig) -> Load {
        let load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            acked: Arc::default(),
            doubtful: Arc::default(),
            notices: Arc::default(),
            drains_in_doubt: Arc::default(),
            failures: Arc::default(),
            seen: Arc::default(),
        };
        let mut threads = Vec::new();
        for (g, base) in rig.bases.iter().enumerate() {
            // Writer.
            let (base, stop, acked, doubtful, failures) = (
                base.clone(),
                load.stop.clone(),
                load.acked.clone(),
                load.doubtful.clone(),
                load.failures.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let t = n % TARGETS.len();
                    let text = format!("g{g} turn {n}");
                    n += 1;
                    let sent = Instant::now();
                    let r = try_request(
                        &base,
                        None,
                        "POST",
                        &format!("/v1/sessions/{}/turns", seg(TARGETS[t])),
                        &[],
                        Some(
                            &json!({"role": "user", "text": text, "channel": "telegram"})
                                .to_string(),
                        ),
                    );
                    match r {
                        Ok(r) if r.status == 201 => {
                            let seq = r.body["event"]["sequence"].as_i64().unwrap_or_else(|| {
                                panic!("an acknowledged turn without its event: {}", r.body)
                            });
                            acked.lock().unwrap().push((t, seq, text));
                        }
                        Ok(r) => {
                            assert_eq!(
                                (r.status, r.code()),
                                (503, "store_unavailable"),
                                "a turn answered neither 201 nor 503: {}",
                                r.body
                            );
                            failures
                                .lock()
                                .unwrap()
                                .push((g, sent, sent.elapsed(), r.status));
                            doubtful.lock().unwrap().push((t, text));
                        }
                        Err(_) => {
                            failures.lock().unwrap().push((g, sent, sent.elapsed(), 0));
                            doubtful.lock().unwrap().push((t, text));
                        }
                    }
                    // A light load: a few turns a second per gateway.
                    std::thread::sleep(Duration::from_millis(100));
                }
            }));
            // Drainer.
            let (base, stop, notices, in_doubt, failures) = (
                rig.bases[g].clone(),
                load.stop.clone(),
                load.notices.clone(),
                load.drains_in_doubt.clone(),
                load.failures.clone(),
            );
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let sent = Instant::now();
                    match drain(&base) {
                        Ok(got) => notices.lock().unwrap().extend(got),
                        Err(status) => {
                            in_doubt.fetch_add(1, Ordering::Relaxed);
                            failures
                                .lock()
                                .unwrap()
                                .push((g, sent, sent.elapsed(), status));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(150));
                }
            }));
            // Leadership poller.
            let (base, stop, seen) = (rig.bases[g].clone(), load.stop.clone(), load.seen.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let sent = Instant::now();
                    if let Some((_, h)) = health(&base) {
                        seen.lock().unwrap().push(Seen {
                            gateway: g,
                            sent,
                            answered: Instant::now(),
                            leader: h["cluster"]["leader"] == true,
                            epoch: h["cluster"]["epoch"].as_i64().unwrap_or(0),
                        });
                    }
                    // Each /health runs a writer probe: not too often.
                    std::thread::sleep(Duration::from_millis(250));
                }
            }));
        }
        Load { threads, ..load }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            t.join().expect("a load thread panicked");
        }
    }

    /// Non-2xx answers of gateway `g` to requests sent in `[from, to)`: their latencies.
    fn failure_latencies(&self, g: usize, from: Instant, to: Instant) -> Vec<Duration> {
        let mut v: Vec<Duration> = self
            .failures
            .lock()
            .unwrap()
            .iter()
            .filter(|(gw, sent, _, _)| *gw == g && *sent >= from && *sent < to)
            .map(|(_, _, d, _)| *d)
            .collect();
        v.sort();
        v
    }

    /// The leadership observations checked: one leader at a time, by epoch.
    fn check_leadership(&self) {
        let seen = self.seen.lock().unwrap();
        let leading: Vec<&Seen> = seen.iter().filter(|s| s.leader).collect();
        let mut by_epoch: BTreeMap<i64, BTreeSet<usize>> = BTreeMap::new();
        for s in &leading {
            assert!(s.epoch > 0, "a leader without an epoch: {s:?}");
            by_epoch.entry(s.epoch).or_default().insert(s.gateway);
        }
        for (e, gs) in &by_epoch {
            assert_eq!(gs.len(), 1, "two gateways led under epoch {e}: {gs:?}");
        }
        // Once a gateway was seen leading under epoch e2, nobody is seen leading under an
        // older epoch in a request sent after that answer.
        for new in &leading {
            for old in &leading {
                assert!(
                    !(old.epoch < new.epoch && old.sent > new.answered),
                    "gateway {} was seen leading under epoch {} after gateway {} was seen \
                     leading under the newer epoch {}",
                    old.gateway,
                    old.epoch,
                    new.gateway,
                    new.epoch
                );
            }
        }
        eprintln!(
            "leadership: {} observations, epochs seen leading {:?}",
            seen.len(),
            by_epoch
        );
    }

    /// Final drains, then the checks of writes and notices against what the load saw.
    fn check_writes_and_notices(&self, rig: &Rig, via: usize) {
        let base = &rig.bases[via];
        // Drain until nothing is pending (answered drains only, on a healthy gateway).
        wait_until("the final drains", RECOVERY, || match drain(base) {
            Ok(got) => {
                let empty = got.is_empty();
                self.notices.lock().unwrap().extend(got);
                empty
            }
            Err(_) => false,
        });
        let acked = self.acked.lock().unwrap();
        let doubtful = self.doubtful.lock().unwrap();
        for (t, key) in TARGETS.iter().enumerate() {
            let texts = transcript(base, key);
            let mut count: BTreeMap<&str, usize> = BTreeMap::new();
            for x in &texts {
                *count.entry(x.as_str()).or_default() += 1;
            }
            for (x, n) in &count {
                assert_eq!(*n, 1, "{key}: {x:?} stored {n} times");
            }
            let sent: BTreeSet<&str> = acked
                .iter()
                .filter(|a| a.0 == t)
                .map(|a| a.2.as_str())
                .chain(doubtful.iter().filter(|d| d.0 == t).map(|d| d.1.as_str()))
                .collect();
            for x in count.keys() {
                assert!(sent.contains(x), "{key}: {x:?} stored but never sent");
            }
            let mut max_acked = 0;
            for (_, seq, text) in acked.iter().filter(|a| a.0 == t) {
                assert!(
                    count.contains_key(text.as_str()),
                    "{key}: the acknowledged turn {text:?} (sequence {seq}) is lost"
                );
                max_acked = max_acked.max(*seq);
            }
            let c = cursor(base, key);
            let (last_seen, notified, material) = (
                c["lastSeen"].as_i64().unwrap_or(-1),
                c["notified"].as_i64().unwrap_or(-1),
                c["material"].as_i64().unwrap_or(-1),
            );
            assert!(
                last_seen == notified && notified == material && material >= max_acked,
                "{key}: after the final drain the cursor is {c} (highest acknowledged turn \
                 {max_acked}): a notice was lost"
            );
        }
        let notices = self.notices.lock().unwrap();
        let mut once = BTreeSet::new();
        for n in notices.iter() {
            assert!(
                once.insert(n.clone()),
                "the notice {n:?} was delivered twice"
            );
        }
        eprintln!(
            "writes: {} acknowledged, {} in doubt (503 or transport error); notices: {} \
             delivered, {} drains in doubt",
            acked.len(),
            doubtful.len(),
            notices.len(),
            self.drains_in_doubt.load(Ordering::Relaxed)
        );
    }
}

/// One drain of W: its notices, or the status of a failed answer (0: transport error).
fn drain(base: &str) -> Result<Vec<(String, i64)>, u16> {
    let r = try_request(
        base,
        None,
        "POST",
        &format!("/v1/sessions/{}/drain", seg(W)),
        &[],
        Some("{}"),
    )
    .map_err(|_| 0u16)?;
    if r.status != 200 {
        assert_eq!(
            (r.status, r.code()),
            (503, "store_unavailable"),
            "a drain answered neither 200 nor 503: {}",
            r.body
        );
        return Err(r.status);
    }
    Ok(r.body["notices"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    (
                        n["targetSessionKey"].as_str().unwrap_or("").to_string(),
                        n["lastSeen"].as_i64().unwrap_or(-1),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

/// Every turn text of a session's transcript, page by page.
fn transcript(base: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let from = after.map(|a| format!("&after={a}")).unwrap_or_default();
        let r = try_request(
            base,
            None,
            "GET",
            &format!("/v1/sessions/{}/turns?limit=500{from}", seg(key)),
            &[],
            None,
        )
        .expect("read the transcript");
        assert_eq!(r.status, 200, "{}", r.body);
        let turns = r.body["turns"].as_array().cloned().unwrap_or_default();
        for t in &turns {
            out.push(t["text"].as_str().unwrap_or("").to_string());
            after = t["index"].as_i64().or(after);
        }
        if r.body["hasMore"] != true || turns.is_empty() {
            return out;
        }
    }
}

/// W's cursor on `target`.
fn cursor(base: &str, target: &str) -> Value {
    let r = try_request(
        base,
        None,
        "GET",
        &format!("/v1/sessions/{}/watches", seg(W)),
        &[],
        None,
    )
    .expect("read the watches");
    r.body["watches"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["targetSessionKey"] == target).cloned())
        .unwrap_or_else(|| panic!("no cursor of W on {target}: {}", r.body))
}

fn median(v: &[Duration]) -> Duration {
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// (a) The leader is partitioned (its packets dropped): it reports not leading within its
/// lease, another gateway leads within the documented bound, and it serves again when healed.
#[test]
fn a_partitioned_leader_loses_leadership_and_another_takes_it_within_the_bound() {
    let rig = Rig::start();
    let mut load = Load::start(&rig);
    wait_until("writes under load", RECOVERY, || {
        load.acked.lock().unwrap().len() >= 10
    });
    let (old, old_epoch) = rig.leader().expect("a leader");
    let t0 = Instant::now();
    rig.proxies[old].set(Fault::Blackhole);
    wait_until(
        "the old leader to report it does not lead",
        RECOVERY,
        || rig.leads(old).is_none(),
    );
    let lost = t0.elapsed();
    let mut new = None;
    wait_until("another gateway to lead", RECOVERY, || {
        new = (0..GATEWAYS)
            .filter(|&i| i != old)
            .find_map(|i| rig.leads(i).map(|e| (i, e)));
        new.is_some()
    });
    let taken = t0.elapsed();
    let (new, new_epoch) = new.expect("a new leader");
    assert!(new_epoch > old_epoch, "epoch {new_epoch} after {old_epoch}");
    // The partition lasts 3 s more (its length, not a wait for a condition), so the
    // partitioned gateway's answers are measured once its connections are known dead too.
    std::thread::sleep(Duration::from_secs(3));
    rig.proxies[old].set(Fault::Pass);
    let healed = Instant::now();
    let recovered = wait_until("the old leader to take writes again", RECOVERY, || {
        rig.writes(old)
    });
    wait_until("the cluster to settle", RECOVERY, || rig.leader().is_some());
    load.stop();
    let lat = load.failure_latencies(old, t0, healed);
    eprintln!(
        "leader partitioned: not leading after {lost:?} (lease {LEASE:?}); gateway {new} led \
         (epoch {new_epoch}) after {taken:?} (bound {:?}); 503/transport answers of the \
         partitioned gateway: {} (median {:?}, max {:?}); it took writes {recovered:?} after \
         the heal",
        aware_cluster::TAKEOVER_BOUND,
        lat.len(),
        median(&lat),
        lat.last().copied().unwrap_or_default()
    );
    assert!(
        lost <= 2 * LEASE,
        "the old leader led {lost:?} into the partition"
    );
    assert!(
        taken <= 2 * aware_cluster::TAKEOVER_BOUND,
        "a new leader only after {taken:?}"
    );
    load.check_leadership();
    load.check_writes_and_notices(&rig, new);
}

/// (b) A follower is partitioned: leadership does not move, the follower answers 503 (never
/// hangs) and serves again by itself when healed.
#[test]
fn a_partitioned_follower_answers_503_and_recovers_and_leadership_stays() {
    let rig = Rig::start();
    let mut load = Load::start(&rig);
    wait_until("writes under load", RECOVERY, || {
        load.acked.lock().unwrap().len() >= 10
    });
    let (leader, epoch) = rig.leader().expect("a leader");
    let follower = (leader + 1) % GATEWAYS;
    let t0 = Instant::now();
    rig.proxies[follower].set(Fault::Blackhole);
    // The follower's requests fail: wait until a few did.
    wait_until("the follower's requests to fail", RECOVERY, || {
        load.failure_latencies(follower, t0, Instant::now()).len() >= 5
    });
    assert_eq!(
        rig.leads(leader),
        Some(epoch),
        "leadership moved when a follower was partitioned"
    );
    rig.proxies[follower].set(Fault::Pass);
    let healed = Instant::now();
    let recovered = wait_until("the follower to take writes again", RECOVERY, || {
        rig.writes(follower)
    });
    load.stop();
    let lat = load.failure_latencies(follower, t0, healed);
    eprintln!(
        "follower partitioned for {:?}: {} failed answers (median {:?}, max {:?}); it took \
         writes {recovered:?} after the heal",
        healed - t0,
        lat.len(),
        median(&lat),
        lat.last().copied().unwrap_or_default()
    );
    assert_eq!(rig.leads(leader), Some(epoch), "leadership moved");
    load.check_leadership();
    load.check_writes_and_notices(&rig, leader);
}

/// (c) PostgreSQL unreachable for every gateway for 30 s, then back: every gateway recovers by
/// itself and nothing acknowledged is lost.
#[test]
fn postgres_unreachable_for_30_s_then_back_every_gateway_recovers_by_itself() {
    let rig = Rig::start();
    let mut load = Load::start(&rig);
    wait_until("writes under load", RECOVERY, || {
        load.acked.lock().unwrap().len() >= 10
    });
    let t0 = Instant::now();
    for p in &rig.proxies {
        p.set(Fault::Blackhole);
    }
    let nobody = wait_until("no gateway to lead", RECOVERY, || {
        (0..GATEWAYS).all(|i| rig.leads(i).is_none())
    });
    // The outage lasts its full length: this sleep is the fault, not a wait for a condition.
    std::thread::sleep(OUTAGE.saturating_sub(t0.elapsed()));
    for p in &rig.proxies {
        p.set(Fault::Pass);
    }
    let healed = Instant::now();
    let mut recovered = Vec::new();
    for i in 0..GATEWAYS {
        wait_until("the gateway to take writes again", RECOVERY, || {
            rig.writes(i)
        });
        recovered.push(healed.elapsed());
    }
    let mut after = None;
    wait_until("a leader again", RECOVERY, || {
        after = rig.leader();
        after.is_some()
    });
    let led = healed.elapsed();
    load.stop();
    let mut lat: Vec<Duration> = (0..GATEWAYS)
        .flat_map(|g| load.failure_latencies(g, t0, healed))
        .collect();
    lat.sort();
    eprintln!(
        "outage of {:?}: nobody led {nobody:?} into it; after the heal every gateway took \
         writes within {recovered:?}, a leader ({after:?}: gateway, epoch) within {led:?}; {} failed answers during the \
         outage (median {:?}, max {:?})",
        healed - t0,
        lat.len(),
        median(&lat),
        lat.last().copied().unwrap_or_default()
    );
    load.check_leadership();
    load.check_writes_and_notices(&rig, 0);
}

/// (d) 500 ms of round-trip latency on every path: everything stays correct.
#[test]
fn half_a_second_of_latency_keeps_everything_correct() {
    let rig = Rig::start();
    let mut load = Load::start(&rig);
    wait_until("writes under load", RECOVERY, || {
        load.acked.lock().unwrap().len() >= 10
    });
    let before = load.acked.lock().unwrap().len();
    let (leader, epoch) = rig.leader().expect("a leader");
    for p in &rig.proxies {
        p.set(Fault::Delay(Duration::from_millis(250)));
    }
    let t0 = Instant::now();
    // The latency lasts its full length (the fault, not a wait for a condition); writes must
    // get through meanwhile.
    std::thread::sleep(LATENCY_FOR);
    let through = load.acked.lock().unwrap().len() - before;
    let failed = load.failures.lock().unwrap().len();
    let slow = t0.elapsed();
    for p in &rig.proxies {
        p.set(Fault::Pass);
    }
    load.stop();
    eprintln!(
        "500 ms round trips for {slow:?}: {through} turns acknowledged, {failed} answers 503 or \
         failed; leader {leader} (epoch {epoch}), now {:?}",
        rig.leader(),
    );
    assert!(through > 0, "no write got through 500 ms round trips");
    load.check_leadership();
    load.check_writes_and_notices(&rig, leader);
}
