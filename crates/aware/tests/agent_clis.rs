//! Decision D30: aware with the REAL agent CLIs (Claude Code and Codex CLI, pinned in
//! `clients/agent-clis/package-lock.json`), each in a fresh `$HOME`, offline, against the
//! scripted model server of the test kit (`aware_testkit::model_server`) and a real
//! `aware serve --test-clock`.
//!
//! A test binary of its own: every test starts real CLIs (1–5 s each), and they need `npm ci`
//! in `clients/agent-clis` (the runner does it once when `node_modules` is missing or stale).
//! `cargo test -p aware --test agent_clis`; `AWARE_HOOK_PAYLOADS_DIR=DIR` also writes the hook
//! payloads the payload tests captured to `DIR/<cli>/<Event>.json`.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod agent_clis {
    pub mod aware_hooks;
    pub mod codex_wake;
    pub mod gemini;
    pub mod monitor;
    pub mod payloads;
    pub mod support;
}
