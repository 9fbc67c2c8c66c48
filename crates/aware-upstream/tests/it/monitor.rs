//! The monitor's own rules (04 §7), scenarios S129, S137, S138 and the engine part of S143:
//! a real engine on a temporary SQLite file with a manual clock, and fake providers.
//!
//! Ticks are driven with `Monitor::run_due(now)` after moving the manual clock to tick n =
//! T0 + 15 s + (n − 1) × 60 s. A provider that "never answers" blocks on a [`Gate`] that the test
//! opens before it ends (a blocking thread must finish before the runtime can shut down).

use aware_core::{AgentId, EventKind, SessionKey, SessionRef};
use aware_engine::views::LinkRow;
use aware_engine::{CreateSession, Engine, EngineConfig, LinkInput, ManualClock, RunOutcome};
use aware_testkit::engine::{SqliteStore, StoreOptions};
use aware_upstream::claude::local::LocalClaude;
use aware_upstream::monitor::{Monitor, MonitorConfig};
use aware_upstream::provider::{CatalogItem, Outcome, Probe, Provider, ProviderError, ThreadInfo};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use aware_testkit::spec::{T0, X};
/// A local adopted session.
const A: &str = "agent:main:claude:aaaa";
/// A second local adopted session.
const A2: &str = "agent:main:claude:bbbb";
/// A node-adopted session.
const B: &str = "agent:main:claude:cccc";
const LOCAL: &str = "gateway:local";
const NODE: &str = "node:laptop";

fn sref(s: &str) -> SessionRef {
    SessionRef {
        key: SessionKey::parse(s).unwrap(),
        agent: AgentId::parse("main").unwrap(),
    }
}

fn tick_at(n: i64) -> i64 {
    T0 + 15_000 + (n - 1) * 60_000
}

struct World {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    engine: Engine,
}

impl World {
    /// An engine with X, and X watching each of `linked` (local links unless the key is B).
    fn new(linked: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = EngineConfig::new();
        config.notify_on_create = false;
        config.retention.prune_interval_secs = 31_536_000;
        let clock = Arc::new(ManualClock::new(T0));
        let store = SqliteStore::open(StoreOptions::new(dir.path().join("state.db"))).unwrap();
        let engine = Engine::open(Arc::new(store), config, clock.clone()).unwrap();
        engine.start().unwrap();
        let w = World {
            _dir: dir,
            clock,
            engine,
        };
        w.create(X);
        for k in linked {
            w.create(k);
            w.engine.register_watch(&sref(X), &sref(k)).expect("watch");
            let input = if *k == B { node_link() } else { local_link(k) };
            w.engine.link_upsert(&sref(k), input).unwrap();
        }
        w
    }

    fn create(&self, s: &str) {
        self.engine
            .create_session(CreateSession::new(SessionKey::parse(s).unwrap()))
            .unwrap();
    }

    fn link(&self, s: &str) -> Option<LinkRow> {
        self.engine.link(&sref(s)).unwrap()
    }

    fn marker(&self, s: &str) -> Value {
        let l = self.link(s).expect("link");
        serde_json::from_str(l.last_marker_json.as_deref().unwrap()).unwrap()
    }

    fn count(&self, s: &str, kind: EventKind) -> usize {
        self.engine
            .list_since(&sref(s), 0, 200)
            .unwrap()
            .events
            .iter()
            .filter(|e| e.kind == kind)
            .count()
    }

    fn hdms(&self, s: &str) -> usize {
        self.count(s, EventKind::HumanDirectMessage)
    }

    fn missing(&self, s: &str) -> usize {
        self.count(s, EventKind::UpstreamMissing)
    }

    fn monitor(&self, providers: Vec<Arc<dyn Provider>>, timeout: Duration) -> Arc<Monitor> {
        let config = MonitorConfig {
            provider_timeout: timeout,
            ..MonitorConfig::default()
        };
        Arc::new(Monitor::new(self.engine.clone(), providers, config, T0))
    }

