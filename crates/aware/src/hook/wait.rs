//! `aware hook --wait`: wakes an idle session. Installed as a `Stop` command hook with
//! `async: true` (and, for Claude Code, `asyncRewake: true`), it runs in the background after
//! each stop, blocks on the session's wake stream (no polling: the gateway pushes a wake when a
//! notice opens, and a catch-up wake on connect when one is already pending), drains, and hands
//! the text over: Claude Code's waiter exits 2 with it on stderr, which makes Claude Code call
//! the model again with it; Codex's starts a turn with it through `codex queue` and exits 0
//! ([`super::codex_wake`]). With nothing to deliver it exits 0 silently (an exit 2 with nothing
//! would loop: every stop starts the hook again).
//!
//! - One waiter per session: a new one stops the old one, which exits 0 ([`slot`]: a locked pid
//!   file, a checked signal through a pidfd).
//! - It survives gateway restarts: a lost stream reconnects with a doubling backoff, and the
//!   catch-up on connect finds what was missed.
//! - It never outlives its CLI: the lineage is taken first thing ([`Lineage`]), and before a
//!   drain (which acknowledges) and on every stream line it checks that the CLI process that
//!   started it is still there; an orphan exits 0 without draining, so a notice is never taken
//!   by a waiter nobody listens to.
//! - It gives up silently after `--wait-secs`.

use super::common::{said, warn, Cli, Target};
use super::lineage::Lineage;
use super::slot;
use aware_client::hook_input as input;
use aware_client::{Client, ClientError};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Reads of the stream time out after this long without a byte (the gateway sends a keep-alive
/// comment every 15 s); a silent connection is then replaced.
const READ_TIMEOUT: Duration = Duration::from_secs(45);
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// How the wait ended.
enum End {
    /// A drained text to hand over.
    Deliver(Delivery),
    /// Nothing to deliver (gave up, replaced, orphaned, or an error already warned about).
    Quiet,
}

/// What was drained, for whom.
struct Delivery {
    prompt: String,
    target: Target,
    /// The hook input's `session_id` (Codex: the thread to queue the turn on).
    thread: Option<String>,
}

pub fn run(gw: Client, cli: Cli, timeout_ms: u64, wait_secs: u64, forced: Option<input::Event>) {
    // Claude Code in print mode (`claude -p`, the SDK) waits for an async Stop hook before it
    // exits and wakes nothing on its exit 2: waiting would only delay the exit, and a notice
    // drained then would be lost. Claude Code says so in the hook's environment.
    if std::env::var("CLAUDE_CODE_SESSION_ATTENDED").is_ok_and(|v| v == "0") {
        return;
    }
    // First, before anything that can block: the CLI may be gone by the time stdin is read.
    // CLAUDE_PID is Claude Code's: a Codex started from inside a Claude Code session inherits
    // it, and its waiter answers to Codex all the same.
    let lineage = match Lineage::of_this_process(cli == Cli::ClaudeCode) {
        Ok(l) => l,
        Err(msg) => return warn(&msg),
    };
    let per_request = Duration::from_millis(timeout_ms.max(1));
    // `--wait-secs` is bounded by clap (a week): this cannot overflow.
    let until = Instant::now() + Duration::from_secs(wait_secs);
    // The stop signals are watched before the slot can be taken, so a replacing waiter's
    // SIGTERM (or a hangup, an interrupt) always ends this one through `release`, never by the
    // default action, which would leave the pid file behind.
    let watched = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the signal runtime: {e}"))
        .and_then(|rt| {
            let stops = rt.block_on(async { Stops::watch() });
            stops.map(|s| (rt, s))
        });
    let (rt, stops) = match watched {
        Ok(w) => w,
        Err(msg) => return warn(&msg),
    };
    let (tx, rx) = mpsc::channel();
    let gw_waiter = gw.clone();
    let spawned = std::thread::Builder::new()
        .name("aware-hook-wait".into())
        .spawn(move || {
            let _ = tx.send(waiter(
                &gw_waiter,
                cli,
                forced,
                &lineage,
                per_request,
                until,
            ));
        });
    if let Err(e) = spawned {
        warn(&format!("cannot start the waiting thread: {e}"));
        return;
    }
    let end = match wait_or_stop(&rt, stops, rx, until) {
        Ok(end) => end,
        Err(msg) => {
            warn(&msg);
            End::Quiet
        }
    };
    // Every exit frees the slot and removes its file (`exit` runs no destructors). Freed
    // before a Codex hand-over too: the turn it starts ends in a stop whose new waiter must
    // find the slot free.
    slot::release();
    if let End::Deliver(d) = end {
        match (cli, d.thread.as_deref()) {
            (Cli::ClaudeCode, _) => {
                eprintln!("{}", d.prompt);
                std::process::exit(2);
            }
            // Codex wakes on the queued turn, not on an exit code: exit 0 either way.
            (Cli::Codex, Some(thread)) => {
                super::codex_wake::hand_over(&gw, &d.target, thread, &d.prompt, per_request);
            }
            // Not reached: `waiter` drains nothing for Codex without a thread.
            (Cli::Codex, None) => warn("drained with no Codex thread to wake"),
            // Not reached: `hook::run` refuses --wait with --cli gemini.
            (Cli::Gemini, _) => {}
        }
    }
    // Exit at once: the waiting thread may still be blocked in a read.
    std::process::exit(0);
}

/// The signals that end a waiter quietly: SIGTERM (a newer waiter replaced this one), SIGHUP
/// and SIGINT (its terminal went away).
struct Stops {
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Stops {
    fn watch() -> Result<Stops, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot watch {name}: {e}"))
        };
        Ok(Stops {
            term: watch(SignalKind::terminate(), "SIGTERM")?,
            hup: watch(SignalKind::hangup(), "SIGHUP")?,
            int: watch(SignalKind::interrupt(), "SIGINT")?,
        })
    }
}

