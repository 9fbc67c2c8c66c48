//! `aware hook`: the Claude Code `UserPromptSubmit` hook (03 §8). Always exits 0.
//!
//! Reads the hook's JSON from stdin, records the prompt as a human `user` turn of the session
//! (`--session`, else the key adoption mints for the same Claude thread), drains the session and
//! prints the drain's `prompt` so Claude Code adds it to the model's context. Every failure is one
//! warning line on stderr and nothing on stdout: a hook must never block or break a prompt.
//!
//! The work runs on a thread; the main thread stops waiting at `--timeout-ms`, and every HTTP
//! request gets only the budget that is left, so the process ends within the deadline even when
//! the gateway accepts connections and never answers.

use crate::client::seg;
use crate::context::Conn;
use aware_client::{Client, ClientError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Largest hook input read from stdin (03 §8 step 1).
const MAX_INPUT: usize = 1 << 20;
/// The only event the hook acts on.
const EVENT: &str = "UserPromptSubmit";
/// Channel and origin of the recorded turn (03 §8 step 3).
const CHANNEL: &str = "claude-code";
const ORIGIN: &str = "hook";
/// Time kept back from the deadline for handing the answer over and printing it.
const MARGIN: Duration = Duration::from_millis(100);

/// Reads the hook JSON Claude Code sends on stdin, records the prompt as a human turn, drains the
/// session and prints its notices (Claude Code adds stdout to the model's context). Failures at
/// run time are one warning line on stderr and exit 0, so a prompt is never blocked; argument
/// errors exit 1 (shown to the user, not blocking).
#[derive(clap::Args, Debug)]
#[command(
    long_about = "Claude Code UserPromptSubmit hook. Reads the hook JSON on stdin, records the \
                  prompt as a human turn of the session (--session, else \
                  agent:<agent>:claude:<sha256 of session_id>), drains the session and prints \
                  its notices for the model. Run-time failures are one warning line on stderr \
                  and exit 0, so a prompt is never blocked; argument errors exit 1."
)]
pub struct HookArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// The whole hook finishes within this many milliseconds (then it gives up with a warning).
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    pub timeout_ms: u64,
}

/// The message of a panic on the work thread, for the warning line.
static PANIC: Mutex<Option<String>> = Mutex::new(None);

pub fn run(args: HookArgs, outer: &Conn) {
    let gw = match crate::context::resolve(args.conn.clone().or(outer), None)
        .and_then(crate::client::connect)
    {
        Ok(c) => c,
        Err(f) => {
            warn(f.message());
            return;
        }
    };
    let deadline = Instant::now() + Duration::from_millis(args.timeout_ms);
    // A panic must not print its own report: the hook promises exactly one stderr line.
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut p) = PANIC.lock() {
            *p = Some(info.to_string());
        }
    }));
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("aware-hook".into())
        .spawn(move || {
            let _ = tx.send(work(&gw, deadline));
        });
    let outcome = match spawned {
        Err(e) => Err(format!("cannot start the hook thread: {e}")),
        Ok(_) => match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "gave up after {} ms (--timeout-ms)",
                args.timeout_ms
            )),
            Err(RecvTimeoutError::Disconnected) => Err(format!(
                "internal error: {}",
                PANIC
                    .lock()
                    .ok()
                    .and_then(|p| p.clone())
                    .unwrap_or_else(|| "the hook thread stopped".into())
            )),
        },
    };
    match outcome {
        Ok(prompt) if prompt.is_empty() => {}
        Ok(prompt) => {
            // Write errors (a closed stdout) are ignored: there is nobody left to tell.
            let mut out = std::io::stdout().lock();
            let _ = out
                .write_all(prompt.as_bytes())
                .and_then(|_| out.write_all(b"\n"))
                .and_then(|_| out.flush());
        }
        Err(msg) => warn(&msg),
    }
}

/// The one warning line on stderr, control characters flattened so it stays one line.
fn warn(msg: &str) {
    let line: String = msg
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let _ = writeln!(std::io::stderr().lock(), "aware hook: warning: {line}");
}

