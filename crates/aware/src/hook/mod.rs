//! `aware hook`: the hook of Claude Code, Codex CLI and Gemini CLI (03 §8, extended to the events
//! that let a running agent hear a change before its next action; docs/claude-code.md,
//! docs/codex.md, docs/gemini-cli.md).
//!
//! One command line serves every event: the event comes from the input's `hook_event_name`
//! (or `--event`). `UserPromptSubmit` records the prompt as a human turn; `SessionStart`,
//! `PostToolUse` and `PostToolBatch` hand pending notices to the model as added context;
//! `Stop` sends the agent back once when a notice is pending; `SubagentStart`/`SubagentStop`
//! make native subagents child sessions; `PreCompact` records `compacted`; any other event is
//! ignored. `--wait` is the idle wake ([`wait`]).
//!
//! Every failure is one warning line on stderr, nothing on stdout and exit 0: a hook must never
//! block or break the CLI. The work runs on a thread; the main thread stops waiting at
//! `--timeout-ms`, and every HTTP request gets only the budget that is left, so the process ends
//! within the deadline even when the gateway accepts connections and never answers.

mod act;
mod codex_wake;
mod common;
mod gemini;
mod lineage;
mod slot;
mod spool;
mod wait;

pub(crate) use common::drain_body;

use crate::context::Conn;
// The input parser lives in aware-client (a library) so the `hook_stdin` fuzz target can call
// it; `input` keeps its name here.
use aware_client::hook_input as input;
use aware_client::Client;
pub use common::Cli;
use common::{warn, Http, Output, Target};
use input::Event;
use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `--event NAME`: any event name of a CLI. The ones the hook acts on become an [`Event`]; any
/// other (a CLI's newer event, such as Claude Code's `PreSkillShellCommand`) makes the hook do
/// nothing, as an unknown `hook_event_name` does, so a command line installed under a new event
/// never shows the user an error on every run.
#[derive(Clone, Copy, Debug)]
pub struct EventName(Option<Event>);

/// An event name is letters and digits (`PostToolUse`); anything else is a typo of the command
/// line, refused (exit 1) so it is seen.
fn event_name(name: &str) -> Result<EventName, String> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err("an event name is letters and digits, such as PostToolUse".into());
    }
    Ok(EventName(Event::parse(name)))
}

/// The hook of Claude Code, Codex CLI and Gemini CLI. Reads the hook JSON on stdin and acts on its event.
/// Run-time failures are one warning line on stderr and exit 0, so the CLI is never blocked;
/// argument errors exit 1 (shown to the user, not blocking).
#[derive(clap::Args, Debug)]
#[command(
    long_about = "Hook of Claude Code, Codex CLI and Gemini CLI (--cli gemini). Reads the hook \
                  JSON on stdin; the event comes from its hook_event_name (or --event); Gemini \
                  CLI's BeforeAgent, AfterTool and AfterAgent are read as UserPromptSubmit, \
                  PostToolUse and Stop. UserPromptSubmit records the \
                  prompt as a human turn of the session (--session, else \
                  agent:<agent>:claude:<sha256 of session_id>) and hands pending notices over; \
                  SessionStart, PostToolUse and PostToolBatch hand pending notices over as added \
                  context; Stop and SubagentStop send the agent back once when a notice is \
                  pending; \
                  SubagentStart/SubagentStop make native subagents child sessions; PreCompact \
                  records the compaction; other events do nothing. With --wait (an async Stop \
                  hook) it waits for a notice or a message and hands it over: for Claude Code \
                  (asyncRewake) it exits 2 with it on stderr, which wakes the idle session; for \
                  Codex (--cli codex) it starts a turn with it through `codex queue` and exits 0. \
                  Run-time failures are one warning line on stderr and exit 0, so the CLI is \
                  never blocked; argument errors exit 1."
)]
pub struct HookArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// The whole hook finishes within this many milliseconds (then it gives up with a warning).
    /// With --wait it bounds each request, not the wait.
    #[arg(long, default_value_t = 3000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_MS))]
    pub timeout_ms: u64,
    /// The CLI that runs the hook: decides the answer's format and the channel of prompts.
    #[arg(long, value_enum, default_value_t = Cli::ClaudeCode)]
    pub cli: Cli,
    /// The event, for a CLI whose input does not name it (else hook_event_name is read). An
    /// event the hook does not act on makes it do nothing.
    #[arg(long, value_name = "EVENT", value_parser = event_name)]
    pub event: Option<EventName>,
    /// Wait for a pending notice on the session's wake stream; when one arrives, drain it and
    /// hand it over: print it on stderr and exit 2 (Claude Code's asyncRewake then wakes the
    /// session), or with --cli codex queue it as a new turn (`codex queue`) and exit 0. One
    /// waiter per session: a new one replaces the old.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up silently (exit 0) after this many seconds, from 1 to 604800 (a week).
    #[arg(long, default_value_t = 3600, value_name = "SECS", requires = "wait",
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub wait_secs: u64,
}

