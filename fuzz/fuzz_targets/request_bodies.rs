//! The gateway's strict JSON body parsing without a server: `parse_strict` and `Obj` (every
//! body), and the two bodies parsed whole before any engine call, `parse_turn`
//! (`POST /v1/sessions/{key}/turns`) and `parse_ack` (`POST /v1/sessions/{key}/ack`). Pure
//! functions: every input is independent. (The goal, watch and tool bodies are parsed inside
//! their handlers, interleaved with engine reads; `tool_bodies` sends those over HTTP.)
//!
//! Input: the whole input is the body for `parse_strict` and `Obj::parse`; the first byte picks
//! `parse_turn` (even) or `parse_ack` (odd) for the rest.
//!
//! Invariants:
//! - `parse_strict` accepts exactly what `serde_json` accepts, with the same value, except a
//!   document with a repeated key in some object, which it refuses naming the key;
//! - `Obj::parse` accepts exactly a strictly parsed JSON object, and a blank body where an empty
//!   body is allowed; its error is a typed 400 `invalid_json` with a message;
//! - `parse_turn` and `parse_ack` never accept an unknown field, at the top or in a nested
//!   object (`provenance`, `notices[]`); what they accept is the body's fields, with the
//!   documented types, values and ranges (docs/api.md §2.7, §2.11); a required field missing
//!   is an error; an error is a typed 400 (`invalid_json`, `invalid_argument`, or
//!   `invalid_session_key` for a malformed `provenance.sourceSessionKey`) with a message.
#![no_main]

use aware_core::SessionKey;
use aware_engine::{ProvenanceKind, Role};
use aware_gateway::fuzzing::{parse_ack, parse_strict, parse_turn, ApiError, Obj, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const TURN_FIELDS: &[&str] = &[
    "role",
    "text",
    "provenance",
    "channel",
    "runId",
    "occurredAt",
    "idempotencyKey",
    "upstreamText",
    "origin",
];
const PROVENANCE_FIELDS: &[&str] = &["kind", "humanId", "sourceSessionKey", "sourceTool"];
const ACK_FIELDS: &[&str] = &["notices", "systemEventIds"];
const NOTICE_FIELDS: &[&str] = &["contextKey", "targetAgentId", "lastSeen"];

fuzz_target!(|data: &[u8]| {
    check_strict(data);
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    if selector % 2 == 0 {
        check_turn(body);
    } else {
        check_ack(body);
    }
});

fn check_strict(data: &[u8]) {
    let lax = serde_json::from_slice::<Value>(data);
    match (parse_strict(data), &lax) {
        (Ok(v), Ok(l)) => assert_eq!(&v, l, "strict and lax parse differ"),
        (Ok(v), Err(e)) => panic!("strict accepted what serde_json refuses ({e}): {v:?}"),
        (Err(e), Ok(_)) => {
            assert!(e.to_string().contains("duplicate key"), "{e}")
        }
        (Err(_), Err(_)) => {}
    }
    for empty_ok in [true, false] {
        match Obj::parse(data, empty_ok) {
            Ok(mut obj) => {
                let blank = data.iter().all(u8::is_ascii_whitespace);
                let map = match parse_strict(data) {
                    Ok(Value::Object(map)) => map,
                    _ => {
                        assert!(empty_ok && blank, "Obj accepted a non-object");
                        Map::new()
                    }
                };
                // Every field taken leaves nothing; a field left is named.
                if let Some(k) = map.keys().next() {
                    let fresh = Obj::parse(data, empty_ok).map(Obj::finish);
                    let Ok(Err(e)) = fresh else {
                        panic!("unknown field {k:?} accepted")
                    };
                    assert_eq!(e.message, format!("unknown field {k:?}"));
                }
                for k in map.keys() {
                    assert!(obj.has(k));
                    match (obj.opt_value(k), map.get(k)) {
                        // A field is omitted, never null.
                        (Err(e), Some(Value::Null)) => {
                            assert_eq!(e.message, format!("{k} must not be null (omit it instead)"))
                        }
                        (got, want) => assert_eq!(got.ok().flatten().as_ref(), want),
                    }
                }
                assert!(obj.finish().is_ok());
            }
            Err(e) => {
                assert!(!matches!(parse_strict(data), Ok(Value::Object(_))));
                assert!(!(empty_ok && data.iter().all(u8::is_ascii_whitespace)));
                assert_eq!(e.status, StatusCode::BAD_REQUEST);
                assert_eq!(e.code, "invalid_json");
                assert!(!e.message.is_empty());
            }
        }
    }
}

/// A 400 with one of the body codes and a message.
fn check_error(e: &ApiError, codes: &[&str]) {
    assert_eq!(e.status, StatusCode::BAD_REQUEST, "{e:?}");
    assert!(codes.contains(&e.code), "{e:?}");
    assert!(!e.message.is_empty());
}

/// The body's object, which an accepted body must be, with only `allowed` keys.
fn object_with_only<'a>(v: &'a Value, allowed: &[&str], what: &str) -> &'a Map<String, Value> {
    let Value::Object(map) = v else {
        panic!("{what} accepted a non-object: {v:?}")
    };
    for k in map.keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "{what} accepted unknown field {k:?}"
        );
    }
    map
}

