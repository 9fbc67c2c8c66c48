//! How a CLI command failed, with its exit status (docs/exit-statuses.md). Its own module so
//! the settings resolver (`context`) and the client commands (`client`) both use it without
//! importing each other.

use aware_client::ClientError;

/// How a command failed, with its exit status.
pub enum Failure {
    Server(String),
    Unreachable(String),
    Usage(String),
}

impl Failure {
    /// The text printed after `error: `.
    pub fn message(&self) -> &str {
        match self {
            Failure::Server(m) | Failure::Unreachable(m) | Failure::Usage(m) => m,
        }
    }

    pub fn exit(self) -> ! {
        let (status, m) = match self {
            Failure::Server(m) => (1, m),
            Failure::Unreachable(m) => (3, m),
            Failure::Usage(m) => (2, m),
        };
        let label = crate::style::paint(
            crate::style::Stream::Stderr,
            crate::style::Colour::Red,
            "error:",
        );
        eprintln!("{label} {m}");
        std::process::exit(status)
    }
}

/// The CLI's wording of a failed request: the client's text plus the hint a new user needs.
/// The exit status is the client's (docs/exit-statuses.md).
impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        match &e {
            ClientError::BadUrl { .. } | ClientError::CaFile { .. } => {
                Failure::Usage(e.to_string())
            }
            ClientError::Status { .. } => Failure::Server(format!("{e}{}", hint(e.code()))),
            ClientError::Decode { .. } => Failure::Server(e.to_string()),
            ClientError::Timeout { .. } => Failure::Unreachable(format!(
                "{e}; raise --timeout or AWARE_TIMEOUT, or check that `aware serve` is healthy"
            )),
            ClientError::Unreachable { .. } | ClientError::Transport { .. } => {
                Failure::Unreachable(format!(
                    "{e} (is `aware serve` running? set --url or AWARE_URL)"
                ))
            }
        }
    }
}

pub type CliResult<T> = Result<T, Failure>;

/// The hint for the error codes a new user meets first.
fn hint(code: &str) -> &'static str {
    match code {
        "unauthorized" => " (set --token or AWARE_TOKEN to the gateway's token)",
        "session_not_found" => {
            " (create it with `aware create KEY`, or `aware init claude-code` in a Claude Code project; `aware list` shows the sessions)"
        }
        "payload_too_large" => " (the gateway accepts bodies up to 1 MiB and texts up to 256 KiB)",
        _ => "",
    }
}
