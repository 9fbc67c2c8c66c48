//! `aware serve`: the gateway on the embedded SQLite store.

use anyhow::{Context, Result};
use aware_gateway::{check_bind_policy, GatewayConfig, Overrides};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Data directory (default $XDG_DATA_HOME/aware); created when missing.
    #[arg(long, env = "AWARE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Configuration file (default <data-dir>/config.toml when it exists).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Listen address (default 127.0.0.1:7420; port 0 picks a free port).
    #[arg(long, env = "AWARE_BIND")]
    bind: Option<String>,
    /// Write the bound port to this file once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Read the bearer token from this file (one trailing newline is dropped), so it does not
    /// show in `ps`.
    #[arg(long, env = "AWARE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Durability: full (default) or normal.
    #[arg(long)]
    durability: Option<String>,
    /// Test mode: a manual engine clock and the admin routes.
    #[arg(long)]
    test_clock: bool,
    /// Start of the test clock in epoch ms (default: now).
    #[arg(long)]
    test_clock_start: Option<i64>,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
    /// Log level filter (e.g. info, warn, aware_engine=debug).
    #[arg(long, default_value = "info")]
    log_level: String,
}

/// Exit status 2 with a message: configuration or usage errors.
fn config_error(msg: impl std::fmt::Display) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2);
}

pub fn run(args: ServeArgs, token: Option<String>) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level).unwrap_or_else(|_| {
        config_error(format!(
            "--log-level {:?} is not a valid filter",
            args.log_level
        ))
    });
    match args.log_format.as_str() {
        "text" => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .init(),
        "json" => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init(),
        other => config_error(format!("--log-format must be text or json (got {other:?})")),
    }
    let overrides = Overrides {
        data_dir: args.data_dir,
        config: args.config,
        bind: args.bind,
        token,
        token_file: args.token_file,
        durability: args.durability,
        test_clock: args.test_clock,
        test_clock_start: args.test_clock_start,
    };
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let config = GatewayConfig::load(&overrides, &env).unwrap_or_else(|e| config_error(e));
    if let Err(msg) = check_bind_policy(&config) {
        config_error(msg);
    }
    aware_gateway::create_private_dir(&config.data_dir)
        .with_context(|| format!("create data directory {}", config.data_dir.display()))?;
    raise_fd_limit();
    let grace = std::time::Duration::from_secs(config.http.shutdown_grace_secs);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let result = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .with_context(|| format!("bind {}", config.bind))?;
        let addr = listener.local_addr()?;
        tracing::info!(event = "listening", addr = %addr, durability = config.durability.as_str(), "listening on {addr}");
        if let Some(p) = &args.port_file {
            std::fs::write(p, addr.port().to_string()).with_context(|| format!("write {}", p.display()))?;
        }
        match aware_gateway::run(listener, config, shutdown_signal()).await {
            Err(aware_gateway::RunError::Fatal(msg)) => config_error(msg),
            other => other?,
        }
        tracing::info!(event = "stopped", "gateway stopped");
        Ok(())
    });
    // A blocking engine call stuck in outside I/O must not keep the process alive forever.
    runtime.shutdown_timeout(grace);
    result
}

/// Raises the soft limit on open descriptors to the hard limit, so the connection cap (not the
/// descriptor limit) is what bounds connections.
fn raise_fd_limit() {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` into the valid, exclusively borrowed `lim` and
        // keeps no pointer to it; setrlimit only reads it.
        let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        if got != 0 || lim.rlim_cur >= lim.rlim_max {
            return;
        }
        let before = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: as above; `lim` is a fully initialised rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
            tracing::debug!(
                event = "fd_limit_raised",
                from = before,
                to = lim.rlim_cur,
                "raised the open-file limit"
            );
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
