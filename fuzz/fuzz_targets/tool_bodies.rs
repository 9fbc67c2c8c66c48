//! The gateway's strict body parser and the tool argument handling, over real HTTP.
//!
//! The body parser (`body::Obj`) and the tool handlers are private to `aware-gateway`, so the
//! target starts the gateway in-process once per process (`aware_gateway::run` on 127.0.0.1:0,
//! a temporary data dir, the test clock, `notify_on_create = false`, no Claude root, durability
//! `normal`), creates two sessions, and then POSTs the fuzz input as a request body.
//!
//! Input: the first byte picks the route (mod 4), the rest is the body:
//! 0 `POST /v1/tools/session_status`, 1 `POST /v1/tools/sessions_send`,
//! 2 `POST /v1/tools/sessions_list` (all three with `X-Aware-Session: agent:main:main`),
//! 3 `POST /v1/sessions` (operator).
//!
//! `sessions_send` waits up to `timeoutSeconds` (default 30) of wall time for a reply that never
//! comes here, so a body that is a JSON object whose `timeoutSeconds` is absent or a positive
//! integer is sent with `timeoutSeconds: 0`; every other body is sent as is.
//!
//! Invariants: no answer is a 5xx (a body can be wrong, never break the server); every error
//! answer is `{"error": {"code", "message"}}`; every success is a JSON object; `/health` stays 200.
//!
//! `AWARE_FUZZ_VERBOSE=1` prints the route and status of every request (to check the seeds).
#![no_main]

use aware_gateway::GatewayConfig;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use std::sync::OnceLock;
use std::time::Duration;

const CALLER: &str = "agent:main:main";
const WORKER: &str = "agent:main:worker";
const ROUTES: [(&str, bool); 4] = [
    ("/v1/tools/session_status", true),
    ("/v1/tools/sessions_send", true),
    ("/v1/tools/sessions_list", true),
    ("/v1/sessions", false),
];

struct Server {
    base: String,
    agent: ureq::Agent,
    // Kept alive for the whole process: the runtime serves, the directory holds the store.
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

static SERVER: OnceLock<Server> = OnceLock::new();
static VERBOSE: OnceLock<bool> = OnceLock::new();

fn server() -> &'static Server {
    SERVER.get_or_init(start)
}

fn start() -> Server {
    let dir = tempfile::tempdir().expect("temporary data dir");
    let mut config = GatewayConfig::for_data_dir(dir.path());
    config.notify_on_create = false;
    config.test_clock_start = Some(1_767_225_600_000);
    config.claude_root = None;
    config.durability = aware_store::Durability::Normal;
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
    let server = Server {
        base: format!("http://{addr}"),
        agent,
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
    for (key, label) in [(CALLER, "boss"), (WORKER, "w1")] {
        let body = json!({"key": key, "label": label}).to_string();
        let (status, _) = server.post("/v1/sessions", None, body.as_bytes());
        assert!(status == 200 || status == 201, "create {key}: {status}");
    }
    server
}

impl Server {
    fn healthy(&self) -> bool {
        matches!(self.agent.get(&format!("{}/health", self.base)).call(), Ok(r) if r.status() == 200)
    }

    fn post(&self, path: &str, caller: Option<&str>, body: &[u8]) -> (u16, String) {
        let mut req = self
            .agent
            .post(&format!("{}{path}", self.base))
            .set("Content-Type", "application/json");
        if let Some(c) = caller {
            req = req.set("X-Aware-Session", c);
        }
        let resp = match req.send_bytes(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("POST {path}: transport error (server hung or died?): {e}"),
        };
        let status = resp.status();
        let text = resp.into_string().expect("a readable answer");
        (status, text)
    }
}

/// `timeoutSeconds: 0` for a `sessions_send` body that would otherwise wait for a reply.
fn no_wait(body: &[u8]) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(body) else {
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

fuzz_target!(|data: &[u8]| {
    let s = server();
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let (path, as_caller) = ROUTES[usize::from(selector) % ROUTES.len()];
    let rewritten = if path.ends_with("sessions_send") {
        no_wait(body)
    } else {
        None
    };
    let body = rewritten.as_deref().unwrap_or(body);
    let (status, text) = s.post(path, as_caller.then_some(CALLER), body);
    if *VERBOSE.get_or_init(|| std::env::var_os("AWARE_FUZZ_VERBOSE").is_some()) {
        eprintln!(
            "POST {path} -> {status}: {}",
            text.chars().take(160).collect::<String>()
        );
    }
    assert!(
        status < 500,
        "POST {path} answered {status}: {text}\nbody: {:?}",
        String::from_utf8_lossy(body)
    );
    let answer: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("POST {path} answered {status} with non-JSON ({e}): {text}"));
    if status >= 400 {
        let code = answer["error"]["code"].as_str();
        let message = answer["error"]["message"].as_str();
        assert!(
            code.is_some_and(|c| !c.is_empty()) && message.is_some(),
            "POST {path} answered {status} without an error object: {text}"
        );
    } else {
        assert!(answer.is_object(), "POST {path} answered {status}: {text}");
    }
    assert!(s.healthy(), "the gateway is not healthy after POST {path}");
});
