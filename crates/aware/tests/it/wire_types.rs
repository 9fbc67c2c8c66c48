//! `aware_wire`'s types of what a session is told agree with a real gateway (decision D49):
//! peeks and drains (with and without a cut), an acknowledgement with a stale and an
//! undecodable key, and wakes of the three reasons from the SSE stream each read into their
//! type and write back to the same JSON text. A field renamed, dropped, retyped or reordered on
//! one side fails here.

use crate::common::*;
use aware_wire::{AckAnswer, AckArgs, AckNotice, DrainAnswer, Wake, WakeReason};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};

fn same<T: DeserializeOwned + Serialize>(what: &str, v: &Value) -> T {
    let typed: T =
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{v:#}"));
    assert_eq!(
        serde_json::to_string(&typed).unwrap(),
        v.to_string(),
        "{what}: written back differently"
    );
    typed
}

#[test]
fn drains_acks_and_wakes_read_into_the_wire_types() {
    let mut s = Server::start();
    s.create(W);
    s.create_child(C, W);
    s.create_child(D, W);
    let wakes = Wakes::subscribe(&s, "", None);
    s.set_clock(T0 + 1_000);
    let r = s.post(
        &format!("/v1/sessions/{}/system-events", seg(W)),
        json!({"text": "nightly build finished", "contextKey": "build:nightly"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    s.hdm(C);
    s.hdm(D);

    let peek: DrainAnswer = same("pending W", &s.pending(W));
    assert_eq!(peek.system_events.len(), 1);
    assert_eq!(peek.notices.len(), 2);
    assert_eq!(peek.has_more, None);

    // A cut: one item (the FIFO entry) drained, the two notices left, `hasMore` present.
    let r = s.post(&format!("/v1/sessions/{}/drain?limit=1", seg(W)), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let cut: DrainAnswer = same("drain W limit 1", &r.body);
    assert_eq!(cut.has_more, Some(true));
    assert!(cut.notices.is_empty());

    // An explicit ack: C's notice with its lastSeen, D's with a stale one, a key that does not
    // decode.
    let left: DrainAnswer = same("pending W again", &s.pending(W));
    let notice_of = |key: &str| {
        left.notices
            .iter()
            .find(|n| n.target_session_key == key)
            .unwrap()
            .clone()
    };
    let (c, d) = (notice_of(C), notice_of(D));
    let args = AckArgs {
        notices: vec![
            AckNotice {
                context_key: c.context_key.clone(),
                target_agent_id: Some(c.target_agent_id.clone()),
                last_seen: Some(c.last_seen),
            },
            AckNotice {
                context_key: d.context_key.clone(),
                last_seen: Some(d.last_seen + 7),
                ..Default::default()
            },
            AckNotice {
                context_key: "session-state:zz".into(),
                ..Default::default()
            },
        ],
        system_event_ids: vec![],
    };
    let body = serde_json::to_value(&args).unwrap();
    let r = s.post(&format!("/v1/sessions/{}/ack", seg(W)), body);
    assert_eq!(r.status, 200, "{}", r.body);
    let acked: AckAnswer = same("ack W", &r.body);
    assert_eq!(acked.acked, 1);
    assert_eq!(
        acked.ignored,
        vec![d.context_key.clone(), "session-state:zz".to_string()]
    );

    let last: DrainAnswer = same("drain W", &s.drain(W));
    assert_eq!(last.notices.len(), 1, "{last:?}");

    // Wakes of every reason: session-state (above), message (a send), spawn.
    let r = s.tool(
        W,
        "sessions_send",
        json!({"sessionKey": C, "message": "status?", "timeoutSeconds": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.tool(W, "sessions_spawn", json!({"task": "look into it"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let seen: Vec<Wake> = wakes
        .settle()
        .iter()
        .map(|w| same::<Wake>("wake", w))
        .collect();
    for reason in [
        WakeReason::SessionState,
        WakeReason::Message,
        WakeReason::Spawn,
    ] {
        assert!(
            seen.iter().any(|w| w.reason == reason),
            "no {reason:?} wake among {seen:?}"
        );
    }
}

#[test]
fn session_routes_read_into_the_wire_types() {
    use aware_wire::sessions::{
        Compaction, CreatedSession, Deleted, GoalChange, PostedTurn, ResetSession, RunAnswer,
        Session, SessionPage, SystemEventEnqueued, TurnPage, Unwatched, Watched, WatchersPage,
        WatchesPage,
    };
    let mut s = Server::start();
    s.create(W);
    s.set_clock(T0 + 1_000);
    let r = s.post(
        "/v1/sessions",
        json!({"key": C, "parentSessionKey": W, "label": "migrations"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let created: CreatedSession = same("create C", &r.body);
    assert!(created.created);
    let r = s.put(
        &format!("/v1/sessions/{}/goal", seg(C)),
        json!({"text": "move the tests to staging", "actor": {"type": "human", "id": "alice"}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let set: GoalChange = same("goal set", &r.body);
    assert!(set.changed && set.goal.is_some() && set.event.is_some());
    let r = s.put(
        &format!("/v1/sessions/{}/goal", seg(C)),
        json!({"text": "move the tests to staging", "actor": {"type": "human", "id": "alice"}}),
    );
    let unchanged: GoalChange = same("goal set again", &r.body);
    assert!(!unchanged.changed, "{}", r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/runs", seg(C)),
        json!({"runId": "run-1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let started: RunAnswer = same("run started", &r.body);
    assert_eq!(started.run.ended_at, None);
    assert_eq!(started.event, None);
    s.set_clock(T0 + 2_000);
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(C)),
        json!({"role": "user", "text": "use staging", "provenance": {"kind": "human", "humanId": "alice"},
               "channel": "telegram", "idempotencyKey": "tg-1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let human: PostedTurn = same("human turn", &r.body);
    assert!(human.event.is_some());
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(C)),
        json!({"role": "user", "text": "use staging", "provenance": {"kind": "human", "humanId": "alice"},
               "channel": "telegram", "idempotencyKey": "tg-1"}),
    );
    let again: PostedTurn = same("repeated turn", &r.body);
    assert_eq!(again.duplicate, Some(true));
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(C)),
        json!({"role": "assistant", "text": "switched", "runId": "run-1"}),
    );
    same::<PostedTurn>("agent turn", &r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/runs/run-1/end", seg(C)),
        json!({"outcome": "ok"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let ended: RunAnswer = same("run ended", &r.body);
    assert_eq!(ended.run.outcome.as_deref(), Some("ok"));
    let r = s.post(
        &format!("/v1/sessions/{}/compaction", seg(C)),
        json!({"operationId": "op-1", "summary": "compacted the plan"}),
    );
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    same::<Compaction>("compaction", &r.body);
    let r = s.post(
        &format!("/v1/sessions/{}/compaction", seg(C)),
        json!({"operationId": "op-1", "summary": "compacted the plan"}),
    );
    let again: Compaction = same("compaction again", &r.body);
    assert_eq!(again.duplicate, Some(true), "{}", r.body);
    for (what, text) in [
        ("system event", "deploy done"),
        ("system event again", "deploy done"),
    ] {
        let r = s.post(
            &format!("/v1/sessions/{}/system-events", seg(C)),
            json!({"text": text, "contextKey": "deploy"}),
        );
        assert!(r.status == 200 || r.status == 201, "{}", r.body);
        same::<SystemEventEnqueued>(what, &r.body);
    }

    let one: Session = same("GET C", &s.get(&format!("/v1/sessions/{}", seg(C))).body);
    assert_eq!(one.label.as_deref(), Some("migrations"));
    assert!(one.goal.is_some());
    let page: SessionPage = same("GET sessions", &s.get("/v1/sessions").body);
    assert_eq!(page.sessions.len(), 2);
    let turns: TurnPage = same(
        "GET turns",
        &s.get(&format!("/v1/sessions/{}/turns", seg(C))).body,
    );
    // The human turn, the agent turn and the compaction.
    assert_eq!(turns.turns.len(), 3, "{turns:?}");
    let watches: WatchesPage = same(
        "GET watches of W",
        &s.get(&format!("/v1/sessions/{}/watches", seg(W))).body,
    );
    assert_eq!(watches.watches.len(), 1);
    let watchers: WatchersPage = same(
        "GET watchers of C",
        &s.get(&format!("/v1/sessions/{}/watchers", seg(C))).body,
    );
    assert_eq!(watchers.watchers.len(), 1);
    s.create(D);
    let r = s.post(
        &format!("/v1/sessions/{}/watches", seg(D)),
        json!({"target": C}),
    );
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    let watched: Watched = same("D watches C", &r.body);
    assert!(watched.watched);
    let r = s.delete(&format!("/v1/sessions/{}/watches/{}", seg(D), seg(C)));
    assert_eq!(r.status, 200, "{}", r.body);
    let unwatched: Unwatched = same("D unwatches C", &r.body);
    assert!(unwatched.unwatched);
    let r = s.post(&format!("/v1/sessions/{}/reset", seg(D)), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let reset: ResetSession = same("reset D", &r.body);
    assert_ne!(reset.previous_session_id, reset.session.session_id);
    let r = s.delete(&format!("/v1/sessions/{}", seg(D)));
    assert_eq!(r.status, 200, "{}", r.body);
    same::<Deleted>("delete D", &r.body);
    let r = s.delete(&format!("/v1/sessions/{}/goal", seg(C)));
    assert_eq!(r.status, 200, "{}", r.body);
    let cleared: GoalChange = same("goal cleared", &r.body);
    assert!(cleared.changed && cleared.goal.is_none() && cleared.event.is_some());
}