fn opt_str<'a>(map: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    map.get(k).map(|v| {
        v.as_str()
            .unwrap_or_else(|| panic!("{k} accepted as {v:?}"))
    })
}

fn check_turn(body: &[u8]) {
    let t = match parse_turn(body) {
        Ok(t) => t,
        Err(e) => {
            check_error(
                &e,
                &["invalid_json", "invalid_argument", "invalid_session_key"],
            );
            if e.code == "invalid_session_key" {
                let src = parse_strict(body)
                    .ok()
                    .and_then(|v| v.pointer("/provenance/sourceSessionKey").cloned());
                let Some(Value::String(k)) = src else {
                    panic!("invalid_session_key without a sourceSessionKey: {e:?}")
                };
                assert!(SessionKey::parse(&k).is_err());
            }
            return;
        }
    };
    let v = parse_strict(body).expect("an accepted turn is strict JSON");
    let map = object_with_only(&v, TURN_FIELDS, "turn");
    let role = opt_str(map, "role").expect("role is required");
    assert_eq!(
        (role, t.role),
        match role {
            "user" => ("user", Role::User),
            "assistant" => ("assistant", Role::Assistant),
            "tool" => ("tool", Role::Tool),
            other => panic!("role {other:?} accepted"),
        }
    );
    assert_eq!(Some(t.text.as_str()), opt_str(map, "text"));
    assert_eq!(t.channel.as_deref(), opt_str(map, "channel"));
    assert_eq!(t.run_id.as_deref(), opt_str(map, "runId"));
    assert_eq!(t.idempotency_key.as_deref(), opt_str(map, "idempotencyKey"));
    assert_eq!(t.upstream_text.as_deref(), opt_str(map, "upstreamText"));
    assert_eq!(t.origin.as_deref(), opt_str(map, "origin"));
    assert!(matches!(
        t.origin.as_deref(),
        None | Some("import" | "hook")
    ));
    assert_eq!(
        t.occurred_at,
        map.get("occurredAt")
            .map(|v| v.as_i64().expect("an integer"))
    );
    assert!(t.occurred_at.is_none_or(|n| n >= 0));
    match (&t.provenance, map.get("provenance")) {
        (None, None) => {}
        (Some(p), Some(pv)) => {
            let pm = object_with_only(pv, PROVENANCE_FIELDS, "provenance");
            let kind = opt_str(pm, "kind").expect("provenance.kind is required");
            assert_eq!(
                p.kind,
                match kind {
                    "human" => ProvenanceKind::Human,
                    "inter_session" => ProvenanceKind::InterSession,
                    "internal_system" => ProvenanceKind::InternalSystem,
                    other => panic!("provenance.kind {other:?} accepted"),
                }
            );
            assert_eq!(p.human_id.as_deref(), opt_str(pm, "humanId"));
            assert_eq!(p.source_tool.as_deref(), opt_str(pm, "sourceTool"));
            let src = opt_str(pm, "sourceSessionKey");
            assert_eq!(p.source_session_key.is_some(), src.is_some());
            if let (Some(k), Some(raw)) = (&p.source_session_key, src) {
                assert_eq!(SessionKey::parse(raw).as_ref(), Ok(k));
            }
            if p.kind == ProvenanceKind::InterSession {
                assert!(p.source_session_key.is_some());
            }
        }
        (p, pv) => panic!("provenance {p:?} from {pv:?}"),
    }
}

fn check_ack(body: &[u8]) {
    let (notices, ids) = match parse_ack(body) {
        Ok(ok) => ok,
        Err(e) => {
            check_error(&e, &["invalid_json", "invalid_argument"]);
            return;
        }
    };
    if body.iter().all(u8::is_ascii_whitespace) {
        assert!(notices.is_empty() && ids.is_empty());
        return;
    }
    let v = parse_strict(body).expect("an accepted ack is strict JSON");
    let map = object_with_only(&v, ACK_FIELDS, "ack");
    let given = map
        .get("notices")
        .map(|n| n.as_array().expect("notices is an array").clone())
        .unwrap_or_default();
    assert_eq!(given.len(), notices.len());
    for (n, nv) in notices.iter().zip(&given) {
        let nm = object_with_only(nv, NOTICE_FIELDS, "notices[]");
        assert_eq!(Some(n.context_key.as_str()), opt_str(nm, "contextKey"));
        // The agent id is stored lower-case, as `AgentId::parse` gives it.
        assert_eq!(
            n.target_agent.as_deref(),
            opt_str(nm, "targetAgentId")
                .map(|a| aware_core::AgentId::parse(a).expect("a valid agent id"))
                .as_ref()
                .map(|a| a.as_str())
        );
        assert_eq!(
            n.last_seen,
            nm.get("lastSeen").map(|v| v.as_i64().expect("an integer"))
        );
        assert!(n.last_seen.is_none_or(|s| s >= 0));
    }
    let given_ids: Vec<i64> = map
        .get("systemEventIds")
        .map(|a| {
            a.as_array()
                .expect("systemEventIds is an array")
                .iter()
                .map(|v| v.as_i64().expect("an integer id"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(ids, given_ids);
}
