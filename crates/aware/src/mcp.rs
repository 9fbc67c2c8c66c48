//! `aware mcp`: an MCP server over stdio, a thin client of the HTTP API (03 §7).

use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct McpArgs {}

/// Connection settings shared by the client commands (global flags).
pub struct Gateway {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
}

pub fn run(_args: McpArgs, _gw: Gateway) -> Result<()> {
    anyhow::bail!("aware mcp is not built yet")
}
