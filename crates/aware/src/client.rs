//! The CLI's client commands (03 §10): thin callers of the HTTP API. Exit status 0 on success,
//! 1 when the server answered an error, 2 for usage errors, 3 when the gateway is unreachable
//! (or did not answer within the request timeout).

use crate::context::Resolved;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

pub struct Client {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub json: bool,
    /// Budget of one request (`--timeout`, `AWARE_TIMEOUT`).
    pub timeout: Duration,
}

/// How a command failed, with its exit status.
pub enum Failure {
    Server(String),
    Unreachable(String),
    Usage(String),
}

impl Failure {
    pub fn exit(self) -> ! {
        match self {
            Failure::Server(m) => {
                eprintln!("error: {m}");
                std::process::exit(1)
            }
            Failure::Unreachable(m) => {
                eprintln!("error: {m}");
                std::process::exit(3)
            }
            Failure::Usage(m) => {
                eprintln!("error: {m}");
                std::process::exit(2)
            }
        }
    }
}

pub type CliResult<T> = Result<T, Failure>;

/// Writes `text` and exactly one newline to stdout. A closed pipe (`aware list | head`) ends the
/// process quietly with status 0: the reader has what it wanted.
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let r = o
        .write_all(text.trim_end_matches('\n').as_bytes())
        .and_then(|_| o.write_all(b"\n"))
        .and_then(|_| o.flush());
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// The human text of a transport failure, with the hint a new user needs. ureq's own Display
/// repeats its kind ("Network Error: Network Error: …"), so the message is built here.
pub fn transport_message(url: &str, e: &ureq::Transport) -> String {
    let detail = transport_detail(e);
    let timed_out = detail.contains("timed out") || detail.contains("Timeout");
    if timed_out {
        format!(
            "the gateway at {url} did not answer in time ({detail}); \
             raise --timeout or AWARE_TIMEOUT, or check that `aware serve` is healthy"
        )
    } else {
        format!(
            "cannot reach the gateway at {url}: {detail} \
             (is `aware serve` running? set --url or AWARE_URL)"
        )
    }
}

/// What went wrong on the wire, said once (ureq's Display repeats the error kind):
/// "Connect error: Connection refused (os error 111)".
pub fn transport_detail(e: &ureq::Transport) -> String {
    let source = std::error::Error::source(e).map(|s| s.to_string());
    match (e.message(), source) {
        (Some(m), Some(s)) if !m.contains(&s) => format!("{m}: {s}"),
        (Some(m), _) => m.to_string(),
        (None, Some(s)) => s,
        (None, None) => e.kind().to_string(),
    }
}

/// The detail of any ureq error that is not an HTTP status.
pub fn error_detail(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Transport(t) => transport_detail(t),
        other => other.to_string(),
    }
}

/// `<code>: <message>` of an error answer, with a hint for the codes a new user meets first.
pub fn server_message(status: u16, v: &Value) -> String {
    let code = v["error"]["code"].as_str().unwrap_or("internal");
    let msg = match v["error"]["message"].as_str() {
        Some(m) => m.to_string(),
        None => format!("HTTP status {status}"),
    };
    let hint = match code {
        "unauthorized" => " (set --token or AWARE_TOKEN to the gateway's token)",
        "session_not_found" => {
            " (create it with `aware init claude-code`, or POST /v1/sessions; `aware list` shows the sessions)"
        }
        "payload_too_large" => " (the gateway accepts bodies up to 1 MiB and texts up to 256 KiB)",
        _ => "",
    };
    format!("{code}: {msg}{hint}")
}

/// What must be escaped in a path segment or header: controls, non-ASCII (by the encoder),
/// and the characters that end or restructure a segment. `:` and `-` stay readable.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'?')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|')
    .add(b'[')
    .add(b']');

/// Percent-encodes one path segment (a session key may hold `/`).
pub fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

impl Client {
    pub fn new(r: Resolved, json: bool) -> Client {
        Client {
            url: r.url,
            token: r.token,
            session: r.session,
            agent: r.agent,
            json,
            timeout: r.timeout,
        }
    }

    fn base(&self) -> &str {
        self.url.trim_end_matches('/')
    }

