//! `aware hook`: the Claude Code `UserPromptSubmit` hook (03 §8). Always exits 0.

#[derive(clap::Args, Debug)]
pub struct HookArgs {}

pub fn run(_args: HookArgs, _gw: crate::mcp::Gateway) {}
