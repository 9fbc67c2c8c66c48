//! Model-based test of the engine against the reference model of the contract
//! (`aware_testkit::model`, written from docs/semantics.md): the signal log (heads, pruned
//! watermarks, retention), cursors and notices (triples, drain/ack, registration, unwatch,
//! cleanup, restart sweep), the system-event FIFO and prompt rendering, wakes (which watcher,
//! how often, what each carries, coalescing on the manual clock, the catch-up), `sessions_send`,
//! spawn, and the failure model (failing appends and reads through the store's fault plan).
//!
//! A fixed universe of sessions is driven by random operation sequences; after every step the
//! engine's observable state (heads, retained streams, history gaps, every cursor row, pending
//! notices and their text, every FIFO and prompt, the wakes delivered in the step) must equal
//! the model's exactly, and the cross-step properties hold: heads are never lowered (except by
//! deleting the session), sequences are never reused, wake ids increase, and a pending notice's
//! text does not change until the watcher consumes it. Seeds: decision D48.

use aware_core::{
    ActorType, AgentId, CursorState, EventKind, KindClass, Origin, SessionKey, SessionRef,
};
use aware_engine::{
    AckNotice, Actor, AppendOutcome, AppendRequest, CreateSession, Engine, EngineConfig,
    EngineError, ErrorKind, GoalStatus, ManualClock, NewTurn, NotRecorded, PruneReport, RunOutcome,
    Wake, WakeReason,
};
use aware_engine::{Provenance, ProvenanceKind};
use aware_store::CursorRow;
use aware_testkit::engine::{open_sqlite_engine, Durability};
use aware_testkit::model_runner::{cases_from_env, regression_seeds, run_seeded};
use proptest::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aware_testkit::model::*;
use aware_testkit::spec::{DAY, T0 as START};

fn key(i: usize) -> SessionKey {
    SessionKey::parse(KEYS[i]).unwrap()
}

fn sref(i: usize) -> SessionRef {
    SessionRef::with_default(key(i), &AgentId::parse("main").unwrap())
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// A `user` turn with human provenance; `human_id` names a watcher's key as the human id
    /// (so the event's `actor_id` equals that watcher: self-suppression).
    HumanTurn {
        t: usize,
        human_id: Option<usize>,
    },
    /// A `user` turn with provenance `inter_session` from `from`: an agent turn, never recorded.
    InterSessionTurn {
        t: usize,
        from: usize,
    },
    SetGoal {
        t: usize,
        text: u8,
        complete: bool,
        actor: Option<usize>,
    },
    ClearGoal {
        t: usize,
        actor: Option<usize>,
    },
    StartRun {
        t: usize,
    },
    EndRun {
        t: usize,
        outcome: u8,
    },
    Compaction {
        t: usize,
        op: u8,
    },
    Register {
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
    Peek {
        s: usize,
    },
    Ack {
        w: usize,
        t: usize,
        agent: u8,
        last_seen: u8,
        bad_key: bool,
    },
    Reset {
        s: usize,
    },
    Delete {
        s: usize,
    },
    Create {
        s: usize,
    },
    Advance {
        ms: i64,
    },
    Prune,
    Restart,
    /// The test-mode admin append with explicit producer-passed watchers.
    AdminAppend {
        t: usize,
        kind: u8,
        actor: Option<usize>,
        watchers: Vec<usize>,
    },
    /// A host's line into the FIFO of `s` (02 §8.3): `text` and `key` pick from small sets
    /// that collide (dedupe), are blank or reserved (refused), or span lines (rendering).
    SystemEvent {
        s: usize,
        text: u8,
        key: u8,
    },
    /// Explicit ack of the FIFO entry at `index` of `s` (or an id that is not there).
    AckFifo {
        s: usize,
        index: u8,
    },
    /// `sessions_send` dispatch (03 §6.1) from `caller` to `t`, with or without `watch`.
    Send {
        caller: usize,
        t: usize,
        watch: bool,
    },
    /// `sessions_spawn` (03 §6.5) by `caller`; the child lives for this step only (the universe
    /// is fixed), then is deleted.
    Spawn {
        caller: usize,
    },
    /// `inner` with the store failing appends (to the stream of `stream`, or every append).
    FailAppends {
        stream: Option<usize>,
        inner: Box<Op>,
    },
    /// The reads of `s` with the store failing reads (01 §12: degraded answers, no change).
    FailReads {
        s: usize,
    },
    /// A write whose commit fails (01 §12): a human turn on `t`, a send from `caller` to `t`
    /// with `watch`, a spawn by `caller`, or a registration of `caller` on `t`, by `what`.
    FailCommit {
        what: u8,
        caller: usize,
        t: usize,
    },
}

const FIFO_TEXTS: [&str; 4] = [
    "deploy finished",
    "  deploy finished ",
    "line one\nline two",
    " ",
];
const FIFO_KEYS: [Option<&str>; 5] = [
    None,
    Some("ci:1"),
    Some(" CI:1 "),
    Some("session-state:61"),
    Some("  "),
];

/// Sessions with the parent `W` (whose deletion orphans the children) drawn more often.
fn session_biased() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(W), 1 => Just(X), 1 => Just(C), 1 => Just(D), 1 => Just(G)]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let s = 0..N;
    let w = 0..4usize;
    let child = prop_oneof![Just(C), Just(D)];
    let actor = prop::option::of(0..4usize);
    prop_oneof![
        10 => (s.clone(), prop::option::weighted(0.15, 0..4usize))
            .prop_map(|(t, human_id)| Op::HumanTurn { t, human_id }),
        2 => (s.clone(), w.clone()).prop_map(|(t, from)| Op::InterSessionTurn { t, from }),
        5 => (s.clone(), 0..2u8, any::<bool>(), actor.clone())
            .prop_map(|(t, text, complete, actor)| Op::SetGoal { t, text, complete, actor }),
        1 => (s.clone(), actor.clone()).prop_map(|(t, actor)| Op::ClearGoal { t, actor }),
        2 => child.clone().prop_map(|t| Op::StartRun { t }),
        2 => (child, 0..4u8).prop_map(|(t, outcome)| Op::EndRun { t, outcome }),
        2 => (s.clone(), 0..3u8).prop_map(|(t, op)| Op::Compaction { t, op }),
        5 => (0..N, s.clone()).prop_map(|(w, t)| Op::Register { w, t }),
        2 => (0..N, s.clone()).prop_map(|(w, t)| Op::Unwatch { w, t }),
        5 => s.clone().prop_map(|s| Op::Drain { s }),
        1 => s.clone().prop_map(|s| Op::Peek { s }),
        3 => (w.clone(), s.clone(), 0..3u8, 0..3u8, prop::bool::weighted(0.1))
            .prop_map(|(w, t, agent, last_seen, bad_key)| Op::Ack { w, t, agent, last_seen, bad_key }),
        1 => s.clone().prop_map(|s| Op::Reset { s }),
        2 => session_biased().prop_map(|s| Op::Delete { s }),
        3 => session_biased().prop_map(|s| Op::Create { s }),
        3 => prop_oneof![4 => 0i64..20_000, 1 => (DAY / 2)..(DAY + DAY / 2)]
            .prop_map(|ms| Op::Advance { ms }),
        2 => Just(Op::Prune),
        2 => Just(Op::Restart),
        3 => (s.clone(), 0..9u8, actor, prop::collection::vec(0..N, 0..3))
            .prop_map(|(t, kind, actor, watchers)| Op::AdminAppend { t, kind, actor, watchers }),
        3 => (s.clone(), 0..4u8, 0..5u8).prop_map(|(s, text, key)| Op::SystemEvent { s, text, key }),
        1 => (s.clone(), 0..3u8).prop_map(|(s, index)| Op::AckFifo { s, index }),
        3 => (s.clone(), s.clone(), any::<bool>())
            .prop_map(|(caller, t, watch)| Op::Send { caller, t, watch }),
        1 => s.clone().prop_map(|caller| Op::Spawn { caller }),
        1 => s.clone().prop_map(|s| Op::FailReads { s }),
        1 => (0..4u8, s.clone(), s.clone())
            .prop_map(|(what, caller, t)| Op::FailCommit { what, caller, t }),
    ]
}

