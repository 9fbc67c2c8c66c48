//! `[http]`: the gateway's edge settings (origins, Host names, timeouts, connection and stream
//! limits), their defaults and their checks.

use super::error::{bad, ConfigError};
use super::file::FileHttp;
use std::path::{Path, PathBuf};

/// `[http]`: the edge of the gateway (browser origins, Host names, connection limits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Origins (`scheme://host[:port]`, lower case) answered with CORS headers.
    pub allowed_origins: Vec<String>,
    /// Extra `Host` names (lower case, optionally with `:port`) besides the loopback names.
    pub allowed_hosts: Vec<String>,
    pub header_timeout_secs: u64,
    pub idle_timeout_secs: u64,
    pub body_timeout_secs: u64,
    pub max_connections: usize,
    pub shutdown_grace_secs: u64,
    /// Long-held requests (`GET /v1/wakes`, `GET /v1/console/events`, waiting `sessions_send`
    /// calls) open at once; `None` derives it from `max_connections`
    /// ([`HttpSettings::stream_cap`]).
    pub max_streams: Option<usize>,
    /// Streams one agent token may hold at once (the operator is bounded by `max_streams`).
    pub max_streams_per_agent: usize,
    /// `[http] tls_cert` and `tls_key` (`--tls-cert`, `--tls-key`): serve HTTPS.
    pub tls: Option<ServerTls>,
    /// `[http] allow_plaintext_tokens` (`--allow-plaintext-tokens`): a token off loopback
    /// without TLS, for a trusted network or behind a TLS-terminating proxy.
    pub allow_plaintext_tokens: bool,
}

/// The certificate and key the listener serves TLS with, read and checked at start-up.
#[derive(Clone)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
}

impl ServerTls {
    /// Reads the PEM certificate chain and key; `cert_what` and `key_what` name the settings
    /// in the error (`http.tls_cert`, `--tls-key`, ...).
    pub fn load(
        cert_what: &str,
        cert: &Path,
        key_what: &str,
        key: &Path,
    ) -> Result<ServerTls, ConfigError> {
        let config = aware_tls::server_config(cert_what, cert, key_what, key).map_err(bad)?;
        Ok(ServerTls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            acceptor: tokio_rustls::TlsAcceptor::from(config),
        })
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &Self) -> bool {
        self.cert == other.cert && self.key == other.key
    }
}

impl Eq for ServerTls {}

/// `[http] tls_cert`/`tls_key`, each from its flag or the file: both or neither.
pub(super) fn resolve_tls(
    cert: Option<(&str, PathBuf)>,
    key: Option<(&str, PathBuf)>,
) -> Result<Option<ServerTls>, ConfigError> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some((cw, c)), Some((kw, k))) => ServerTls::load(cw, &c, kw, &k).map(Some),
        (Some((w, _)), None) => Err(bad(format!(
            "{w} is set but no key: set http.tls_key (or --tls-key) too"
        ))),
        (None, Some((w, _))) => Err(bad(format!(
            "{w} is set but no certificate: set http.tls_cert (or --tls-cert) too"
        ))),
    }
}

impl HttpSettings {
    /// The most `max_streams` may be: all connections but an eighth (at least one), which stay
    /// free for `/health` and the short routes however many long-held requests are open.
    pub fn max_held_allowed(max_connections: usize) -> usize {
        max_connections - (max_connections / 8).max(1).min(max_connections)
    }

    /// How many long-held requests (streams and `sessions_send` calls waiting for a reply) may
    /// be open at once: `max_streams`, else three quarters of `max_connections`. Always well
    /// below `max_connections`, so requests that hold their connection cannot take the slots
    /// `/health` and every other route need.
    pub fn stream_cap(&self) -> usize {
        self.max_streams
            .unwrap_or_else(|| self.max_connections - (self.max_connections / 4).max(1))
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout_secs: 10,
            idle_timeout_secs: 60,
            body_timeout_secs: 30,
            max_connections: 1024,
            shutdown_grace_secs: 5,
            max_streams: None,
            max_streams_per_agent: 64,
            tls: None,
            allow_plaintext_tokens: false,
        }
    }
}

/// An extra `Host` name as the edge compares it (lower case), or why it cannot be one. Shared
/// by `[http] allowed_hosts` and `aware node serve --allowed-host`.
pub fn normalize_allowed_host(host: &str) -> Result<String, String> {
    let lower = host.to_ascii_lowercase();
    if lower.is_empty() || lower.contains(['/', ' ', '@']) {
        return Err(format!(
            "{host:?} must be a host name or address, optionally with :port"
        ));
    }
    Ok(lower)
}

pub(super) fn apply_http(d: &mut HttpSettings, h: &FileHttp) -> Result<(), ConfigError> {
    for o in h.allowed_origins.clone().unwrap_or_default() {
        let lower = o.to_ascii_lowercase();
        let rest = lower
            .strip_prefix("http://")
            .or_else(|| lower.strip_prefix("https://"));
        match rest {
            Some(r) if !r.is_empty() && !r.contains('/') => d.allowed_origins.push(lower),
            _ => {
                return Err(bad(format!(
                    "http.allowed_origins: {o:?} must be an origin like http://localhost:3000 (scheme, host, optional port; no path)"
                )))
            }
        }
    }
    for host in h.allowed_hosts.clone().unwrap_or_default() {
        let lower =
            normalize_allowed_host(&host).map_err(|e| bad(format!("http.allowed_hosts: {e}")))?;
        d.allowed_hosts.push(lower);
    }
    let secs = |name: &str, v: Option<u64>, dflt: u64| -> Result<u64, ConfigError> {
        match v {
            Some(0) => Err(bad(format!("http.{name} must be at least 1"))),
            Some(n) => Ok(n),
            None => Ok(dflt),
        }
    };
    d.header_timeout_secs = secs(
        "header_timeout_secs",
        h.header_timeout_secs,
        d.header_timeout_secs,
    )?;
    d.idle_timeout_secs = secs(
        "idle_timeout_secs",
        h.idle_timeout_secs,
        d.idle_timeout_secs,
    )?;
    d.body_timeout_secs = secs(
        "body_timeout_secs",
        h.body_timeout_secs,
        d.body_timeout_secs,
    )?;
    d.shutdown_grace_secs = secs(
        "shutdown_grace_secs",
        h.shutdown_grace_secs,
        d.shutdown_grace_secs,
    )?;
    match h.max_connections {
        Some(0) => return Err(bad("http.max_connections must be at least 1")),
        Some(n) => d.max_connections = n,
        None => {}
    }
    match h.max_streams {
        Some(n) if n > HttpSettings::max_held_allowed(d.max_connections) => {
            return Err(bad(format!(
                "http.max_streams ({n}) must be at most {} with http.max_connections = {}: long-held requests (streams and waiting sends) may take at most seven eighths of the connections, so the rest stays free for /health and every other route",
                HttpSettings::max_held_allowed(d.max_connections),
                d.max_connections
            )))
        }
        Some(n) => d.max_streams = Some(n),
        None => {}
    }
    match h.max_streams_per_agent {
        Some(0) => return Err(bad("http.max_streams_per_agent must be at least 1")),
        Some(n) => d.max_streams_per_agent = n,
        None => {}
    }
    Ok(())
}
