//! The one blocking HTTP client of the gateway API, shared by the CLI, the MCP server, the Claude
//! Code hook, the demo and the HTTP benchmarks.
//!
//! It owns what every caller must do the same way: the base URL (only `http://` and `https://`),
//! the bearer token, the caller headers (`X-Aware-Session`, `X-Aware-Agent`), one percent-encoding
//! of path segments ([`seg`]), a bound on every request, and one reading of an error answer
//! (`{"error": {"code", "message"}}`) into [`ClientError`], whose [`ClientError::exit_status`] is
//! the status of docs/exit-statuses.md. How an error is *shown* (hints, prefixes) stays with the
//! caller.
//!
//! Two pure parsers of what the binary reads on stdin live here too, so the fuzz targets can
//! call them: [`hook_input`] (`aware hook`) and [`mcp_stdin`] (`aware mcp`'s line framing).

mod error;
pub mod hook_input;
pub mod mcp_stdin;
pub mod sse;

pub use error::ClientError;

use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Bound of one request when the caller sets none (the CLI's documented default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest error answer read to find its code and message; the rest is left unread.
const MAX_ERROR_BODY: u64 = 64 * 1024;

pub use aware_core::path::seg;

/// Writes `text` and exactly one newline to stdout, for every program that prints what the
/// gateway answered (the CLI, the demo, the bench reports). A closed pipe (`aware list | head`)
/// ends the process quietly with status 0: the reader has what it wanted.
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let r = o
        .write_all(text.trim_end_matches('\n').as_bytes())
        .and_then(|_| o.write_all(b"\n"))
        .and_then(|_| o.flush());
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// A URL without `http://` or `https://` is a usage error, not a connection failure.
pub fn check_url(url: &str) -> Result<(), ClientError> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        Ok(())
    } else {
        Err(ClientError::BadUrl {
            url: url.to_string(),
        })
    }
}

/// A gateway and who calls it. Cloning shares the keep-alive connections; a client built with
/// [`Client::new`] has its own.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    session: Option<String>,
    agent: Option<String>,
    timeout: Duration,
    /// Trust for `https://` gateways: Mozilla's roots plus a CA file ([`Client::with_ca_file`]);
    /// `None` is ureq's default (Mozilla's roots).
    tls: Option<Arc<aware_tls::rustls::ClientConfig>>,
    http: ureq::Agent,
}

impl std::fmt::Debug for Client {
    // The token is left out so that a client never ends up in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("session", &self.session)
            .field("agent", &self.agent)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the gateway at `url` (`http://host:port`, a trailing `/` is ignored), without
    /// token or caller, bounded by [`DEFAULT_TIMEOUT`].
    pub fn new(url: &str) -> Result<Client, ClientError> {
        check_url(url)?;
        Ok(Client {
            base: url.trim_end_matches('/').to_string(),
            token: None,
            session: None,
            agent: None,
            timeout: DEFAULT_TIMEOUT,
            tls: None,
            http: no_redirects().build(),
        })
    }

    /// Also trusts the CA certificates of the PEM file `ca_file` for `https://` gateways (a
    /// gateway with a certificate of a private CA, or self-signed). A file that cannot be read
    /// or holds no certificate is [`ClientError::CaFile`].
    pub fn with_ca_file(mut self, ca_file: Option<&Path>) -> Result<Client, ClientError> {
        let Some(path) = ca_file else {
            return Ok(self);
        };
        let fail = |detail: String| ClientError::CaFile { detail };
        let mut roots = aware_tls::webpki_roots();
        aware_tls::add_file(&mut roots, "the CA file", path).map_err(fail)?;
        self.tls = Some(Arc::new(aware_tls::client_config(roots).map_err(fail)?));
        self.http = self.agent_builder().build();
        Ok(self)
    }

    fn agent_builder(&self) -> ureq::AgentBuilder {
        let b = no_redirects();
        match &self.tls {
            Some(t) => b.tls_config(t.clone()),
            None => b,
        }
    }

    /// The same client with connections of its own (a clone shares them): a request abandoned
    /// on a hanging peer must not leave its connection to the next one.
    pub fn fresh(&self) -> Client {
        Client {
            http: self.agent_builder().build(),
            ..self.clone()
        }
    }

    /// The bearer token; an empty one counts as none.
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// The calling session (`X-Aware-Session`) and the agent of a bare key (`X-Aware-Agent`,
    /// sent only with a session).
    pub fn with_caller(mut self, session: Option<String>, agent: Option<String>) -> Client {
        self.session = session;
        self.agent = agent;
        self
    }

    /// The bound of one request (connect, send and read together).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The base URL without its trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    pub fn agent(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The full URL of `path` (`/v1/...`, segments already encoded with [`seg`]).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request as the configured caller, bounded by the client's timeout.
    pub fn request(&self, method: &str, path: &str) -> Request<'_> {
        Request {
            client: self,
            method: method.to_string(),
            path: path.to_string(),
            timeout: self.timeout,
            caller: Caller::Configured,
        }
    }

    /// `GET path` and its JSON answer.
    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.request("GET", path).json(None)
    }

    /// `POST path` with a JSON body and its JSON answer.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.request("POST", path).json(Some(body))
    }
}

/// Who a request is sent as.
#[derive(Debug, Clone)]
enum Caller {
    /// The client's session and agent, when it has them.
    Configured,
    /// No caller headers: an operator request.
    Operator,
    /// This session key, with no agent header.
    Session(String),
}

/// One request being built; nothing is sent before [`Request::send`], [`Request::send_any`],
/// [`Request::json`] or [`Request::stream`].
#[must_use]
pub struct Request<'a> {
    client: &'a Client,
    method: String,
    path: String,
    timeout: Duration,
    caller: Caller,
}