    /// Moves the clock to tick n and runs the monitor.
    async fn tick(&self, m: &Monitor, n: i64) {
        let t = tick_at(n);
        self.clock.set(t).unwrap();
        m.run_due(t).await;
    }
}

fn local_link(key: &str) -> LinkInput {
    LinkInput {
        catalog_id: "claude".into(),
        host_id: LOCAL.into(),
        thread_id: format!("thread-{key}"),
        upstream_kind: "claude-cli".into(),
        upstream_ref: json!({"filePath": format!("/nowhere/{key}.jsonl")}),
        marker: json!({"offset": 0}),
    }
}

fn node_link() -> LinkInput {
    LinkInput {
        catalog_id: "claude".into(),
        host_id: NODE.into(),
        thread_id: "thread-b".into(),
        upstream_kind: "claude-cli".into(),
        upstream_ref: json!({"nodeId": "laptop", "threadId": "thread-b"}),
        marker: json!({"uuid": null}),
    }
}

fn activity(key: &str, turns: u32, marker: Value, id: &str) -> Outcome {
    Outcome::Activity {
        session_key: key.into(),
        human_turns: turns,
        next_marker: marker,
        occurred_at: Some(T0 + 5_000),
        dedupe_id: Some(id.into()),
        rebased: false,
    }
}

fn missing(key: &str) -> Outcome {
    Outcome::Missing {
        session_key: key.into(),
    }
}

type Answer = Box<dyn Fn(&[Probe], usize) -> Result<Vec<Outcome>, ProviderError> + Send + Sync>;

/// A provider whose `check` answers with a closure of (probes, call number from 1).
struct Fake {
    host: &'static str,
    calls: AtomicUsize,
    /// Calls whose answer has been handed back to the monitor.
    returned: AtomicUsize,
    answer: Answer,
}

