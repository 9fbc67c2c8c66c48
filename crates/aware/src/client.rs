//! The CLI's client commands (03 §10): thin callers of the HTTP API. Exit status 0 on success,
//! 1 when the server answered an error, 2 for usage errors, 3 when the gateway is unreachable
//! (or did not answer within the request timeout).

use crate::context::Resolved;
pub use crate::failure::{CliResult, Failure};
use aware_client::ClientError;
pub use aware_client::{out, seg};
use serde::Deserialize as _;
use serde_json::Value;
use std::time::Duration;

/// A client command's connection (the shared [`aware_client::Client`]) and output mode.
pub struct Client {
    pub http: aware_client::Client,
    pub json: bool,
}

/// The shared client for resolved settings (token, caller, request timeout).
pub fn connect(r: Resolved) -> CliResult<aware_client::Client> {
    Ok(aware_client::Client::new(&r.url)?
        .with_ca_file(r.ca_file.as_deref())?
        .with_token(r.token)
        .with_caller(r.session, r.agent)
        .with_timeout(r.timeout))
}

impl Client {
    pub fn new(r: Resolved, json: bool) -> CliResult<Client> {
        Ok(Client {
            http: connect(r)?,
            json,
        })
    }

    /// The gateway URL as configured.
    pub fn url(&self) -> &str {
        self.http.base()
    }

    pub fn session(&self) -> Option<&str> {
        self.http.session()
    }

