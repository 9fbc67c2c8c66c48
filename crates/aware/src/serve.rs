//! `aware serve`: the gateway on the embedded SQLite store or a PostgreSQL server.

use anyhow::{Context, Result};
use aware_gateway::{check_bind_policy, GatewayConfig, Overrides};
use std::path::PathBuf;

/// Durability of commits.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DurabilityArg {
    /// synchronous=FULL: survives power loss.
    Full,
    /// synchronous=NORMAL: survives process crashes only.
    Normal,
}

/// Format of the log lines on stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Data directory, created when missing [default: $XDG_DATA_HOME/aware].
    #[arg(long, env = "AWARE_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Configuration file [default: <data-dir>/config.toml, else $XDG_CONFIG_HOME/aware/config.toml, when it exists].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen address, e.g. 127.0.0.1:7420 or localhost:7420 (port 0 picks a free port) [default: 127.0.0.1:7420].
    #[arg(long, env = "AWARE_BIND", value_name = "ADDR")]
    bind: Option<String>,
    /// Bearer token every route but /health requires.
    #[arg(
        long,
        env = "AWARE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Write the bound port to this file once listening.
    #[arg(long, value_name = "FILE")]
    port_file: Option<PathBuf>,
    /// Read the bearer token from this file (one trailing newline is dropped), so it does not
    /// show in `ps`.
    #[arg(long, env = "AWARE_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PostgreSQL server to keep the state in instead of the embedded SQLite file, e.g.
    /// postgres://aware@db:5432/aware (password from [store] password_file or PGPASSWORD; the
    /// URL's own password is never logged).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key) [config: [http] tls_cert].
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert [config: [http] tls_key].
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Allow a token on a non-loopback bind without TLS: only on a trusted network or behind a
    /// TLS-terminating proxy (the token crosses the network in clear otherwise) [config: [http]
    /// allow_plaintext_tokens].
    #[arg(long)]
    allow_plaintext_tokens: bool,
    /// Durability of commits [default: full].
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// Test mode: a manual engine clock and the admin routes.
    #[arg(long)]
    test_clock: bool,
    /// Start of the test clock in epoch ms [default: now].
    #[arg(long, value_name = "MS")]
    test_clock_start: Option<i64>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log level filter: a level (error, warn, info, debug, trace, off) and/or target=level
    /// directives, comma-separated, e.g. info,aware_engine=debug. The PostgreSQL driver stays at
    /// info unless named (tokio_postgres=debug): its debug lines carry statement parameters,
    /// which hold message text.
    #[arg(long, default_value = "info", value_name = "FILTER", value_parser = parse_log_level)]
    log_level: String,
}

const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// `EnvFilter` takes any bare word as a target name, so `--log-level verbose` would silently log
/// nothing; only levels and `target=level` directives are accepted.
fn parse_log_level(s: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "expected a level ({}) or target=level directives separated by commas, e.g. info,aware_engine=debug",
            LEVELS.join(", ")
        )
    };
    if s.trim().is_empty() {
        return Err(bad());
    }
    for d in s.split(',') {
        let d = d.trim();
        let level = match d.split_once('=') {
            Some((target, level)) if !target.is_empty() => level,
            Some(_) => return Err(bad()),
            None => d,
        };
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(bad());
        }
    }
    tracing_subscriber::EnvFilter::try_new(s).map_err(|_| bad())?;
    Ok(s.to_string())
}

/// Exit status 2 with a message: configuration or usage errors.
fn config_error(msg: impl std::fmt::Display) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2);
}

/// A host name (`localhost:7420`) resolved to one address; IPv4 first, as `127.0.0.1` is what
/// users expect `localhost` to mean.
fn resolve_bind(b: &str) -> Result<String, String> {
    if b.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(b.to_string());
    }
    let addrs: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(b)
        .map_err(|e| {
            format!("--bind {b:?} is not an address like 127.0.0.1:7420 or localhost:7420 ({e})")
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.to_string())
        .ok_or_else(|| format!("--bind {b:?} resolves to no address"))
}

