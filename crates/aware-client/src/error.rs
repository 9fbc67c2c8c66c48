//! How a request failed, typed once for every caller, with its exit status.

/// A failed request. `Display` is the plain text (`<code>: <message>`, or what went wrong on the
/// wire); callers add their own hints and prefixes.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL does not start with `http://` or `https://`.
    #[error(
        "the gateway URL must start with http:// or https:// (got {url:?}), \
         e.g. --url http://127.0.0.1:7420"
    )]
    BadUrl { url: String },
    /// The CA file to trust (`--ca-file`, `AWARE_CA_FILE`) cannot be read or holds no
    /// certificate.
    #[error("{detail}")]
    CaFile { detail: String },
    /// The gateway answered with an error status.
    #[error("{}: {}", self.code(), self.message())]
    Status {
        status: u16,
        /// `error.code` of the answer, when it has one.
        code: Option<String>,
        /// `error.message` of the answer, when it has one.
        message: Option<String>,
        /// The answer as received (at most 64 KiB).
        body: String,
    },
    /// No connection: refused, no route, the name does not resolve.
    #[error("cannot reach the gateway at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// Connected (or connecting) but no answer within the request's bound.
    #[error("the gateway at {url} did not answer in time ({detail})")]
    Timeout { url: String, detail: String },
    /// Any other failure on the wire (a connection reset mid-answer, a malformed status line).
    #[error("the connection to the gateway at {url} failed: {detail}")]
    Transport { url: String, detail: String },
    /// An answer arrived but its body is not what was asked for (not JSON, cut off).
    #[error("internal: unreadable answer: {detail}")]
    Decode { detail: String },
}

impl ClientError {
    /// The exit status of docs/exit-statuses.md: 1 the gateway answered an error (or an answer
    /// that cannot be read), 2 a usage error, 3 the gateway is unreachable or did not answer in
    /// time.
    pub fn exit_status(&self) -> i32 {
        match self {
            ClientError::BadUrl { .. } | ClientError::CaFile { .. } => 2,
            ClientError::Status { .. } | ClientError::Decode { .. } => 1,
            ClientError::Unreachable { .. }
            | ClientError::Timeout { .. }
            | ClientError::Transport { .. } => 3,
        }
    }

    /// The error code of an error answer (`internal` when it carried none); for the other
    /// variants a code naming the failure.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Status { code, .. } => code.as_deref().unwrap_or("internal"),
            ClientError::BadUrl { .. } => "invalid_url",
            ClientError::CaFile { .. } => "invalid_ca_file",
            ClientError::Unreachable { .. }
            | ClientError::Timeout { .. }
            | ClientError::Transport { .. } => "gateway_unavailable",
            ClientError::Decode { .. } => "internal",
        }
    }

    /// The message of an error answer (`HTTP status N` when it carried none), else the detail.
    pub fn message(&self) -> String {
        match self {
            ClientError::Status {
                status, message, ..
            } => message
                .clone()
                .unwrap_or_else(|| format!("HTTP status {status}")),
            ClientError::Unreachable { detail, .. }
            | ClientError::Timeout { detail, .. }
            | ClientError::Transport { detail, .. }
            | ClientError::Decode { detail } => detail.clone(),
            ClientError::BadUrl { .. } | ClientError::CaFile { .. } => self.to_string(),
        }
    }

    /// The HTTP status of an error answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when no answer came at all (exit status 3).
    pub fn is_unavailable(&self) -> bool {
        self.exit_status() == 3
    }

    pub(crate) fn from_transport(url: &str, t: &ureq::Transport) -> ClientError {
        let detail = transport_detail(t);
        let url = url.to_string();
        let io_timeout = std::error::Error::source(t)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|e| {
                matches!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                )
            });
        // ureq reports its own deadline as an I/O error whose text says so.
        if io_timeout || detail.contains("timed out") || detail.contains("Timeout") {
            return ClientError::Timeout { url, detail };
        }
        match t.kind() {
            ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => {
                ClientError::Unreachable { url, detail }
            }
            _ => ClientError::Transport { url, detail },
        }
    }
}

/// What went wrong on the wire, said once (ureq's `Display` repeats the error kind:
/// "Network Error: Network Error: …"): "Connect error: Connection refused (os error 111)".
fn transport_detail(e: &ureq::Transport) -> String {
    let source = std::error::Error::source(e).map(|s| s.to_string());
    match (e.message(), source) {
        (Some(m), Some(s)) if !m.contains(&s) => format!("{m}: {s}"),
        (Some(m), _) => m.to_string(),
        (None, Some(s)) => s,
        (None, None) => e.kind().to_string(),
    }
}
