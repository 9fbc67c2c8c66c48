//! The CLI's client commands (03 §10): thin callers of the HTTP API. Exit status 0 on success,
//! 1 when the server answered an error, 2 for usage errors, 3 when the gateway is unreachable.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

pub struct Client {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub json: bool,
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
                eprintln!("error: gateway unreachable: {m}");
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
    fn agent(&self, timeout: Duration) -> ureq::Agent {
        ureq::AgentBuilder::new().timeout(timeout).build()
    }

    fn request(&self, method: &str, path: &str, timeout: Duration) -> ureq::Request {
        let mut r = self.agent(timeout).request(
            method,
            &format!("{}{}", self.url.trim_end_matches('/'), path),
        );
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

    /// Sends a request and returns the JSON answer.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> CliResult<Value> {
        self.call_with_timeout(method, path, body, Duration::from_secs(30))
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
            Err(ureq::Error::Status(_, resp)) => {
                let v: Value = resp.into_json().unwrap_or(Value::Null);
                let code = v["error"]["code"].as_str().unwrap_or("internal");
                let msg = v["error"]["message"].as_str().unwrap_or("no message");
                Err(Failure::Server(format!("{code}: {msg}")))
            }
            Err(e) => Err(Failure::Unreachable(e.to_string())),
        }
    }

    pub fn tool(&self, name: &str, args: Value) -> CliResult<Value> {
        if self.session.is_none() {
            return Err(Failure::Usage(
                "this command needs --session (or AWARE_SESSION) naming the calling session".into(),
            ));
        }
        let timeout = args["timeoutSeconds"].as_u64().unwrap_or(30) + 30;
        self.call_with_timeout(
            "POST",
            &format!("/v1/tools/{name}"),
            Some(args),
            Duration::from_secs(timeout),
        )
    }

    /// Prints the raw JSON with `--json`, else the human rendering.
    pub fn print(&self, v: &Value, human: impl FnOnce(&Value) -> String) {
        if self.json {
            println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
        } else {
            println!("{}", human(v));
        }
    }

    /// Streams wakes of one session and calls `on_wake` for each (drain --follow).
    pub fn follow_wakes(
        &self,
        session: &str,
        mut on_wake: impl FnMut() -> CliResult<()>,
    ) -> CliResult<()> {
        let resp = self
            .request(
                "GET",
                &format!("/v1/wakes?session={}", seg(session)),
                Duration::from_secs(24 * 3600),
            )
            .call()
            .map_err(|e| match e {
                ureq::Error::Status(code, _) => {
                    Failure::Server(format!("wake stream refused with status {code}"))
                }
                e => Failure::Unreachable(e.to_string()),
            })?;
        let reader = BufReader::new(resp.into_reader().take(u64::MAX));
        for line in reader.lines() {
            let line = line.map_err(|e| Failure::Unreachable(e.to_string()))?;
            if line.starts_with("event: wake") {
                on_wake()?;
            }
        }
        Ok(())
    }
}

pub fn human_session(v: &Value) -> String {
    let mut out = format!(
        "{} (agent {}, kind {}, {})",
        v["key"].as_str().unwrap_or(""),
        v["agentId"].as_str().unwrap_or(""),
        v["kind"].as_str().unwrap_or(""),
        v["status"].as_str().unwrap_or("")
    );
    if let Some(sv) = v["stateVersion"].as_i64() {
        out.push_str(&format!(" state version {sv}"));
    }
    out
}

pub fn human_drain(v: &Value) -> String {
    match v["prompt"].as_str() {
        Some("") | None => "(nothing pending)".into(),
        Some(p) => p.to_string(),
    }
}