/// Steps 1–4 of 03 §8. `Ok("")` means print nothing (another event, or nothing pending).
fn work(gw: &Client, deadline: Instant) -> Result<String, String> {
    let input = read_input(std::io::stdin().lock())?;
    let Some(hook) = parse_input(&input)? else {
        return Ok(String::new());
    };
    let target = Target::resolve(gw, hook.session_id.as_deref())?;
    let http = Http { gw, deadline };
    let turns = target.path("turns");
    let turn = json!({
        "role": "user",
        "text": hook.prompt,
        "provenance": {"kind": "human"},
        "channel": CHANNEL,
        "origin": ORIGIN,
    });
    // Post first and create only on a 404: the common case (the session exists) costs one
    // request less than create-then-post.
    let recorded = match http.post(&turns, &turn) {
        Ok(_) => Ok(()),
        Err(e) if e.code() == "session_not_found" => {
            let mut create = json!({"key": target.key, "createdVia": "hook"});
            if let Some(a) = &target.agent {
                create["agentId"] = a.clone().into();
            }
            http.post("/v1/sessions", &create)
                .map_err(|e| format!("cannot create session: {}", said(&e)))?;
            http.post(&turns, &turn)
                .map(|_| ())
                .map_err(|e| format!("cannot record the prompt: {}", said(&e)))
        }
        Err(e) if e.is_unavailable() => {
            return Err(format!("cannot record the prompt: {}", said(&e)))
        }
        Err(e) => Err(format!("cannot record the prompt: {}", said(&e))),
    };
    // A prompt the gateway refused (e.g. over the size limit) must not hide the notices that
    // are waiting: they are still drained and printed, and the refusal is the warning.
    let drained = http
        .post(&target.path("drain"), &json!({}))
        .map_err(|e| format!("cannot drain: {}", said(&e)))?;
    let prompt = drained["prompt"].as_str().unwrap_or("").to_string();
    if let Err(m) = recorded {
        warn(&m);
    }
    Ok(prompt)
}

/// Reads stdin to its end, refusing more than [`MAX_INPUT`] bytes.
fn read_input(r: impl Read) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    r.take(MAX_INPUT as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read the hook input: {e}"))?;
    if buf.len() > MAX_INPUT {
        return Err("hook input is larger than 1 MiB; ignored".into());
    }
    Ok(buf)
}

/// The fields of a `UserPromptSubmit` input the hook uses.
#[derive(Debug)]
struct HookInput {
    session_id: Option<String>,
    prompt: String,
}

/// `Ok(None)` for any event other than `UserPromptSubmit`.
fn parse_input(bytes: &[u8]) -> Result<Option<HookInput>, String> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("hook input is not valid JSON: {e}"))?;
    let Value::Object(o) = v else {
        return Err("hook input must be a JSON object".into());
    };
    match o.get("hook_event_name") {
        Some(Value::String(e)) if e == EVENT => {}
        Some(Value::String(_)) => return Ok(None),
        Some(_) => return Err("hook_event_name must be a string".into()),
        None => return Err("hook input has no hook_event_name".into()),
    }
    let prompt = match o.get("prompt") {
        Some(Value::String(p)) => p.clone(),
        Some(_) => return Err("prompt must be a string".into()),
        None => return Err("hook input has no prompt".into()),
    };
    let session_id = match o.get("session_id") {
        None => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err("session_id must be a non-empty string".into()),
    };
    Ok(Some(HookInput { session_id, prompt }))
}

/// The session the prompt goes to.
#[derive(Debug)]
struct Target {
    key: String,
    /// `agentId` for a bare `--session` key given with `--agent`.
    agent: Option<String>,
}

impl Target {
    /// `--session`, else `agent:<agent or main>:claude:<sha256 hex of session_id>` (03 §8 step
    /// 2), the key adoption mints for the same local thread (04 §3 step 4).
    fn resolve(gw: &Client, session_id: Option<&str>) -> Result<Target, String> {
        if let Some(s) = gw.session().filter(|s| !s.trim().is_empty()) {
            let bare = !s.trim().to_ascii_lowercase().starts_with("agent:");
            return Ok(Target {
                key: s.to_string(),
                agent: gw.agent().map(str::to_string).filter(|_| bare),
            });
        }
        let id = session_id
            .ok_or("hook input has no session_id (and no --session was given)".to_string())?;
        Ok(Target {
            key: claude_key(gw.agent().unwrap_or("main"), id),
            agent: None,
        })
    }

    fn path(&self, what: &str) -> String {
        let q = self
            .agent
            .as_deref()
            .map(|a| format!("?agentId={}", seg(a)))
            .unwrap_or_default();
        format!("/v1/sessions/{}/{what}{q}", seg(&self.key))
    }
}

/// `agent:<agent>:claude:<lowercase hex SHA-256 of session_id>`.
fn claude_key(agent: &str, session_id: &str) -> String {
    let digest = Sha256::digest(session_id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("agent:{agent}:claude:{hex}")
}

/// A failed request as the warning line says it: the gateway's `<code>: <message>`, or that
/// it is unavailable.
fn said(e: &ClientError) -> String {
    if e.is_unavailable() {
        format!("gateway unavailable: {}", e.message())
    } else {
        e.to_string()
    }
}

/// Operator requests (no `X-Aware-Session`) bounded by the hook's deadline.
struct Http<'a> {
    gw: &'a Client,
    deadline: Instant,
}

impl Http<'_> {
    fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let budget = self
            .deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(MARGIN);
        if budget.is_zero() {
            return Err(ClientError::Timeout {
                url: self.gw.base().to_string(),
                detail: "out of time (--timeout-ms)".into(),
            });
        }
        self.gw
            .request("POST", path)
            .operator()
            .timeout(budget)
            .json(Some(body))
    }
}
