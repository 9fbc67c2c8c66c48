//! `aware hook --wait`: wakes an idle session. Installed as a `Stop` command hook with
//! `async: true` and `asyncRewake: true`, it runs in the background after each stop, blocks on
//! the session's wake stream (no polling: the gateway pushes a wake when a notice opens, and a
//! catch-up wake on connect when one is already pending), drains, and exits 2 with the notice on
//! stderr, which makes Claude Code call the model again with it. With nothing to deliver it
//! exits 0 silently (an exit 2 with nothing would loop: every stop starts the hook again).
//!
//! - One waiter per session: a new one stops the old one (SIGTERM, after checking that the pid in
//!   the session's pid file is an `aware hook --wait` process), which exits 0.
//! - It survives gateway restarts: a lost stream reconnects with a doubling backoff, and the
//!   catch-up on connect finds what was missed.
//! - It never outlives its CLI: before a drain (which acknowledges) and on every stream line, it
//!   checks that the CLI process that started it is still there; an orphan exits 0 without
//!   draining, so a notice is never taken by a waiter nobody listens to.
//! - It gives up silently after `--wait-secs`.

use super::common::{said, warn, Target};
use aware_client::hook_input as input;
use aware_client::{Client, ClientError};
use serde_json::json;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Reads of the stream time out after this long without a byte (the gateway sends a keep-alive
/// comment every 15 s); a silent connection is then replaced.
const READ_TIMEOUT: Duration = Duration::from_secs(45);
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// How the wait ended.
enum End {
    /// A notice to hand over: stderr, exit 2.
    Deliver(String),
    /// Nothing to deliver (gave up, replaced, orphaned, or an error already warned about).
    Quiet,
}

pub fn run(gw: Client, timeout_ms: u64, wait_secs: u64, forced: Option<input::Event>) {
    // Claude Code in print mode (`claude -p`, the SDK) waits for an async Stop hook before it
    // exits and wakes nothing on its exit 2: waiting would only delay the exit, and a notice
    // drained then would be lost. Claude Code says so in the hook's environment.
    if std::env::var("CLAUDE_CODE_SESSION_ATTENDED").is_ok_and(|v| v == "0") {
        return;
    }
    let per_request = Duration::from_millis(timeout_ms.max(1));
    let until = Instant::now() + Duration::from_secs(wait_secs);
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("aware-hook-wait".into())
        .spawn(move || {
            let _ = tx.send(waiter(&gw, forced, per_request, until));
        });
    if let Err(e) = spawned {
        warn(&format!("cannot start the waiting thread: {e}"));
        return;
    }
    let end = match wait_or_term(rx, until) {
        Ok(end) => end,
        Err(msg) => {
            warn(&msg);
            End::Quiet
        }
    };
    if let End::Deliver(prompt) = end {
        eprintln!("{prompt}");
        std::process::exit(2);
    }
    // Exit at once: the waiting thread may still be blocked in a read.
    std::process::exit(0);
}

/// The waiter's result, SIGTERM (a newer waiter replaced this one) or the end of `--wait-secs`,
/// whichever comes first.
fn wait_or_term(rx: mpsc::Receiver<Result<End, String>>, until: Instant) -> Result<End, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the signal runtime: {e}"))?;
    rt.block_on(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
        let (otx, orx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            if let Ok(r) = rx.recv() {
                let _ = otx.send(r);
            }
        });
        tokio::select! {
            r = orx => r.unwrap_or(Ok(End::Quiet)),
            _ = term.recv() => Ok(End::Quiet),
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => Ok(End::Quiet),
        }
    })
}

