//! The cluster hooks with two engines on one store (what two gateways on one PostgreSQL are to
//! the engine), joined by an in-process bus: remote wakes, their coalescing, the repair check of
//! lost notifications, and the singletons gated on leadership.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use aware_engine::*;
use aware_store::Store;
use aware_store_sqlite::{SqliteStore, StoreOptions};
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Forwards published wakes to the peer engine (when `up`), and records them.
#[derive(Default)]
struct Bus {
    peer: Mutex<Option<Engine>>,
    up: AtomicBool,
    published: Mutex<Vec<Wake>>,
}

impl WakeBus for Bus {
    fn publish(&self, wake: &Wake) {
        self.published.lock().unwrap().push(wake.clone());
        if !self.up.load(Ordering::SeqCst) {
            return;
        }
        let peer = self.peer.lock().unwrap().clone();
        if let Some(peer) = peer {
            peer.deliver_remote_wake(RemoteWake::of(wake));
        }
    }

    fn publish_reply(&self, run_id: &str) {
        if !self.up.load(Ordering::SeqCst) {
            return;
        }
        let peer = self.peer.lock().unwrap().clone();
        if let Some(peer) = peer {
            peer.signal_remote_reply(run_id);
        }
    }
}

struct Lead(AtomicBool);
impl Leadership for Lead {
    fn is_leader(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

struct Pair {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    a: Engine,
    b: Engine,
    bus_a: Arc<Bus>,
    bus_b: Arc<Bus>,
    lead_a: Arc<Lead>,
    lead_b: Arc<Lead>,
}

fn pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new();
    config.notify_on_create = false;
    config.retention.prune_interval_secs = 31_536_000;
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).unwrap());
    let clock = Arc::new(ManualClock::new(T0));
    let a = Engine::open(store.clone(), config.clone(), clock.clone()).unwrap();
    let b = Engine::open(store, config, clock.clone()).unwrap();
    let (bus_a, bus_b) = (Arc::new(Bus::default()), Arc::new(Bus::default()));
    *bus_a.peer.lock().unwrap() = Some(b.clone());
    *bus_b.peer.lock().unwrap() = Some(a.clone());
    bus_a.up.store(true, Ordering::SeqCst);
    bus_b.up.store(true, Ordering::SeqCst);
    let lead_a = Arc::new(Lead(AtomicBool::new(true)));
    let lead_b = Arc::new(Lead(AtomicBool::new(false)));
    a.set_wake_bus(bus_a.clone());
    b.set_wake_bus(bus_b.clone());
    a.set_leadership(lead_a.clone());
    b.set_leadership(lead_b.clone());
    a.start().unwrap();
    b.start().unwrap();
    for s in [W, X] {
        a.create_session(CreateSession::new(key(s))).unwrap();
    }
    a.create_session(CreateSession::new(key(C)).parent(key(W)))
        .unwrap();
    Pair {
        _dir: dir,
        clock,
        a,
        b,
        bus_a,
        bus_b,
        lead_a,
        lead_b,
    }
}

fn hdm(e: &Engine, s: &str) {
    e.post_turn(&sref(s), NewTurn::user("hello").channel("telegram"))
        .unwrap();
}

#[test]
fn a_wake_produced_on_one_engine_reaches_the_others_subscribers_as_remote() {
    let p = pair();
    let mut on_a = p.a.subscribe_wakes();
    let mut on_b = p.b.subscribe_wakes();
    hdm(&p.a, C);
    let local = on_a.try_recv().unwrap();
    assert!(
        !local.remote,
        "the producer's own wake goes to its webhooks"
    );
    let remote = on_b.try_recv().unwrap();
    assert_eq!(
        (remote.reason, remote.session_key.as_str(), remote.remote),
        (WakeReason::SessionState, W, true)
    );
    assert_eq!(
        remote.targets,
        vec![(C.to_string(), "main".to_string())],
        "targets are read from the shared store"
    );
    assert!(on_b.try_recv().is_err(), "exactly one wake on B");
    assert!(
        p.bus_b.published.lock().unwrap().is_empty(),
        "a remote wake is never published again"
    );

    // `message` wakes cross too, at once.
    let sent = p.a.send_dispatch(&sref(X), &sref(C), "hi", false).unwrap();
    let w = on_b.try_recv().unwrap();
    assert_eq!(
        (w.reason, w.session_key.as_str(), w.run_id, w.remote),
        (WakeReason::Message, C, Some(sent.run_id), true)
    );
}