/// The operations that append, for [`Op::FailAppends`].
fn appending_op() -> impl Strategy<Value = Op> {
    let s = 0..N;
    let actor = prop::option::of(0..4usize);
    prop_oneof![
        3 => s.clone().prop_map(|t| Op::HumanTurn { t, human_id: None }),
        2 => (s.clone(), 0..2u8, any::<bool>(), actor.clone())
            .prop_map(|(t, text, complete, actor)| Op::SetGoal { t, text, complete, actor }),
        1 => (prop_oneof![Just(C), Just(D)], 0..4u8).prop_map(|(t, outcome)| Op::EndRun { t, outcome }),
        1 => (s.clone(), 0..3u8).prop_map(|(t, op)| Op::Compaction { t, op }),
        1 => prop_oneof![Just(C), Just(D), Just(X)].prop_map(|s| Op::Create { s }),
        1 => s.clone().prop_map(|caller| Op::Spawn { caller }),
        1 => (s.clone(), 0..9u8, actor, prop::collection::vec(0..N, 0..3))
            .prop_map(|(t, kind, actor, watchers)| Op::AdminAppend { t, kind, actor, watchers }),
    ]
}

/// Every operation, a few of them under a failing store.
fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => op_strategy(),
        1 => (prop::option::of(0..N), appending_op())
            .prop_map(|(stream, inner)| Op::FailAppends { stream, inner: Box::new(inner) }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Reference model
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

struct Harness {
    engine: Option<Engine>,
    clock: Arc<ManualClock>,
    config: EngineConfig,
    db: std::path::PathBuf,
    /// Every wake the engine delivered (02 §10), subscribed before `start` so the restart
    /// sweep's wakes are seen too.
    wakes: RefCell<tokio::sync::broadcast::Receiver<Wake>>,
    /// The id of the last wake seen: ids increase within a process.
    last_wake_id: Cell<u64>,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let mut config = EngineConfig::new();
        config.retention = policy();
        // Prunes are the model's steps, never a timer's: `run_timers` fires coalesced wakes only.
        config.retention.prune_interval_secs = 31_536_000;
        config.coalesce_secs = (COALESCE_MS / 1000) as u64;
        let db = dir.path().join("state.db");
        let clock = Arc::new(ManualClock::new(START));
        // Restarts here are clean closes, never crashes: `normal` keeps the case fast.
        let engine =
            open_sqlite_engine(&db, Durability::Normal, config.clone(), clock.clone()).unwrap();
        let wakes = engine.subscribe_wakes();
        engine.start().unwrap();
        Harness {
            engine: Some(engine),
            clock,
            config,
            db,
            wakes: RefCell::new(wakes),
            last_wake_id: Cell::new(0),
            _dir: dir,
        }
    }

    fn e(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }

    fn restart(&mut self) -> (u64, PruneReport) {
        let old = self.engine.take().unwrap();
        old.close();
        drop(old);
        let engine = open_sqlite_engine(
            &self.db,
            Durability::Normal,
            self.config.clone(),
            self.clock.clone(),
        )
        .unwrap();
        self.wakes = RefCell::new(engine.subscribe_wakes());
        self.last_wake_id.set(0);
        let (sweep, prune) = engine.start().unwrap();
        self.engine = Some(engine);
        (sweep.cursors, prune.expect("no concurrent prune pass"))
    }
}

// The model's own expectations, written from the spec rather than taken from `aware_core`, so
// a formatting or classification bug in production cannot hide behind itself.

/// 02 §8.2: `session-state:` and the lowercase hex of the target key's UTF-8 bytes.
fn spec_context_key(target: &str) -> String {
    let hex: String = target.bytes().map(|b| format!("{b:02x}")).collect();
    format!("session-state:{hex}")
}

/// 02 §8.1, the notice template.
fn spec_notice_text(target: &str, last_seen: i64) -> String {
    format!(
        "Session \"{target}\" changed (other actor). Reconcile before acting: session_status \
         sessionKey \"{target}\" changesSince {last_seen}."
    )
}

/// 01 §5, the class column of the kinds table.
fn spec_class(kind: EventKind) -> KindClass {
    match kind {
        EventKind::HumanDirectMessage | EventKind::GoalChanged | EventKind::UpstreamMissing => {
            KindClass::Material
        }
        EventKind::ChildSpawned => KindClass::Seeds,
        EventKind::RunCompleted
        | EventKind::RunFailed
        | EventKind::Compacted
        | EventKind::Adopted
        | EventKind::Created => KindClass::LogOnly,
    }
}

#[test]
fn spec_expectations_are_literal() {
    // Pinned against the spec's own examples (02 §8.1 / §8.2), not against production code.
    assert_eq!(
        spec_context_key("agent:main:subagent:c1"),
        "session-state:6167656e743a6d61696e3a7375626167656e743a6331"
    );
    assert_eq!(spec_context_key("ab"), "session-state:6162");
    assert_eq!(
        spec_notice_text("agent:main:subagent:c1", 1),
        "Session \"agent:main:subagent:c1\" changed (other actor). Reconcile before acting: \
         session_status sessionKey \"agent:main:subagent:c1\" changesSince 1."
    );
}

fn not_found<T: std::fmt::Debug>(r: &Result<T, EngineError>) -> bool {
    matches!(r, Err(EngineError::SessionNotFound(_)))
}

fn model_cursor(row: &CursorRow) -> MCursor {
    let s: &CursorState = &row.state;
    MCursor {
        ls: s.last_seen,
        n: s.notified,
        m: s.material,
        muted: s.muted,
        origin: s.origin,
        opened: s.notice_opened_at,
        updated: s.updated_at,
    }
}

fn assert_cursor_eq(ctx: &str, pair: (usize, usize), got: &CursorRow, want: &MCursor) {
    let g = model_cursor(got);
    assert!(
        got.state.invariant_holds() && g.ls <= g.n && g.n <= g.m,
        "{ctx}: cursor invariant broken for {pair:?}: {got:?}"
    );
    assert_eq!(got.target_agent, "main", "{ctx}: target agent of {pair:?}");
    // `origin` of a muted row is not defined by the spec (informational); compare the rest.
    let mut g2 = g;
    let mut w2 = *want;
    if want.muted {
        g2.origin = Origin::Watch;
        w2.origin = Origin::Watch;
    }
    assert_eq!(
        g2, w2,
        "{ctx}: cursor ({} -> {}) differs from the model",
        KEYS[pair.0], KEYS[pair.1]
    );
}

// ---------------------------------------------------------------------------------------------
// Applying one operation to both sides
// ---------------------------------------------------------------------------------------------

