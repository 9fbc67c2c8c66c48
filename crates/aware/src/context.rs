//! Connection settings of the client commands: flags, then environment variables, then the saved
//! client context (`$XDG_CONFIG_HOME/aware/client.toml`), then defaults.
//!
//! The flags are declared without clap's `env` so that a flag given before the subcommand
//! (`aware --session K status`) and one given after it both beat the environment.

use crate::failure::Failure;
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_URL: &str = "http://127.0.0.1:7420";
/// Request timeout when neither `--timeout`, `AWARE_TIMEOUT` nor the client file sets one.
pub const DEFAULT_TIMEOUT_SECS: f64 = 30.0;

/// Where the gateway is and who calls it.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Conn {
    /// Gateway URL [env: AWARE_URL] [default: http://127.0.0.1:7420].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Bearer token [env: AWARE_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// The calling session, the caller identity [env: AWARE_SESSION].
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
    /// Agent of a bare --session key.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Also trust the CA certificates of this PEM file for an https:// gateway [env:
    /// AWARE_CA_FILE].
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

impl Conn {
    /// `self` (given after the subcommand) wins over `outer` (given before it).
    pub fn or(self, outer: &Conn) -> Conn {
        Conn {
            url: self.url.or_else(|| outer.url.clone()),
            token: self.token.or_else(|| outer.token.clone()),
            session: self.session.or_else(|| outer.session.clone()),
            agent: self.agent.or_else(|| outer.agent.clone()),
            ca_file: self.ca_file.or_else(|| outer.ca_file.clone()),
        }
    }
}

/// The saved client context (`client.toml`).
#[derive(serde::Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    pub url: Option<String>,
    pub token_file: Option<PathBuf>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub timeout_secs: Option<f64>,
    pub ca_file: Option<PathBuf>,
}

/// `$XDG_CONFIG_HOME/aware` (else `~/.config/aware`); never relative ([`crate::home`]).
pub fn config_dir() -> Result<PathBuf, Failure> {
    crate::home::xdg_dir("XDG_CONFIG_HOME", ".config")
        .map_err(|e| Failure::Usage(format!("cannot find the client context: {e}")))
}

pub fn client_file_path() -> Result<PathBuf, Failure> {
    Ok(config_dir()?.join("client.toml"))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Reads `client.toml` when it exists; a broken file is a usage error naming it.
pub fn read_client_file() -> Result<ClientFile, Failure> {
    let path = client_file_path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text)
            .map_err(|e| Failure::Usage(format!("{}: {}", path.display(), e.message()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClientFile::default()),
        Err(e) => Err(Failure::Usage(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// The settings a client command runs with.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub timeout: Duration,
    /// A CA file to trust for an https:// gateway (`--ca-file`, `AWARE_CA_FILE`, `ca_file`).
    pub ca_file: Option<PathBuf>,
    /// The session came from client.toml, not from --session or AWARE_SESSION: reads act as
    /// the operator then (`commands::read_client`).
    pub session_from_file: bool,
}

/// Flags > environment > client file > defaults.
pub fn resolve(flags: Conn, timeout_flag: Option<f64>) -> Result<Resolved, Failure> {
    let file = read_client_file()?;
    let url = flags
        .url
        .or_else(|| env("AWARE_URL"))
        .or(file.url)
        .unwrap_or_else(|| DEFAULT_URL.to_string());
    // A URL without `http://` or `https://` is a usage error, not a connection failure.
    aware_client::check_url(&url)?;
    let token = match flags.token.or_else(|| env("AWARE_TOKEN")) {
        Some(t) => Some(t),
        None => match env("AWARE_TOKEN_FILE")
            .map(PathBuf::from)
            .or(file.token_file)
        {
            Some(p) => Some(read_token_file(&p)?),
            None => None,
        },
    };
    let timeout_secs = match timeout_flag {
        Some(t) => t,
        None => match env("AWARE_TIMEOUT") {
            Some(t) => t.trim().parse::<f64>().map_err(|_| {
                Failure::Usage(format!(
                    "AWARE_TIMEOUT must be a number of seconds (got {t:?})"
                ))
            })?,
            None => file.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS),
        },
    };
    let given = flags
        .session
        .or_else(|| env("AWARE_SESSION"))
        .filter(|s| !s.trim().is_empty());
    let session_from_file = given.is_none() && file.session.is_some();
    Ok(Resolved {
        url,
        token: token.filter(|t| !t.is_empty()),
        session_from_file,
        session: given.or(file.session).filter(|s| !s.trim().is_empty()),
        agent: flags.agent.or(file.agent),
        timeout: timeout_duration(timeout_secs)?,
        ca_file: flags
            .ca_file
            .or_else(|| env("AWARE_CA_FILE").map(PathBuf::from))
            .or(file.ca_file),
    })
}

/// A positive, finite number of seconds.
pub fn timeout_duration(secs: f64) -> Result<Duration, Failure> {
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 {
        return Err(Failure::Usage(format!(
            "the request timeout must be a number of seconds between 0 and 86400 (got {secs})"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The first line of a token file, trimmed.
pub fn read_token_file(p: &std::path::Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| Failure::Usage(format!("cannot read the token file {}: {e}", p.display())))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(Failure::Usage(format!(
            "the token file {} is empty",
            p.display()
        )));
    }
    Ok(token)
}
