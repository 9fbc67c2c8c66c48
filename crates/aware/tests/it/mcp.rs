//! `aware mcp` (03 §7, S109, S110): the real binary as a child process, spoken to in
//! newline-delimited JSON-RPC 2.0 over its stdin and stdout, against a real gateway.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One `aware mcp` process and the lines it wrote.
struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    stderr: Arc<Mutex<String>>,
    /// Signalled when stderr reached end of file: every line the process wrote is in `stderr`.
    stderr_closed: Receiver<()>,
    next_id: i64,
    /// Responses that arrived while another one was awaited.
    early: Vec<Value>,
}

impl Mcp {
    fn start(server: &Server, session: &str) -> Self {
        Self::spawn(&["--url", &server.base, "--session", session])
    }

    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(bin())
            // The spec's exact prompt; the reconcile preview has its own tests (preview.rs).
            .env("AWARE_PREVIEW_BYTES", "0")
            .arg("mcp")
            .args(args)
            .env_remove("AWARE_SESSION")
            .env_remove("AWARE_TOKEN")
            .env_remove("AWARE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start aware mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // stdout carries only protocol messages: anything else fails the test.
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let (closed, stderr_closed) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
            let _ = closed.send(());
        });
        let stdin = child.stdin.take();
        Mcp {
            child,
            stdin,
            lines,
            stderr,
            stderr_closed,
            next_id: 1,
            early: Vec::new(),
        }
    }

    fn send(&mut self, msg: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request without waiting; returns its id.
    fn start_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Waits for the response with this id, keeping the others for later.
    fn wait(&mut self, id: i64) -> Value {
        if let Some(i) = self.early.iter().position(|m| m["id"] == id) {
            return self.early.remove(i);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "no answer to request {id} within 60 s; stderr: {}",
                    self.stderr()
                )
            });
            if msg["id"] == id {
                assert_eq!(msg["jsonrpc"], "2.0", "{msg}");
                return msg;
            }
            if msg.get("id").is_some() {
                self.early.push(msg);
            }
        }
    }

    /// Sends a request and returns the whole response object (`result` or `error`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.start_request(method, params);
        self.wait(id)
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    fn initialize(&mut self) -> Value {
        let r = self.result(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "aware-tests", "version": "0"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    fn call(&mut self, name: &str, args: Value) -> Value {
        self.result("tools/call", json!({"name": name, "arguments": args}))
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Closes stdin (the end of the session for an MCP server), waits for the exit and for the
    /// end of stderr, and returns the exit code and the whole of stderr. Nothing can be written
    /// after this, so a count of stderr lines is final: no line can come late.
    fn finish(&mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "aware mcp did not exit after stdin closed; stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        self.stderr_closed
            .recv_timeout(Duration::from_secs(20))
            .expect("stderr reaches end of file once aware mcp exited");
        (status.code(), self.stderr())
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn texts(result: &Value) -> Vec<String> {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {result}"))
        .iter()
        .map(|c| {
            assert_eq!(c["type"], "text", "{c}");
            c["text"].as_str().unwrap().to_string()
        })
        .collect()
}

fn is_error(result: &Value) -> bool {
    result["isError"] == true
}

#[test]
fn s109_mcp_initialize_ping_and_tools_list() {
    let s = Server::family();
    let mut m = Mcp::start(&s, W);
    let init = m.initialize();
    assert_eq!(init["serverInfo"]["name"], "aware", "{init}");
    assert_eq!(init["protocolVersion"], "2025-06-18", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    assert_eq!(m.result("ping", json!({})), json!({}));

    let list = m.result("tools/list", json!({}));
    let tools = list["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 6, "{list}");
    // Same names, descriptions and input schemas as GET /v1/tools, in the same order.
    let http = s.get("/v1/tools").body;
    let http_tools = http["tools"].as_array().unwrap();
    assert_eq!(http_tools.len(), 6);
    for (mine, theirs) in tools.iter().zip(http_tools) {
        assert_eq!(mine["name"], theirs["name"]);
        assert_eq!(mine["description"], theirs["description"]);
        assert_eq!(
            mine["inputSchema"], theirs["inputSchema"],
            "{}",
            mine["name"]
        );
    }
    let read_only: Vec<&str> = tools
        .iter()
        .filter(|t| t["annotations"]["readOnlyHint"] == true)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        read_only,
        ["session_status", "sessions_list", "sessions_history"]
    );
    insta::assert_json_snapshot!("tools_list", list);
}

#[test]
fn s109_mcp_session_status_matches_http_and_errors() {
    let mut s = Server::family();
    let mut m = Mcp::start(&s, W);
    m.initialize();

    // content[0].text is the HTTP statusText, structuredContent the HTTP result.
    for args in [
        json!({"sessionKey": C}),
        json!({"sessionKey": C, "changesSince": 0}),
    ] {
        let http = s.tool(W, "session_status", args.clone());
        assert_eq!(http.status, 200, "{}", http.body);
        let r = m.call("session_status", args);
        assert!(!is_error(&r), "{r}");
        assert_eq!(texts(&r), [http.body["statusText"].as_str().unwrap()]);
        assert_eq!(r["structuredContent"], http.body);
    }

    // Any other tool: the text is the 2-space pretty JSON of the result.
    let r = m.call("sessions_list", json!({}));
    let http = s.tool(W, "sessions_list", json!({})).body;
    assert_eq!(r["structuredContent"], http);
    assert_eq!(
        texts(&r),
        [serde_json::to_string_pretty(&http).unwrap().as_str()]
    );
    assert!(texts(&r)[0].starts_with("{\n  \"count\": 2,"), "{r}");

    // An HTTP error is a tool result with isError and `<code>: <message>`.
    let r = m.call("session_status", json!({"changesSince": -1}));
    assert!(is_error(&r), "{r}");
    assert_eq!(
        texts(&r),
        ["invalid_argument: changesSince must be a non-negative integer"]
    );
    assert!(r.get("structuredContent").is_none(), "{r}");

    // An unknown tool is a JSON-RPC error, not a forwarded call.
    let r = m.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // The gateway stopped: isError with gateway_unavailable; the server itself stays up.
    s.stop();
    let r = m.call("session_status", json!({"sessionKey": C}));
    assert!(is_error(&r), "{r}");
    let t = texts(&r);
    assert_eq!(t.len(), 1, "{r}");
    assert!(t[0].starts_with("gateway_unavailable: "), "{r}");
    assert_eq!(m.result("ping", json!({})), json!({}));
    // The failed drain after the call is one warning line on stderr. Counted once the process
    // has exited and its stderr is closed, so a second line written late (after the answer)
    // fails the test instead of arriving after the count.
    let (code, stderr) = m.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("drain of agent:main:main failed"))
        .count();
    assert_eq!(warnings, 1, "{stderr}");
}

#[test]
fn s110_mcp_appends_and_acks_notices() {
    let s = Server::family();
    let mut m = Mcp::start(&s, W);
    m.initialize();
    s.hdm(C);
    assert_eq!(s.triple(W, C), (1, 2, 2));

    let r = m.call("sessions_list", json!({}));
    assert!(!is_error(&r), "{r}");
    let t = texts(&r);
    assert_eq!(t.len(), 2, "{r}");
    assert_eq!(
        t[1],
        format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, 1))
    );
    // Decision D29: Claude Code and Codex show the model only the structured result, so the notice
    // is in it too (else it would be acknowledged and never seen).
    assert_eq!(
        r["structuredContent"]["awareNotices"],
        format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, 1)),
        "{r}"
    );
    // Appending consumed the notice: the drain acked it.
    assert_eq!(s.triple(W, C), (2, 2, 2));
    assert_eq!(s.pending(W)["notices"], json!([]));

    let r = m.call("sessions_list", json!({}));
    assert_eq!(texts(&r).len(), 1, "{r}");
    assert!(r["structuredContent"].get("awareNotices").is_none(), "{r}");
}

