//! `aware mcp`: an MCP server over stdio, a thin client of the HTTP API (03 §7).
//!
//! Built on the official Rust SDK (`rmcp`): the SDK owns JSON-RPC framing, the `initialize`
//! handshake, protocol-version negotiation and `ping`; this module only lists the six agent
//! tools (names, descriptions and schemas of `aware_wire`) and forwards `tools/call`
//! to `POST /v1/tools/{name}` as the `--session` caller. After every call it drains the session
//! and appends the drain's prompt, so a model sees its notices on its next tool result: as a
//! last text block and, in a structured result, as its `awareNotices` field (the real CLIs show
//! the model the structured result alone).
//!
//! The HTTP client is the blocking `aware_client::Client` of the CLI; every request runs on
//! `tokio::task::spawn_blocking`, never on the runtime's worker.

use crate::client::{seg, Failure};
use crate::context::Conn;
use anyhow::{Context as _, Result};
// The line framing and message check live in aware-client (a library) so the `mcp_stdin` fuzz
// target can call them.
use aware_client::mcp_stdin::{check_message, next_line, Line, MAX_LINE};
use aware_client::{Client, ClientError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    #[command(flatten)]
    pub conn: Conn,
}

/// Largest request body the gateway reads (api.md §1.3): a bigger call is refused here with the
/// gateway's own code instead of being cut off mid-upload and looking like an outage.
const MAX_BODY: usize = 1 << 20;

/// Interval of progress notifications while `sessions_send` waits for a reply.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub fn run(args: McpArgs, outer: &Conn) -> Result<()> {
    // The request timeout (AWARE_TIMEOUT, client.toml, 30 s) bounds each call; `sessions_send`
    // waits up to its `timeoutSeconds` on top of it.
    let client =
        match crate::context::resolve(args.conn.or(outer), None).and_then(crate::client::connect) {
            Ok(c) => c,
            Err(f) => f.exit(),
        };
    let session = match client.session().map(str::trim) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => {
            eprintln!(
                "error: aware mcp needs --session KEY (or AWARE_SESSION) naming the calling session"
            );
            std::process::exit(2);
        }
    };
    let agent = client.agent().map(str::to_string);
    let http = Http {
        client: client.with_caller(Some(session.clone()), agent),
        session,
    };
    http.ensure_session();
    let server = AwareMcp {
        http: Arc::new(http),
        tools: Arc::new(tools()?),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(async move {
        let running = server
            .serve(checked_stdio())
            .await
            .context("MCP handshake failed")?;
        running.waiting().await.context("MCP server task failed")?;
        anyhow::Ok(())
    });
    // A tool call still waiting on the gateway must not keep a closed server alive.
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Stdio for rmcp with the JSON-RPC checks it leaves out: rmcp drops a line that is not JSON
/// (or not a JSON-RPC message) without an answer, so the client waits for ever. Here such a line
/// gets the error JSON-RPC 2.0 prescribes (-32700 parse error, -32600 invalid request, id null
/// when none can be read) and the server goes on. rmcp's output and these errors share one
/// writer so that lines never interleave.
fn checked_stdio() -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (rmcp_in, mut feed) = tokio::io::duplex(1 << 20);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 20);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let errors = tx.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(from_rmcp).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(l) = rx.recv().await {
            if stdout.write_all(l.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
        let parse_error = |m: String| {
            serde_json::json!({"jsonrpc": "2.0", "id": null,
                               "error": {"code": -32700, "message": format!("Parse error: {m}")}})
        };
        loop {
            let line = match next_line(&mut stdin, MAX_LINE).await {
                // End of stdin, or stdin failed: the server ends.
                Ok(None) | Err(_) => break,
                Ok(Some(Line::TooLong(n))) => {
                    let _ = errors.send(
                        parse_error(format!(
                            "a line of {n} bytes is longer than the {MAX_LINE} bytes a message may have"
                        ))
                        .to_string(),
                    );
                    continue;
                }
                Ok(Some(Line::Bytes(b))) => match String::from_utf8(b) {
                    Ok(line) => line,
                    Err(e) => {
                        // One bad line is answered like any other malformed message; it does
                        // not end the server.
                        let _ = errors.send(
                            parse_error(format!(
                                "the line is not valid UTF-8 (byte {})",
                                e.utf8_error().valid_up_to()
                            ))
                            .to_string(),
                        );
                        continue;
                    }
                },
            };
            if line.trim().is_empty() {
                continue;
            }
            match check_message(&line) {
                Ok(()) => {
                    if feed.write_all(line.as_bytes()).await.is_err()
                        || feed.write_all(b"\n").await.is_err()
                    {
                        break;
                    }
                }
                Err(error) => {
                    let _ = errors.send(error.to_string());
                }
            }
        }
        // End of stdin ends the server.
        let _ = feed.shutdown().await;
    });
    (rmcp_in, rmcp_out)
}

