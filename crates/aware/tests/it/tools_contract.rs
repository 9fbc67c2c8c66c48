//! Snapshot tests of the agent tools' wire contract (03 §6): `GET /v1/tools` (names,
//! descriptions, input schemas) and the answers of a fixed sequence of tool calls on the test
//! clock. UUIDs (session ids, run ids, spawned keys) are replaced by `<uuid-N>` in order of first
//! appearance, so equal ids stay visibly equal. Snapshots live in `tests/snapshots/`.

use crate::common::*;
use serde_json::{json, Value};

fn is_uuid_at(b: &[u8], i: usize) -> bool {
    if i + 36 > b.len() {
        return false;
    }
    (0..36).all(|j| {
        let c = b[i + j];
        match j {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit() && !c.is_ascii_uppercase(),
        }
    }) && (i + 36 == b.len() || !b[i + 36].is_ascii_hexdigit())
        && (i == 0 || !b[i - 1].is_ascii_hexdigit())
}

fn redact_str(s: &str, seen: &mut Vec<String>) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if is_uuid_at(b, i) {
            let id = &s[i..i + 36];
            let n = match seen.iter().position(|x| x == id) {
                Some(n) => n,
                None => {
                    seen.push(id.to_string());
                    seen.len() - 1
                }
            };
            out.push_str(&format!("<uuid-{}>", n + 1));
            i += 36;
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn redact(v: &Value, seen: &mut Vec<String>) -> Value {
    match v {
        Value::String(s) => Value::String(redact_str(s, seen)),
        Value::Array(a) => Value::Array(a.iter().map(|x| redact(x, seen)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (redact_str(k, seen), redact(x, seen)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn tools_list_wire_contract() {
    let s = Server::start();
    let r = s.get("/v1/tools");
    assert_eq!(r.status, 200, "{}", r.body);
    insta::assert_json_snapshot!("tools_list", r.body);
}

/// A fixed sequence of tool calls (and the few host calls that give them something to report);
/// every value is deterministic under the test clock once UUIDs are redacted.
#[test]
fn tool_call_answers() {
    let mut s = Server::start();
    let mut log: Vec<Value> = Vec::new();
    let mut record = |what: &str, args: Value, r: Resp| {
        log.push(json!({"call": what, "args": args, "status": r.status, "answer": r.body}));
        r.body
    };
    macro_rules! call {
        ($caller:expr, $name:expr, $args:expr) => {{
            let args = $args;
            let r = s.tool($caller, $name, args.clone());
            record(&format!("{} as {}", $name, $caller), args, r)
        }};
    }

    s.create(W);
    s.set_clock(T0 + 1_000);
    let r = s.post("/v1/sessions", json!({"key": X, "label": "coord"}));
    assert_eq!(r.status, 201);
    s.set_clock(T0 + 2_000);
    s.create_child(C, W); // sequence 1
    s.set_clock(T0 + 3_000);

    let spawned = call!(
        W,
        "sessions_spawn",
        json!({"task": "research X", "label": "r", "runTimeoutSeconds": 60})
    );
    let k = spawned["childSessionKey"].as_str().unwrap().to_string();
    call!(
        W,
        "session_status",
        json!({"sessionKey": k, "changesSince": 0})
    );
    s.set_clock(T0 + 4_000);
    s.hdm(C); // sequence 4: W's notice on C
    s.set_clock(T0 + 5_000);
    call!(
        W,
        "sessions_send",
        json!({"sessionKey": X, "message": "hello coord", "timeoutSeconds": 0, "watch": true})
    );
    call!(
        W,
        "sessions_send",
        json!({"label": "coord", "message": "again", "timeoutSeconds": 0})
    );
    call!(W, "sessions_list", json!({}));
    call!(
        W,
        "sessions_list",
        json!({"kinds": ["subagent"], "limit": 1})
    );
    call!(W, "sessions_list", json!({"excludeSubagents": true}));
    call!(W, "sessions_history", json!({"sessionKey": k}));
    call!(
        W,
        "sessions_history",
        json!({"sessionKey": X, "limit": 1, "offset": 0})
    );
    call!(
        W,
        "session_status",
        json!({"sessionKey": C, "changesSince": 1, "limit": 1})
    );
    s.set_clock(T0 + 6_000);
    let r = s.put(
        &format!("/v1/sessions/{}/goal", seg(X)),
        json!({"text": "coordinate", "actor": {"type": "human", "id": "alice"}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    call!(W, "session_status", json!({}));
    call!(X, "session_status", json!({"changesSince": 0}));
    let p = s.pending(W);
    record(
        "pending W",
        json!(null),
        Resp {
            status: 200,
            body: p,
            headers: vec![],
        },
    );
    call!(W, "sessions_unwatch", json!({"sessionKey": C}));
    call!(W, "sessions_unwatch", json!({"sessionKey": C}));
    s.set_clock(T0 + 64_000); // the spawned run times out (started at T0+3 s, 60 s)
    call!(
        W,
        "session_status",
        json!({"sessionKey": k, "changesSince": 3})
    );
    let d = s.drain(W);
    record(
        "drain W",
        json!(null),
        Resp {
            status: 200,
            body: d,
            headers: vec![],
        },
    );
    call!(
        W,
        "sessions_send",
        json!({"sessionKey": W, "message": "me", "timeoutSeconds": 0})
    );
    call!(W, "session_status", json!({"changesSince": -1}));

    wire_types_agree(&log);
    let mut seen = Vec::new();
    let redacted = redact(&Value::Array(log), &mut seen);
    insta::assert_json_snapshot!("tool_call_answers", redacted);
}

/// `aware_wire`'s types and the gateway agree (decision D49): every argument object of the
/// sequence reads into the tool's argument type, and every 200 answer into its result type,
/// and both write back to the same JSON text (so no field is missing from a type, misnamed,
/// mistyped or out of order). A client built on the types reads exactly what the gateway sends.
fn wire_types_agree(log: &[Value]) {
    use aware_wire::*;
    use serde::{de::DeserializeOwned, Serialize};
    fn same<T: DeserializeOwned + Serialize>(what: &str, v: &Value) {
        let typed: T =
            serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{v:#}"));
        let back = serde_json::to_string(&typed).unwrap();
        assert_eq!(back, v.to_string(), "{what}: written back differently");
    }
    let mut checked = 0;
    for entry in log {
        let call = entry["call"].as_str().unwrap();
        let Some(tool) = call.split(' ').next().and_then(Tool::parse) else {
            continue;
        };
        let (args, answer) = (&entry["args"], &entry["answer"]);
        let ok = entry["status"] == 200;
        match tool {
            Tool::SessionsSend => {
                same::<SessionsSendArgs>(call, args);
                if ok {
                    same::<SessionsSendResult>(call, answer);
                }
            }
            Tool::SessionStatus => {
                same::<SessionStatusArgs>(call, args);
                if ok {
                    same::<SessionStatusResult>(call, answer);
                }
            }
            Tool::SessionsList => {
                same::<SessionsListArgs>(call, args);
                if ok {
                    same::<SessionsListResult>(call, answer);
                }
            }
            Tool::SessionsHistory => {
                same::<SessionsHistoryArgs>(call, args);
                if ok {
                    same::<SessionsHistoryResult>(call, answer);
                }
            }
            Tool::SessionsSpawn => {
                same::<SessionsSpawnArgs>(call, args);
                if ok {
                    same::<SessionsSpawnResult>(call, answer);
                }
            }
            Tool::SessionsUnwatch => {
                same::<SessionsUnwatchArgs>(call, args);
                if ok {
                    same::<SessionsUnwatchResult>(call, answer);
                }
            }
        }
        checked += usize::from(ok);
    }
    assert!(checked >= 14, "only {checked} answers checked");
}