#[test]
fn s110_mcp_appends_notices_to_error_results_too() {
    let s = Server::family();
    let mut m = Mcp::start(&s, W);
    m.initialize();
    s.hdm(C);
    let r = m.call("session_status", json!({"limit": 5}));
    assert!(is_error(&r), "{r}");
    assert_eq!(
        texts(&r),
        [
            "invalid_argument: limit requires changesSince".to_string(),
            format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, 1)),
        ]
    );
    assert_eq!(s.triple(W, C), (2, 2, 2));
}

#[test]
fn mcp_without_session_is_a_usage_error() {
    let mut m = Mcp::spawn(&["--url", "http://127.0.0.1:9"]);
    let (code, stderr) = m.finish();
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "error: aware mcp needs --session KEY (or AWARE_SESSION) naming the calling session\n"
    );
}

#[test]
fn mcp_forwards_the_bearer_token() {
    let s = Server::with_args(DEFAULT_CONFIG, &["--token", "sekrit-0123456789"]);
    s.create(W);
    let mut with = Mcp::spawn(&[
        "--url",
        &s.base,
        "--session",
        W,
        "--token",
        "sekrit-0123456789",
    ]);
    with.initialize();
    let r = with.call("session_status", json!({}));
    assert!(!is_error(&r), "{r}");
    assert_eq!(r["structuredContent"]["sessionKey"], W);

    let mut without = Mcp::start(&s, W);
    without.initialize();
    let r = without.call("session_status", json!({}));
    assert!(is_error(&r), "{r}");
    assert!(texts(&r)[0].starts_with("unauthorized: "), "{r}");
}

