//! The `aware-bench` binary: the benchmarks, kept out of the shipped `aware` binary so it links
//! neither them nor their raw-SQLite floors. The gateway processes they drive (`serve`, `hook`)
//! are the real `aware` binary, found next to this one (or at `AWARE_BIN`).

use anyhow::Result;
use aware_bench::{engine, http, scale, soak, stall};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "aware-bench",
    version,
    about = "Benchmarks of aware, each workload printed next to a floor measured in the same process"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Engine benchmarks, each printed next to a raw rusqlite floor run in the same process.
    Engine(engine::BenchArgs),
    /// Gateway benchmarks over loopback HTTP, against the engine in-process.
    Http(http::HttpBenchArgs),
    /// GET latency and thread count under a hanging webhook, a hanging node and idle sockets.
    Stall(stall::StallBenchArgs),
    /// The real `aware serve` under a long mixed load: notices checked against a model, RSS,
    /// fds, threads, store size and per-route latency sampled, slopes printed; fails on a
    /// violation, a 5xx, an error or fd/thread growth.
    Soak(soak::SoakArgs),
    /// How cost grows with the work: each workload at 1×, 10× and 100× on SQLite and
    /// PostgreSQL, its growth per 10× next to the target, an SVG chart of the curves.
    Scale(scale::ScaleArgs),
}

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AWARE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result: Result<()> = match cli.command {
        Command::Engine(args) => {
            let json = args.json;
            engine::run(args, json)
        }
        Command::Http(args) => {
            let json = args.json;
            http::run(args, json)
        }
        Command::Stall(args) => stall::run(args),
        Command::Soak(args) => soak::run(args),
        Command::Scale(args) => scale::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