    fn request(&self, method: &str, path: &str, timeout: Duration) -> ureq::Request {
        let agent = ureq::AgentBuilder::new().timeout(timeout).build();
        self.request_on(&agent, method, path)
    }

    fn request_on(&self, agent: &ureq::Agent, method: &str, path: &str) -> ureq::Request {
        let mut r = agent.request(method, &format!("{}{}", self.base(), path));
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {t}"));
        }
        if let Some(s) = &self.session {
            r = r.set("X-Aware-Session", &seg(s));
            if let Some(a) = &self.agent {
                r = r.set("X-Aware-Agent", a);
            }
        }
        r
    }

    /// Sends a request within the request timeout and returns the JSON answer.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> CliResult<Value> {
        self.call_with_timeout(method, path, body, self.timeout)
    }

    pub fn call_with_timeout(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> CliResult<Value> {
        let req = self.request(method, path, timeout);
        let result = match body {
            Some(b) => req
                .set("Content-Type", "application/json")
                .send_string(&b.to_string()),
            None => req.call(),
        };
        match result {
            Ok(resp) => resp
                .into_json::<Value>()
                .map_err(|e| Failure::Server(format!("internal: unreadable answer: {e}"))),
            Err(ureq::Error::Status(status, resp)) => {
                let v: Value = resp.into_json().unwrap_or(Value::Null);
                Err(Failure::Server(server_message(status, &v)))
            }
            Err(ureq::Error::Transport(t)) => {
                Err(Failure::Unreachable(transport_message(self.base(), &t)))
            }
        }
    }

    pub fn need_session(&self, what: &str) -> CliResult<&str> {
        self.session.as_deref().ok_or_else(|| {
            Failure::Usage(format!(
                "{what} needs --session KEY (or AWARE_SESSION) naming the calling session"
            ))
        })
    }

    /// `POST /v1/tools/{name}` as the `--session` caller; `extra` is added to the request
    /// timeout (a `sessions_send` waiting for its reply).
    pub fn tool(&self, name: &str, args: Value, extra: Duration) -> CliResult<Value> {
        self.need_session(&format!("`{name}`"))?;
        self.call_with_timeout(
            "POST",
            &format!("/v1/tools/{name}"),
            Some(args),
            self.timeout + extra,
        )
    }

    /// Prints the raw JSON with `--json` (pretty), else the human rendering.
    pub fn print(&self, v: &Value, human: impl FnOnce(&Value) -> String) {
        if self.json {
            out(&serde_json::to_string_pretty(v).unwrap_or_default());
        } else {
            out(&human(v));
        }
    }

    /// Streams the wakes of one session and calls `on_wake` for each (drain --follow). When the
    /// stream ends or the gateway is gone, it reconnects with a doubling backoff (0.5 s up to
    /// 10 s) and calls `on_wake` once after each reconnect to catch up on what it missed.
    pub fn follow_wakes(
        &self,
        session: &str,
        mut on_wake: impl FnMut() -> CliResult<()>,
    ) -> CliResult<()> {
        const FIRST: Duration = Duration::from_millis(500);
        const MAX: Duration = Duration::from_secs(10);
        let mut backoff = FIRST;
        let mut connected_before = true;
        loop {
            // Connecting is bounded by the request timeout; the stream itself lives on (the
            // gateway sends a keep-alive comment every 15 s).
            let agent = ureq::AgentBuilder::new()
                .timeout_connect(self.timeout)
                .timeout_read(Duration::from_secs(120))
                .build();
            let req = self.request_on(
                &agent,
                "GET",
                &format!("/v1/wakes?session={}", seg(session)),
            );
            match req.call() {
                Ok(resp) => {
                    if !connected_before {
                        eprintln!("aware: reconnected to {}", self.base());
                        // Whatever was queued while the stream was down.
                        on_wake()?;
                    }
                    backoff = FIRST;
                    let reader = BufReader::new(resp.into_reader().take(u64::MAX));
                    for line in reader.lines() {
                        let Ok(line) = line else { break };
                        if line.starts_with("event: wake") {
                            on_wake()?;
                        }
                    }
                    eprintln!("aware: the wake stream ended; reconnecting");
                    connected_before = false;
                }
                Err(ureq::Error::Status(status, resp)) if status != 503 => {
                    let v: Value = resp.into_json().unwrap_or(Value::Null);
                    return Err(Failure::Server(server_message(status, &v)));
                }
                Err(e) => {
                    let msg = match &e {
                        ureq::Error::Transport(t) => transport_message(self.base(), t),
                        other => other.to_string(),
                    };
                    eprintln!("aware: {msg}; retrying in {:.1} s", backoff.as_secs_f64());
                    connected_before = false;
                }
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX);
        }
    }
}