fn apply(h: &mut Harness, m: &mut Model, op: &Op, ctx: &str) {
    match op {
        Op::HumanTurn { t, human_id } => {
            let mut turn = NewTurn::user("hello").channel("telegram");
            if let Some(hid) = human_id {
                turn.provenance = Some(Provenance {
                    kind: ProvenanceKind::Human,
                    human_id: Some(KEYS[*hid].to_string()),
                    source_session_key: None,
                    source_tool: None,
                });
            }
            let r = h.e().post_turn(&sref(*t), turn);
            if !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: post_turn failed: {e}"));
            let predicted = m.human_turn_records(*t) && !m.append_fails(*t);
            assert_eq!(
                out.event.is_some(),
                predicted,
                "{ctx}: human turn recorded?"
            );
            if let Some(e) = out.event {
                assert_eq!(e.kind, EventKind::HumanDirectMessage);
                assert_eq!(e.actor_type, ActorType::Human);
                assert_eq!(e.actor_id.as_deref(), human_id.map(|i| KEYS[i]));
                let passed: Vec<usize> = parent_of(*t).into_iter().collect();
                m.record(
                    *t,
                    e.sequence,
                    e.dedupe_key.clone(),
                    KindClass::Material,
                    human_id.map(|i| KEYS[i]),
                    &passed,
                    ctx,
                );
            }
        }
        Op::InterSessionTurn { t, from } => {
            let mut turn = NewTurn::user("from another session");
            turn.provenance = Some(Provenance::inter_session(key(*from), Some("sessions_send")));
            let r = h.e().post_turn(&sref(*t), turn);
            if !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: post_turn failed: {e}"));
            assert!(
                out.event.is_none(),
                "{ctx}: an inter-session (agent) turn recorded an event: {:?}",
                out.event
            );
        }
        Op::SetGoal {
            t,
            text,
            complete,
            actor,
        } => {
            let text_s = format!("goal text {text}");
            let status = if *complete {
                GoalStatus::Complete
            } else {
                GoalStatus::Active
            };
            let actor_v = actor.map_or(Actor::system(), |a| Actor::agent(&key(a)));
            let r = h.e().set_goal(&sref(*t), &text_s, status, actor_v);
            if !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: set_goal failed: {e}"));
            let sess = m.sessions[*t].as_mut().unwrap();
            let changed = sess.goal != Some((*text, *complete));
            sess.goal = Some((*text, *complete));
            assert_eq!(out.changed, changed, "{ctx}: goal changed?");
            assert_eq!(
                out.event.is_some(),
                changed && !m.append_fails(*t),
                "{ctx}: goal event?"
            );
            if let Some(e) = out.event {
                assert_eq!(e.actor_id.as_deref(), actor.map(|a| KEYS[a]));
                let passed: Vec<usize> = parent_of(*t).into_iter().collect();
                m.record(
                    *t,
                    e.sequence,
                    None,
                    KindClass::Material,
                    actor.map(|a| KEYS[a]),
                    &passed,
                    ctx,
                );
            }
        }
        Op::ClearGoal { t, actor } => {
            let actor_v = actor.map_or(Actor::system(), |a| Actor::agent(&key(a)));
            let r = h.e().clear_goal(&sref(*t), actor_v);
            if !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: clear_goal failed: {e}"));
            let sess = m.sessions[*t].as_mut().unwrap();
            let changed = sess.goal.take().is_some();
            assert_eq!(out.changed, changed, "{ctx}: goal cleared?");
            assert_eq!(
                out.event.is_some(),
                changed && !m.append_fails(*t),
                "{ctx}: goal event?"
            );
            if let Some(e) = out.event {
                let passed: Vec<usize> = parent_of(*t).into_iter().collect();
                m.record(
                    *t,
                    e.sequence,
                    None,
                    KindClass::Material,
                    actor.map(|a| KEYS[a]),
                    &passed,
                    ctx,
                );
            }
        }
        Op::StartRun { t } => {
            m.runs += 1;
            let run_id = format!("run-{}", m.runs);
            let r = h.e().start_run(&sref(*t), Some(run_id.clone()), None);
            match m.sessions[*t].as_mut() {
                None => assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                ),
                Some(s) if s.run.is_some() => assert!(
                    matches!(r, Err(EngineError::RunActive(_))),
                    "{ctx}: expected run_active, got {r:?}"
                ),
                Some(s) => {
                    r.unwrap_or_else(|e| panic!("{ctx}: start_run failed: {e}"));
                    s.run = Some(run_id);
                }
            }
        }
        Op::EndRun { t, outcome } => {
            let outcome = [
                RunOutcome::Ok,
                RunOutcome::Error,
                RunOutcome::Timeout,
                RunOutcome::Cancelled,
            ][*outcome as usize];
            let Some(run_id) = m.sessions[*t].as_ref().and_then(|s| s.run.clone()) else {
                // No active run: ending one that was never started is refused (03 §4.3,
                // 404 run_not_found; session_not_found first when the session is gone) and
                // records nothing (the heads are compared after every step).
                let r = h.e().end_run(&sref(*t), "never-started", outcome);
                if m.exists(*t) {
                    assert!(
                        matches!(r, Err(EngineError::RunNotFound(_))),
                        "{ctx}: expected run_not_found, got {r:?}"
                    );
                } else {
                    assert!(
                        not_found(&r),
                        "{ctx}: expected session_not_found, got {r:?}"
                    );
                }
                return;
            };
            let out = h
                .e()
                .end_run(&sref(*t), &run_id, outcome)
                .unwrap_or_else(|e| panic!("{ctx}: end_run failed: {e}"));
            m.sessions[*t].as_mut().unwrap().run = None;
            let Some(e) = out.event else {
                assert!(
                    m.append_fails(*t),
                    "{ctx}: a child's run end recorded nothing"
                );
                return;
            };
            assert!(
                !m.append_fails(*t),
                "{ctx}: a failed append answered an event"
            );
            let want = if outcome == RunOutcome::Ok {
                EventKind::RunCompleted
            } else {
                EventKind::RunFailed
            };
            assert_eq!(e.kind, want, "{ctx}");
            let passed: Vec<usize> = parent_of(*t).into_iter().collect();
            m.record(
                *t,
                e.sequence,
                e.dedupe_key.clone(),
                KindClass::LogOnly,
                None,
                &passed,
                ctx,
            );
        }
        Op::Compaction { t, op } => {
            let op_id = format!("op{op}");
            let r = h.e().compaction(&sref(*t), &op_id, None);
            if !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: compaction failed: {e}"));
            let dedupe = format!("compacted:main:{}:{op_id}", KEYS[*t]);
            let Some(e) = out.event else {
                assert!(
                    m.append_fails(*t) && m.event_by_dedupe(&dedupe).is_none() && !out.duplicate,
                    "{ctx}: compaction answered no event: {out:?}"
                );
                return;
            };
            match m.event_by_dedupe(&dedupe) {
                Some(seq) => {
                    assert!(out.duplicate, "{ctx}: repeated operationId not a duplicate");
                    assert_eq!(e.sequence, seq, "{ctx}: duplicate answers the first event");
                }
                None => {
                    assert!(
                        !out.duplicate,
                        "{ctx}: fresh operationId reported duplicate"
                    );
                    assert_eq!(e.kind, EventKind::Compacted);
                    m.record(
                        *t,
                        e.sequence,
                        Some(dedupe),
                        KindClass::LogOnly,
                        None,
                        &[],
                        ctx,
                    );
                }
            }
        }
        Op::Register { w, t } => {
            let r = h.e().register_watch(&sref(*w), &sref(*t));
            if !m.may_register(*w, *t) {
                assert!(r.is_err(), "{ctx}: registration should be refused: {r:?}");
                return;
            }
            let row = r.unwrap_or_else(|e| panic!("{ctx}: register failed: {e}"));
            let c = m.register(*w, *t);
            assert_cursor_eq(ctx, (*w, *t), &row, &c);
        }
        Op::Unwatch { w, t } => {
            let r = h.e().unwatch(&sref(*w), &sref(*t));
            if !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            if qualified(*w) && !m.exists(*w) {
                // A watcher is an existing session (02 §1; the routes refuse a missing caller,
                // 03 §5.3): refused, and no cursor row written (compared after every step).
                assert!(
                    matches!(&r, Err(EngineError::SessionNotFound(k)) if k.contains(KEYS[*w])),
                    "{ctx}: unwatch by a missing watcher: expected session_not_found, got {r:?}"
                );
                return;
            }
            let got = r.unwrap_or_else(|e| panic!("{ctx}: unwatch failed: {e}"));
            let existing = m.cursors.get(&(*w, *t)).copied();
            let want = qualified(*w)
                && !existing.is_some_and(|c| c.muted)
                && (existing.is_some() || parent_of(*t) == Some(*w));
            assert_eq!(got, want, "{ctx}: unwatched?");
            if want {
                let origin = existing.map_or(Origin::Spawn, |c| c.origin);
                let c = MCursor::settled(m.head(*t), true, origin, m.now);
                m.cursors.insert((*w, *t), c);
            }
        }
        Op::Drain { s } => {
            let r = h.e().drain(&sref(*s));
            if !m.exists(*s) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let d = r.unwrap_or_else(|e| panic!("{ctx}: drain failed: {e}"));
            let pending = m.pending_of(*s);
            check_notices(ctx, *s, &d.notices, &pending);
            check_fifo(ctx, *s, &d.system_events, &m.fifo[*s]);
            assert_eq!(d.prompt, m.prompt_of(*s), "{ctx}: drain prompt");
            m.fifo[*s].clear();
            let mut follow = 0;
            for (t, _) in &pending {
                if m.ack(*s, *t) {
                    follow += 1;
                }
            }
            assert_eq!(d.pending_after, follow, "{ctx}: drain pendingAfter");
        }
        Op::Peek { s } => {
            let r = h.e().peek(&sref(*s));
            if !m.exists(*s) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
            }
        }
        Op::Ack {
            w,
            t,
            agent,
            last_seen,
            bad_key,
        } => {
            let context_key = if *bad_key {
                format!("session-state:{}", "ZZ")
            } else {
                spec_context_key(KEYS[*t])
            };
            let existing = m.cursors.get(&(*w, *t)).copied().filter(|c| c.pending());
            let ls_given = match last_seen {
                0 => None,
                1 => Some(existing.map_or(0, |c| c.ls)),
                _ => Some(existing.map_or(12_345, |c| c.ls + 1)),
            };
            let agent_given = match agent {
                0 => None,
                1 => Some("main".to_string()),
                _ => Some("other".to_string()),
            };
            let r = h.e().ack(
                &sref(*w),
                vec![AckNotice {
                    context_key: context_key.clone(),
                    target_agent: agent_given.clone(),
                    last_seen: ls_given,
                }],
                vec![],
            );
            if !m.exists(*w) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let res = r.unwrap_or_else(|e| panic!("{ctx}: ack failed: {e}"));
            let (mut acked, mut follow, mut ignored) = (0, 0, vec![]);
            if *bad_key {
                ignored.push(context_key);
            } else if let Some(c) = existing {
                if agent_given.as_deref().is_none_or(|a| a == "main") {
                    if ls_given.is_some_and(|ls| ls != c.ls) {
                        ignored.push(context_key);
                    } else {
                        acked = 1;
                        if m.ack(*w, *t) {
                            follow = 1;
                        }
                    }
                }
            }
            assert_eq!(
                (res.acked, res.follow_ups, res.ignored),
                (acked, follow, ignored),
                "{ctx}: ack answer"
            );
        }
        Op::Reset { s } => {
            let r = h.e().reset_session(&sref(*s));
            match m.sessions[*s].as_ref() {
                None => assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                ),
                Some(ss) if ss.run.is_some() => assert!(
                    matches!(r, Err(EngineError::RunActive(_))),
                    "{ctx}: expected run_active, got {r:?}"
                ),
                Some(_) => {
                    let (sess, _) = r.unwrap_or_else(|e| panic!("{ctx}: reset failed: {e}"));
                    assert_eq!(sess.state_version, m.head(*s), "{ctx}: head kept by reset");
                    m.reset(*s);
                }
            }
        }
        Op::Delete { s } => {
            let r = h.e().delete_session(&sref(*s));
            if !m.exists(*s) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            r.unwrap_or_else(|e| panic!("{ctx}: delete failed: {e}"));
            m.delete(*s);
        }
        Op::Create { s } => {
            let mut req = CreateSession::new(key(*s));
            if let Some(p) = parent_of(*s) {
                req = req.parent(key(p));
            }
            let r = h.e().create_session(req);
            if m.exists(*s) {
                let (created, _) = r.unwrap_or_else(|e| panic!("{ctx}: create failed: {e}"));
                assert!(!created, "{ctx}: existing session re-created");
                return;
            }
            if let Some(p) = parent_of(*s) {
                if !m.exists(p) {
                    assert!(
                        not_found(&r),
                        "{ctx}: expected session_not_found, got {r:?}"
                    );
                    return;
                }
            }
            let (created, sess) = r.unwrap_or_else(|e| panic!("{ctx}: create failed: {e}"));
            assert!(created, "{ctx}: not created");
            assert!(!sess.row.orphaned, "{ctx}: a new session is not orphaned");
            m.sessions[*s] = Some(MSession {
                orphaned: false,
                goal: None,
                run: None,
            });
            m.announce_creation(*s);
            if let Some(p) = parent_of(*s) {
                let seq = h.e().version(&sref(*s));
                assert_eq!(sess.state_version, seq, "{ctx}");
                if m.append_fails(*s) {
                    assert_eq!(seq, 0, "{ctx}: a failed child_spawned left a head");
                    return;
                }
                m.record(
                    *s,
                    seq,
                    Some(format!("child-spawned:{}", sess.row.session_id)),
                    KindClass::Seeds,
                    None,
                    &[p],
                    ctx,
                );
            } else {
                assert_eq!(sess.state_version, 0, "{ctx}: a new stream has no head");
            }
        }
        Op::SystemEvent { .. }
        | Op::AckFifo { .. }
        | Op::Send { .. }
        | Op::Spawn { .. }
        | Op::FailAppends { .. }
        | Op::FailReads { .. }
        | Op::FailCommit { .. } => apply_contract(h, m, op, ctx),
        Op::Advance { ms } => {
            let now = h.clock.advance(*ms);
            h.e()
                .run_timers()
                .unwrap_or_else(|e| panic!("{ctx}: timers failed: {e}"));
            m.advance(*ms);
            assert_eq!(now, m.now);
        }
        Op::Prune => {
            let report = h.e().prune_pass().expect("no concurrent prune pass");
            let want = m.prune();
            let got = MPrune {
                age: report.deleted_by_age,
                cap: report.deleted_by_cap,
                cursors: report.expired_cursors,
                system_events: report.expired_system_events,
            };
            assert_eq!(got, want, "{ctx}: prune report");
        }
        Op::Restart => {
            let (swept, report) = h.restart();
            let want_swept = m.sweep();
            assert_eq!(swept, want_swept, "{ctx}: restart sweep re-froze");
            let want = m.prune();
            let got = MPrune {
                age: report.deleted_by_age,
                cap: report.deleted_by_cap,
                cursors: report.expired_cursors,
                system_events: report.expired_system_events,
            };
            assert_eq!(got, want, "{ctx}: start-up prune report");
        }
        Op::AdminAppend {
            t,
            kind,
            actor,
            watchers,
        } => {
            // Every kind of 01 §5, so the class table is exercised against `spec_class`.
            let kind = [
                EventKind::HumanDirectMessage,
                EventKind::GoalChanged,
                EventKind::ChildSpawned,
                EventKind::Compacted,
                EventKind::UpstreamMissing,
                EventKind::RunCompleted,
                EventKind::RunFailed,
                EventKind::Adopted,
                EventKind::Created,
            ][*kind as usize];
            let actor_type = if actor.is_some() {
                ActorType::Agent
            } else {
                ActorType::System
            };
            let mut req = AppendRequest::new(sref(*t), kind, actor_type);
            req.actor_id = actor.map(|a| KEYS[a].to_string());
            req.watchers = watchers.iter().map(|w| KEYS[*w].to_string()).collect();
            let r = h.e().append(req);
            if !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: append failed: {e}"));
            if m.append_fails(*t) {
                assert!(
                    matches!(out, AppendOutcome::NotRecorded(NotRecorded::Failed)),
                    "{ctx}: a failing append answered {out:?}"
                );
                return;
            }
            let AppendOutcome::Recorded(e) = out else {
                panic!("{ctx}: admin append not recorded: {out:?}");
            };
            m.record(
                *t,
                e.sequence,
                None,
                spec_class(kind),
                actor.map(|a| KEYS[a]),
                watchers,
                ctx,
            );
        }
    }
}