impl Fake {
    fn new(
        host: &'static str,
        answer: impl Fn(&[Probe], usize) -> Result<Vec<Outcome>, ProviderError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Fake {
            host,
            calls: AtomicUsize::new(0),
            returned: AtomicUsize::new(0),
            answer: Box::new(answer),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn returned(&self) -> usize {
        self.returned.load(Ordering::SeqCst)
    }

    /// Waits (up to 10 s) until every call so far has handed its answer back.
    async fn all_returned(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.returned() < self.calls() {
            assert!(Instant::now() < deadline, "a provider call never returned");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Provider for Fake {
    fn host_id(&self) -> String {
        self.host.into()
    }
    fn list(
        &self,
        _limit: usize,
        _cursor: Option<&str>,
    ) -> Result<(Vec<CatalogItem>, Option<String>), ProviderError> {
        Ok((Vec::new(), None))
    }
    fn open_thread(&self, _t: &str, _h: bool) -> Result<ThreadInfo, ProviderError> {
        Err(ProviderError::ThreadNotFound)
    }
    fn check(&self, probes: &[Probe]) -> Result<Vec<Outcome>, ProviderError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let out = (self.answer)(probes, n);
        self.returned.fetch_add(1, Ordering::SeqCst);
        out
    }
}

/// Holds a provider call until opened (at most 10 s, so no test can hang for good).
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    waiting: AtomicUsize,
}

impl Gate {
    fn wait(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut open = self.open.lock().unwrap();
        while !*open && Instant::now() < deadline {
            open = self
                .cv
                .wait_timeout(open, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Waits until a provider call is held at the gate.
    async fn entered(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.waiting.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the provider was never called");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// S129. Re-checks before writing.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s129_a_run_started_during_the_check_defers_the_record() {
    let w = World::new(&[A]);
    let engine = w.engine.clone();
    let p = Fake::new(LOCAL, move |probes, n| {
        assert_eq!(probes.len(), 1);
        if n == 1 {
            engine
                .start_run(&sref(A), Some("r1".into()), None)
                .expect("start run");
        }
        Ok(vec![activity(A, 1, json!({"offset": 12}), "12")])
    });
    let m = w.monitor(vec![p.clone()], Duration::from_secs(5));
    let before = w.link(A).unwrap();
    w.tick(&m, 1).await;
    assert_eq!(p.calls(), 1);
    assert_eq!(w.hdms(A), 0, "nothing recorded");
    assert_eq!(w.link(A).unwrap(), before, "marker unchanged, no settle");

    w.engine.end_run(&sref(A), "r1", RunOutcome::Ok).unwrap();
    w.tick(&m, 2).await;
    assert_eq!(p.calls(), 2);
    assert_eq!(w.hdms(A), 1, "the next idle tick records it");
    assert_eq!(w.marker(A), json!({"offset": 12}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s129_a_changed_source_during_the_check_wins() {
    let w = World::new(&[A]);
    let engine = w.engine.clone();
    let p = Fake::new(LOCAL, move |_, _| {
        let mut moved = local_link(A);
        moved.upstream_ref = json!({"filePath": "/elsewhere/a.jsonl"});
        moved.marker = json!({"offset": 999});
        engine.link_upsert(&sref(A), moved).expect("upsert");
        Ok(vec![activity(A, 1, json!({"offset": 8}), "8")])
    });
    let m = w.monitor(vec![p.clone()], Duration::from_secs(5));
    w.tick(&m, 1).await;
    assert_eq!(p.calls(), 1);
    assert_eq!(w.hdms(A), 0, "no event");
    assert_eq!(w.marker(A), json!({"offset": 999}));
    assert_eq!(w.link(A).unwrap().last_scanned_at, None);
}

// ---------------------------------------------------------------------------------------------
// S137. Provider timeout and isolation.

/// The local provider answers `missing` for A on every call but `stuck`, where `stuck_answer`
/// runs; the node provider reports 1 human turn for B on every call. After two misses, the
/// stuck tick must leave the streak alone: the fourth call then records `upstream_missing`.
async fn isolation_case(
    stuck_answer: impl Fn(&Gate) -> Result<Vec<Outcome>, ProviderError> + Send + Sync + 'static,
    expect_timeout: bool,
) {
    let w = World::new(&[A, B]);
    let gate = Arc::new(Gate::default());
    let g2 = gate.clone();
    let local = Fake::new(LOCAL, move |probes, n| {
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].session_key, A);
        if n == 3 {
            return stuck_answer(&g2);
        }
        Ok(vec![missing(A)])
    });
    let node = Fake::new(NODE, |probes, n| {
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].session_key, B);
        let id = format!("item-{n}");
        Ok(vec![activity(B, 1, json!({"uuid": id}), &id)])
    });
    let m = w.monitor(
        vec![local.clone(), node.clone()],
        Duration::from_millis(300),
    );
    w.tick(&m, 1).await;
    w.tick(&m, 2).await;
    assert_eq!((w.missing(A), w.hdms(B)), (0, 2));
    let link_a = w.link(A).unwrap();

    let started = Instant::now();
    w.tick(&m, 3).await;
    let took = started.elapsed();
    if expect_timeout {
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert_eq!(m.metrics.provider_timeouts.load(Ordering::SeqCst), 1);
    } else {
        assert_eq!(m.metrics.provider_timeouts.load(Ordering::SeqCst), 0);
    }
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(w.hdms(B), 3, "the node activity is recorded");
    assert_eq!(w.marker(B), json!({"uuid": "item-3"}));
    assert_eq!(w.missing(A), 0);
    assert_eq!(w.link(A).unwrap(), link_a, "nothing settled for A");
    // A late answer is discarded: judged once the held call has handed its answer back (not
    // after a pause), and again by tick 4 below, whose miss is exactly the third.
    gate.open();
    local.all_returned().await;
    assert_eq!(w.missing(A), 0);
    assert_eq!(w.link(A).unwrap(), link_a);

    // The streak was left at 2: the next tick calls the provider again and the third miss counts.
    w.tick(&m, 4).await;
    assert_eq!(local.calls(), 4, "the next tick calls the provider again");
    assert_eq!(node.calls(), 4);
    assert_eq!(w.missing(A), 1);
    assert!(w.link(A).is_none());
    assert_eq!(m.metrics.ticks.load(Ordering::SeqCst), 4);
    assert_eq!(m.metrics.ticks_skipped.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s137_a_provider_that_never_answers_times_out_in_isolation() {
    isolation_case(
        |gate| {
            gate.wait();
            Ok(vec![missing(A)])
        },
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s137_a_failing_provider_is_isolated() {
    isolation_case(
        |_| Err(ProviderError::Io("permission denied".into())),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s137_a_tick_due_while_the_previous_waits_is_skipped() {
    let w = World::new(&[A]);
    let gate = Arc::new(Gate::default());
    let g2 = gate.clone();
    let local = Fake::new(LOCAL, move |_, n| {
        if n == 1 {
            g2.wait();
        }
        Ok(vec![])
    });
    let m = w.monitor(vec![local.clone()], Duration::from_secs(5));
    w.clock.set(tick_at(1)).unwrap();
    let m2 = m.clone();
    let first = tokio::spawn(async move { m2.run_due(tick_at(1)).await });
    gate.entered().await;
    w.clock.set(tick_at(2)).unwrap();
    tokio::time::timeout(Duration::from_secs(1), m.run_due(tick_at(2)))
        .await
        .expect("a skipped tick returns at once");
    assert_eq!(m.metrics.ticks_skipped.load(Ordering::SeqCst), 1);
    assert_eq!(m.metrics.ticks.load(Ordering::SeqCst), 1);
    assert_eq!(local.calls(), 1, "skipped, not queued");
    gate.open();
    first.await.unwrap();
    assert_eq!(local.calls(), 1);
    // The cadence goes on: the next due tick runs.
    w.tick(&m, 3).await;
    assert_eq!(m.metrics.ticks.load(Ordering::SeqCst), 2);
    assert_eq!(m.metrics.ticks_skipped.load(Ordering::SeqCst), 1);
    assert_eq!(local.calls(), 2);
}

// ---------------------------------------------------------------------------------------------
// S138. Stop discards late results.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s138_stop_waits_for_the_tick_and_discards_its_results() {
    let w = World::new(&[A, A2]);
    let gate = Arc::new(Gate::default());
    let g2 = gate.clone();
    // Calls 1 and 2: A is missing. Call 3 waits, then answers A missing (the third time) and one
    // human turn for A2.
    let local = Fake::new(LOCAL, move |probes, n| {
        assert_eq!(probes.len(), 2);
        if n == 3 {
            g2.wait();
            return Ok(vec![
                missing(A),
                activity(A2, 1, json!({"offset": 42}), "42"),
            ]);
        }
        Ok(vec![missing(A)])
    });
    let m = w.monitor(vec![local.clone()], Duration::from_secs(10));
    w.tick(&m, 1).await;
    w.tick(&m, 2).await;
    let (link_a, link_a2) = (w.link(A).unwrap(), w.link(A2).unwrap());
    let sequences =
        |w: &World, s: &str| w.engine.list_since(&sref(s), 0, 200).unwrap().events.len();
    let (events_a, events_a2) = (sequences(&w, A), sequences(&w, A2));

    w.clock.set(tick_at(3)).unwrap();
    let m2 = m.clone();
    let tick = tokio::spawn(async move { m2.run_due(tick_at(3)).await });
    gate.entered().await;
    let m3 = m.clone();
    let l3 = local.clone();
    // What the provider had handed back when stop returned: the held call must be among it.
    let stop = tokio::spawn(async move {
        m3.stop().await;
        l3.returned()
    });
    // The pause only gives a stop that does not wait the chance to return early; the verdict
    // is the count below, not the time.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!tick.is_finished());
    gate.open();
    let returned_at_stop = tokio::time::timeout(Duration::from_secs(5), stop)
        .await
        .expect("stop returns once the tick ended")
        .unwrap();
    assert_eq!(
        returned_at_stop, 3,
        "stop returned before the tick in flight (the provider still held it)"
    );
    tokio::time::timeout(Duration::from_secs(1), tick)
        .await
        .expect("the tick had ended")
        .unwrap();
    assert_eq!(local.calls(), 3);
    assert_eq!(w.missing(A), 0, "no upstream_missing");
    assert_eq!(w.hdms(A2), 0, "no human_direct_message");
    assert_eq!((sequences(&w, A), sequences(&w, A2)), (events_a, events_a2));
    assert_eq!(w.link(A).unwrap(), link_a, "no settle");
    assert_eq!(w.link(A2).unwrap(), link_a2, "no settle");
    assert_eq!(m.metrics.missing.load(Ordering::SeqCst), 0);
    assert_eq!(m.metrics.human_turns.load(Ordering::SeqCst), 0);

    // A stopped monitor ticks no more.
    w.tick(&m, 4).await;
    assert_eq!(local.calls(), 3);
    assert_eq!(m.metrics.ticks.load(Ordering::SeqCst), 3);
}

// ---------------------------------------------------------------------------------------------
// S143 (engine part). An open error other than not-found is no outcome and resets the streak.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s143_an_open_error_is_no_outcome_and_resets_the_streak() {
    let w = World::new(&[A]);
    // Calls 1, 2: missing; call 3: a simulated permission error (no outcome); then missing.
    let local = Fake::new(LOCAL, |_, n| {
        Ok(if n == 3 { vec![] } else { vec![missing(A)] })
    });
    let m = w.monitor(vec![local.clone()], Duration::from_secs(5));
    for n in 1..=5 {
        w.tick(&m, n).await;
        assert_eq!(w.missing(A), 0, "tick {n}");
        assert!(w.link(A).is_some(), "tick {n}");
    }
    w.tick(&m, 6).await;
    assert_eq!(local.calls(), 6);
    assert_eq!(w.missing(A), 1);
    assert!(w.link(A).is_none());
}

/// The real local provider (04 §8 step 2): not found and "not a regular file" are `missing`;
/// an open error of any other kind is no outcome.
#[test]
fn s143_local_provider_open_errors() {
    let dir = tempfile::tempdir().unwrap();
    let looped = dir.path().join("loop.jsonl");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let not_a_dir = dir.path().join("file.jsonl");
    std::fs::write(&not_a_dir, "{}\n").unwrap();
    let probe = |key: &str, path: &std::path::Path| Probe {
        session_key: key.into(),
        agent_id: "main".into(),
        host_id: LOCAL.into(),
        thread_id: "t".into(),
        upstream_kind: "claude-cli".into(),
        upstream_ref: json!({"filePath": path.to_string_lossy()}),
        marker: json!({"offset": 0}),
        own_recent_user_texts: vec![],
    };
    let provider = LocalClaude::new(dir.path());
    let out = provider
        .check(&[
            probe("agent:main:claude:gone", &dir.path().join("gone.jsonl")),
            probe("agent:main:claude:dir", dir.path()),
            probe("agent:main:claude:loop", &looped),
            probe("agent:main:claude:notdir", &not_a_dir.join("x.jsonl")),
        ])
        .unwrap();
    assert_eq!(
        out,
        vec![
            missing("agent:main:claude:gone"),
            missing("agent:main:claude:dir"),
        ],
        "a symlink loop or a path through a file is no outcome"
    );
}

/// Settle semantics the monitor relies on: a 0-turn activity only moves the marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_turn_activity_settles_without_an_event() {
    let w = World::new(&[A]);
    let local = Fake::new(LOCAL, |_, _| {
        Ok(vec![Outcome::Activity {
            session_key: A.into(),
            human_turns: 0,
            next_marker: json!({"offset": 5}),
            occurred_at: None,
            dedupe_id: None,
            rebased: true,
        }])
    });
    let m = w.monitor(vec![local], Duration::from_secs(5));
    w.tick(&m, 1).await;
    assert_eq!(w.hdms(A), 0);
    assert_eq!(w.marker(A), json!({"offset": 5}));
    assert_eq!(w.link(A).unwrap().last_scanned_at, Some(tick_at(1)));
}