#[test]
fn remote_state_wakes_coalesce_per_watcher_on_the_receiver() {
    let p = pair();
    let mut on_b = p.b.subscribe_wakes();
    hdm(&p.a, C);
    assert!(on_b.try_recv().is_ok());
    // Two more requests inside the window (e.g. from two other gateways): merged.
    let req = RemoteWake {
        session_key: W.into(),
        agent_id: "main".into(),
        reason: WakeReason::SessionState,
        run_id: None,
        from: None,
        at: T0,
    };
    p.clock.set(T0 + 1_000).unwrap();
    p.b.deliver_remote_wake(req.clone());
    p.b.deliver_remote_wake(req);
    assert!(on_b.try_recv().is_err(), "inside the window: merged");
    p.clock.set(T0 + 20_000).unwrap();
    p.b.run_timers().unwrap();
    let merged = on_b.try_recv().unwrap();
    assert_eq!((merged.session_key.as_str(), merged.remote), (W, true));
    assert!(on_b.try_recv().is_err(), "one merged delivery");
    assert!(
        p.bus_b.published.lock().unwrap().is_empty(),
        "a delivery only remote requests asked for is not published again"
    );
}

#[test]
fn the_repair_check_wakes_a_watcher_whose_notification_was_lost() {
    let p = pair();
    let mut on_b = p.b.subscribe_wakes();
    assert_eq!(
        p.b.repair_wakes().unwrap(),
        0,
        "the first check only records"
    );
    p.bus_a.up.store(false, Ordering::SeqCst);
    hdm(&p.a, C);
    assert!(on_b.try_recv().is_err(), "the notification was lost");
    assert_eq!(p.b.repair_wakes().unwrap(), 1);
    let w = on_b.try_recv().unwrap();
    assert_eq!(
        (w.reason, w.session_key.as_str(), w.remote),
        (WakeReason::SessionState, W, true)
    );
    assert_eq!(p.b.repair_wakes().unwrap(), 0, "nothing new since");

    // A notification that did arrive needs no repair.
    p.a.drain(&sref(W)).unwrap();
    p.bus_a.up.store(true, Ordering::SeqCst);
    p.clock.set(T0 + 60_000).unwrap();
    hdm(&p.a, C);
    assert!(on_b.try_recv().is_ok());
    assert_eq!(p.b.repair_wakes().unwrap(), 0);
}

#[test]
fn only_the_leader_runs_the_singletons() {
    let p = pair();
    p.a.start_run(&sref(C), None, Some(60)).unwrap();
    let before = p.a.version(&sref(C));
    p.clock.set(T0 + 61_000).unwrap();
    p.b.run_timers().unwrap();
    assert_eq!(
        p.a.version(&sref(C)),
        before,
        "a follower leaves run timeouts to the leader"
    );
    let follower_start = p.b.start().unwrap();
    assert_eq!(
        follower_start,
        (SweepReport::default(), None),
        "a follower joining a running cluster neither sweeps nor prunes"
    );
    // Leadership moves (the leader died): the new leader's next timer tick does the work.
    p.lead_a.0.store(false, Ordering::SeqCst);
    p.lead_b.0.store(true, Ordering::SeqCst);
    assert!(!p.a.is_leader() && p.b.is_leader());
    p.b.run_timers().unwrap();
    assert!(
        p.a.version(&sref(C)) > before,
        "the new leader timed the run out (its end is recorded)"
    );
}

/// Whether `watch` has a signal waiting (polled once, no waiting: a `Notify` permit is stored).
fn signalled_now(watch: &ReplyWatch) -> bool {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(std::time::Duration::ZERO, watch.signalled()).await
        })
        .is_ok()
}