/// The six tools: names, descriptions, titles, hints and both schemas from `aware_wire` (the
/// input schemas are the ones the gateway publishes at `GET /v1/tools`).
fn tools() -> Result<Vec<Tool>> {
    aware_wire::Tool::ALL
        .iter()
        .map(|&t| {
            let Value::Object(input) = t.input_schema() else {
                anyhow::bail!("input schema of {} is not an object", t.name());
            };
            let Value::Object(output) = t.output_schema() else {
                anyhow::bail!("output schema of {} is not an object", t.name());
            };
            let hints = t.hints();
            let mut annotations = ToolAnnotations::new()
                .read_only(hints.read_only)
                .idempotent(hints.idempotent)
                .open_world(false);
            if !hints.read_only {
                annotations = annotations.destructive(hints.destructive);
            }
            Ok(Tool::new(t.name(), t.description(), input)
                .with_title(t.title())
                .with_raw_output_schema(Arc::new(output))
                .annotate(annotations))
        })
        .collect()
}

#[derive(Clone)]
struct AwareMcp {
    http: Arc<Http>,
    tools: Arc<Vec<Tool>>,
}

struct Http {
    /// The gateway, as the `--session` caller.
    client: Client,
    session: String,
}

/// How one HTTP request ended.
enum Answer {
    Ok(Value),
    /// The gateway answered an error: `<code>: <message>`.
    Refused(String),
    /// No answer at all (connection refused, timeout, …).
    Unreachable(String),
}

impl From<Result<Value, ClientError>> for Answer {
    fn from(r: Result<Value, ClientError>) -> Answer {
        match r {
            Ok(v) => Answer::Ok(v),
            Err(e) if e.is_unavailable() => Answer::Unreachable(e.message()),
            Err(e) => Answer::Refused(e.to_string()),
        }
    }
}

impl Http {
    /// One blocking request as the `--session` caller.
    fn post(&self, path: &str, body: &Value, timeout: Duration) -> Answer {
        self.client
            .request("POST", path)
            .timeout(timeout)
            .json(Some(body))
            .into()
    }

    /// Creates the caller session when it does not exist yet, so the first tool call of a new
    /// Claude Code project does not fail with `session_not_found` before the hook ever ran.
    /// Failures are a warning only: the gateway may come up later.
    fn ensure_session(&self) {
        let mut body = serde_json::json!({"key": self.session});
        if let Some(a) = self.client.agent() {
            if !self.session.to_ascii_lowercase().starts_with("agent:") {
                body["agentId"] = a.into();
            }
        }
        let created = self
            .client
            .request("POST", "/v1/sessions")
            .operator()
            // Short: the handshake waits for this, and a client gives up on a slow start.
            .timeout(Duration::from_secs(2))
            .send(Some(&body.to_string()));
        match created {
            Ok(resp) if resp.status() == 201 => {
                eprintln!("aware mcp: created session {}", self.session);
            }
            Ok(_) => {}
            Err(e) if e.is_unavailable() => eprintln!(
                "aware mcp: warning: gateway at {} unreachable at start ({}); tool calls will fail until it runs",
                self.client.base(),
                e.message()
            ),
            Err(e) => eprintln!(
                "aware mcp: warning: cannot create session {}: {}",
                self.session,
                Failure::from(e).message()
            ),
        }
    }

