//! `aware node serve`: a paired node exposing this machine's Claude Code transcripts and Codex
//! CLI rollouts (04 §2.2, docs/upstream.md §4).

use anyhow::{Context, Result};
use aware_gateway::{run_node, NodeServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct NodeServeArgs {
    /// Listen address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7421")]
    bind: String,
    /// Bearer token the gateway must send (falls back to AWARE_TOKEN). Off loopback a token of
    /// at least 16 bytes is required.
    #[arg(long, env = "AWARE_NODE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the bearer token from this file (one trailing newline is dropped), so it does not
    /// show in `ps`.
    #[arg(
        long,
        env = "AWARE_NODE_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "token"
    )]
    token_file: Option<PathBuf>,
    /// A Host name the node also answers to, besides the loopback names and the bind address
    /// (e.g. laptop.lan:7421, as the gateway's [[nodes]] url names it); repeatable. Like the
    /// gateway's [http] allowed_hosts: other names are refused (421), against DNS rebinding.
    #[arg(long, value_name = "HOST[:PORT]")]
    allowed_host: Vec<String>,
    /// Seconds a client has to send a request head (as the gateway's [http] header_timeout_secs).
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Seconds an idle keep-alive connection is kept, and a stalled write waits (as the
    /// gateway's [http] idle_timeout_secs).
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_secs: u64,
    /// Connections served at once; further ones wait in the kernel's backlog.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    max_connections: u64,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key). Off loopback a token needs
    /// TLS or --allow-plaintext-tokens.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Allow the token on a non-loopback bind without TLS: only on a trusted network or behind
    /// a TLS-terminating proxy.
    #[arg(long)]
    allow_plaintext_tokens: bool,
    /// Claude Code projects directory (default ~/.claude/projects).
    #[arg(long)]
    claude_root: Option<PathBuf>,
    /// Codex home whose sessions/ the node serves (default $CODEX_HOME, else ~/.codex).
    #[arg(long, conflicts_with = "no_codex")]
    codex_home: Option<PathBuf>,
    /// Serve no Codex catalog (its routes answer 404 not_found).
    #[arg(long)]
    no_codex: bool,
    /// Node id reported by /health (default: the host name, else "node").
    #[arg(long)]
    node_id: Option<String>,
    /// Write the bound port to this file once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
}

/// Exit status 2 with a message: configuration or usage errors.
fn config_error(msg: impl std::fmt::Display) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2);
}

/// The host name, from the kernel or the environment.
fn host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

pub fn run(args: NodeServeArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let bind: SocketAddr = args.bind.parse().unwrap_or_else(|_| {
        config_error(format!(
            "--bind {:?} must be an address such as 127.0.0.1:7421",
            args.bind
        ))
    });
    // An empty token is no token, whichever way it came.
    let token = match &args.token_file {
        Some(path) => Some(
            aware_gateway::config::read_token_file("--token-file", path)
                .unwrap_or_else(|e| config_error(e)),
        ),
        None => args.token.or_else(|| std::env::var("AWARE_TOKEN").ok()),
    }
    .filter(|t| !t.is_empty());
    let allowed_hosts = args
        .allowed_host
        .iter()
        .map(|h| {
            aware_gateway::config::normalize_allowed_host(h)
                .unwrap_or_else(|e| config_error(format!("--allowed-host: {e}")))
        })
        .collect();
    let http = aware_gateway::config::HttpSettings {
        allowed_hosts,
        header_timeout_secs: args.header_timeout_secs,
        idle_timeout_secs: args.idle_timeout_secs,
        max_connections: usize::try_from(args.max_connections).unwrap_or(1024),
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(c), Some(k)) => Some(
                aware_gateway::config::ServerTls::load("--tls-cert", c, "--tls-key", k)
                    .unwrap_or_else(|e| config_error(e)),
            ),
            _ => None,
        },
        allow_plaintext_tokens: args.allow_plaintext_tokens,
        ..Default::default()
    };
    let cfg = NodeServerConfig {
        bind,
        http,
        node_id: args
            .node_id
            .or_else(host_name)
            .unwrap_or_else(|| "node".into()),
        token,
        claude_root: args
            .claude_root
            .unwrap_or_else(aware_gateway::config::default_claude_root),
        codex_home: (!args.no_codex).then(|| {
            args.codex_home.unwrap_or_else(|| {
                aware_gateway::config::default_codex_home(&|k| std::env::var(k).ok())
            })
        }),
    };
    // The gateway's rules (03 §5.2): off loopback a token is required and must not be weak.
    if let Err(msg) = cfg.check_bind_policy() {
        config_error(msg);
    }
    crate::serve::raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .with_context(|| format!("bind {bind}"))?;
        let addr = listener.local_addr()?;
        tracing::info!(event = "listening", addr = %addr, node_id = %cfg.node_id, root = %cfg.claude_root.display(), codex_home = ?cfg.codex_home, "listening on {addr}");
        if let Some(p) = &args.port_file {
            std::fs::write(p, addr.port().to_string())
                .with_context(|| format!("write {}", p.display()))?;
        }
        run_node(listener, cfg, crate::signals::shutdown_signal()).await?;
        tracing::info!(event = "stopped", "node stopped");
        Ok(())
    })
}
