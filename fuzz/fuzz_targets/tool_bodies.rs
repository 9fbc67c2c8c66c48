//! The gateway's request bodies over real HTTP: the six tools and the bodies of `POST …/turns`,
//! `PUT …/goal`, `POST …/watches`, `POST …/ack`, `POST …/drain` and `POST /v1/sessions`.
//!
//! The tool bodies, the goal and the watch are parsed inside their handlers, interleaved with
//! engine reads (the order of checks, docs/api.md §1.8), so the target starts the gateway
//! in-process once per process (`aware_gateway::run` on 127.0.0.1:0, a temporary data dir, the
//! test clock, `notify_on_create = false`, no Claude root, durability `normal`) and POSTs the
//! fuzz input as a request body. `request_bodies` fuzzes the turn and ack parsers alone.
//!
//! **Each input is independent.** A fresh gateway per input is far too slow, so each input gets
//! a fresh agent instead: input *n* runs as agent `fz<n>`, whose `agent:fz<n>:main` (the caller,
//! label `boss`) and `agent:fz<n>:worker` (label `w1`) are created for it. Every request carries
//! `X-Aware-Session: agent:fz<n>:main`, and an agent sees only its own sessions (no
//! `visible_agents` here), so whatever an input creates or changes (sessions, turns, goals,
//! watches, labels, cursors) is in its own agent and invisible to every other input: another
//! agent named in a body is refused (403) or empty, the same for every input. Two things keep
//! that airtight: the body's `agent:main:` (the seeds' spelling) is replaced by
//! `agent:fz<n>:` byte for byte (malformed JSON and repeated keys stay as they are), and an
//! input whose body names `fz` at all (in its bytes or, through a JSON escape, in a decoded
//! string) is skipped, so no input can reach an earlier input's agent. What stays shared is the
//! store's size and the global sequence numbers, which no answer's status depends on.
//!
//! Input: the first byte picks the route (mod 12), the rest is the body:
//! 0 `session_status`, 1 `sessions_send`, 2 `sessions_list`, 3 `sessions_history`,
//! 4 `sessions_spawn`, 5 `sessions_unwatch` (`POST /v1/tools/{name}`), 6 `POST /v1/sessions`,
//! 7 `POST /v1/sessions/agent:fz<n>:worker/turns`, 8 `PUT …/agent:fz<n>:worker/goal`,
//! 9 `POST …/agent:fz<n>:main/watches`, 10 `POST …/agent:fz<n>:main/ack`,
//! 11 `POST …/agent:fz<n>:main/drain`.
//!
//! `sessions_send` waits up to `timeoutSeconds` (default 30) of wall time for a reply that never
//! comes here, so a body that is a strict JSON object whose `timeoutSeconds` is absent or a
//! positive integer is sent with `timeoutSeconds: 0`; every other body is sent as is.
//!
//! Invariants: no answer is a 5xx (a body can be wrong, never break the server); every error
//! answer is `{"error": {"code", "message"}}`; every success is a JSON object, and only for a
//! body (blank where the route allows it, else an object) without an unknown field, at the top
//! or in a nested object (`provenance`, `actor`, `notices[]`), the tools' fields being their
//! published input schemas (`tools::list()`); `/health` stays 200.
//!
//! `AWARE_FUZZ_VERBOSE=1` prints the route and status of every request (to check the seeds).
#![no_main]

use aware_gateway::fuzzing::parse_strict;
use aware_gateway::GatewayConfig;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// A route: method, path after `/v1/` (`{s}` is the input's caller, `{w}` its worker), whether a blank body is
/// accepted, and the fields of its body (`None`: the tool's published schema).
struct Route {
    method: &'static str,
    path: &'static str,
    blank_ok: bool,
    fields: Option<&'static [&'static str]>,
}

const fn tool(path: &'static str) -> Route {
    Route {
        method: "POST",
        path,
        blank_ok: true,
        fields: None,
    }
}

