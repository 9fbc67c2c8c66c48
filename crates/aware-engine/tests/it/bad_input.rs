//! Bad input gets a typed error whose message names the rule, and nothing stored changes.

use crate::common::*;
use aware_core::{ActorType, EventKind, SessionKey};
use aware_engine::*;
use serde_json::json;

/// A fingerprint of everything stored, to prove refused calls changed nothing.
fn fingerprint(w: &World) -> Vec<String> {
    let conn = rusqlite::Connection::open(w.dir.path().join("state.db")).unwrap();
    let mut out = Vec::new();
    for table in [
        "session_state_events",
        "session_state_heads",
        "session_watch_cursors",
        "session_system_events",
        "sessions",
        "turns",
        "runs",
    ] {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
            .unwrap();
        let cols = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let vals: Vec<String> = (0..cols)
                .map(|i| format!("{:?}", r.get::<_, rusqlite::types::Value>(i).unwrap()))
                .collect();
            out.push(format!("{table}: {}", vals.join("|")));
        }
    }
    out
}

#[test]
fn invalid_keys_name_the_rule() {
    let cases: [(String, &str); 6] = [
        (format!("agent:main:{}", "a".repeat(502)), "512 bytes"),
        ("agent:main:a\nb".into(), "control characters"),
        ("   ".into(), "empty"),
        ("agent:bad/id:x".into(), "[a-z0-9][a-z0-9_-]{0,63}"),
        ("agent:main".into(), "agent:<agentId>:<rest>"),
        ("agent:main:\u{7}".into(), "control characters"),
    ];
    for (input, rule) in cases {
        let err = SessionKey::parse(&input).unwrap_err();
        assert!(err.to_string().contains(rule), "{input:?}: {err}");
    }
}

#[test]
// Cases are pushed one by one because several need a request built first.
#[allow(clippy::vec_init_then_push)]
fn refused_calls_change_nothing() {
    let w = World::family();
    w.hdm(C);
    let before = fingerprint(&w);
    let s = sref(C);
    let e = &w.engine;
    let mut checks: Vec<(&str, EngineError, &str)> = Vec::new();
    checks.push((
        "negative changesSince",
        e.list_since(&s, -1, 10).unwrap_err(),
        "changesSince must be a non-negative integer",
    ));
    checks.push((
        "limit 0",
        e.list_since(&s, 0, 0).unwrap_err(),
        "limit must be an integer between 1 and 200",
    ));
    checks.push((
        "limit 201",
        e.list_since(&s, 0, 201).unwrap_err(),
        "limit must be an integer between 1 and 200",
    ));
    checks.push((
        "oversized text",
        e.post_turn(&s, NewTurn::user("x".repeat(262_145)))
            .unwrap_err(),
        "262144 bytes",
    ));
    checks.push((
        "bad channel",
        e.post_turn(&s, NewTurn::user("x").channel("a b"))
            .unwrap_err(),
        "channel must match",
    ));
    let mut bad_payload = AppendRequest::new(s.clone(), EventKind::RunFailed, ActorType::System);
    bad_payload.payload = Some(json!("outcome"));
    checks.push((
        "non-object payload",
        e.append(bad_payload).unwrap_err(),
        "payload must be a JSON object",
    ));
    let mut bad_actor = AppendRequest::new(s.clone(), EventKind::Compacted, ActorType::System);
    bad_actor.actor_id = Some("a\u{0}b".into());
    checks.push((
        "control char in actorId",
        e.append(bad_actor).unwrap_err(),
        "actorId must be",
    ));
    let mut long_dedupe = AppendRequest::new(s.clone(), EventKind::Compacted, ActorType::System);
    long_dedupe.dedupe_key = Some("k".repeat(513));
    checks.push((
        "513-byte dedupeKey",
        e.append(long_dedupe).unwrap_err(),
        "dedupeKey must be",
    ));
    checks.push((
        "bad operation id",
        e.compaction(&s, "op:1", None).unwrap_err(),
        "operationId must be",
    ));
    checks.push((
        "bad run id",
        e.start_run(&s, Some("r 1".into()), None).unwrap_err(),
        "runId must be",
    ));
    checks.push((
        "empty goal",
        e.set_goal(&s, "", GoalStatus::Active, Actor::system())
            .unwrap_err(),
        "1..=4000",
    ));
    checks.push((
        "reserved context key",
        e.enqueue_system_event(&s, "x", Some("session-state:61"))
            .unwrap_err(),
        "reserved for notices",
    ));
    checks.push((
        "empty system event",
        e.enqueue_system_event(&s, " \n ", None).unwrap_err(),
        "must not be empty",
    ));
    checks.push((
        "unknown session",
        e.post_turn(&sref("agent:main:nope"), NewTurn::user("x"))
            .unwrap_err(),
        "agent:main:nope",
    ));
    checks.push((
        "self watch",
        e.register_watch(&sref(W), &sref(W)).unwrap_err(),
        "cannot watch itself",
    ));
    checks.push((
        "bad spawn timeout",
        e.spawn(&sref(W), "t", None, None, Some(0)).unwrap_err(),
        "runTimeoutSeconds",
    ));
    for (name, err, rule) in checks {
        assert!(err.to_string().contains(rule), "{name}: {err}");
    }
    assert_eq!(
        fingerprint(&w),
        before,
        "a refused call changed stored state"
    );
}
