//! A scripted local model server for the real agent CLIs (decision D30): the Anthropic Messages API
//! that Claude Code calls (`POST /v1/messages?beta=true`, streamed SSE, and `count_tokens`) and
//! the OpenAI Responses API that Codex CLI calls for a custom `model_provider`
//! (`POST /v1/responses`, streamed SSE) and the Gemini API that Gemini CLI calls
//! (`POST /v1beta/models/{m}:streamGenerateContent?alt=sse` and `:generateContent`), on loopback.
//!
//! A [`Script`] is what "the model" says, step by step: text, one or several tool calls (several
//! in one step are parallel calls), then the end of its turn. Each request is sorted into a
//! [`Lane`] and answered from that lane's steps in arrival order:
//!
//! - [`Lane::Main`]: the agent's own conversation.
//! - [`Lane::Subagent`]: a native subagent (Claude Code's requests say `cc_is_subagent=true` in
//!   the first system block; Codex's carry `client_metadata["x-openai-subagent"]`), so the
//!   parent's and the subagent's steps never mix.
//! - [`Lane::Compaction`]: a request to summarise the conversation (Claude's `/compact` and
//!   Codex's compaction); answered with [`Script::summary`] in the `<summary>` tags Claude Code
//!   insists on.
//! - [`Lane::Side`]: a request without tools (titles and the like): a short text.
//!
//! A request past the end of its lane's steps is answered with a final text and the end of the
//! turn ([`UNSCRIPTED_ANSWER`]) and counted in [`ModelServer::unscripted`], so a CLI that asks
//! more than the script foresaw ends its turn instead of hanging, and the test sees it.
//!
//! A step may carry a side effect ([`Step::before`]), run on a blocking thread before the step's
//! answer is sent: say, post a human turn to a watched session at the moment the model asks for a
//! tool call, so the change lands while the tool runs. Every request body is logged
//! ([`ModelServer::requests`]) so a test asserts exactly what the model was shown, and waits for
//! requests with [`ModelServer::wait_for`] (a condition variable and a deadline, never a pause).

mod call;
mod gemini;
mod wire;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::Router;
pub use call::{Call, CallKind, Lane};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wire::{classify, messages_sse, plain, responses_sse, Api};

/// The text answered to a request the script has no step for.
pub const UNSCRIPTED_ANSWER: &str = "(the script has no more steps) Done.";

/// What the model says in one answer: text first, then its tool calls (none ends the turn).
pub struct Step {
    pub text: Option<String>,
    pub calls: Vec<Call>,
    before: Option<SideEffect>,
    /// Computes the answer from the request instead (say, a call that names the id a previous
    /// tool returned).
    from_request: Option<ComputedStep>,
}

/// A side effect run before a step's answer is sent; it gets the request being answered.
pub type SideEffect = Box<dyn FnOnce(&Request) + Send + 'static>;

/// A step computed from the request it answers.
pub type ComputedStep = Box<dyn FnOnce(&Request) -> Step + Send + 'static>;

impl Step {
    /// A final text that ends the turn.
    pub fn text(text: &str) -> Self {
        Step {
            text: Some(text.to_string()),
            calls: Vec::new(),
            before: None,
            from_request: None,
        }
    }
    /// One shell command.
    pub fn shell(id: &str, command: &str) -> Self {
        Self::calls(vec![Call::shell(id, command)])
    }
    /// One other tool call.
    pub fn tool(id: &str, name: &str, input: Value) -> Self {
        Self::calls(vec![Call::tool(id, name, input)])
    }
    /// Several tool calls in one answer (parallel calls).
    pub fn calls(calls: Vec<Call>) -> Self {
        Step {
            text: None,
            calls,
            before: None,
            from_request: None,
        }
    }
    /// A step whose answer is computed from the request it answers (its side effect, if any,
    /// runs first; the computed step's own side effect is ignored).
    pub fn from_request(answer: impl FnOnce(&Request) -> Step + Send + 'static) -> Self {
        Step {
            text: None,
            calls: Vec::new(),
            before: None,
            from_request: Some(Box::new(answer)),
        }
    }
    /// Adds a text before the tool calls.
    pub fn with_text(mut self, text: &str) -> Self {
        self.text = Some(text.to_string());
        self
    }
    /// Runs `effect` before this step's answer is sent.
    pub fn before(mut self, effect: impl FnOnce(&Request) + Send + 'static) -> Self {
        self.before = Some(Box::new(effect));
        self
    }
}