/// Bounds of `--wait-secs` and `--timeout-ms`: both are added to the clock, and a larger value
/// overflowed `Instant` (a panic, exit 101, where the hook promises exit 0 or 1). clap's refusal
/// names the accepted range.
pub const MAX_WAIT_SECS: u64 = 7 * 24 * 3600;
const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

/// The message of a panic on the work thread, for the warning line.
static PANIC: Mutex<Option<String>> = Mutex::new(None);

pub fn run(args: HookArgs, outer: &Conn) {
    if args.wait && args.cli == Cli::Gemini {
        // An argument error, exit 1 as clap's are: Gemini CLI runs no hook in the background
        // that could wake it, so a waiter would only take notices nobody reads.
        eprintln!(
            "error: --wait does not work with --cli gemini: Gemini CLI has no hook that wakes an \
             idle session (docs/gemini-cli.md)"
        );
        std::process::exit(1);
    }
    let gw = match crate::context::resolve(args.conn.clone().or(outer), None)
        .and_then(crate::client::connect)
    {
        Ok(c) => c,
        Err(f) => {
            warn(f.message());
            return;
        }
    };
    // A panic must not print its own report: the hook promises exactly one stderr line.
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut p) = PANIC.lock() {
            *p = Some(info.to_string());
        }
    }));
    let forced = match args.event {
        // Nothing to do for this event (its input need not be read: a CLI copes with a hook
        // that exits without reading, as most one-line hooks do).
        Some(EventName(None)) => return,
        Some(EventName(known)) => known,
        None => None,
    };
    if args.wait {
        wait::run(gw, args.cli, args.timeout_ms, args.wait_secs, forced);
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(args.timeout_ms);
    let cli = args.cli;
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("aware-hook".into())
        .spawn(move || {
            let _ = tx.send(work(&gw, cli, forced, deadline));
        });
    let outcome = match spawned {
        Err(e) => Err(format!("cannot start the hook thread: {e}")),
        Ok(_) => match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "gave up after {} ms (--timeout-ms)",
                args.timeout_ms
            )),
            Err(RecvTimeoutError::Disconnected) => Err(panicked()),
        },
    };
    match outcome {
        Ok(Output::Nothing) => {}
        Ok(Output::Text(text)) => print_stdout(&text),
        Ok(Output::Json(v)) => print_stdout(&v.to_string()),
        Err(msg) => warn(&msg),
    }
}

fn panicked() -> String {
    format!(
        "internal error: {}",
        PANIC
            .lock()
            .ok()
            .and_then(|p| p.clone())
            .unwrap_or_else(|| "the hook thread stopped".into())
    )
}

fn print_stdout(text: &str) {
    // Write errors (a closed stdout) are ignored: there is nobody left to tell.
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(text.as_bytes())
        .and_then(|_| out.write_all(b"\n"))
        .and_then(|_| out.flush());
}

fn work(gw: &Client, cli: Cli, forced: Option<Event>, deadline: Instant) -> Result<Output, String> {
    let bytes = input::read(std::io::stdin().lock())?;
    let Some((event, hook)) = input::parse(&bytes, forced)? else {
        return Ok(Output::Nothing);
    };
    // Nothing to do, so no target to resolve and no request to make. (A stop that continues
    // because of a stop hook, the turn an idle wake started included, still has a text that may
    // answer a message handed over in it.)
    let nothing_to_answer = hook
        .last_assistant_message
        .as_deref()
        .is_none_or(|t| t.trim().is_empty());
    if event == Event::SessionEnd
        || (event == Event::Stop && hook.stop_hook_active && nothing_to_answer)
    {
        return Ok(Output::Nothing);
    }
    let target = Target::resolve(gw, hook.session_id.as_deref())?;
    let http = Http { gw, deadline };
    // What was kept while the gateway was down goes first, in order (a directory listing when
    // nothing is kept).
    if let Ok(spool) = spool::Spool::of(gw.base(), &target.key) {
        spool.replay(&http, &target);
    }
    match cli {
        Cli::Gemini => gemini::act(&http, &target, event, &hook),
        _ => act::act(&http, &target, cli, event, &hook),
    }
}