/// The operations beyond the signal log and cursors: the FIFO, `sessions_send`, spawn and the
/// store's fault seams.
fn apply_contract(h: &mut Harness, m: &mut Model, op: &Op, ctx: &str) {
    match op {
        Op::SystemEvent { s, text, key } => {
            let (text, key) = (FIFO_TEXTS[*text as usize], FIFO_KEYS[*key as usize]);
            let r = h.e().enqueue_system_event(&sref(*s), text, key);
            let mut fifo = m.fifo[*s].clone();
            let want = fifo_push(&mut fifo, text, key, m.now);
            if want == FifoPush::Refused {
                assert!(
                    matches!(&r, Err(e) if e.kind() == ErrorKind::InvalidArgument),
                    "{ctx}: expected invalid_argument, got {r:?}"
                );
                return;
            }
            if !m.exists(*s) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let id = r.unwrap_or_else(|e| panic!("{ctx}: enqueue failed: {e}"));
            assert_eq!(
                id.is_some(),
                want == FifoPush::Inserted,
                "{ctx}: enqueued (Some(id)) or a duplicate (None)?"
            );
            m.fifo[*s] = fifo;
        }
        Op::AckFifo { s, index } => {
            let ids: Vec<i64> = match h.e().peek(&sref(*s)) {
                Ok(d) => d.system_events.iter().map(|e| e.id).collect(),
                Err(_) => Vec::new(),
            };
            let id = ids.get(*index as usize).copied().unwrap_or(i64::MAX);
            let r = h.e().ack(&sref(*s), vec![], vec![id]);
            if !m.exists(*s) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let res = r.unwrap_or_else(|e| panic!("{ctx}: ack failed: {e}"));
            let removed = (*index as usize) < m.fifo[*s].len();
            assert_eq!(
                res,
                aware_engine::AckResult {
                    removed_system_events: u64::from(removed),
                    ..Default::default()
                },
                "{ctx}: ack of a FIFO id"
            );
            if removed {
                m.fifo[*s].remove(*index as usize);
            }
        }
        Op::Send { caller, t, watch } => {
            let r = h
                .e()
                .send_dispatch(&sref(*caller), &sref(*t), "please look", *watch);
            if caller == t {
                assert!(
                    matches!(&r, Err(e) if e.kind() == ErrorKind::InvalidArgument)
                        || (!m.exists(*t) && not_found(&r)),
                    "{ctx}: a send to the caller's own session: {r:?}"
                );
                return;
            }
            if !m.exists(*caller) || !m.exists(*t) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: send failed: {e}"));
            // 03 §6.1: `watched` only when asked; false for a bare caller.
            let watched = watch.then(|| m.may_register(*caller, *t));
            assert_eq!(out.watched, watched, "{ctx}: watched");
            if watched == Some(true) {
                m.register(*caller, *t);
            }
            m.direct_wake(KEYS[*t], MWakeReason::Message, &out.run_id, *caller);
        }
        Op::Spawn { caller } => {
            let r = h.e().spawn(&sref(*caller), "do the task", None, None, None);
            if !m.exists(*caller) {
                assert!(
                    not_found(&r),
                    "{ctx}: expected session_not_found, got {r:?}"
                );
                return;
            }
            let out = r.unwrap_or_else(|e| panic!("{ctx}: spawn failed: {e}"));
            let uuid = out
                .child_key
                .strip_prefix("agent:main:subagent:")
                .unwrap_or_else(|| panic!("{ctx}: child key {}", out.child_key));
            assert!(
                uuid.len() == 36 && uuid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()),
                "{ctx}: child key {}",
                out.child_key
            );
            let child = SessionRef::with_default(
                SessionKey::parse(&out.child_key).unwrap(),
                &AgentId::parse("main").unwrap(),
            );
            // 03 §6.5: `created` then `child_spawned` on the child's stream, the latter seeding
            // the caller's cursor (02 §4); a failing store records neither, the spawn stands.
            let page = h.e().list_since(&child, 0, 10).unwrap();
            let kinds: Vec<EventKind> = page.events.iter().map(|e| e.kind).collect();
            let rows = h.e().watchers(&child).unwrap();
            if m.append_fault == Some(AppendFault::All) {
                assert!(kinds.is_empty(), "{ctx}: failed appends left {kinds:?}");
                assert!(
                    rows.is_empty(),
                    "{ctx}: a cursor without its event: {rows:?}"
                );
            } else {
                assert_eq!(
                    kinds,
                    [EventKind::Created, EventKind::ChildSpawned],
                    "{ctx}: the child's stream"
                );
                for e in &page.events {
                    m.issued(e.sequence, ctx);
                }
                let seeded = page.events[1].sequence;
                let want: Vec<(String, MCursor)> = if qualified(*caller) {
                    vec![(
                        KEYS[*caller].to_string(),
                        MCursor::settled(seeded, false, Origin::Spawn, m.now),
                    )]
                } else {
                    vec![]
                };
                let got: Vec<(String, MCursor)> = rows
                    .iter()
                    .map(|r| (r.watcher.clone(), model_cursor(r)))
                    .collect();
                assert_eq!(got, want, "{ctx}: the child's watchers");
            }
            let (turns, _) = h.e().list_turns(&child, None, 10).unwrap();
            assert_eq!(turns.len(), 1, "{ctx}: the task turn");
            m.direct_wake(&out.child_key, MWakeReason::Spawn, &out.run_id, *caller);
            h.e()
                .delete_session(&child)
                .unwrap_or_else(|e| panic!("{ctx}: deleting the child failed: {e}"));
        }
        Op::FailAppends { stream, inner } => {
            let faults = h.e().store_faults();
            match stream {
                Some(s) => faults.set_fail_appends_for(Some(KEYS[*s].to_string())),
                None => faults.set_fail_appends(true),
            }
            m.append_fault = Some(stream.map_or(AppendFault::All, AppendFault::Stream));
            apply(h, m, inner, ctx);
            h.e().store_faults().clear();
        }
        Op::FailReads { s } => {
            h.e().store_faults().set_fail_reads(true);
            let version = h.e().version(&sref(*s));
            let page = h.e().list_since(&sref(*s), 0, 200);
            h.e().store_faults().clear();
            // 01 §12: a failed read degrades to 0 and the empty page, and changes nothing.
            assert_eq!(version, 0, "{ctx}: version under a read failure");
            let page = page.unwrap_or_else(|e| panic!("{ctx}: listSince failed: {e}"));
            assert!(
                page.events.is_empty()
                    && !page.truncated
                    && page.earliest_available_sequence == 0
                    && !page.history_gap,
                "{ctx}: the degraded page: {page:?}"
            );
        }
        Op::FailCommit { what, caller, t } => {
            let e = h.e();
            e.store_faults().fail_next_commits(1);
            let (r, ok) = match what {
                0 => (
                    e.post_turn(&sref(*t), NewTurn::user("hello").channel("telegram"))
                        .map(|_| ()),
                    m.exists(*t),
                ),
                1 => (
                    e.send_dispatch(&sref(*caller), &sref(*t), "please look", true)
                        .map(|_| ()),
                    caller != t && m.exists(*caller) && m.exists(*t),
                ),
                2 => (
                    e.spawn(&sref(*caller), "do the task", None, None, None)
                        .map(|_| ()),
                    m.exists(*caller),
                ),
                _ => (
                    e.register_watch(&sref(*caller), &sref(*t)).map(|_| ()),
                    m.may_register(*caller, *t),
                ),
            };
            e.store_faults().clear();
            // 01 §12: an op whose commit failed answers store_unavailable, and nothing of it
            // happened: the model does not move, and the checks after the step (heads, cursors,
            // FIFOs, wakes) compare the engine with it.
            if ok {
                assert!(
                    matches!(&r, Err(e) if e.kind() == ErrorKind::StoreUnavailable),
                    "{ctx}: a failed commit answered {r:?}"
                );
            } else {
                assert!(
                    r.is_err(),
                    "{ctx}: a refused op under a failing commit: {r:?}"
                );
            }
        }
        _ => unreachable!("{ctx}: not a contract op"),
    }
}