/// The steps of each lane, and the fixed answers.
pub struct Script {
    pub main: Vec<Step>,
    pub subagent: Vec<Step>,
    /// The compaction summary (inside `<summary>` tags for Claude Code).
    pub summary: String,
    /// The token usage every answer reports. Codex compacts once a turn's usage passes its
    /// `model_auto_compact_token_limit`, so a large figure here triggers compaction.
    pub usage_tokens: u64,
}

impl Script {
    pub fn new(main: Vec<Step>) -> Self {
        Script {
            main,
            subagent: Vec::new(),
            summary: "The user asked for a task; it is under way.".to_string(),
            usage_tokens: 20,
        }
    }
    pub fn with_subagent(mut self, steps: Vec<Step>) -> Self {
        self.subagent = steps;
        self
    }
    pub fn with_usage_tokens(mut self, tokens: u64) -> Self {
        self.usage_tokens = tokens;
        self
    }
}

/// One logged request.
#[derive(Clone, Debug)]
pub struct Request {
    /// 0-based arrival order over all lanes.
    pub index: usize,
    /// The path with its query (`/v1/messages?beta=true`, `/v1/responses`).
    pub path: String,
    pub lane: Lane,
    /// The 0-based step of its lane that answered it; `None` for a fixed answer.
    pub step: Option<usize>,
    /// The request body (JSON; a body that is not JSON is kept as a string).
    pub body: Value,
}