const ROUTES: [Route; 12] = [
    tool("tools/session_status"),
    tool("tools/sessions_send"),
    tool("tools/sessions_list"),
    tool("tools/sessions_history"),
    tool("tools/sessions_spawn"),
    tool("tools/sessions_unwatch"),
    Route {
        method: "POST",
        path: "sessions",
        blank_ok: false,
        fields: Some(&[
            "key",
            "agentId",
            "kind",
            "label",
            "parentSessionKey",
            "createdVia",
        ]),
    },
    Route {
        method: "POST",
        path: "sessions/{w}/turns",
        blank_ok: false,
        fields: Some(&[
            "role",
            "text",
            "provenance",
            "channel",
            "runId",
            "occurredAt",
            "idempotencyKey",
            "upstreamText",
            "origin",
        ]),
    },
    Route {
        method: "PUT",
        path: "sessions/{w}/goal",
        blank_ok: false,
        fields: Some(&["text", "status", "actor"]),
    },
    Route {
        method: "POST",
        path: "sessions/{s}/watches",
        blank_ok: false,
        fields: Some(&["target", "targetAgentId"]),
    },
    Route {
        method: "POST",
        path: "sessions/{s}/ack",
        blank_ok: true,
        fields: Some(&["notices", "systemEventIds"]),
    },
    Route {
        method: "POST",
        path: "sessions/{s}/drain",
        blank_ok: true,
        fields: Some(&["limit"]),
    },
];

/// The fields of the nested objects of a body.
const NESTED: [(&str, &[&str]); 3] = [
    (
        "provenance",
        &["kind", "humanId", "sourceSessionKey", "sourceTool"],
    ),
    ("actor", &["type", "id"]),
    ("notices", &["contextKey", "targetAgentId", "lastSeen"]),
];

struct Server {
    base: String,
    agent: ureq::Agent,
    /// The published input schema's fields of each tool.
    tool_fields: Map<String, Value>,
    // Kept alive for the whole process: the runtime serves, the directory holds the store.
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

static SERVER: OnceLock<Server> = OnceLock::new();
static VERBOSE: OnceLock<bool> = OnceLock::new();
/// The number of the next input's agent.
static NEXT_AGENT: AtomicU64 = AtomicU64::new(0);

fn server() -> &'static Server {
    SERVER.get_or_init(start)
}

fn start() -> Server {
    let dir = tempfile::tempdir().expect("temporary data dir");
    let mut config = GatewayConfig::for_data_dir(dir.path());
    config.notify_on_create = false;
    config.test_clock_start = Some(1_767_225_600_000);
    config.claude_root = None;
    config.codex_home = None;
    config.durability = aware_store_sqlite::Durability::Normal;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    config.bind = addr;
    runtime.spawn(aware_gateway::run(listener, config, std::future::pending()));
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build();
    let mut tool_fields = Map::new();
    for t in aware_gateway::tools::list()["tools"]
        .as_array()
        .expect("a tool list")
    {
        let name = t["name"].as_str().expect("a tool name");
        let fields: Vec<Value> = t["inputSchema"]["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(|k| Value::from(k.as_str()))
            .collect();
        tool_fields.insert(name.into(), Value::from(fields));
    }
    let server = Server {
        base: format!("http://{addr}"),
        agent,
        tool_fields,
        _runtime: runtime,
        _dir: dir,
    };
    for _ in 0..1000 {
        if server.healthy() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(server.healthy(), "the gateway did not come up");
    server
}

impl Server {
    fn healthy(&self) -> bool {
        matches!(self.agent.get(&format!("{}/health", self.base)).call(), Ok(r) if r.status() == 200)
    }

    fn send(&self, method: &str, path: &str, caller: Option<&str>, body: &[u8]) -> (u16, String) {
        let mut req = self
            .agent
            .request(method, &format!("{}{path}", self.base))
            .set("Content-Type", "application/json");
        if let Some(c) = caller {
            req = req.set("X-Aware-Session", c);
        }
        let resp = match req.send_bytes(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {path}: transport error (server hung or died?): {e}"),
        };
        let status = resp.status();
        let text = resp.into_string().expect("a readable answer");
        (status, text)
    }
}

/// The input's own agent: its two sessions, created by the operator.
fn fresh_agent(s: &Server) -> String {
    let ns = format!("fz{}", NEXT_AGENT.fetch_add(1, Ordering::Relaxed));
    for (rest, label) in [("main", "boss"), ("worker", "w1")] {
        let body = json!({"key": format!("agent:{ns}:{rest}"), "label": label}).to_string();
        let (status, text) = s.send("POST", "/v1/sessions", None, body.as_bytes());
        assert_eq!(status, 201, "create agent:{ns}:{rest}: {text}");
    }
    ns
}

/// Does the body name `fz` anywhere, so it could reach another input's agent?
fn names_an_agent_of_ours(body: &[u8]) -> bool {
    fn strings(v: &Value) -> bool {
        match v {
            Value::String(s) => s.to_ascii_lowercase().contains("fz"),
            Value::Array(a) => a.iter().any(strings),
            Value::Object(o) => o
                .iter()
                .any(|(k, v)| k.to_ascii_lowercase().contains("fz") || strings(v)),
            _ => false,
        }
    }
    body.windows(2).any(|w| w.eq_ignore_ascii_case(b"fz"))
        || serde_json::from_slice::<Value>(body).is_ok_and(|v| strings(&v))
}

/// `agent:main:` becomes the input's agent, byte for byte.
fn in_agent(body: &[u8], ns: &str) -> Vec<u8> {
    let from = b"agent:main:";
    let to = format!("agent:{ns}:");
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i..].starts_with(from) {
            out.extend_from_slice(to.as_bytes());
            i += from.len();
        } else {
            out.push(body[i]);
            i += 1;
        }
    }
    out
}

