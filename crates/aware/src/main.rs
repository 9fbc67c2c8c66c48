//! The `aware` binary: the gateway (`serve`), the CLI client commands, the narrated `demo` and
//! the engine benchmarks (`bench`).

use anyhow::Result;
use clap::{Parser, Subcommand};
use client::{seg, Client, Failure};
use serde_json::{json, Value};

mod bench;
mod bench_http;
mod client;
mod demo;
mod hook;
mod mcp;
mod node;
mod serve;

#[derive(Parser, Debug)]
#[command(
    name = "aware",
    version,
    about = "Session hub with session state awareness for multi-agent systems"
)]
struct Cli {
    /// Gateway URL.
    #[arg(
        long,
        global = true,
        env = "AWARE_URL",
        default_value = "http://127.0.0.1:7420"
    )]
    url: String,
    /// Bearer token.
    #[arg(long, global = true, env = "AWARE_TOKEN")]
    token: Option<String>,
    /// The calling session (caller identity).
    #[arg(long, global = true, env = "AWARE_SESSION")]
    session: Option<String>,
    /// Agent of a bare --session key.
    #[arg(long, global = true)]
    agent: Option<String>,
    /// Print the raw JSON answer.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum NodeCommand {
    /// Serve this machine's Claude Code transcripts to a gateway.
    Serve(node::NodeServeArgs),
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway.
    Serve(serve::ServeArgs),
    /// session_status (KEY defaults to --session).
    Status {
        key: Option<String>,
        #[arg(long)]
        changes_since: Option<i64>,
        #[arg(long)]
        limit: Option<i64>,
    },
    /// sessions_list.
    List {
        #[arg(long = "kind")]
        kinds: Vec<String>,
        #[arg(long)]
        limit: Option<i64>,
    },
    /// sessions_send.
    Send {
        target: String,
        message: String,
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        timeout: Option<i64>,
        #[arg(long)]
        label: Option<String>,
    },
    /// sessions_spawn.
    Spawn {
        task: String,
        #[arg(long)]
        label: Option<String>,
        #[arg(long)]
        child_agent: Option<String>,
        #[arg(long)]
        run_timeout: Option<i64>,
    },
    /// Post a turn (TEXT `-` reads stdin).
    Turn {
        key: String,
        text: String,
        #[arg(long, default_value = "user")]
        role: String,
        #[arg(long)]
        provenance: Option<String>,
        #[arg(long)]
        source: Option<String>,
        #[arg(long)]
        channel: Option<String>,
        #[arg(long)]
        human_id: Option<String>,
    },
    /// Drain a session and print the prompt.
    Drain {
        key: String,
        #[arg(long)]
        peek: bool,
        #[arg(long)]
        follow: bool,
    },
    /// Register --session as watcher of TARGET.
    Watch {
        target: String,
        #[arg(long)]
        target_agent: Option<String>,
    },
    /// sessions_unwatch.
    Unwatch {
        target: String,
        #[arg(long)]
        target_agent: Option<String>,
    },
    /// sessions_history.
    History {
        key: String,
        #[arg(long)]
        limit: Option<i64>,
        #[arg(long)]
        offset: Option<i64>,
        #[arg(long)]
        include_tools: bool,
    },
    /// Paired node commands.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// MCP server over stdio exposing the six agent tools (needs --session).
    Mcp(mcp::McpArgs),
    /// Claude Code UserPromptSubmit hook: records the prompt, prints pending notices.
    Hook(hook::HookArgs),
    /// Adopt a catalog thread (a Claude Code session; a Codex CLI session with `--catalog codex`)
    /// so a human typing into it is noticed.
    Adopt {
        thread: String,
        #[arg(long, default_value = "claude")]
        catalog: String,
        #[arg(long, default_value = "gateway:local")]
        host: String,
        #[arg(long)]
        into_agent: Option<String>,
    },
    /// List catalog threads, newest first.
    Catalog {
        #[arg(long, default_value = "claude")]
        catalog: String,
        #[arg(long, default_value = "gateway:local")]
        host: String,
        #[arg(long)]
        limit: Option<i64>,
    },
    /// Walk through spawn, a human stepping in, one notice, drain and reconciliation.
    Demo(demo::DemoArgs),
    /// Engine benchmarks, each printed next to a raw rusqlite floor run in the same process.
    Bench(bench::BenchArgs),
    /// Gateway benchmarks.
    BenchHttp(bench_http::HttpBenchArgs),
}