fn waiter(
    gw: &Client,
    forced: Option<input::Event>,
    per_request: Duration,
    until: Instant,
) -> Result<End, String> {
    let bytes = input::read(std::io::stdin().lock())?;
    // Any event will do (it is installed on Stop); only the session is needed from the input.
    let session_id = match input::parse(&bytes, forced.or(Some(input::Event::Stop)))? {
        Some((_, hook)) => hook.session_id,
        None => None,
    };
    let target = Target::resolve(gw, session_id.as_deref())?;
    let lineage = Lineage::of_this_process();
    let _slot = Slot::take(gw.base(), &target.key)?;
    let stream_path = match &target.agent {
        Some(a) => format!(
            "/v1/wakes?session={}&agent={}",
            crate::client::seg(&target.key),
            crate::client::seg(a)
        ),
        None => format!("/v1/wakes?session={}", crate::client::seg(&target.key)),
    };
    let mut backoff = BACKOFF_FIRST;
    while Instant::now() < until {
        let stream = gw
            .request("GET", &stream_path)
            .operator()
            .timeout(per_request)
            .stream(READ_TIMEOUT);
        match stream {
            Ok(resp) => {
                backoff = BACKOFF_FIRST;
                // The catch-up on connect covers notices, not the FIFO's lines (a message sent
                // while no stream was open, e.g. across a gateway restart): one drain now takes
                // what is already queued; the stream brings the rest.
                if !lineage.alive() {
                    return Ok(End::Quiet);
                }
                let queued = drain(gw, &target, per_request)?;
                if !queued.is_empty() {
                    return Ok(End::Deliver(queued));
                }
                // Every frame, the 15 s keep-alive comments included, re-checks the agent.
                for frame in aware_client::sse::frames(resp.into_reader()) {
                    if !lineage.alive() {
                        return Ok(End::Quiet);
                    }
                    // `wake` (a notice opened, or the catch-up on connect) and `lagged` (the
                    // stream dropped wakes, so look now) both mean: drain.
                    let Some(ev) = frame.event() else { continue };
                    if ev.name == "wake" || ev.name == "lagged" {
                        let prompt = drain(gw, &target, per_request)?;
                        if !prompt.is_empty() {
                            return Ok(End::Deliver(prompt));
                        }
                    }
                }
            }
            // A refusal (401, 403, 400) will not change by waiting: say it once and stop. 503
            // (starting, store down) and 429 `too_many_streams` (the gateway's stream caps,
            // `[http] max_streams`) pass: a stream frees when another client goes.
            Err(e @ ClientError::Status { .. })
                if e.status() != Some(503) && e.status() != Some(429) =>
            {
                return Err(format!("cannot open the wake stream: {}", said(&e)));
            }
            Err(_) => {}
        }
        if !lineage.alive() {
            return Ok(End::Quiet);
        }
        // Retry pacing after a lost stream, not a wait for time to pass.
        std::thread::sleep(backoff.min(until.saturating_duration_since(Instant::now())));
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
    Ok(End::Quiet)
}

fn drain(gw: &Client, target: &Target, per_request: Duration) -> Result<String, String> {
    match gw
        .request("POST", &target.path("drain"))
        .operator()
        .timeout(per_request)
        .json(Some(&json!({})))
    {
        Ok(v) => Ok(aware_wire::DrainAnswer::prompt_of(&v).to_string()),
        // Not created yet: nothing can be pending.
        Err(e) if e.code() == "session_not_found" => Ok(String::new()),
        Err(e) => Err(format!("cannot drain: {}", said(&e))),
    }
}

/// The processes that started this one: the CLI, and the shell it may run the command in.
struct Lineage(Vec<(u32, u64)>);

impl Lineage {
    /// The CLI that started this process (Claude Code names itself in `CLAUDE_PID`), else the
    /// parent, and its parent too when the parent is a shell (hooks run as `sh -c …`), each with
    /// its start time so a reused pid is not taken for the same process.
    fn of_this_process() -> Lineage {
        let mut chain = Vec::new();
        if let Some(pid) = std::env::var("CLAUDE_PID")
            .ok()
            .and_then(|p| p.parse().ok())
        {
            if let Some(st) = Stat::read(pid) {
                chain.push((pid, st.start));
                return Lineage(chain);
            }
        }
        let mut pid = std::os::unix::process::parent_id();
        for _ in 0..2 {
            let Some(st) = Stat::read(pid) else { break };
            chain.push((pid, st.start));
            if !st.is_shell() {
                break;
            }
            pid = st.ppid;
        }
        Lineage(chain)
    }

    /// False once any of them has exited (or the pid now names another process).
    fn alive(&self) -> bool {
        self.0
            .iter()
            .all(|(pid, start)| Stat::read(*pid).is_some_and(|s| s.start == *start))
    }
}

/// The fields of `/proc/<pid>/stat` the lineage check needs.
struct Stat {
    comm: String,
    ppid: u32,
    start: u64,
}

impl Stat {
    fn read(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `comm` is in parentheses and may itself hold spaces and parentheses: split at the last.
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?.to_string();
        let rest: Vec<&str> = text.get(close + 2..)?.split(' ').collect();
        // After comm: state(0) ppid(1) … starttime is field 22 of the line, index 19 here.
        Some(Stat {
            comm,
            ppid: rest.get(1)?.parse().ok()?,
            start: rest.get(19)?.parse().ok()?,
        })
    }

    fn is_shell(&self) -> bool {
        matches!(self.comm.as_str(), "sh" | "bash" | "dash" | "zsh" | "ash")
    }
}

/// The session's waiter slot: a pid file in the user's state directory (mode 0700). Taking it
/// stops the waiter that held it.
struct Slot(PathBuf);

impl Slot {
    fn take(url: &str, key: &str) -> Result<Slot, String> {
        use sha2::{Digest, Sha256};
        use std::os::unix::fs::DirBuilderExt;
        let dir = state_dir().join("waiters");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let digest = Sha256::digest(format!("{url}\0{key}").as_bytes());
        let name = aware_core::hex::lower(&digest[..16]);
        let path = dir.join(format!("{name}.pid"));
        if let Ok(old) = std::fs::read_to_string(&path) {
            if let Ok(pid) = old.trim().parse::<i32>() {
                stop_waiter(pid);
            }
        }
        std::fs::write(&path, std::process::id().to_string())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(Slot(path))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Only our own pid file: a newer waiter has already written its pid over ours.
        if std::fs::read_to_string(&self.0)
            .is_ok_and(|p| p.trim() == std::process::id().to_string())
        {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// SIGTERM to `pid` if it is another `aware hook --wait` of this user (its command line says
/// so); anything else is left alone.
fn stop_waiter(pid: i32) {
    if pid <= 0 || pid as u32 == std::process::id() {
        return;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return;
    };
    let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let ours = words.iter().any(|w| *w == b"hook") && words.iter().any(|w| *w == b"--wait");
    if !ours {
        return;
    }
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// `$XDG_STATE_HOME/aware`, else `~/.local/state/aware`.
fn state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("aware");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/state/aware")
}