    /// `POST /v1/tools/{name}` and the drain after it, both off the async workers.
    fn call_tool(&self, name: &str, args: &Value) -> CallToolResult {
        // sessions_send may wait up to timeoutSeconds (≤ 600) for a reply.
        let wait = args["timeoutSeconds"].as_u64().unwrap_or(30).min(600);
        let timeout = self.client.timeout() + Duration::from_secs(wait);
        let size = args.to_string().len();
        if size > MAX_BODY {
            return CallToolResult::error(vec![ContentBlock::text(format!(
                "payload_too_large: the arguments are {size} bytes; the gateway accepts at most \
                 1 MiB per request and 256 KiB per text"
            ))]);
        }
        let mut result = match self.post(&format!("/v1/tools/{}", seg(name)), args, timeout) {
            Answer::Ok(v) => {
                let text = match (name, v["statusText"].as_str()) {
                    ("session_status", Some(t)) => t.to_string(),
                    _ => serde_json::to_string_pretty(&v).unwrap_or_default(),
                };
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = Some(v);
                r
            }
            Answer::Refused(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
            Answer::Unreachable(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                "gateway_unavailable: cannot reach the aware gateway at {}: {e}",
                self.client.base()
            ))]),
        };
        // Appending the notices is their consumption, so this drains (and acks), not peeks.
        let drain = format!("/v1/sessions/{}/drain", seg(&self.session));
        match self.post(&drain, &crate::hook::drain_body(), self.client.timeout()) {
            Answer::Ok(d) => {
                let prompt = aware_wire::DrainAnswer::prompt_of(&d);
                if !prompt.is_empty() {
                    result.content.push(ContentBlock::text(prompt));
                    // Claude Code and Codex show the model only the structured result when there
                    // is one, so the notices (acknowledged by this drain) must be in it too, or
                    // they are lost. The output schemas allow extra properties.
                    if let Some(Value::Object(o)) = result.structured_content.as_mut() {
                        o.insert("awareNotices".into(), Value::String(prompt.to_string()));
                    }
                }
            }
            Answer::Refused(e) | Answer::Unreachable(e) => {
                eprintln!("aware mcp: warning: drain of {} failed: {e}", self.session);
            }
        }
        result
    }
}

impl ServerHandler for AwareMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("aware", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Session tools of the aware hub. A tool result may end with notices about \
                 sessions you watch, each followed by a preview of what changed (who, how, a \
                 human's words); reconcile with session_status changesSince before acting (in \
                 Claude Code and Codex the tools are named mcp__aware__session_status and \
                 mcp__aware__sessions_history).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.tools.iter().any(|t| t.name == name) {
            // MCP: an unknown tool is a protocol error (-32602), not a tool result.
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {name:?}; tools are {}",
                    aware_wire::Tool::names()
                ),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let http = self.http.clone();
        let waits = name == "sessions_send" && args["timeoutSeconds"].as_u64() != Some(0);
        let mut task = tokio::task::spawn_blocking(move || http.call_tool(&name, &args));
        // sessions_send may wait for a reply (30 s by default): tell a client that asked for
        // progress that the call is alive, so it does not give up on its own timeout.
        let token = context.meta.get_progress_token().filter(|_| waits);
        let result = match token {
            None => task.await,
            Some(token) => {
                let mut tick = tokio::time::interval(PROGRESS_EVERY);
                tick.tick().await;
                let mut n = 0u32;
                loop {
                    tokio::select! {
                        r = &mut task => break r,
                        _ = tick.tick() => {
                            n += 1;
                            let secs = n * PROGRESS_EVERY.as_secs() as u32;
                            let _ = context
                                .peer
                                .notify_progress(
                                    ProgressNotificationParam::new(token.clone(), f64::from(n))
                                        .with_message(format!("waiting for the reply ({secs} s)")),
                                )
                                .await;
                        }
                    }
                }
            }
        }
        .map_err(|e| ErrorData::internal_error(format!("tool call task failed: {e}"), None))?;
        Ok(CallToolResponse::Complete(result))
    }
}