/// The waiter's result, a stop signal or the end of `--wait-secs`, whichever comes first.
fn wait_or_stop(
    rt: &tokio::runtime::Runtime,
    mut stops: Stops,
    rx: mpsc::Receiver<Result<End, String>>,
    until: Instant,
) -> Result<End, String> {
    rt.block_on(async move {
        let (otx, orx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            if let Ok(r) = rx.recv() {
                let _ = otx.send(r);
            }
        });
        tokio::select! {
            r = orx => r.unwrap_or(Ok(End::Quiet)),
            _ = stops.term.recv() => Ok(End::Quiet),
            _ = stops.hup.recv() => Ok(End::Quiet),
            _ = stops.int.recv() => Ok(End::Quiet),
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => Ok(End::Quiet),
        }
    })
}

fn waiter(
    gw: &Client,
    cli: Cli,
    forced: Option<input::Event>,
    lineage: &Lineage,
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
    // Codex is woken on its thread: without one nothing could be handed over, so nothing may
    // be drained.
    if cli == Cli::Codex && session_id.as_deref().is_none_or(|s| s.trim().is_empty()) {
        return Err(
            "the hook input has no session_id (the Codex thread to wake); not waiting".into(),
        );
    }
    let deliver = |prompt: String| {
        End::Deliver(Delivery {
            prompt,
            target: target.clone(),
            thread: session_id.clone(),
        })
    };
    if !lineage.alive()
        || !slot::take(
            &super::common::state_dir()?.join("waiters"),
            gw.base(),
            &target.key,
        )?
    {
        return Ok(End::Quiet);
    }
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
                    return Ok(deliver(queued));
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
                            return Ok(deliver(prompt));
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
        .json(Some(&super::common::drain_body()))
    {
        Ok(v) => Ok(aware_wire::DrainAnswer::prompt_of(&v).to_string()),
        // Not created yet: nothing can be pending.
        Err(e) if e.code() == "session_not_found" => Ok(String::new()),
        Err(e) => Err(format!("cannot drain: {}", said(&e))),
    }
}