impl Request {
    /// How often `needle` occurs in the text the model is shown: every string in the body,
    /// searched one by one (so the JSON escaping of quotes does not matter).
    pub fn count(&self, needle: &str) -> usize {
        fn walk(v: &Value, needle: &str) -> usize {
            match v {
                Value::String(s) => s.matches(needle).count(),
                Value::Array(a) => a.iter().map(|x| walk(x, needle)).sum(),
                Value::Object(o) => o.values().map(|x| walk(x, needle)).sum(),
                _ => 0,
            }
        }
        walk(&self.body, needle)
    }
    /// The strings of the body that contain `needle`, each cut to 300 characters around its
    /// first occurrence (for failure messages: where the model was shown it).
    pub fn places(&self, needle: &str) -> Vec<String> {
        fn walk(v: &Value, needle: &str, out: &mut Vec<String>) {
            match v {
                Value::String(s) => {
                    if let Some(at) = s.find(needle) {
                        let mut start = at.saturating_sub(150);
                        while !s.is_char_boundary(start) {
                            start -= 1;
                        }
                        let mut end = (at + needle.len() + 150).min(s.len());
                        while !s.is_char_boundary(end) {
                            end += 1;
                        }
                        out.push(s[start..end].to_string());
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, needle, out)),
                Value::Object(o) => o.values().for_each(|x| walk(x, needle, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.body, needle, &mut out);
        out
    }
    pub fn contains(&self, needle: &str) -> bool {
        self.count(needle) > 0
    }
    /// The tool names offered to the model (both APIs have `tools[].name`; Codex namespaces
    /// list theirs under `tools[].tools`).
    pub fn tool_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for t in self.body["tools"].as_array().into_iter().flatten() {
            if let Some(n) = t["name"].as_str() {
                names.push(n.to_string());
            }
            for inner in t["tools"].as_array().into_iter().flatten() {
                if let Some(n) = inner["name"].as_str() {
                    names.push(format!("{}__{n}", t["name"].as_str().unwrap_or("")));
                }
            }
        }
        names
    }
    /// The input items (Responses), messages (Messages) or contents (Gemini) of the request,
    /// in order.
    pub fn items(&self) -> Vec<Value> {
        let list = if self.body["input"].is_array() {
            &self.body["input"]
        } else if self.body["contents"].is_array() {
            &self.body["contents"]
        } else {
            &self.body["messages"]
        };
        list.as_array().cloned().unwrap_or_default()
    }
}

struct Log {
    requests: Vec<Request>,
    /// Requests answered with [`UNSCRIPTED_ANSWER`] because their lane had no step left.
    unscripted: usize,
    /// Next step per lane.
    next: HashMap<Lane, usize>,
    main: Vec<Option<Step>>,
    subagent: Vec<Option<Step>>,
}

struct Shared {
    log: Mutex<Log>,
    changed: Condvar,
    summary: String,
    usage_tokens: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Log> {
        // A side effect that panicked poisons nothing here (it runs outside the lock), but a
        // poisoned lock must not hide the log from the test's failure message.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running server; stopped when dropped.
pub struct ModelServer {
    port: u16,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ModelServer {
    /// Binds 127.0.0.1 on a free port and serves `script` on a thread of its own.
    pub fn start(script: Script) -> Self {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind the model server on loopback");
        let port = listener.local_addr().expect("model server address").port();
        listener
            .set_nonblocking(true)
            .expect("model server listener non-blocking");
        let shared = Arc::new(Shared {
            log: Mutex::new(Log {
                requests: Vec::new(),
                unscripted: 0,
                next: HashMap::new(),
                main: script.main.into_iter().map(Some).collect(),
                subagent: script.subagent.into_iter().map(Some).collect(),
            }),
            changed: Condvar::new(),
            summary: script.summary,
            usage_tokens: script.usage_tokens,
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("model server runtime");
            rt.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("model server listener");
                let app = Router::new()
                    .fallback(answer)
                    // Claude Code sends its whole conversation (system prompt, tools) each time.
                    .layer(DefaultBodyLimit::max(256 << 20))
                    .with_state(state);
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await;
            });
        });
        ModelServer {
            port,
            shared,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`: Claude Code's `ANTHROPIC_BASE_URL`; Codex's provider
    /// `base_url` is this plus `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.lock().requests.clone()
    }

    /// The requests of one lane, in arrival order.
    pub fn lane(&self, lane: Lane) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.lane == lane)
            .collect()
    }

    /// How many requests were answered with [`UNSCRIPTED_ANSWER`].
    pub fn unscripted(&self) -> usize {
        self.shared.lock().unscripted
    }

    /// Appends steps to the main lane (for a conversation that goes on after the first turn,
    /// such as an interactive session woken later).
    pub fn push_main(&self, step: Step) {
        self.shared.lock().main.push(Some(step));
    }

    /// Waits until `done` holds for the request log, at most `timeout`; panics with `what` and
    /// the log's summary when it does not.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[Request]) -> bool,
    ) -> Vec<Request> {
        let deadline = Instant::now() + timeout;
        let mut log = self.shared.lock();
        loop {
            if done(&log.requests) {
                return log.requests.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "model server: no {what} within {timeout:?}; requests so far: {}",
                    summarize(&log.requests)
                );
            }
            log = self
                .shared
                .changed
                .wait_timeout(log, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// A one-line-per-request summary of the log, for failure messages.
    pub fn summary(&self) -> String {
        summarize(&self.shared.lock().requests)
    }
}

fn summarize(requests: &[Request]) -> String {
    let mut out = String::new();
    for r in requests {
        out.push_str(&format!(
            "\n  #{} {} {:?} step {:?}, {} items",
            r.index,
            r.path,
            r.lane,
            r.step,
            r.items().len()
        ));
    }
    if out.is_empty() {
        out.push_str("none");
    }
    out
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The one handler: log, pick the step, run its side effect, answer.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per scripted answer of the model server's protocol"
)]
async fn answer(State(shared): State<Arc<Shared>>, uri: Uri, body: Bytes) -> Response {
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| uri.path().to_string());
    let body: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let api = if uri.path().starts_with("/v1/messages") {
        Api::Messages
    } else if uri.path().starts_with("/v1/responses") {
        Api::Responses
    } else if gemini::is_gemini(uri.path()) {
        Api::Gemini
    } else {
        let mut log = shared.lock();
        let index = log.requests.len();
        log.requests.push(Request {
            index,
            path,
            lane: Lane::Side,
            step: None,
            body,
        });
        shared.changed.notify_all();
        return plain(StatusCode::NOT_FOUND, "application/json", "{}".to_string());
    };
    let lane = if uri.path().ends_with("/count_tokens") {
        Lane::CountTokens
    } else {
        classify(api, &body)
    };
    let (request, step) = {
        let mut log = shared.lock();
        let index = log.requests.len();
        let (step_index, step) = match lane {
            Lane::Main | Lane::Subagent => {
                let n = *log.next.get(&lane).unwrap_or(&0);
                let steps = if lane == Lane::Main {
                    &mut log.main
                } else {
                    &mut log.subagent
                };
                match steps.get_mut(n).and_then(Option::take) {
                    Some(step) => {
                        log.next.insert(lane, n + 1);
                        (Some(n), Some(step))
                    }
                    None => {
                        log.unscripted += 1;
                        (None, None)
                    }
                }
            }
            _ => (None, None),
        };
        let request = Request {
            index,
            path,
            lane,
            step: step_index,
            body,
        };
        log.requests.push(request.clone());
        shared.changed.notify_all();
        (request, step)
    };
    let (text, calls) = match (lane, step) {
        (Lane::CountTokens, _) => {
            return plain(
                StatusCode::OK,
                "application/json",
                json!({"input_tokens": shared.usage_tokens}).to_string(),
            )
        }
        (Lane::Compaction, _) => (
            Some(format!(
                "<analysis>Nothing to add.</analysis>\n<summary>{}</summary>",
                shared.summary
            )),
            Vec::new(),
        ),
        (Lane::Side, _) => (Some("OK".to_string()), Vec::new()),
        (_, Some(mut step)) => {
            if let Some(effect) = step.before.take() {
                let req = request.clone();
                // The effect may block (it talks to a gateway over HTTP); a panic in it is the
                // test's failure, reported when the test looks at the gateway, and the CLI still
                // gets its answer.
                let _ = tokio::task::spawn_blocking(move || effect(&req)).await;
            }
            match step.from_request.take() {
                Some(answer) => {
                    let computed = answer(&request);
                    (computed.text, computed.calls)
                }
                None => (step.text, step.calls),
            }
        }
        (_, None) => (Some(UNSCRIPTED_ANSWER.to_string()), Vec::new()),
    };
    let sse = match api {
        Api::Messages => messages_sse(request.index, text.as_deref(), &calls, shared.usage_tokens),
        Api::Responses => {
            responses_sse(request.index, text.as_deref(), &calls, shared.usage_tokens)
        }
        Api::Gemini => {
            return gemini::answer(&request.path, text.as_deref(), &calls, shared.usage_tokens)
        }
    };
    plain(StatusCode::OK, "text/event-stream", sse)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(server: &ModelServer, path: &str, body: Value) -> (u16, String) {
        let r = ureq::post(&format!("{}{path}", server.base_url()))
            .set("Content-Type", "application/json")
            .send_string(&body.to_string());
        match r {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => panic!("request to the model server failed: {e}"),
        }
    }

    fn messages(user: &str, tools: bool) -> Value {
        let tools = if tools {
            json!([{"name": "Bash", "input_schema": {}}])
        } else {
            json!([])
        };
        json!({"model": "m", "stream": true, "tools": tools,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1;"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": user}]}]})
    }

    #[test]
    fn lanes_steps_side_effects_and_the_unscripted_answer() {
        let effect_saw = Arc::new(Mutex::new(None));
        let slot = effect_saw.clone();
        let server = ModelServer::start(Script::new(vec![
            Step::shell("toolu_1", "echo hi")
                .with_text("Looking.")
                .before(move |r| *slot.lock().expect("slot") = Some(r.index)),
            Step::text("Done."),
        ]));
        let (status, first) = post(&server, "/v1/messages?beta=true", messages("go", true));
        assert_eq!(status, 200);
        // The side effect ran before the answer was sent, on the request it answers.
        assert_eq!(*effect_saw.lock().expect("slot"), Some(0));
        for part in [
            "event: message_start",
            "\"type\":\"tool_use\"",
            "\"name\":\"Bash\"",
            "\"partial_json\":\"{\\\"command\\\":\\\"echo hi\\\"",
            "\"stop_reason\":\"tool_use\"",
            "event: message_stop",
        ] {
            assert!(first.contains(part), "{part} in {first}");
        }
        // A request without tools is a side request and takes no step.
        let (_, side) = post(&server, "/v1/messages?beta=true", messages("title?", false));
        assert!(side.contains("\"stop_reason\":\"end_turn\""), "{side}");
        let (_, count) = post(
            &server,
            "/v1/messages/count_tokens?beta=true",
            messages("x", true),
        );
        assert_eq!(count, "{\"input_tokens\":20}");
        let (_, second) = post(&server, "/v1/messages?beta=true", messages("go on", true));
        assert!(second.contains("Done."), "{second}");
        assert_eq!(server.unscripted(), 0);
        let (_, third) = post(&server, "/v1/messages?beta=true", messages("more?", true));
        assert!(third.contains(UNSCRIPTED_ANSWER), "{third}");
        assert_eq!(server.unscripted(), 1);
        let lanes: Vec<(Lane, Option<usize>)> =
            server.requests().iter().map(|r| (r.lane, r.step)).collect();
        assert_eq!(
            lanes,
            [
                (Lane::Main, Some(0)),
                (Lane::Side, None),
                (Lane::CountTokens, None),
                (Lane::Main, Some(1)),
                (Lane::Main, None),
            ]
        );
        assert!(server.requests()[3].contains("go on"));
    }

    #[test]
    fn subagent_and_compaction_requests_have_lanes_of_their_own() {
        let server = ModelServer::start(
            Script::new(vec![Step::text("main")]).with_subagent(vec![Step::text("sub")]),
        );
        let mut sub = messages("look", true);
        sub["system"][0]["text"] = json!("x-anthropic-billing-header: cc_is_subagent=true;");
        let (_, s) = post(&server, "/v1/messages?beta=true", sub);
        assert!(s.contains("\"text\":\"sub\""), "{s}");
        let compact = messages(
            "Do NOT call any tools. Respond with an <analysis> block followed by a <summary> block.",
            true,
        );
        let (_, c) = post(&server, "/v1/messages?beta=true", compact);
        assert!(c.contains("<summary>"), "{c}");
        let codex_sub = json!({"model": "m", "tools": [{"type": "function", "name": "exec_command"}],
            "client_metadata": {"x-openai-subagent": "collab_spawn"},
            "input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "hi"}]}]});
        let (_, cs) = post(&server, "/v1/responses", codex_sub);
        assert!(
            cs.contains(UNSCRIPTED_ANSWER),
            "the sub lane is used up: {cs}"
        );
        let (_, m) = post(&server, "/v1/messages?beta=true", messages("go", true));
        assert!(m.contains("\"text\":\"main\""), "{m}");
        let lanes: Vec<Lane> = server.requests().iter().map(|r| r.lane).collect();
        assert_eq!(
            lanes,
            [Lane::Subagent, Lane::Compaction, Lane::Subagent, Lane::Main]
        );
    }

    #[test]
    fn responses_render_parallel_calls_and_namespaced_tools() {
        let server = ModelServer::start(
            Script::new(vec![Step::calls(vec![
                Call::shell("call_a", "echo a"),
                Call::tool(
                    "call_b",
                    "mcp__aware__session_status",
                    json!({"sessionKey": "k"}),
                ),
                Call::tool(
                    "call_c",
                    "multi_agent_v1.spawn_agent",
                    json!({"message": "m"}),
                ),
            ])])
            .with_usage_tokens(5000),
        );
        let body = json!({"model": "m", "tools": [{"type": "function", "name": "exec_command"}],
            "input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "go"}]}]});
        let (_, sse) = post(&server, "/v1/responses", body);
        let items: Vec<Value> = sse
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| e["item"].clone())
            .collect();
        assert_eq!(items.len(), 3, "{sse}");
        assert_eq!(items[0]["name"], "exec_command");
        assert_eq!(items[0]["arguments"], "{\"cmd\":\"echo a\"}");
        assert_eq!(
            (&items[1]["namespace"], &items[1]["name"]),
            (&json!("mcp__aware"), &json!("session_status"))
        );
        assert_eq!(
            (&items[2]["namespace"], &items[2]["name"]),
            (&json!("multi_agent_v1"), &json!("spawn_agent"))
        );
        assert!(sse.contains("\"total_tokens\":5005"), "{sse}");
    }

    #[test]
    fn a_wait_for_what_never_comes_fails_with_the_log() {
        let server = ModelServer::start(Script::new(vec![]));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            server.wait_for("a request", Duration::from_millis(50), |r| !r.is_empty())
        }));
        let msg = r
            .err()
            .and_then(|e| e.downcast_ref::<String>().cloned())
            .expect("the wait fails");
        assert!(msg.contains("no a request within"), "{msg}");
        assert!(msg.contains("requests so far: none"), "{msg}");
    }
}
