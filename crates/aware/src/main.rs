//! The `aware` binary: the gateway (`serve`), the CLI client commands, the hooks, the MCP server
//! and the narrated `demo`. The benchmarks are the separate `aware-bench` binary.

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use client::{out, Failure};
use context::Conn;

/// `println!` for the commands that print reports: a closed pipe (`aware history | head`) ends
/// the process quietly instead of panicking.
macro_rules! say {
    ($($t:tt)*) => {
        $crate::client::out(&format!($($t)*))
    };
}

mod client;
mod commands;
mod console;
mod context;
mod demo;
mod docgen;
mod doctor;
mod doctor_gemini;
mod failure;
mod home;
mod hook;
mod init;
mod mcp;
mod migrate;
mod node;
mod serve;
mod signals;
mod style;

#[derive(Parser, Debug)]
#[command(
    name = "aware",
    version,
    about = "Session hub with session state awareness for multi-agent systems",
    after_help = "Client flags (--url, --token, --session, --agent, --json) may also be given \
                  before the command. Exit statuses: 0 success, 1 the gateway answered an error, \
                  2 usage or configuration error, 3 gateway unreachable or no answer in time."
)]
struct Cli {
    #[command(flatten)]
    conn: Conn,
    /// Print the raw JSON answer.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// Flags shared by the client commands.
#[derive(clap::Args, Debug, Clone, Default)]
struct Common {
    #[command(flatten)]
    conn: Conn,
    /// Print the raw JSON answer.
    #[arg(long)]
    json: bool,
    /// Request timeout in seconds [env: AWARE_TIMEOUT] [default: 30].
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
}

#[derive(Subcommand, Debug)]
enum NodeCommand {
    /// Serve this machine's Claude Code transcripts to a gateway.
    Serve(node::NodeServeArgs),
}

/// Role of a posted turn.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Role {
    User,
    Assistant,
    Tool,
}

/// Who wrote a `user` turn.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Provenance {
    /// A human typed it (the default).
    Human,
    /// Another session sent it (needs --source).
    InterSession,
    /// The system generated it.
    InternalSystem,
}