/// Column-aligned rows under a header; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let n = cells.len();
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == n {
                    c.to_string()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut outl = vec![line(header.to_vec())];
    for r in rows {
        outl.push(line(r.iter().map(String::as_str).collect()));
    }
    outl.join("\n")
}

pub fn human_sessions(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["sessions"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|s| {
                    vec![
                        s["key"].as_str().unwrap_or("").to_string(),
                        s["agentId"].as_str().unwrap_or("").to_string(),
                        s["kind"].as_str().unwrap_or("").to_string(),
                        s["status"].as_str().unwrap_or("").to_string(),
                        s["stateVersion"]
                            .as_i64()
                            .map(|n| n.to_string())
                            .unwrap_or_default(),
                        s["label"].as_str().unwrap_or("").to_string(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        return "no sessions".into();
    }
    table(
        &["KEY", "AGENT", "KIND", "STATUS", "VERSION", "LABEL"],
        &rows,
    )
}

pub fn human_catalog(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    vec![
                        i["threadId"].as_str().unwrap_or("").to_string(),
                        i["title"].as_str().unwrap_or("(untitled)").to_string(),
                        i["cwd"].as_str().unwrap_or("").to_string(),
                        i["adoptedSessionKey"].as_str().unwrap_or("").to_string(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        return "no threads".into();
    }
    table(&["THREAD", "TITLE", "CWD", "ADOPTED AS"], &rows)
}

/// `statusText` without its fenced JSON block: the changes become one line per event.
pub fn human_status(v: &Value) -> String {
    let text = v["statusText"].as_str().unwrap_or("");
    let head = text
        .split("\n\nSession state changes:")
        .next()
        .unwrap_or(text)
        .to_string();
    let Some(changes) = v.get("stateChanges") else {
        return head;
    };
    let mut lines = vec![head, String::new(), "Changes:".to_string()];
    let events = changes["events"].as_array().cloned().unwrap_or_default();
    if events.is_empty() {
        lines.push("  (none)".into());
    }
    for e in events {
        lines.push(format!(
            "  #{} {} by {}: {}",
            e["sequence"],
            e["kind"].as_str().unwrap_or(""),
            e["actorType"].as_str().unwrap_or(""),
            e["summary"].as_str().unwrap_or("")
        ));
    }
    if changes["truncated"] == true {
        lines.push("  (more changes follow: raise --limit)".into());
    }
    if changes["historyGap"] == true {
        lines.push("  (history gap: older changes were pruned; refresh fully)".into());
    }
    lines.join("\n")
}

/// An operator's view of one session (`GET /v1/sessions/{key}`).
pub fn human_session_object(v: &Value) -> String {
    let mut lines = vec![format!(
        "Session {} (agent {}, kind {})",
        v["key"].as_str().unwrap_or(""),
        v["agentId"].as_str().unwrap_or(""),
        v["kind"].as_str().unwrap_or("")
    )];
    lines.push(format!("Status: {}", v["status"].as_str().unwrap_or("")));
    if let Some(p) = v["parentSessionKey"].as_str() {
        lines.push(format!("Parent: {p}"));
    }
    if let Some(l) = v["label"].as_str() {
        lines.push(format!("Label: {l}"));
    }
    if let Some(g) = v["goal"]["text"].as_str() {
        lines.push(format!(
            "Goal: {g} [{}]",
            v["goal"]["status"].as_str().unwrap_or("")
        ));
    }
    if let Some(n) = v["stateVersion"].as_i64() {
        lines.push(format!("State version: {n}"));
    }
    lines.join("\n")
}

pub fn human_drain(v: &Value) -> String {
    match v["prompt"].as_str() {
        Some("") | None => "(nothing pending)".into(),
        Some(p) => p.to_string(),
    }
}