fn put(v: &mut Value, k: &str, x: Option<impl Into<Value>>) {
    if let Some(x) = x {
        v[k] = x.into();
    }
}

fn client_command(c: &Client, cmd: Command) -> client::CliResult<()> {
    match cmd {
        Command::Status {
            key,
            changes_since,
            limit,
        } => {
            let mut args = json!({});
            put(&mut args, "sessionKey", key);
            put(&mut args, "changesSince", changes_since);
            put(&mut args, "limit", limit);
            let v = c.tool("session_status", args)?;
            c.print(&v, |v| v["statusText"].as_str().unwrap_or("").to_string());
        }
        Command::List { kinds, limit } => {
            let mut args = json!({});
            if !kinds.is_empty() {
                args["kinds"] = json!(kinds);
            }
            put(&mut args, "limit", limit);
            let v = c.tool("sessions_list", args)?;
            c.print(&v, |v| {
                v["sessions"].as_array().map_or(String::new(), |rows| {
                    rows.iter()
                        .map(client::human_session)
                        .collect::<Vec<_>>()
                        .join("\n")
                })
            });
        }
        Command::Send {
            target,
            message,
            watch,
            timeout,
            label,
        } => {
            let mut args = json!({"message": message});
            match label {
                Some(l) => args["label"] = l.into(),
                None => args["sessionKey"] = target.into(),
            }
            if watch {
                args["watch"] = true.into();
            }
            put(&mut args, "timeoutSeconds", timeout);
            let v = c.tool("sessions_send", args)?;
            c.print(&v, |v| match v["reply"].as_str() {
                Some(r) => r.to_string(),
                None => format!(
                    "{} (run {})",
                    v["status"].as_str().unwrap_or(""),
                    v["runId"].as_str().unwrap_or("")
                ),
            });
        }
        Command::Spawn {
            task,
            label,
            child_agent,
            run_timeout,
        } => {
            let mut args = json!({"task": task});
            put(&mut args, "label", label);
            put(&mut args, "agentId", child_agent);
            put(&mut args, "runTimeoutSeconds", run_timeout);
            let v = c.tool("sessions_spawn", args)?;
            c.print(&v, |v| {
                format!(
                    "spawned {} (run {})",
                    v["childSessionKey"].as_str().unwrap_or(""),
                    v["runId"].as_str().unwrap_or("")
                )
            });
        }
        Command::Turn {
            key,
            text,
            role,
            provenance,
            source,
            channel,
            human_id,
        } => {
            let text = if text == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| Failure::Usage(format!("cannot read stdin: {e}")))?;
                s
            } else {
                text
            };
            let mut body = json!({"role": role, "text": text});
            if provenance.is_some() || human_id.is_some() || source.is_some() {
                let mut p = json!({"kind": provenance.unwrap_or_else(|| "human".into())});
                put(&mut p, "humanId", human_id);
                put(&mut p, "sourceSessionKey", source);
                body["provenance"] = p;
            }
            put(&mut body, "channel", channel);
            let v = c.call(
                "POST",
                &format!("/v1/sessions/{}/turns", seg(&key)),
                Some(body),
            )?;
            c.print(&v, |v| match v["event"]["sequence"].as_i64() {
                Some(s) => format!("turn {} recorded; event #{s}", v["turn"]["index"]),
                None => format!("turn {} recorded", v["turn"]["index"]),
            });
        }
        Command::Drain { key, peek, follow } => {
            let path = format!(
                "/v1/sessions/{}/{}",
                seg(&key),
                if peek { "pending" } else { "drain" }
            );
            let method = if peek { "GET" } else { "POST" };
            let once = || -> client::CliResult<()> {
                let v = c.call(method, &path, None)?;
                c.print(&v, client::human_drain);
                Ok(())
            };
            once()?;
            if follow {
                c.follow_wakes(&key, once)?;
            }
        }
        Command::Watch {
            target,
            target_agent,
        } => {
            let watcher = c
                .session
                .clone()
                .ok_or_else(|| Failure::Usage("watch needs --session naming the watcher".into()))?;
            let mut body = json!({"target": target});
            put(&mut body, "targetAgentId", target_agent);
            let v = c.call(
                "POST",
                &format!("/v1/sessions/{}/watches", seg(&watcher)),
                Some(body),
            )?;
            c.print(&v, |v| {
                format!(
                    "watching {} from version {}",
                    v["cursor"]["targetSessionKey"].as_str().unwrap_or(""),
                    v["cursor"]["lastSeen"]
                )
            });
        }
        Command::Unwatch {
            target,
            target_agent,
        } => {
            let mut args = json!({"sessionKey": target});
            put(&mut args, "agentId", target_agent);
            let v = c.tool("sessions_unwatch", args)?;
            c.print(&v, |v| {
                if v["unwatched"] == true {
                    "unwatched".into()
                } else {
                    "was not watching".into()
                }
            });
        }
        Command::History {
            key,
            limit,
            offset,
            include_tools,
        } => {
            let mut args = json!({"sessionKey": key});
            put(&mut args, "limit", limit);
            put(&mut args, "offset", offset);
            if include_tools {
                args["includeTools"] = true.into();
            }
            let v = c.tool("sessions_history", args)?;
            c.print(&v, |v| {
                v["messages"].as_array().map_or(String::new(), |m| {
                    m.iter()
                        .map(|x| {
                            format!(
                                "[{}] {}: {}",
                                x["index"],
                                x["role"].as_str().unwrap_or(""),
                                x["text"].as_str().unwrap_or("")
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
            });
        }
        Command::Adopt {
            thread,
            catalog,
            host,
            into_agent,
        } => {
            let mut body = json!({"catalogId": catalog, "hostId": host, "threadId": thread});
            put(&mut body, "agentId", into_agent);
            let v = c.call("POST", "/v1/catalog/continue", Some(body))?;
            c.print(&v, |v| {
                format!(
                    "{} {} ({})",
                    if v["created"] == true {
                        "adopted as"
                    } else {
                        "already adopted as"
                    },
                    v["sessionKey"].as_str().unwrap_or(""),
                    if v["linked"] == true {
                        "linked: new upstream prompts are watched"
                    } else {
                        "not linked"
                    }
                )
            });
        }
        Command::Catalog {
            catalog,
            host,
            limit,
        } => {
            let mut path = format!(
                "/v1/catalog?catalogId={}&hostId={}",
                seg(&catalog),
                seg(&host)
            );
            if let Some(l) = limit {
                path.push_str(&format!("&limit={l}"));
            }
            let v = c.call("GET", &path, None)?;
            c.print(&v, |v| {
                v["items"].as_array().map_or(String::new(), |items| {
                    items
                        .iter()
                        .map(|i| {
                            format!(
                                "{}  {}  {}{}",
                                i["threadId"].as_str().unwrap_or(""),
                                i["title"].as_str().unwrap_or("(untitled)"),
                                i["cwd"].as_str().unwrap_or(""),
                                i["adoptedSessionKey"]
                                    .as_str()
                                    .map(|k| format!("  [adopted as {k}]"))
                                    .unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
            });
        }
        Command::Serve(_)
        | Command::Demo(_)
        | Command::Bench(_)
        | Command::BenchHttp(_)
        | Command::Mcp(_)
        | Command::Hook(_)
        | Command::Node { .. } => {}
    }
    Ok(())
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A Claude Code hook that exits non-zero blocks the user's prompt: even a flag error
        // of `aware hook` is one warning line and exit 0 (03 §8).
        Err(e) if subcommand_name().as_deref() == Some("hook") => {
            eprintln!(
                "aware hook: warning: {}",
                e.to_string().lines().next().unwrap_or("bad arguments")
            );
            std::process::exit(0);
        }
        Err(e) => e.exit(),
    };
    let result: Result<()> = match cli.command {
        Command::Serve(args) => serve::run(args, cli.token),
        Command::Node {
            command: NodeCommand::Serve(args),
        } => node::run(args),
        Command::Mcp(args) => mcp::run(
            args,
            mcp::Gateway {
                url: cli.url,
                token: cli.token,
                session: cli.session,
                agent: cli.agent,
            },
        ),
        Command::Hook(args) => {
            hook::run(
                args,
                mcp::Gateway {
                    url: cli.url,
                    token: cli.token,
                    session: cli.session,
                    agent: cli.agent,
                },
            );
            Ok(())
        }
        Command::Demo(args) => {
            init_quiet_logs();
            demo::run(args)
        }
        Command::Bench(args) => {
            init_quiet_logs();
            bench::run(args)
        }
        Command::BenchHttp(args) => {
            init_quiet_logs();
            bench_http::run(args)
        }
        cmd => {
            let c = Client {
                url: cli.url,
                token: cli.token,
                session: cli.session,
                agent: cli.agent,
                json: cli.json,
            };
            if let Err(f) = client_command(&c, cmd) {
                f.exit();
            }
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
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
