//! `aware mcp`: an MCP server over stdio, a thin client of the HTTP API (03 §7).
//!
//! Built on the official Rust SDK (`rmcp`): the SDK owns JSON-RPC framing, the `initialize`
//! handshake, protocol-version negotiation and `ping`; this module only lists the six agent
//! tools (the gateway's own schemas, `aware_gateway::tools::list()`) and forwards `tools/call`
//! to `POST /v1/tools/{name}` as the `--session` caller. After every call it drains the session
//! and appends the drain's prompt, so a model sees its notices on its next tool result.
//!
//! The HTTP client is the blocking `ureq` of the CLI; every request runs on
//! `tokio::task::spawn_blocking`, never on the runtime's worker.

use crate::client::seg;
use anyhow::{Context as _, Result};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct McpArgs {}

/// Connection settings shared by the client commands (global flags).
pub struct Gateway {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
}

/// The tools that only read (03 §7): they carry `readOnlyHint: true`.
const READ_ONLY_TOOLS: [&str; 3] = ["session_status", "sessions_list", "sessions_history"];

/// Default HTTP timeout; `sessions_send` waits up to its `timeoutSeconds` on top of it.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

pub fn run(_args: McpArgs, gw: Gateway) -> Result<()> {
    let session = match gw.session.as_deref().map(str::trim) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => {
            eprintln!(
                "error: aware mcp needs --session KEY (or AWARE_SESSION) naming the calling session"
            );
            std::process::exit(2);
        }
    };
    let server = AwareMcp {
        http: Arc::new(Http {
            base: gw.url.trim_end_matches('/').to_string(),
            token: gw.token,
            session,
            agent: gw.agent,
            agent_http: ureq::AgentBuilder::new().timeout(HTTP_TIMEOUT).build(),
        }),
        tools: Arc::new(tools()?),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(async move {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .context("MCP handshake failed")?;
        running.waiting().await.context("MCP server task failed")?;
        anyhow::Ok(())
    });
    // A tool call still waiting on the gateway must not keep a closed server alive.
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The six tools with the gateway's names, descriptions and input schemas.
fn tools() -> Result<Vec<Tool>> {
    let list = aware_gateway::tools::list();
    let rows = list["tools"]
        .as_array()
        .context("aware_gateway::tools::list() has no tools array")?;
    rows.iter()
        .map(|t| {
            let name = t["name"]
                .as_str()
                .context("tool without a name")?
                .to_string();
            let schema: JsonObject = match &t["inputSchema"] {
                Value::Object(m) => m.clone(),
                _ => anyhow::bail!("tool {name} has no inputSchema object"),
            };
            let description = t["description"].as_str().unwrap_or_default().to_string();
            let mut tool = Tool::new(name.clone(), description, schema);
            if READ_ONLY_TOOLS.contains(&name.as_str()) {
                tool = tool.annotate(ToolAnnotations::new().read_only(true));
            }
            Ok(tool)
        })
        .collect()
}

#[derive(Clone)]
struct AwareMcp {
    http: Arc<Http>,
    tools: Arc<Vec<Tool>>,
}

struct Http {
    base: String,
    token: Option<String>,
    session: String,
    agent: Option<String>,
    agent_http: ureq::Agent,
}

/// How one HTTP request ended.
enum Answer {
    Ok(Value),
    /// The gateway answered an error: `<code>: <message>`.
    Refused(String),
    /// No answer at all (connection refused, timeout, …).
    Unreachable(String),
}

impl Http {
    /// One blocking request as the `--session` caller.
    fn post(&self, path: &str, body: &Value, timeout: Duration) -> Answer {
        let mut r = self
            .agent_http
            .post(&format!("{}{}", self.base, path))
            .timeout(timeout)
            .set("X-Aware-Session", &seg(&self.session))
            .set("Content-Type", "application/json");
        if let Some(a) = &self.agent {
            r = r.set("X-Aware-Agent", a);
        }
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {t}"));
        }
        match r.send_string(&body.to_string()) {
            Ok(resp) => match resp.into_json::<Value>() {
                Ok(v) => Answer::Ok(v),
                Err(e) => Answer::Refused(format!("internal: unreadable answer: {e}")),
            },
            Err(ureq::Error::Status(status, resp)) => {
                let v: Value = resp.into_json().unwrap_or(Value::Null);
                let code = v["error"]["code"].as_str().unwrap_or("internal");
                let message = match v["error"]["message"].as_str() {
                    Some(m) => m.to_string(),
                    None => format!("HTTP status {status}"),
                };
                Answer::Refused(format!("{code}: {message}"))
            }
            Err(e) => Answer::Unreachable(e.to_string()),
        }
    }

    /// `POST /v1/tools/{name}` and the drain after it, both off the async workers.
    fn call_tool(&self, name: &str, args: &Value) -> CallToolResult {
        // sessions_send may wait up to timeoutSeconds (≤ 600) for a reply.
        let wait = args["timeoutSeconds"].as_u64().unwrap_or(30).min(600);
        let timeout = HTTP_TIMEOUT + Duration::from_secs(wait);
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
                self.base
            ))]),
        };
        // Appending the notices is their consumption, so this drains (and acks), not peeks.
        let drain = format!("/v1/sessions/{}/drain", seg(&self.session));
        match self.post(&drain, &Value::Object(Default::default()), HTTP_TIMEOUT) {
            Answer::Ok(d) => {
                if let Some(prompt) = d["prompt"].as_str().filter(|p| !p.is_empty()) {
                    result.content.push(ContentBlock::text(prompt));
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
                 sessions you watch; reconcile with session_status changesSince before acting.",
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
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.tools.iter().any(|t| t.name == name) {
            // MCP: an unknown tool is a protocol error (-32602), not a tool result.
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {name:?}; tools are {}",
                    aware_gateway::tools::TOOL_NAMES.join(", ")
                ),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let http = self.http.clone();
        let result = tokio::task::spawn_blocking(move || http.call_tool(&name, &args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("tool call task failed: {e}"), None))?;
        Ok(CallToolResponse::Complete(result))
    }
}
