//! The `aware` binary. For now: `demo` (the engine, narrated) and `bench` (benchmarks against a
//! raw SQLite floor). The gateway (`serve`) and the client commands come with the gateway issue.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod demo;

#[derive(Parser, Debug)]
#[command(
    name = "aware",
    version,
    about = "Session hub with session state awareness for multi-agent systems"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Walk through spawn, a human stepping in, one notice, drain and reconciliation.
    Demo(demo::DemoArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AWARE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result: Result<()> = match cli.command {
        Command::Demo(args) => demo::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