fn check_fifo(ctx: &str, s: usize, got: &[aware_store::SystemEventRow], want: &[MSysEvent]) {
    let got_v: Vec<MSysEvent> = got
        .iter()
        .map(|e| MSysEvent {
            text: e.text.clone(),
            context_key: e.context_key.clone(),
            at: e.enqueued_at,
        })
        .collect();
    assert_eq!(got_v, want, "{ctx}: FIFO of {}", KEYS[s]);
    assert!(
        got.windows(2).all(|p| p[0].id < p[1].id),
        "{ctx}: FIFO ids not in arrival order"
    );
}

/// The wakes delivered during the step equal the model's (which watcher, how often, what each
/// carries), ids increase, and a new subscriber's catch-up is one wake per pending watcher.
fn check_wakes(h: &Harness, m: &Model, ctx: &str) {
    let mut got = Vec::new();
    {
        let mut rx = h.wakes.borrow_mut();
        loop {
            match rx.try_recv() {
                Ok(w) => {
                    assert!(
                        w.id > h.last_wake_id.get(),
                        "{ctx}: wake id {} not above {}",
                        w.id,
                        h.last_wake_id.get()
                    );
                    h.last_wake_id.set(w.id);
                    got.push(model_wake(&w));
                }
                Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                Err(e) => panic!("{ctx}: wake stream: {e}"),
            }
        }
    }
    // Within a step every wake has the same time; their order among watchers is not specified.
    let mut want = m.wakes.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{ctx}: wakes delivered");
    let catch_up: Vec<MWake> = h
        .e()
        .catch_up_wakes()
        .unwrap()
        .iter()
        .map(model_wake)
        .collect();
    assert_eq!(catch_up, m.catch_up(), "{ctx}: catch-up wakes");
}