#[test]
fn mcp_answers_while_a_tool_call_waits() {
    let s = Server::family();
    let mut m = Mcp::start(&s, W);
    m.initialize();
    // sessions_send waits for a reply that only comes when the test writes it, below.
    let send = m.start_request(
        "tools/call",
        json!({"name": "sessions_send",
               "arguments": {"sessionKey": C, "message": "anyone?", "timeoutSeconds": 30}}),
    );
    // The message is stored before the send starts waiting.
    let run = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let t = s.get(&format!("/v1/sessions/{}/turns", seg(C))).body;
            let found = t["turns"].as_array().and_then(|t| {
                t.iter()
                    .find(|t| t["text"] == "anyone?")
                    .and_then(|t| t["runId"].as_str().map(String::from))
            });
            if let Some(run) = found {
                break run;
            }
            assert!(
                Instant::now() < deadline,
                "the sent message was never stored"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // Answered while the send waits: stdout is one ordered stream, so the send's answer not
    // having come before these two means they overtook it (no clock involved).
    let r = m.call("session_status", json!({"sessionKey": C}));
    assert!(!is_error(&r), "{r}");
    assert_eq!(m.result("ping", json!({})), json!({}));
    assert!(
        m.early.iter().all(|e| e["id"] != send),
        "the send was answered before the calls made while it waited: {:?}",
        m.early
    );
    // The reply ends the wait.
    let t = s.post(
        &format!("/v1/sessions/{}/turns", seg(C)),
        json!({"role": "assistant", "text": "here", "runId": run}),
    );
    assert_eq!(t.status, 201, "{}", t.body);
    let r = m.wait(send);
    let r = &r["result"]["structuredContent"];
    assert_eq!(
        (&r["status"], &r["reply"]),
        (&json!("ok"), &json!("here")),
        "{r}"
    );
}

/// Decision D15: every tool has a title, an output schema and all four hints.
#[test]
fn tools_have_titles_output_schemas_and_hints() {
    let s = Server::family();
    let mut m = Mcp::start(&s, W);
    m.initialize();
    let list = m.result("tools/list", json!({}));
    for t in list["tools"].as_array().unwrap() {
        assert!(t["title"].as_str().is_some_and(|x| !x.is_empty()), "{t}");
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
        for hint in ["readOnlyHint", "idempotentHint", "openWorldHint"] {
            assert!(t["annotations"][hint].is_boolean(), "{hint}: {t}");
        }
        if t["annotations"]["readOnlyHint"] == false {
            assert!(t["annotations"]["destructiveHint"].is_boolean(), "{t}");
        }
    }
}

/// Decision D15: the caller session is created at start, so the first tool call of a new project
/// works before the hook ever ran.
#[test]
fn mcp_creates_its_caller_session() {
    let s = Server::family();
    let fresh = "agent:main:project:new";
    assert_eq!(s.get(&format!("/v1/sessions/{}", seg(fresh))).status, 404);
    let mut m = Mcp::start(&s, fresh);
    m.initialize();
    let r = m.call("session_status", json!({}));
    assert!(!is_error(&r), "{r}");
    assert_eq!(r["structuredContent"]["sessionKey"], fresh);
}

/// Decision D8: malformed JSON-RPC is -32700, bad params -32602; an argument body over the
/// gateway's limit is reported as payload_too_large, not as an unreachable gateway.
#[test]
fn mcp_error_codes_and_body_limit() {
    let s = Server::family();
    let mut m = Mcp::start(&s, W);
    m.initialize();
    {
        let stdin = m.stdin.as_mut().unwrap();
        writeln!(stdin, "{{not json").unwrap();
        stdin.flush().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let parse_error = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = m
            .lines
            .recv_timeout(left)
            .expect("an answer to malformed JSON");
        if msg.get("error").is_some() {
            break msg;
        }
    };
    assert_eq!(parse_error["error"]["code"], -32700, "{parse_error}");
    assert_eq!(parse_error["id"], Value::Null, "{parse_error}");
    // The server is still usable.
    assert_eq!(m.result("ping", json!({})), json!({}));
    let r = m.request("tools/call", json!({"name": 7}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = m.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = m.call(
        "sessions_send",
        json!({"sessionKey": C, "message": "x".repeat(2 << 20), "timeoutSeconds": 0}),
    );
    assert!(is_error(&r), "{r}");
    let t = texts(&r).join("\n");
    assert!(t.starts_with("payload_too_large"), "{t}");
    assert!(!t.contains("gateway_unavailable"), "{t}");
}

/// Decision D15: a waiting sessions_send reports progress to a client that asked for it.
#[test]
fn waiting_send_sends_progress_notifications() {
    let s = Server::family();
    s.create(X);
    let mut m = Mcp::start(&s, X);
    m.initialize();
    let id = m.start_request(
        "tools/call",
        json!({"name": "sessions_send", "_meta": {"progressToken": "p1"},
               "arguments": {"sessionKey": C, "message": "still there?", "timeoutSeconds": 6}}),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut progress = Vec::new();
    let answer = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = m.lines.recv_timeout(left).expect("progress or the answer");
        if msg["method"] == "notifications/progress" {
            progress.push(msg);
        } else if msg["id"] == id {
            break msg;
        }
    };
    assert_eq!(
        answer["result"]["structuredContent"]["status"], "timeout",
        "{answer}"
    );
    assert!(!progress.is_empty(), "no progress notification");
    assert_eq!(progress[0]["params"]["progressToken"], "p1");
}

/// Decision D8: a line that is not UTF-8 is a -32700 answer, not a silent exit; a line longer than
/// 4 MiB is refused (-32700) instead of being held whole, and the server goes on.
#[test]
fn mcp_answers_invalid_utf8_and_overlong_lines() {
    let s = Server::family();
    let mut m = Mcp::start(&s, W);
    m.initialize();
    let next_error = |m: &mut Mcp| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = m
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to the bad line; stderr: {}", m.stderr()));
            if msg.get("error").is_some() {
                break msg;
            }
        }
    };
    {
        let stdin = m.stdin.as_mut().unwrap();
        stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}\n")
            .unwrap();
        stdin.flush().unwrap();
    }
    let e = next_error(&mut m);
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("UTF-8"),
        "{e}"
    );
    assert_eq!(m.result("ping", json!({})), json!({}));
    // A well-formed ping padded past the limit: answered as an error, not as a ping.
    {
        let pad = "x".repeat(5 << 20);
        let stdin = m.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": 99, "method": "ping", "params": {"pad": pad}})
        )
        .unwrap();
        stdin.flush().unwrap();
    }
    let e = next_error(&mut m);
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("longer than"),
        "{e}"
    );
    assert_eq!(m.result("ping", json!({})), json!({}));
}
