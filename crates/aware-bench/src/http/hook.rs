//! Workload 4: what the hook costs a tool call. Claude Code and Codex run `aware hook` after
//! every tool call (`PostToolUse`); with nothing pending it is one drain round trip. Measured as
//! the wall time of the whole process (spawn, stdin, the request, exit), next to the floor of
//! spawning the same binary for `--version` (no request), alternated so both see the same
//! machine.

use super::setup::*;
use crate::report::*;
use crate::util::*;
use anyhow::{bail, Context, Result};
use aware_store_sqlite::Durability;
use serde_json::json;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

const KEY: &str = "agent:main:bench-hook";

/// Runs `exe args…` with `input` on stdin; its wall time in ns, its status and stdout.
fn timed(exe: &std::path::Path, args: &[&str], input: &[u8]) -> Result<(u64, bool, Vec<u8>)> {
    let t = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .env_remove("AWARE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_SESSION")
        .env("XDG_CONFIG_HOME", "/nonexistent-aware-bench-config")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // The --version floor may exit before reading: a broken pipe is expected there.
        let _ = stdin.write_all(input);
    }
    let out = child.wait_with_output().context("waiting for the child")?;
    Ok((
        t.elapsed().as_nanos() as u64,
        out.status.success(),
        out.stdout,
    ))
}

pub(crate) fn w4(plan: &Plan, runs: u64) -> Result<Vec<Outcome>> {
    let dir = plan.data_dir("w4")?;
    let gw = Gateway::start(&dir, Durability::Normal)?;
    let agent = new_agent(&gw.base)?;
    agent
        .request("POST", "/v1/sessions")
        .json(Some(&json!({"key": KEY})))
        .context("creating the hook's session")?;
    let exe = crate::util::aware_exe()?;
    let input = json!({"hook_event_name": "PostToolUse", "session_id": "bench",
                       "tool_name": "Bash", "tool_input": {"command": "echo hi"},
                       "tool_response": {"stdout": "hi\n"}})
    .to_string();
    let hook_args = ["hook", "--url", gw.base.as_str(), "--session", KEY];
    // Nothing pending: the hook must print nothing (else this measures another path).
    let (_, ok, out) = timed(&exe, &hook_args, input.as_bytes())?;
    if !ok || !out.is_empty() {
        bail!(
            "the hook answered {:?} with nothing pending",
            String::from_utf8_lossy(&out)
        );
    }
    let mut hook = Vec::with_capacity(runs as usize);
    let mut floor = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        hook.push(timed(&exe, &hook_args, input.as_bytes())?.0);
        floor.push(timed(&exe, &["--version"], b"")?.0);
    }
    gw.stop()?;
    let (h50, h99) = percentiles(&mut hook);
    let (f50, f99) = percentiles(&mut floor);
    let ms = |ns: u64| ns as f64 / 1e6;
    let line = format!(
        "hook after a tool call (PostToolUse, nothing pending, {runs} processes): p50 {} p99 {}; \
         floor `aware --version`: p50 {} p99 {}; p50 ratio {:.2}x",
        fmt_dur(h50),
        fmt_dur(h99),
        fmt_dur(f50),
        fmt_dur(f99),
        h50 as f64 / f50.max(1) as f64
    );
    Ok(vec![Outcome::new("HTTP4", line)
        .figure("hook_p50", ms(h50), "ms", Better::Lower)
        .figure("hook_p99", ms(h99), "ms", Better::Lower)
        .figure("spawn_floor_p50", ms(f50), "ms", Better::Lower)
        .figure(
            "hook_over_floor_p50",
            h50 as f64 / f50.max(1) as f64,
            "x",
            Better::Lower,
        )
        .target("hook_p50", 5.0)
        .target("hook_p99", 20.0)])
}