fn model_wake(w: &Wake) -> MWake {
    MWake {
        session: w.session_key.clone(),
        reason: match w.reason {
            WakeReason::SessionState => MWakeReason::SessionState,
            WakeReason::Message => MWakeReason::Message,
            WakeReason::Spawn => MWakeReason::Spawn,
        },
        targets: w.targets.iter().map(|(k, _)| k.clone()).collect(),
        run_id: w.run_id.clone(),
        from: w.from.clone(),
        at: w.at,
    }
}

fn check_notices(ctx: &str, w: usize, got: &[aware_engine::Notice], want: &[(usize, MCursor)]) {
    let got_v: Vec<(String, String, i64, i64, String, String)> = got
        .iter()
        .map(|n| {
            (
                n.target_key.clone(),
                n.target_agent.clone(),
                n.last_seen,
                n.opened_at,
                n.context_key.clone(),
                n.text.clone(),
            )
        })
        .collect();
    let want_v: Vec<(String, String, i64, i64, String, String)> = want
        .iter()
        .map(|(t, c)| {
            (
                KEYS[*t].to_string(),
                "main".to_string(),
                c.ls,
                c.opened.expect("pending row has notice_opened_at"),
                spec_context_key(KEYS[*t]),
                spec_notice_text(KEYS[*t], c.ls),
            )
        })
        .collect();
    assert_eq!(got_v, want_v, "{ctx}: notices of {}", KEYS[w]);
    let pairs: BTreeSet<(&str, &str)> = got
        .iter()
        .map(|n| (n.target_key.as_str(), n.target_agent.as_str()))
        .collect();
    assert_eq!(pairs.len(), got.len(), "{ctx}: two notices for one pair");
}

// ---------------------------------------------------------------------------------------------
// Checks after every step
// ---------------------------------------------------------------------------------------------

#[derive(Default, Clone)]
struct Observed {
    heads: [i64; N],
    seqs: BTreeSet<i64>,
    max_seq: i64,
    /// `(watcher, target)` → notice text, for every pending notice.
    notices: BTreeMap<(usize, usize), String>,
}