    /// Sends a request within the request timeout and returns the JSON answer.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> CliResult<Value> {
        match self.http.request(method, path).json(body.as_ref()) {
            Ok(v) => Ok(v),
            Err(e) if e.code() == "session_not_found" => Err(self.not_found(e)),
            Err(e) => Err(e.into()),
        }
    }

    /// A missing session said with the known keys nearest to it ("did you mean …"), so a typo
    /// is not answered with "create it" (which would make the typo a session of its own).
    fn not_found(&self, e: ClientError) -> Failure {
        let message = e.message();
        let Some(missing) = message
            .strip_prefix("session ")
            .and_then(|m| m.strip_suffix(" does not exist"))
        else {
            return e.into();
        };
        let listed = self
            .http
            .request("GET", "/v1/sessions?limit=500")
            .operator()
            .json(None)
            .ok();
        let keys: Vec<String> = listed
            .as_ref()
            .and_then(|v| v["sessions"].as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["key"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let near = nearest(missing, &keys);
        if near.is_empty() {
            return e.into();
        }
        Failure::Server(format!(
            "{e} (did you mean {}? `aware list` shows the sessions)",
            near.iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        ))
    }

    /// [`Client::call`] with a typed body, the answer also read into `R` for the human rendering
    /// (the `Value` is what `--json` prints). An answer that does not read is a gateway this
    /// client does not understand, said as such.
    pub fn call_typed<R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&impl serde::Serialize>,
    ) -> CliResult<(Value, R)> {
        let body = body
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Failure::Usage(format!("the body of {method} {path}: {e}")))?;
        let v = self.call(method, path, body)?;
        let typed = read_answer(&v, &format!("{method} {path}"))?;
        Ok((v, typed))
    }

    pub fn need_session(&self, what: &str) -> CliResult<&str> {
        self.session().ok_or_else(|| {
            Failure::Usage(format!(
                "{what} needs --session KEY (or AWARE_SESSION) naming the calling session"
            ))
        })
    }

    /// `POST /v1/tools/{name}` as the `--session` caller, with the tool's typed arguments;
    /// `extra` is added to the request timeout (a `sessions_send` waiting for its reply). The
    /// answer stays a `Value`: `--json` prints it as the gateway sent it, fields a newer
    /// gateway added included.
    pub fn tool(
        &self,
        tool: aware_wire::Tool,
        args: &impl serde::Serialize,
        extra: Duration,
    ) -> CliResult<Value> {
        let name = tool.name();
        self.need_session(&format!("`{name}`"))?;
        let args = serde_json::to_value(args)
            .map_err(|e| Failure::Usage(format!("arguments of {name}: {e}")))?;
        Ok(self
            .http
            .request("POST", &format!("/v1/tools/{}", seg(name)))
            .timeout(self.http.timeout() + extra)
            .json(Some(&args))?)
    }

    /// [`Client::tool`], and the answer also read into the tool's answer type `R` for the
    /// human rendering (the `Value` is what `--json` prints). An answer that does not read is
    /// a gateway this client does not understand, said as such.
    pub fn tool_typed<R: serde::de::DeserializeOwned>(
        &self,
        tool: aware_wire::Tool,
        args: &impl serde::Serialize,
        extra: Duration,
    ) -> CliResult<(Value, R)> {
        let v = self.tool(tool, args, extra)?;
        let typed = read_answer(&v, tool.name())?;
        Ok((v, typed))
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
            let stream = self
                .http
                .request("GET", &format!("/v1/wakes?session={}", seg(session)))
                .stream(Duration::from_secs(120));
            match stream {
                Ok(resp) => {
                    if !connected_before {
                        eprintln!("aware: reconnected to {}", self.url());
                        // Whatever was queued while the stream was down.
                        on_wake()?;
                    }
                    backoff = FIRST;
                    // `wake` (a notice opened, or the catch-up on connect) and `lagged` (the
                    // stream dropped wakes, so look now) both mean: drain.
                    for ev in aware_client::sse::events(resp.into_reader()) {
                        if ev.name == "wake" || ev.name == "lagged" {
                            on_wake()?;
                        }
                    }
                    eprintln!("aware: the wake stream ended; reconnecting");
                    connected_before = false;
                }
                // 429 `too_many_streams` (the gateway's stream caps) is retried like 503: a
                // stream frees when another client goes.
                Err(e @ ClientError::Status { .. })
                    if e.status() != Some(503) && e.status() != Some(429) =>
                {
                    return Err(e.into());
                }
                Err(e) => {
                    let f = Failure::from(e);
                    eprintln!(
                        "aware: {}; retrying in {:.1} s",
                        f.message(),
                        backoff.as_secs_f64()
                    );
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

/// One row of the session table, from an operator's session object or a `sessions_list` row.
pub struct SessionLine {
    pub key: String,
    pub agent: String,
    pub kind: String,
    pub status: String,
    /// Absent in a `sessions_list` row whose stream is empty.
    pub version: Option<i64>,
    pub label: Option<String>,
}

impl From<aware_wire::sessions::Session> for SessionLine {
    fn from(s: aware_wire::sessions::Session) -> Self {
        Self {
            key: s.key,
            agent: s.agent_id,
            kind: s.kind,
            status: s.status,
            version: Some(s.state_version),
            label: s.label,
        }
    }
}

impl From<aware_wire::SessionRow> for SessionLine {
    fn from(s: aware_wire::SessionRow) -> Self {
        Self {
            key: s.key,
            agent: s.agent_id,
            kind: s.kind.as_str().to_string(),
            status: s.status,
            version: s.state_version,
            label: s.label,
        }
    }
}

/// An answer read into its `aware_wire` type; one that does not read is a gateway this client
/// does not understand, said as such.
fn read_answer<R: serde::de::DeserializeOwned>(v: &Value, what: &str) -> CliResult<R> {
    R::deserialize(v).map_err(|e| {
        Failure::Server(format!(
            "the gateway's answer to {what} does not read as this client expects ({e}); is the \
             gateway a different version?"
        ))
    })
}

/// The session table. The key is the last column and always whole: it is what a user copies
/// (a subagent's or an adopted session's key runs to 60–82 characters), and as the last column
/// its length pushes no other column. `_wide` is kept so `--wide` still parses.
pub fn human_sessions(lines: &[SessionLine], _wide: bool) -> String {
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|s| {
            vec![
                s.agent.clone(),
                s.kind.clone(),
                s.status.clone(),
                s.version.map(|n| n.to_string()).unwrap_or_default(),
                s.label.clone().unwrap_or_default(),
                s.key.clone(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no sessions".into();
    }
    table(
        &["AGENT", "KIND", "STATUS", "VERSION", "LABEL", "KEY"],
        &rows,
    )
}

pub fn human_catalog(page: &aware_wire::catalog::CatalogPage) -> String {
    let rows: Vec<Vec<String>> = page
        .items
        .iter()
        .map(|i| {
            vec![
                i.thread_id.clone(),
                i.title.clone().unwrap_or_else(|| "(untitled)".into()),
                i.cwd.clone().unwrap_or_default(),
                i.adopted_session_key.clone().unwrap_or_default(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no threads".into();
    }
    table(&["THREAD", "TITLE", "CWD", "ADOPTED AS"], &rows)
}

/// `statusText` without its fenced JSON block: the changes become one line per event.
pub fn human_status(status: &aware_wire::SessionStatusResult) -> String {
    let text = status.status_text.as_str();
    let head = text
        .split("\n\nSession state changes:")
        .next()
        .unwrap_or(text)
        .to_string();
    let Some(changes) = &status.state_changes else {
        return head;
    };
    let mut lines = vec![head, String::new(), "Changes:".to_string()];
    if changes.events.is_empty() {
        lines.push("  (none)".into());
    }
    for e in &changes.events {
        // The stored summary says `via unknown` when a turn named no channel (01 §5); to a
        // reader that looks like an error, so the CLI says what it means.
        let summary = match e.summary.strip_suffix(" via unknown") {
            Some(head) => format!("{head} (no channel given)"),
            None => e.summary.clone(),
        };
        lines.push(format!(
            "  #{} {} by {} at {}: {summary}",
            e.sequence,
            e.kind,
            e.actor_type,
            utc_seconds(e.occurred_at),
        ));
    }
    if changes.truncated {
        lines.push("  (more changes follow: raise --limit)".into());
    }
    if changes.history_gap {
        lines.push("  (history gap: older changes were pruned; refresh fully)".into());
    }
    lines.join("\n")
}

/// An operator's view of one session (`GET /v1/sessions/{key}`), read into `aware_wire`'s
/// session type; an answer that does not read is shown as the JSON it is.
pub fn human_session_object(v: &Value) -> String {
    let Ok(s) = aware_wire::sessions::Session::deserialize(v) else {
        return serde_json::to_string_pretty(v).unwrap_or_default();
    };
    let mut lines = vec![format!(
        "Session {} (agent {}, kind {})",
        s.key, s.agent_id, s.kind
    )];
    lines.push(format!("Status: {}", s.status));
    if let Some(p) = &s.parent_session_key {
        lines.push(format!("Parent: {p}"));
    }
    if let Some(l) = &s.label {
        lines.push(format!("Label: {l}"));
    }
    if let Some(g) = &s.goal {
        lines.push(format!("Goal: {} [{}]", g.text, g.status));
    }
    lines.push(format!("State version: {}", s.state_version));
    lines.join("\n")
}

pub fn human_drain(v: &Value) -> String {
    match aware_wire::DrainAnswer::prompt_of(v) {
        "" => "(nothing pending)".into(),
        p => p.to_string(),
    }
}

/// `2026-01-01T12:00:00Z` for epoch milliseconds (the prompt lines' rendering, to the second).
pub fn utc_seconds(ms: i64) -> String {
    let full = aware_core::time::rfc3339_millis(ms);
    // `…T12:00:00.000Z`: drop the milliseconds, a reader wants the minute and second.
    match full.get(..19) {
        Some(head) => format!("{head}Z"),
        None => full,
    }
}

/// One message of a history, from a `sessions_history` message or an operator's turn object.
pub struct HistoryLine {
    pub index: i64,
    pub at: i64,
    pub role: String,
    pub actor_type: String,
    pub actor_id: Option<String>,
    pub channel: Option<String>,
    pub run_id: Option<String>,
    pub text: String,
}

impl From<aware_wire::HistoryMessage> for HistoryLine {
    fn from(m: aware_wire::HistoryMessage) -> Self {
        Self {
            index: m.index,
            at: m.at,
            role: m.role,
            actor_type: m.actor_type,
            actor_id: m.actor_id,
            channel: m.channel,
            run_id: m.run_id,
            text: m.text,
        }
    }
}

impl From<aware_wire::sessions::Turn> for HistoryLine {
    fn from(t: aware_wire::sessions::Turn) -> Self {
        Self {
            index: t.index,
            at: t.at,
            role: t.role,
            actor_type: t.actor_type,
            actor_id: t.actor_id,
            channel: t.channel,
            run_id: t.run_id,
            text: t.text,
        }
    }
}

/// One line per message: index, time, role, who acted (`human alice`, `agent …`, `system`),
/// channel, run, then the text (its further lines indented).
pub fn human_history(messages: &[HistoryLine], has_more: bool) -> String {
    if messages.is_empty() {
        return "no messages".into();
    }
    let mut lines = Vec::new();
    for m in messages {
        let actor = match &m.actor_id {
            Some(id) => format!("{} {id}", m.actor_type),
            None => m.actor_type.clone(),
        };
        let mut head = format!("[{}] {} {} by {actor}", m.index, utc_seconds(m.at), m.role,);
        if let Some(ch) = &m.channel {
            head.push_str(&format!(" via {ch}"));
        }
        if let Some(r) = &m.run_id {
            head.push_str(&format!(" (run {r})"));
        }
        lines.push(format!("{head}: {}", m.text.replace('\n', "\n    ")));
    }
    if has_more {
        lines.push("(more messages follow: use --offset)".into());
    }
    lines.join("\n")
}

/// Up to three keys within a few edits of `missing` (the closest first).
fn nearest(missing: &str, keys: &[String]) -> Vec<String> {
    let bound = (missing.chars().count() / 4).clamp(2, 6);
    let mut scored: Vec<(usize, &String)> = keys
        .iter()
        .map(|k| (strsim::levenshtein(missing, k), k))
        .filter(|(d, _)| *d <= bound)
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, k)| k.clone()).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_nearest_keys_are_a_few_edits_away() {
        let keys: Vec<String> = ["agent:main:reviewer", "agent:main:worker", "agent:ops:main"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            super::nearest("agent:main:reviwer", &keys),
            ["agent:main:reviewer"]
        );
        assert!(super::nearest("something else entirely", &keys).is_empty());
    }
}