/// `timeoutSeconds: 0` for a `sessions_send` body that would otherwise wait for a reply. Only a
/// strict object is rewritten: re-serialising would drop a repeated key the gateway refuses.
fn no_wait(body: &[u8]) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut map)) = parse_strict(body) else {
        return None;
    };
    let waits = match map.get("timeoutSeconds") {
        None => true,
        Some(v) => v.as_i64().is_some_and(|n| n > 0),
    };
    if !waits {
        return None;
    }
    map.insert("timeoutSeconds".into(), Value::from(0));
    Some(serde_json::to_vec(&Value::Object(map)).expect("re-serialise"))
}

/// Why `body` must not be accepted on `route`, if it must not: not a JSON object (nor blank where
/// allowed), or a field the route does not have.
fn refusable(route: &Route, tool_fields: &Map<String, Value>, body: &[u8]) -> Option<String> {
    if route.blank_ok && body.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let Ok(Value::Object(map)) = parse_strict(body) else {
        return Some("not a strict JSON object".into());
    };
    let fields: Vec<&str> = match route.fields {
        Some(f) => f.to_vec(),
        None => {
            let name = route.path.trim_start_matches("tools/");
            tool_fields[name]
                .as_array()
                .expect("fields")
                .iter()
                .filter_map(Value::as_str)
                .collect()
        }
    };
    for (k, v) in &map {
        if !fields.contains(&k.as_str()) {
            return Some(format!("unknown field {k:?}"));
        }
        let Some((_, nested)) = NESTED.iter().find(|(n, _)| n == k) else {
            continue;
        };
        let objects = match v {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for o in objects {
            if let Value::Object(o) = o {
                if let Some(u) = o.keys().find(|u| !nested.contains(&u.as_str())) {
                    return Some(format!("unknown field {k}.{u}"));
                }
            }
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let s = server();
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    if names_an_agent_of_ours(body) {
        return;
    }
    let route = &ROUTES[usize::from(selector) % ROUTES.len()];
    let ns = fresh_agent(s);
    let caller = format!("agent:{ns}:main");
    let path = format!(
        "/v1/{}",
        route
            .path
            .replace("{s}", &caller)
            .replace("{w}", &format!("agent:{ns}:worker"))
    );
    let body = in_agent(body, &ns);
    let body = if route.path.ends_with("sessions_send") {
        no_wait(&body).unwrap_or(body)
    } else {
        body
    };
    let (status, text) = s.send(route.method, &path, Some(&caller), &body);
    if *VERBOSE.get_or_init(|| std::env::var_os("AWARE_FUZZ_VERBOSE").is_some()) {
        eprintln!(
            "{} {path} -> {status}: {}",
            route.method,
            text.chars().take(160).collect::<String>()
        );
    }
    let shown = String::from_utf8_lossy(&body);
    assert!(
        status < 500,
        "{} {path} answered {status}: {text}\nbody: {shown:?}",
        route.method
    );
    let answer: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path} answered {status} with non-JSON ({e}): {text}"));
    if status >= 400 {
        let code = answer["error"]["code"].as_str();
        let message = answer["error"]["message"].as_str();
        assert!(
            code.is_some_and(|c| !c.is_empty()) && message.is_some(),
            "{path} answered {status} without an error object: {text}"
        );
    } else {
        assert!(answer.is_object(), "{path} answered {status}: {text}");
        if let Some(why) = refusable(route, &s.tool_fields, &body) {
            panic!("{path} accepted ({status}) a body with {why}: {shown:?}\n{text}");
        }
    }
    assert!(s.healthy(), "the gateway is not healthy after {path}");
});