fn check(h: &Harness, m: &Model, prev: &Observed, op: Option<&Op>, ctx: &str) -> Observed {
    let e = h.e();
    let mut obs = Observed {
        max_seq: prev.max_seq,
        ..Default::default()
    };

    // Heads: equal to the model, never lowered except by deleting the session.
    for (i, name) in KEYS.iter().enumerate() {
        let v = e.version(&sref(i));
        assert_eq!(v, m.head(i), "{ctx}: head of {}", name);
        let deleted = matches!(op, Some(Op::Delete { s }) if *s == i);
        assert!(
            v >= prev.heads[i] || (deleted && v == 0),
            "{ctx}: head of {} lowered from {} to {v}",
            name,
            prev.heads[i]
        );
        obs.heads[i] = v;
    }

    // Streams, earliest available sequence and the exact history gap.
    for (i, name) in KEYS.iter().enumerate() {
        let page = e.list_since(&sref(i), 0, 200).unwrap();
        let seqs: Vec<i64> = page.events.iter().map(|ev| ev.sequence).collect();
        let want = m.retained(i);
        assert_eq!(seqs, want, "{ctx}: retained stream of {}", name);
        assert!(!page.truncated, "{ctx}");
        let earliest =
            want.first()
                .copied()
                .unwrap_or(if m.head(i) > 0 { m.head(i) + 1 } else { 0 });
        assert_eq!(
            page.earliest_available_sequence, earliest,
            "{ctx}: earliestAvailableSequence of {}",
            name
        );
        let pm = m.pruned(i);
        let mut afters: BTreeSet<i64> = [0, pm, pm + 1, m.head(i)].into_iter().collect();
        if pm > 0 {
            afters.insert(pm - 1);
        }
        for after in afters {
            let p = if after == 0 {
                page.clone()
            } else {
                e.list_since(&sref(i), after, 200).unwrap()
            };
            assert_eq!(
                p.history_gap,
                after < pm,
                "{ctx}: historyGap of {} after {after} (pruned watermark {pm})",
                name
            );
            let tail: Vec<i64> = p.events.iter().map(|ev| ev.sequence).collect();
            let want_tail: Vec<i64> = want.iter().copied().filter(|s| *s > after).collect();
            assert_eq!(tail, want_tail, "{ctx}: listSince {} after {after}", name);
        }
        if want.len() > 2 {
            let p = e.list_since(&sref(i), 0, 2).unwrap();
            assert!(p.truncated, "{ctx}: a short page is truncated");
            assert_eq!(p.events.len(), 2, "{ctx}");
        }
        for s in seqs {
            if !prev.seqs.contains(&s) {
                assert!(
                    s > prev.max_seq,
                    "{ctx}: new sequence {s} not above every earlier one ({})",
                    prev.max_seq
                );
            }
            obs.max_seq = obs.max_seq.max(s);
            obs.seqs.insert(s);
        }
    }

    // Every cursor row, from both sides, and nothing else in the table.
    let mut seen_rows = 0usize;
    for (t, name) in KEYS.iter().enumerate() {
        if !m.exists(t) {
            assert!(
                !m.cursors.keys().any(|&(w, tt)| w == t || tt == t),
                "{ctx}: model keeps cursors of a missing session"
            );
            continue;
        }
        let rows = e.watchers(&sref(t)).unwrap();
        let mut want: Vec<(usize, MCursor)> = m
            .cursors
            .iter()
            .filter(|(&(_, tt), _)| tt == t)
            .map(|(&(w, _), c)| (w, *c))
            .collect();
        want.sort_by_key(|(w, _)| KEYS[*w]);
        let got_ws: Vec<usize> = rows.iter().map(|r| index_of(&r.watcher)).collect();
        let want_ws: Vec<usize> = want.iter().map(|(w, _)| *w).collect();
        assert_eq!(got_ws, want_ws, "{ctx}: watchers of {}", name);
        for (row, (w, c)) in rows.iter().zip(&want) {
            assert_cursor_eq(ctx, (*w, t), row, c);
        }
        seen_rows += rows.len();
        if qualified(t) {
            let rows = e.watches(&sref(t)).unwrap();
            let n_want = m.cursors.keys().filter(|&&(w, _)| w == t).count();
            assert_eq!(rows.len(), n_want, "{ctx}: watches of {}", name);
            for row in &rows {
                let pair = (t, index_of(&row.target_key));
                assert_cursor_eq(ctx, pair, row, &m.cursors[&pair]);
            }
        }
    }
    let total: i64 = rusqlite::Connection::open(&h.db)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM session_watch_cursors", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(total as usize, seen_rows, "{ctx}: stray cursor rows");
    assert_eq!(total as usize, m.cursors.len(), "{ctx}: cursor count");

    // Pending notices: exact, one per pair, and text stable while pending.
    for (s, name) in KEYS.iter().enumerate() {
        let r = e.peek(&sref(s));
        if !m.exists(s) {
            assert!(not_found(&r), "{ctx}");
            continue;
        }
        let d = r.unwrap();
        let pending = m.pending_of(s);
        check_notices(ctx, s, &d.notices, &pending);
        check_fifo(ctx, s, &d.system_events, &m.fifo[s]);
        assert_eq!(d.prompt, m.prompt_of(s), "{ctx}: prompt of {name}");
        assert_eq!(
            d.pending_after,
            d.notices.len() as u64,
            "{ctx}: peek pendingAfter"
        );
        for n in &d.notices {
            obs.notices
                .insert((s, index_of(&n.target_key)), n.text.clone());
        }
    }
    let consumed_by = match op {
        Some(Op::Drain { s }) => Some(*s),
        Some(Op::Ack { w, .. }) => Some(*w),
        _ => None,
    };
    check_wakes(h, m, ctx);
    for (pair, text) in &obs.notices {
        if Some(pair.0) == consumed_by {
            continue;
        }
        if let Some(before) = prev.notices.get(pair) {
            assert_eq!(
                text, before,
                "{ctx}: notice text of a pending notice changed without being consumed"
            );
        }
    }
    obs
}

impl Driver for Harness {
    type Op = Op;
    type Observed = Observed;
    fn create(s: usize) -> Op {
        Op::Create { s }
    }
    fn apply(&mut self, m: &mut Model, op: &Op, ctx: &str) {
        apply(self, m, op, ctx)
    }
    fn check(&self, m: &Model, prev: &Observed, op: Option<&Op>, ctx: &str) -> Observed {
        check(self, m, prev, op, ctx)
    }
    fn finish(&mut self) {
        if let Some(e) = self.engine.take() {
            e.close();
        }
    }
}

fn run_case(ops: &[Op]) {
    let mut h = Harness::new();
    let mut m = Model::new(START);
    aware_testkit::model::run_case(&mut h, &mut m, ops);
}