/// A `sessions_send` waiter on engine A is signalled by the reply committed on engine B, over
/// the bus (B's writer cannot reach A's waiters); with the bus down nothing signals it (the
/// gateway's waiter then finds the reply by its own periodic re-read).
#[test]
fn a_reply_committed_on_one_engine_signals_the_waiter_on_the_other() {
    let p = pair();
    let sent = p.a.send_dispatch(&sref(X), &sref(C), "hi", false).unwrap();
    let watch = p.a.watch_reply(&sent.run_id);
    assert!(!signalled_now(&watch), "nothing replied yet");
    let mut reply = NewTurn::user("done").role(Role::Assistant);
    reply.run_id = Some(sent.run_id.clone());
    p.b.post_turn(&sref(C), reply).unwrap();
    assert!(
        signalled_now(&watch),
        "the reply on B did not signal A's waiter"
    );
    assert_eq!(
        EngineMetrics::get(&p.a.metrics().replies_remote_signalled),
        1
    );
    assert!(
        p.a.reply_state(&sref(C), &sent.run_id).unwrap().is_some(),
        "A reads the reply from the shared store"
    );

    // A run nobody waits on: no signal counted. The bus down: the waiter is not signalled.
    let other =
        p.a.send_dispatch(&sref(X), &sref(C), "again", false)
            .unwrap();
    let mut reply = NewTurn::user("done").role(Role::Assistant);
    reply.run_id = Some(other.run_id.clone());
    p.b.post_turn(&sref(C), reply).unwrap();
    assert_eq!(
        EngineMetrics::get(&p.a.metrics().replies_remote_signalled),
        1
    );
    let third =
        p.a.send_dispatch(&sref(X), &sref(C), "third", false)
            .unwrap();
    let watch = p.a.watch_reply(&third.run_id);
    p.bus_b.up.store(false, Ordering::SeqCst);
    let mut reply = NewTurn::user("done").role(Role::Assistant);
    reply.run_id = Some(third.run_id.clone());
    p.b.post_turn(&sref(C), reply).unwrap();
    assert!(!signalled_now(&watch), "a signal without a bus");
}

/// Sessions come and go (a new watcher per task, never deleted): the wake bookkeeping of both
/// engines follows the watchers woken recently, not every watcher ever woken. Engine `a` never
/// runs a repair check, as a lone SQLite gateway: it records no woken watchers at all; `b`
/// runs one per round, as a gateway on PostgreSQL: it holds at most one round's. Each round
/// wakes 200 new watchers, then the clock moves past two coalescing windows.
/// (`cargo run --release -p aware-engine --example wake_churn` runs a million, with the RSS.)
#[test]
fn wake_bookkeeping_follows_recent_watchers_not_every_watcher_ever_woken() {
    const ROUND: usize = 200;
    const ROUNDS: usize = 12;
    let p = pair();
    let _subscriber = p.b.subscribe_wakes();
    let (mut most_a, mut most_b) = (WakeBookkeeping::default(), WakeBookkeeping::default());
    for round in 0..ROUNDS {
        let target = format!("agent:main:churn-t{round}");
        p.a.create_session(CreateSession::new(key(&target)))
            .unwrap();
        for i in 0..ROUND {
            let watcher = format!("agent:main:churn-w{round}-{i}");
            p.a.create_session(CreateSession::new(key(&watcher)))
                .unwrap();
            p.a.register_watch(&sref(&watcher), &sref(&target)).unwrap();
        }
        hdm(&p.a, &target);
        p.clock.set(T0 + (round as i64 + 1) * 60_000).unwrap();
        // Measured before the check, which empties `woken`.
        for (most, e) in [(&mut most_a, &p.a), (&mut most_b, &p.b)] {
            let now = e.wake_bookkeeping();
            most.coalescer = most.coalescer.max(now.coalescer);
            most.merged = most.merged.max(now.merged);
            most.woken = most.woken.max(now.woken);
        }
        p.b.repair_wakes().unwrap();
    }
    let woke = p.bus_a.published.lock().unwrap().len();
    assert!(woke >= ROUND * ROUNDS, "{woke} wakes");
    // The coalescer sweeps once it holds 1,024 watchers; everything older than two windows
    // (40 s, less than a round) goes, so it never holds much more than that.
    for (name, most) in [("a", most_a), ("b", most_b)] {
        assert!(
            most.coalescer < 1_024 + ROUND,
            "{name}: {most:?} after {} watchers",
            ROUND * ROUNDS
        );
        assert_eq!(most.merged, 0, "{name}: nothing was coalesced");
    }
    assert_eq!(most_a.woken, 0, "no repair check, nothing recorded");
    assert!(most_b.woken <= ROUND, "b: {most_b:?}");
    assert!(most_b.woken > 0, "b records what its next check needs");
}