/// The filter the gateway logs with: the operator's, with the PostgreSQL driver capped at info
/// unless a directive names it. tokio-postgres logs every statement with its parameters at
/// debug (turn texts, goals), so a broad `debug` or `trace` would write message content into
/// the log, which no log line may carry (the privacy scan checks it on both stores).
fn log_filter(level: &str) -> String {
    if level
        .split(',')
        .any(|d| d.trim().starts_with("tokio_postgres"))
    {
        level.to_string()
    } else {
        format!("{level},tokio_postgres=info")
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    init_logging(&args.log_level, args.log_format);
    let (config, config_file, port_file) = load_config(args);
    raise_fd_limit();
    let grace = std::time::Duration::from_secs(config.http.shutdown_grace_secs);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let result = runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(config.bind).await {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => config_error(format!(
                "cannot listen on {}: the port is already in use (is another `aware serve` \
                 running? pick another with --bind, or port 0 for a free one)",
                config.bind
            )),
            Err(e) => return Err(anyhow::Error::new(e).context(format!("bind {}", config.bind))),
        };
        // Only once the port is ours: a serve that cannot start leaves no empty data folder.
        aware_gateway::create_private_dir(&config.data_dir)
            .with_context(|| format!("create data directory {}", config.data_dir.display()))?;
        let addr = listener.local_addr()?;
        let durability_text = log_starting(&config, config_file.as_deref());
        let scheme = if config.http.tls.is_some() { "https" } else { "http" };
        tracing::info!(event = "listening", addr = %addr, durability = durability_text, tls = config.http.tls.is_some(), "listening on {addr}; web console at {scheme}://{addr}/ui/");
        if let Some(p) = &port_file {
            std::fs::write(p, addr.port().to_string()).with_context(|| format!("write {}", p.display()))?;
        }
        match aware_gateway::run(listener, config, crate::signals::shutdown_signal()).await {
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

/// Installs the log subscriber: `level` (already accepted by clap's parser) in `format`.
fn init_logging(level: &str, format: LogFormat) {
    // parse_log_level has accepted it already.
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(level))
        .unwrap_or_else(|e| config_error(format!("--log-level: {e}")));
    match format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init(),
    }
}

/// The gateway's configuration from the flags, the environment and the config file (exits with
/// the configuration error status on a bad one), the config file used, and the port file.
fn load_config(
    args: ServeArgs,
) -> (
    GatewayConfig,
    Option<std::path::PathBuf>,
    Option<std::path::PathBuf>,
) {
    let port_file = args.port_file.clone();
    let bind = args
        .bind
        .as_deref()
        .map(|b| resolve_bind(b).unwrap_or_else(|e| config_error(e)));
    // The config file: --config, else <data-dir>/config.toml, else the user's
    // $XDG_CONFIG_HOME/aware/config.toml.
    let data_dir_hint = args
        .data_dir
        .clone()
        .unwrap_or_else(aware_gateway::config::default_data_dir);
    let config_file = args.config.clone().or_else(|| {
        // Without a home (HOME unset and none in the password database) only the data dir's.
        std::iter::once(data_dir_hint.join("config.toml"))
            .chain(
                crate::context::config_dir()
                    .ok()
                    .map(|d| d.join("config.toml")),
            )
            .find(|p| p.exists())
    });
    // A command line is readable by every local user (`ps`, /proc): a password there is
    // public. The config file's [store] url, AWARE_STORE_URL and password_file are not.
    if let Some(url) = args
        .store
        .as_deref()
        .filter(|u| aware_store_pg::url_has_password(u))
    {
        config_error(format!(
            "--store {} carries a password, which every local user can read in ps; put the \
             password in [store] password_file or PGPASSWORD, or the whole URL in [store] url or \
             AWARE_STORE_URL",
            aware_store_pg::redact_url(url)
        ));
    }
    let overrides = Overrides {
        data_dir: args.data_dir,
        config: config_file.clone(),
        bind,
        token: args.token,
        token_file: args.token_file,
        durability: args.durability.map(|d| match d {
            DurabilityArg::Full => "full".to_string(),
            DurabilityArg::Normal => "normal".to_string(),
        }),
        test_clock: args.test_clock,
        test_clock_start: args.test_clock_start,
        store_url: args.store,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        allow_plaintext_tokens: args.allow_plaintext_tokens,
    };
    // clap has already read AWARE_DATA_DIR, AWARE_BIND and AWARE_TOKEN into the flags, below a
    // flag given on the command line; the loader must not let them win over the flags again.
    let env = |name: &str| {
        if matches!(
            name,
            "AWARE_DATA_DIR" | "AWARE_BIND" | "AWARE_TOKEN" | "AWARE_TOKEN_FILE"
        ) {
            return None;
        }
        std::env::var(name).ok().filter(|v| !v.is_empty())
    };
    let config = GatewayConfig::load(&overrides, &env).unwrap_or_else(|e| config_error(e));
    if let Err(msg) = check_bind_policy(&config) {
        config_error(msg);
    }
    (config, config_file, port_file)
}

/// The start-up line: where the data, the config, the store and the Claude root are. Answers
/// the durability it names, for the listening line.
fn log_starting(config: &GatewayConfig, config_file: Option<&std::path::Path>) -> String {
    let config_text = config_file.map_or_else(
        || "none (defaults)".to_string(),
        |p| p.display().to_string(),
    );
    let claude_text = config
        .claude_root
        .as_ref()
        .map_or_else(|| "disabled".to_string(), |p| p.display().to_string());
    // The PostgreSQL location is rebuilt from the parsed URL and never has a password.
    let (store_text, durability_text) = match &config.postgres {
        Some(pg) => (pg.location(), "synchronous_commit=on"),
        None => (
            config.data_dir.join("state.db").display().to_string(),
            config.durability.as_str(),
        ),
    };
    tracing::info!(
        event = "starting",
        "data dir {}, config file {config_text}, store {store_text}, Claude root {claude_text}, durability {durability_text}",
        config.data_dir.display(),
    );
    durability_text.to_string()
}

/// Raises the soft limit on open descriptors to the hard limit, so the connection cap (not the
/// descriptor limit) is what bounds connections.
pub(crate) fn raise_fd_limit() {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let lim = getrlimit(Resource::Nofile);
        // `None` is "unlimited": raise a finite soft limit to the hard one, whatever it is.
        let raise = match (lim.current, lim.maximum) {
            (Some(cur), Some(max)) => cur < max,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if !raise {
            return;
        }
        let new = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, new).is_ok() {
            tracing::debug!(
                event = "fd_limit_raised",
                from = lim.current,
                to = lim.maximum,
                "raised the open-file limit"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_postgres_driver_stays_at_info_unless_named() {
        assert_eq!(log_filter("trace"), "trace,tokio_postgres=info");
        assert_eq!(
            log_filter("info,tokio_postgres=debug"),
            "info,tokio_postgres=debug"
        );
    }

    #[test]
    fn log_levels_are_levels_or_directives() {
        for ok in ["info", "WARN", "info,aware_engine=debug", "aware=trace"] {
            assert!(parse_log_level(ok).is_ok(), "{ok}");
        }
        for bad in ["verbose", "", "=debug", "info,aware=loud"] {
            assert!(parse_log_level(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bind_names_resolve() {
        assert_eq!(resolve_bind("127.0.0.1:7420").unwrap(), "127.0.0.1:7420");
        assert!(resolve_bind("localhost:7420").unwrap().ends_with(":7420"));
        assert!(resolve_bind("no port").is_err());
    }
}