/// Hand-written sequences for paths that random generation reaches rarely.
fn directed_sequences() -> Vec<(&'static str, Vec<Op>)> {
    let human = |t| Op::HumanTurn { t, human_id: None };
    let turns = |t, n| (0..n).map(move |_| Op::HumanTurn { t, human_id: None });
    let drain = |s| Op::Drain { s };
    vec![
        (
            "frozen watermark and one follow-up",
            vec![
                human(C),
                human(C),
                human(C),
                Op::Peek { s: W },
                drain(W),
                drain(W),
                drain(W),
            ],
        ),
        (
            "self-suppression",
            vec![
                Op::Register { w: X, t: C },
                Op::SetGoal {
                    t: C,
                    text: 0,
                    complete: false,
                    actor: Some(W),
                },
                Op::HumanTurn {
                    t: C,
                    human_id: Some(X),
                },
                Op::InterSessionTurn { t: C, from: W },
                Op::AdminAppend {
                    t: C,
                    kind: 0,
                    actor: Some(X),
                    watchers: vec![W, X, C, G, W],
                },
                drain(W),
                drain(X),
            ],
        ),
        (
            "row cap, age, cursor expiry and history gaps",
            turns(C, 14)
                .chain([
                    Op::Prune,
                    Op::Register { w: W, t: X },
                    human(X),
                    Op::Advance { ms: DAY + 1 },
                    human(D),
                    Op::Prune,
                    human(C),
                    Op::Prune,
                ])
                .collect(),
        ),
        (
            "restart sweep re-freezes pending notices",
            vec![
                human(C),
                human(C),
                Op::Restart,
                Op::Peek { s: W },
                drain(W),
                human(C),
                human(D),
                Op::Restart,
                Op::Restart,
                drain(W),
            ],
        ),
        (
            "unwatch mutes, registration unmutes",
            vec![
                Op::Unwatch { w: W, t: C },
                human(C),
                Op::Unwatch { w: W, t: C },
                Op::Register { w: W, t: C },
                human(C),
                Op::Register { w: W, t: C },
                drain(W),
            ],
        ),
        (
            "orphaned children and a re-created parent",
            vec![
                Op::Delete { s: W },
                human(C),
                Op::Create { s: W },
                human(C),
                Op::Register { w: W, t: C },
                human(C),
                Op::Unwatch { w: W, t: C },
                Op::Delete { s: C },
                Op::Create { s: C },
                human(C),
                human(D),
                drain(W),
            ],
        ),
        (
            "reset watcher restarts at changesSince 0",
            vec![
                human(C),
                Op::Reset { s: W },
                human(C),
                human(C),
                drain(W),
                drain(W),
            ],
        ),
        (
            "compaction dedupe ends when the first event is pruned",
            [
                Op::Compaction { t: C, op: 0 },
                Op::Compaction { t: C, op: 0 },
            ]
            .into_iter()
            .chain(turns(D, 13))
            .chain([Op::Prune, Op::Compaction { t: C, op: 0 }])
            .collect(),
        ),
        (
            "explicit ack variants",
            vec![
                human(C),
                human(C),
                Op::Ack {
                    w: W,
                    t: C,
                    agent: 2,
                    last_seen: 0,
                    bad_key: false,
                },
                Op::Ack {
                    w: W,
                    t: C,
                    agent: 0,
                    last_seen: 0,
                    bad_key: true,
                },
                Op::Ack {
                    w: W,
                    t: C,
                    agent: 1,
                    last_seen: 2,
                    bad_key: false,
                },
                Op::Ack {
                    w: W,
                    t: C,
                    agent: 1,
                    last_seen: 1,
                    bad_key: false,
                },
                Op::Ack {
                    w: W,
                    t: C,
                    agent: 0,
                    last_seen: 0,
                    bad_key: false,
                },
                Op::Ack {
                    w: W,
                    t: C,
                    agent: 0,
                    last_seen: 0,
                    bad_key: false,
                },
            ],
        ),
        (
            "wakes: opening, coalescing, merged delivery, drained before due, follow-ups",
            vec![
                Op::Register { w: X, t: C },
                human(C),
                Op::Advance { ms: 5_000 },
                human(D),
                Op::Advance { ms: 15_000 },
                human(C),
                drain(W),
                Op::Advance { ms: 20_000 },
                human(D),
                Op::Advance { ms: 1_000 },
                human(D),
                drain(W),
                drain(X),
                Op::Advance { ms: 19_000 },
                Op::Restart,
                Op::Delete { s: X },
                Op::Create { s: X },
            ],
        ),
        (
            "FIFO: creation lines, dedupe, refusals, multi-line prompt, cap, ack by id",
            (0..23u8)
                .map(|i| Op::SystemEvent {
                    s: W,
                    text: i % 4,
                    key: i % 3,
                })
                .chain([
                    Op::AckFifo { s: W, index: 1 },
                    Op::AckFifo { s: W, index: 9 },
                    human(C),
                    Op::Peek { s: W },
                    drain(W),
                    Op::SystemEvent {
                        s: C,
                        text: 2,
                        key: 0,
                    },
                    Op::Reset { s: C },
                    Op::Delete { s: W },
                    Op::Create { s: X },
                    Op::Create { s: W },
                    Op::Delete { s: X },
                    Op::Create { s: X },
                ])
                .collect(),
        ),
        (
            "sessions_send with and without watch, spawn, failing appends and reads",
            vec![
                Op::Send {
                    caller: X,
                    t: C,
                    watch: true,
                },
                Op::Send {
                    caller: G,
                    t: C,
                    watch: true,
                },
                Op::Send {
                    caller: W,
                    t: W,
                    watch: false,
                },
                Op::Unwatch { w: X, t: C },
                Op::Send {
                    caller: X,
                    t: C,
                    watch: true,
                },
                human(C),
                Op::Spawn { caller: W },
                Op::Spawn { caller: G },
                Op::FailAppends {
                    stream: None,
                    inner: Box::new(Op::Spawn { caller: X }),
                },
                Op::FailAppends {
                    stream: Some(C),
                    inner: Box::new(human(C)),
                },
                Op::FailAppends {
                    stream: Some(D),
                    inner: Box::new(human(C)),
                },
                Op::Delete { s: D },
                Op::FailAppends {
                    stream: Some(D),
                    inner: Box::new(Op::Create { s: D }),
                },
                human(D),
                Op::FailReads { s: C },
                Op::FailCommit {
                    what: 0,
                    caller: W,
                    t: C,
                },
                Op::FailCommit {
                    what: 1,
                    caller: W,
                    t: D,
                },
                Op::FailCommit {
                    what: 2,
                    caller: X,
                    t: X,
                },
                Op::FailCommit {
                    what: 3,
                    caller: X,
                    t: D,
                },
                human(D),
                drain(W),
                drain(X),
            ],
        ),
        (
            "runs, goals and deletes with an active run",
            vec![
                Op::StartRun { t: C },
                Op::StartRun { t: C },
                Op::Reset { s: C },
                Op::EndRun { t: C, outcome: 1 },
                Op::StartRun { t: D },
                Op::Delete { s: D },
                Op::Create { s: D },
                Op::StartRun { t: D },
                Op::EndRun { t: D, outcome: 0 },
                Op::SetGoal {
                    t: D,
                    text: 1,
                    complete: true,
                    actor: None,
                },
                Op::SetGoal {
                    t: D,
                    text: 1,
                    complete: true,
                    actor: None,
                },
                Op::ClearGoal {
                    t: D,
                    actor: Some(X),
                },
                Op::ClearGoal {
                    t: D,
                    actor: Some(X),
                },
                drain(W),
            ],
        ),
    ]
}

#[test]
fn model_engine_matches_reference() {
    let cases = cases_from_env("AWARE_MODEL_CASES", 64);
    for (name, ops) in directed_sequences() {
        let outcome = std::panic::catch_unwind(|| run_case(&ops));
        if let Err(e) = outcome {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("directed sequence {name:?} failed: {msg}\nops: {ops:?}");
        }
    }
    run_seeded(
        "model_engine",
        &regression_seeds(include_str!("model_seeds.txt")),
        cases,
        2000,
        &prop::collection::vec(any_op(), 1..60),
        |ops| run_case(&ops),
    );
}

/// Regression (02 §2 step 3 as documented in ARCHITECTURE.md): a re-created parent inherits
/// nothing from its orphaned child's spawn edge, but an explicit registration is honoured the
/// same way whichever producer records the event. The engine once notified it for an admin
/// append but not for a human turn.
#[test]
fn recreated_parent_is_notified_only_through_its_explicit_registration() {
    let h = Harness::new();
    let e = h.e();
    e.create_session(CreateSession::new(key(W))).unwrap();
    e.create_session(CreateSession::new(key(C)).parent(key(W)))
        .unwrap();
    e.delete_session(&sref(W)).unwrap();
    e.create_session(CreateSession::new(key(W))).unwrap();
    e.post_turn(&sref(C), NewTurn::user("before")).unwrap();
    assert!(
        e.peek(&sref(W)).unwrap().notices.is_empty(),
        "the spawn edge was inherited"
    );
    let row = e.register_watch(&sref(W), &sref(C)).unwrap();
    let h0 = row.state.last_seen;
    e.post_turn(&sref(C), NewTurn::user("hi")).unwrap();
    assert_eq!(e.peek(&sref(W)).unwrap().notices.len(), 1);
    e.append(AppendRequest::new(
        sref(C),
        EventKind::HumanDirectMessage,
        ActorType::Human,
    ))
    .unwrap();
    let cursor = &e.watches(&sref(W)).unwrap()[0];
    assert_eq!(cursor.state.last_seen, h0);
    assert_eq!(e.peek(&sref(W)).unwrap().notices.len(), 1);
}

/// 02 §1: a watcher is the agent-qualified key of an *existing* session (registration refuses a
/// missing watcher, 02 §7 step 1). Regression: `Engine::unwatch` once answered `true` for a
/// deleted parent and wrote a muted row that a session re-created under that key inherited.
#[test]
fn unwatch_by_missing_watcher_writes_no_cursor() {
    let h = Harness::new();
    let e = h.e();
    e.create_session(CreateSession::new(key(W))).unwrap();
    e.create_session(CreateSession::new(key(C)).parent(key(W)))
        .unwrap();
    e.delete_session(&sref(W)).unwrap();
    let r = e.unwatch(&sref(W), &sref(C));
    assert!(
        !matches!(r, Ok(true)),
        "unwatch by a missing watcher answered {r:?}"
    );
    assert!(
        e.watchers(&sref(C)).unwrap().is_empty(),
        "a cursor row exists for a watcher session that does not exist"
    );
    e.create_session(CreateSession::new(key(W))).unwrap();
    assert!(
        e.watches(&sref(W)).unwrap().is_empty(),
        "the re-created session inherited a cursor"
    );
}