impl Provenance {
    fn as_str(self) -> &'static str {
        match self {
            Provenance::Human => "human",
            Provenance::InterSession => "inter_session",
            Provenance::InternalSystem => "internal_system",
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway.
    // The last of a repeated flag wins, as in most servers (a wrapper adds its own --bind).
    #[command(args_override_self = true)]
    Serve(serve::ServeArgs),
    /// Copy the state between a data directory (SQLite) and an empty PostgreSQL database, either
    /// way, keeping sequences; counts are verified.
    Migrate(migrate::MigrateArgs),
    /// Status of a session (session_status); as operator without --session.
    Status {
        /// Session key (default: --session).
        key: Option<String>,
        /// Also list the changes after this state version (needs --session).
        #[arg(long, value_name = "N")]
        changes_since: Option<i64>,
        /// At most this many changes (1..=200).
        #[arg(long, value_name = "N")]
        limit: Option<i64>,
        #[command(flatten)]
        common: Common,
    },
    /// List sessions (sessions_list); as operator without --session.
    List {
        /// Only sessions of this kind (repeatable), e.g. main, subagent, adopted.
        #[arg(long = "kind", value_name = "KIND")]
        kinds: Vec<String>,
        /// At most this many sessions.
        #[arg(long, value_name = "N")]
        limit: Option<i64>,
        /// Accepted for scripts written before keys were always printed whole (the key is the
        /// table's last column, never cut).
        #[arg(long, hide = true)]
        wide: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Send a message to a session (sessions_send), by key or by --label, and wait for its reply.
    ///
    /// The message is stored on the target as a user turn with a new run id. By default the
    /// command then waits up to 30 s for the reply: an assistant turn on the target carrying that
    /// run id, which the receiver posts with `aware reply TARGET TEXT`. It prints the reply, or
    /// exits 1 when none came in time (the message stays sent). --no-wait returns at once with
    /// the run id.
    Send {
        /// Target session key, then the message; with --label only the message.
        #[arg(value_name = "TARGET MESSAGE", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// Also watch the target from --session.
        #[arg(long)]
        watch: bool,
        /// Wait up to this many seconds for the reply (0: do not wait) [default: 30]; no reply in
        /// time exits 1.
        #[arg(long, value_name = "SECS", conflicts_with = "no_wait")]
        timeout: Option<i64>,
        /// Do not wait for the reply: print the run id and return (same as --timeout 0).
        #[arg(long)]
        no_wait: bool,
        /// Send to the session with this label instead of a key.
        #[arg(long, value_name = "LABEL")]
        label: Option<String>,
        #[command(flatten)]
        conn: Conn,
        /// Print the raw JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Spawn a sub-agent session (sessions_spawn).
    Spawn {
        /// The task of the new session.
        task: String,
        /// Label of the new session.
        #[arg(long, value_name = "LABEL")]
        label: Option<String>,
        /// Agent of the new session (default: the caller's).
        #[arg(long, value_name = "AGENT")]
        child_agent: Option<String>,
        /// Seconds the run may take.
        #[arg(long, value_name = "SECS")]
        run_timeout: Option<i64>,
        #[command(flatten)]
        common: Common,
    },
    /// Answer a message sent with `aware send`: an assistant turn carrying the message's run id,
    /// which ends the sender's wait.
    ///
    /// Without --run-id it answers the newest message another session sent to KEY (see `aware
    /// history KEY`).
    Reply {
        /// The session that received the message (the one answering).
        key: String,
        /// The reply; `-` reads stdin.
        text: String,
        /// Run id of the message answered (printed by `aware send --no-wait` and `aware history`).
        #[arg(long, value_name = "RUN_ID")]
        run_id: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Delete a session and everything it owns (DELETE /v1/sessions/KEY): its turns, runs,
    /// queued lines, event log and the watches from and to it; its children stay, orphaned.
    ///
    /// Needs --yes, since nothing brings it back. As operator without --session; with an agent
    /// token only that agent's sessions.
    Delete {
        /// Key of the session to delete.
        key: String,
        /// Delete without asking (required: the command never prompts).
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Create a session (POST /v1/sessions); nothing changes when it exists.
    ///
    /// As operator without --session; with --session the creation is recorded as that
    /// session's act.
    Create {
        /// Key of the new session, agent:<agentId>:<rest>, e.g. agent:main:reviewer (a bare key
        /// is refused unless --agent-id names its agent).
        key: String,
        /// Parent session: it watches the new one from the start.
        #[arg(long, value_name = "KEY")]
        parent: Option<String>,
        /// Label, unique within the agent (`aware send --label` finds it).
        #[arg(long, value_name = "LABEL")]
        label: Option<String>,
        /// Kind: group, cron or other (a subagent or main key has its own kind).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// Agent of a bare KEY.
        #[arg(long, value_name = "AGENT")]
        agent_id: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Post a turn to a session.
    Turn {
        /// Session key.
        key: String,
        /// The text; `-` reads stdin.
        text: String,
        /// Role of the turn.
        #[arg(long, value_enum, default_value = "user")]
        role: Role,
        /// Who wrote a user turn.
        #[arg(long, value_enum)]
        provenance: Option<Provenance>,
        /// Sending session of an inter_session turn.
        #[arg(long, value_name = "KEY")]
        source: Option<String>,
        /// Channel the turn came from, e.g. slack.
        #[arg(long, value_name = "CHANNEL")]
        channel: Option<String>,
        /// Id of the human who wrote it.
        #[arg(long, value_name = "ID")]
        human_id: Option<String>,
        /// Run id the turn belongs to; an assistant turn with a sent message's run id is its
        /// reply (what `aware reply` posts).
        #[arg(long, value_name = "RUN_ID")]
        run_id: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Drain a session (acknowledges its notices) and print the prompt.
    Drain {
        /// Session key.
        key: String,
        /// Read without acknowledging (same as `aware pending`).
        #[arg(long)]
        peek: bool,
        /// Stay subscribed to the session's wakes and drain on each; reconnects when the
        /// gateway restarts. With --json, one object per line. Wakes for changes of a watched
        /// session are coalesced (at most one per 20 s by default) and an adopted session's
        /// human prompts are found by the 60 s monitor, so a quiet minute is not a hang.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Show what a drain would return, without acknowledging anything.
    Pending {
        /// Session key.
        key: String,
        #[command(flatten)]
        common: Common,
    },
    /// Register --session as watcher of TARGET.
    Watch {
        /// Session to watch.
        target: String,
        /// Agent of a bare TARGET key.
        #[arg(long, value_name = "AGENT")]
        target_agent: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Stop watching TARGET (sessions_unwatch).
    Unwatch {
        /// Session to stop watching.
        target: String,
        /// Agent of a bare TARGET key.
        #[arg(long, value_name = "AGENT")]
        target_agent: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Transcript of a session: time, role, who acted (human, agent, system), channel and run.
    ///
    /// As operator without --session (every turn, full texts); with --session through
    /// sessions_history as that caller.
    History {
        /// Session key.
        key: String,
        /// At most this many messages.
        #[arg(long, value_name = "N")]
        limit: Option<i64>,
        /// Skip this many messages.
        #[arg(long, value_name = "N")]
        offset: Option<i64>,
        /// Include tool turns.
        #[arg(long)]
        include_tools: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Paired node commands.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// MCP server over stdio exposing the six agent tools (needs --session).
    Mcp(mcp::McpArgs),
    /// The hook of Claude Code, Codex and Gemini CLI: records prompts, hands notices and
    /// messages over, wakes idle sessions (every event).
    Hook(hook::HookArgs),
    /// Set up a project for an agent CLI (claude-code, codex, gemini): hooks, MCP server and
    /// session.
    Init {
        #[command(subcommand)]
        command: init::InitCommand,
    },
    /// Check the gateway, token, session, a project's Claude Code, Codex and Gemini CLI configs
    /// and the Claude root.
    Doctor(doctor::DoctorArgs),
    /// Print the web console's URL (the gateway's `/ui/`) and open it in a browser when this
    /// machine has a display; the page asks for the token when the gateway has one.
    Console {
        /// Only print the URL.
        #[arg(long)]
        no_open: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Adopt a catalog thread (a Claude Code session; a Codex CLI session with `--catalog codex`)
    /// so a human typing into it is noticed.
    ///
    /// Exits 1 when the session is adopted but not linked (no transcript of that thread was
    /// found, so nothing typed there would be noticed).
    Adopt {
        /// Thread id (a Claude Code session id, see `aware catalog`).
        thread: String,
        /// Catalog id.
        #[arg(long, default_value = "claude", value_name = "CATALOG")]
        catalog: String,
        /// Host: gateway:local or node:<id>.
        #[arg(long, default_value = "gateway:local", value_name = "HOST")]
        host: String,
        /// Agent of the adopted session (default: the caller's, else the default agent).
        #[arg(long, value_name = "AGENT")]
        into_agent: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// List catalog threads, newest first.
    Catalog {
        /// Catalog id.
        #[arg(long, default_value = "claude", value_name = "CATALOG")]
        catalog: String,
        /// Host: gateway:local or node:<id>.
        #[arg(long, default_value = "gateway:local", value_name = "HOST")]
        host: String,
        /// At most this many threads (1..=200).
        #[arg(long, value_name = "N")]
        limit: Option<i64>,
        #[command(flatten)]
        common: Common,
    },
    /// Print a shell completion script (e.g. `aware completions bash > ~/.local/share/bash-completion/completions/aware`).
    Completions {
        /// Shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the CLI reference in Markdown (docs/cli.md is this output).
    #[command(hide = true)]
    HelpMarkdown,
    /// Walk through spawn, a human stepping in, one notice, drain and reconciliation.
    Demo(demo::DemoArgs),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if subcommand_name().as_deref() == Some("hook") => {
            // `--help` and `--version` print and exit 0. An argument error exits 1: Claude Code
            // shows it to the user without blocking the prompt, so a typo in settings.json is
            // seen instead of silently turning the hook off (exit 2 would block the prompt).
            if e.use_stderr() {
                let _ = e.print();
                std::process::exit(1);
            }
            e.exit()
        }
        Err(e) => e.exit(),
    };
    let client_only = cli.conn.url.is_some()
        || cli.conn.token.is_some()
        || cli.conn.session.is_some()
        || cli.conn.agent.is_some()
        || cli.json;
    let result: Result<()> = match cli.command {
        Command::Serve(_) | Command::Demo(_) if client_only => Failure::Usage(
            "--url, --token, --session, --agent and --json are client flags; \
                 `serve` and `demo` do not take them (serve has its own --token)"
                .into(),
        )
        .exit(),
        Command::Serve(args) => serve::run(args),
        Command::Migrate(args) => migrate::run(args),
        Command::Node {
            command: NodeCommand::Serve(args),
        } => node::run(args),
        Command::Mcp(args) => mcp::run(args, &cli.conn),
        Command::Hook(args) => {
            hook::run(args, &cli.conn);
            Ok(())
        }
        Command::Init { command } => init::run(command, &cli.conn),
        Command::Doctor(args) => doctor::run(args, &cli.conn),
        Command::Console { no_open, common } => {
            if let Err(f) = console::run(no_open, common, &cli.conn) {
                f.exit();
            }
            Ok(())
        }
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "aware", &mut buf);
            out(&String::from_utf8_lossy(&buf));
            Ok(())
        }
        Command::HelpMarkdown => {
            out(&docgen::markdown(&Cli::command()));
            Ok(())
        }
        Command::Demo(args) => {
            init_quiet_logs();
            demo::run(args)
        }
        cmd => {
            if let Err(f) = commands::run(cmd, &cli.conn, cli.json) {
                f.exit();
            }
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!(
            "{} {e:#}",
            style::paint(style::Stream::Stderr, style::Colour::Red, "error:")
        );
        std::process::exit(1);
    }
}

/// The subcommand named on the command line, skipping global flags and their values.
fn subcommand_name() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--url" | "--token" | "--session" | "--agent" => {
                args.next();
            }
            flag if flag.starts_with('-') => {}
            name => return Some(name.to_string()),
        }
    }
    None
}

fn init_quiet_logs() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AWARE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
}