impl Request<'_> {
    /// Another bound for this request (e.g. a `sessions_send` waiting for its reply).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends no caller headers (operator requests: creating a session, the hook's writes).
    pub fn operator(mut self) -> Self {
        self.caller = Caller::Operator;
        self
    }

    /// Sends `session` as the caller instead of the client's own.
    pub fn as_session(mut self, session: &str) -> Self {
        self.caller = Caller::Session(session.to_string());
        self
    }

    fn build(&self, agent: &ureq::Agent) -> ureq::Request {
        let c = self.client;
        let mut r = agent.request(&self.method, &c.url(&self.path));
        if let Some(t) = &c.token {
            r = r.set("Authorization", &format!("Bearer {t}"));
        }
        match &self.caller {
            Caller::Operator => {}
            Caller::Session(s) => r = r.set("X-Aware-Session", &seg(s)),
            Caller::Configured => {
                if let Some(s) = &c.session {
                    r = r.set("X-Aware-Session", &seg(s));
                    // The gateway reads the agent header as written (an agent id is ASCII).
                    if let Some(a) = &c.agent {
                        r = r.set("X-Aware-Agent", a);
                    }
                }
            }
        }
        r
    }

    /// Sends the request with `body` (JSON text) and returns the answer whatever its status;
    /// only a failure to get an answer is an error. Read the body to its end so the connection
    /// goes back to the pool.
    pub fn send_any(self, body: Option<&str>) -> Result<Response, ClientError> {
        let req = self.build(&self.client.http).timeout(self.timeout);
        let result = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(b),
            None => req.call(),
        };
        match result {
            Ok(r) => Ok(Response(r)),
            Err(ureq::Error::Status(_, r)) => Ok(Response(r)),
            Err(ureq::Error::Transport(t)) => {
                Err(ClientError::from_transport(&self.client.base, &t))
            }
        }
    }

    /// Sends the request; an answer with status 300 or above is [`ClientError::Status`] (a
    /// redirect is not followed, see [`no_redirects`]).
    pub fn send(self, body: Option<&str>) -> Result<Response, ClientError> {
        let resp = self.send_any(body)?;
        if resp.status() >= 300 {
            return Err(resp.into_error());
        }
        Ok(resp)
    }

    /// Sends `body` as JSON and returns the JSON answer.
    pub fn json(self, body: Option<&Value>) -> Result<Value, ClientError> {
        let text = body.map(Value::to_string);
        self.send(text.as_deref())?.json()
    }

    /// Opens a long-lived answer (the wake stream): connecting is bounded by the request's
    /// timeout, each read by `read_timeout` (the gateway sends keep-alive comments). An error
    /// answer is [`ClientError::Status`].
    pub fn stream(self, read_timeout: Duration) -> Result<Response, ClientError> {
        let agent = self
            .client
            .agent_builder()
            .timeout_connect(self.timeout)
            .timeout_read(read_timeout)
            .build();
        match self.build(&agent).call() {
            Ok(r) if r.status() >= 300 => Err(Response(r).into_error()),
            Ok(r) => Ok(Response(r)),
            Err(ureq::Error::Status(_, r)) => Err(Response(r).into_error()),
            Err(ureq::Error::Transport(t)) => {
                Err(ClientError::from_transport(&self.client.base, &t))
            }
        }
    }
}

/// An agent that follows no redirects: a gateway URL names the one host that may get the token,
/// the prompts and the drains, and a 3xx from it (or from whatever answers on its port) must
/// not send a request to another host. ureq 2 then hands the 3xx back as an answer.
fn no_redirects() -> ureq::AgentBuilder {
    ureq::AgentBuilder::new().redirects(0)
}

/// An answer of the gateway.
pub struct Response(ureq::Response);

impl Response {
    pub fn status(&self) -> u16 {
        self.0.status()
    }

    /// The body as text.
    pub fn text(self) -> Result<String, ClientError> {
        self.0.into_string().map_err(|e| ClientError::Decode {
            detail: e.to_string(),
        })
    }

    /// The body as JSON.
    pub fn json(self) -> Result<Value, ClientError> {
        self.0.into_json().map_err(|e| ClientError::Decode {
            detail: e.to_string(),
        })
    }

    /// The body as JSON, reading at most `limit` bytes (a peer that is not trusted to be small).
    pub fn json_limited(self, limit: u64) -> Result<Value, ClientError> {
        serde_json::from_reader(self.0.into_reader().take(limit)).map_err(|e| ClientError::Decode {
            detail: e.to_string(),
        })
    }

    /// The body as a reader (a stream).
    pub fn into_reader(self) -> impl Read + Send {
        self.0.into_reader()
    }

    /// The typed error of an error answer: its status, and the code and message of its
    /// `{"error": {...}}` body when it has one.
    pub fn into_error(self) -> ClientError {
        let status = self.status();
        if (300..400).contains(&status) {
            let to = self.0.header("Location").unwrap_or("").to_string();
            return ClientError::Status {
                status,
                code: Some("redirect_not_followed".into()),
                message: Some(format!(
                    "the gateway answered {status} with a redirect to {to:?}; aware follows no \
                     redirects (they could send the request elsewhere): give the final URL"
                )),
                body: String::new(),
            };
        }
        let mut raw = String::new();
        let _ = self
            .0
            .into_reader()
            .take(MAX_ERROR_BODY)
            .read_to_string(&mut raw);
        let v: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        ClientError::Status {
            status,
            code: v["error"]["code"].as_str().map(str::to_string),
            message: v["error"]["message"].as_str().map(str::to_string),
            body: raw,
        }
    }
}
