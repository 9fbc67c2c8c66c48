//! The edge checks every request passes before it is routed: the `Host` name (DNS rebinding),
//! the browser origin (cross-site requests), CORS for configured origins, the body's media
//! type, and the bearer token with the identity it names.
//!
//! Two listeners share this edge: the gateway (`dispatch`) and the paired node
//! (`node_server`). Both run [`check_site`] first and compare tokens with [`secrets_equal`],
//! and both refuse weak tokens through [`check_token_strength`], so a rule added
//! here cannot be forgotten by one of them.

use crate::config::{GatewayConfig, HttpSettings};
use crate::http::error::ApiError;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};

/// A token is all that stands between a caller and the data (off loopback the network, on
/// loopback the other local users and agents): shorter ones are guessable.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Refuses to listen, whatever the bind, with a blank token or one under [`MIN_TOKEN_BYTES`];
/// `tokens` names each token for the message. The rule of `aware serve` and `aware node serve`.
pub fn check_token_strength<'a>(
    bind: SocketAddr,
    tokens: impl IntoIterator<Item = (String, &'a str)>,
) -> Result<(), String> {
    // On loopback too: there a token is the boundary between local users, and an agent's token
    // the boundary between agents; a 2-byte token bounds nothing.
    for (what, t) in tokens {
        if t.trim().is_empty() || t.len() < MIN_TOKEN_BYTES {
            return Err(format!(
                "refusing to listen on {bind} with a weak token: {what} must be at least {MIN_TOKEN_BYTES} bytes and not blank (e.g. `head -c 24 /dev/urandom | base64`)"
            ));
        }
    }
    Ok(())
}

/// Refuses a token off loopback over plain HTTP: every request would carry it in clear across
/// the network, where anyone on the path can read and replay it. `tls` says the listener serves
/// TLS; `opt_out` is the operator's explicit `allow_plaintext_tokens` (a trusted network, or a
/// TLS-terminating proxy in front); `how` names the settings for the message. The rule of
/// `aware serve` and `aware node serve`.
pub fn check_plaintext_tokens(
    bind: SocketAddr,
    has_token: bool,
    tls: bool,
    opt_out: bool,
    how: (&str, &str),
) -> Result<(), String> {
    if bind.ip().is_loopback() || !has_token || tls || opt_out {
        return Ok(());
    }
    let (tls_how, opt_out_how) = how;
    Err(format!(
        "refusing to listen on {bind} with a bearer token over plain HTTP: off loopback every \
         request would carry the token in clear across the network, where anyone on the path can \
         read and reuse it. Serve TLS ({tls_how}), or, on a trusted network or behind a \
         TLS-terminating proxy, say so explicitly with {opt_out_how}"
    ))
}

/// The bearer token a request presents (empty when none).
pub(crate) fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// The first checks of every request on either listener: the `Host` (DNS rebinding), then the
/// origin (cross-site pages), then a CORS preflight from an allowed origin, answered here.
/// `bind` is the configured address, `port` the bound one.
pub(crate) fn check_site(
    bind: SocketAddr,
    http: &HttpSettings,
    port: u16,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Site, ApiError> {
    let host = uri.authority().map(|a| a.as_str().to_string()).or_else(|| {
        headers
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or("?").to_string())
    });
    check_host(bind, http, port, host.as_deref())?;
    let origin = check_origin(http, headers, host.as_deref().unwrap_or(""))?;
    Ok(match preflight(method, headers, &origin) {
        Some(r) => Site::Preflight(r),
        None => Site::Pass(origin),
    })
}

/// What [`check_site`] decided for a request it did not refuse.
pub(crate) enum Site {
    /// A CORS preflight, already answered.
    Preflight(Response),
    /// Route the request; add CORS headers to the answer for an allowed origin.
    Pass(Origin),
}

/// Who a request speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The main token (or no token configured): everything.
    Operator,
    /// An agent's own token: only that agent's sessions, and what it may see (03 §5.3).
    Agent(String),
}

/// Compares two secrets in time independent of where they differ and of their lengths: both
/// are hashed first, so the compare always runs over 32 bytes and a short guess learns nothing
/// about the token's length.
pub(crate) fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    let (x, y) = (Sha256::digest(a), Sha256::digest(b));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

/// The identity of the bearer token, or `None` when it names nobody. Every configured token is
/// compared (no early exit), so timing does not tell which holder nearly matched.
pub(crate) fn identify(config: &GatewayConfig, headers: &HeaderMap) -> Option<Identity> {
    let Some(main) = &config.token else {
        return Some(Identity::Operator);
    };
    let given = bearer(headers);
    let mut found = None;
    if secrets_equal(given.as_bytes(), main.as_bytes()) {
        found = Some(Identity::Operator);
    }
    for (id, a) in &config.agents {
        if let Some(t) = &a.token {
            if secrets_equal(given.as_bytes(), t.as_bytes()) && found.is_none() {
                found = Some(Identity::Agent(id.clone()));
            }
        }
    }
    found
}

/// Does any request need a token here? (With none configured everyone is the operator.)
pub(crate) fn tokens_configured(config: &GatewayConfig) -> bool {
    config.token.is_some()
}

/// `host[:port]` split; the host lower-cased, IPv6 kept in brackets.
fn split_authority(v: &str) -> Option<(String, Option<u16>)> {
    let v = v.trim().to_ascii_lowercase();
    if v.is_empty() {
        return None;
    }
    let (host, port) = if v.starts_with('[') {
        let end = v.find(']')?;
        let (h, rest) = v.split_at(end + 1);
        match rest {
            "" => (h.to_string(), None),
            r => (h.to_string(), Some(r.strip_prefix(':')?.parse().ok()?)),
        }
    } else {
        match v.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p.parse().ok()?)),
            None => (v, None),
        }
    };
    (!host.is_empty()).then_some((host, port))
}

const LOOPBACK_NAMES: [&str; 3] = ["127.0.0.1", "localhost", "[::1]"];

/// Checks the `Host` of a request (03 §5.2 hardened): a DNS-rebinding page reaches the gateway
/// under the attacker's own name, so only names that cannot be rebound are served: the loopback
/// names, the bind address, `[http] allowed_hosts`, and on an unspecified bind (`0.0.0.0`, `::`)
/// any IP literal (an address is not a DNS name, so it cannot be rebound). A port, when given,
/// must be the bound port (or the one an `allowed_hosts` entry names).
fn check_host(
    bind: SocketAddr,
    http: &HttpSettings,
    port: u16,
    host: Option<&str>,
) -> Result<(), ApiError> {
    let loopback = bind.ip().is_loopback();
    let accepted = || {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|s| s.to_string()).collect();
        if !loopback {
            if bind.ip().is_unspecified() {
                names.push("any IP address".into());
            } else {
                names.push(bracketed(bind.ip()));
            }
        }
        names.extend(http.allowed_hosts.iter().cloned());
        format!(
            "{} (with or without :{port}); add names under [http] allowed_hosts",
            names.join(", ")
        )
    };
    let refuse = |what: String| {
        ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_request",
            format!("{what}; this gateway answers to Host {}", accepted()),
        )
    };
    let Some(raw) = host else {
        return Err(refuse("the request has no Host header".into()));
    };
    let Some((h, p)) = split_authority(raw) else {
        return Err(refuse(format!("Host {raw:?} is not host[:port]")));
    };
    let port_ok = p.is_none_or(|p| p == port);
    let by_rule = port_ok
        && (LOOPBACK_NAMES.contains(&h.as_str())
            || (!loopback
                && (h == bracketed(bind.ip())
                    || (bind.ip().is_unspecified()
                        && h.trim_start_matches('[')
                            .trim_end_matches(']')
                            .parse::<IpAddr>()
                            .is_ok()))));
    let by_list = http.allowed_hosts.iter().any(|e| match split_authority(e) {
        Some((eh, Some(ep))) => eh == h && p == Some(ep),
        Some((eh, None)) => eh == h && port_ok,
        None => false,
    });
    if by_rule || by_list {
        Ok(())
    } else {
        Err(refuse(format!("Host {raw:?} is not served here")))
    }
}

fn bracketed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v) => v.to_string(),
        IpAddr::V6(v) => format!("[{v}]"),
    }
}

/// What the origin check decided for a request that may go on.
pub(crate) enum Origin {
    /// No origin, or the gateway's own: no CORS headers.
    Same,
    /// A configured cross-origin caller: answered with CORS headers for it.
    Allowed(String),
}

/// Refuses cross-site requests (a page in the user's browser could otherwise create sessions,
/// post "human" turns or drain notices): an `Origin` must be the gateway's own
/// (`http://` or, over TLS, `https://` + the request's `Host`) or listed in `[http] allowed_origins`, and
/// `Sec-Fetch-Site: cross-site` is refused unless its origin is listed. Clients that send no
/// `Origin` (curl, SDKs, the CLI) are not browsers and pass.
fn check_origin(http: &HttpSettings, headers: &HeaderMap, host: &str) -> Result<Origin, ApiError> {
    let origin = headers
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    let refuse = |msg: String| {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden_origin", format!(
            "{msg}; requests from web pages are refused unless their origin is listed in [http] allowed_origins (clients that send no Origin are not affected)"
        ))
    };
    // The page the gateway serves itself (the console) comes from the scheme it listens with:
    // over TLS its own origin is `https://` + Host.
    let scheme = if http.tls.is_some() { "https" } else { "http" };
    let own = format!("{scheme}://{}", host.trim().to_ascii_lowercase());
    match origin {
        Some(o) if http.allowed_origins.contains(&o) => Ok(Origin::Allowed(o)),
        Some(o) if o == own && !cross_site => Ok(Origin::Same),
        Some(o) => Err(refuse(format!(
            "Origin {o:?} is not this gateway's origin ({own})"
        ))),
        None if cross_site => Err(refuse(
            "a cross-site request (Sec-Fetch-Site: cross-site)".into(),
        )),
        None => Ok(Origin::Same),
    }
}

/// Adds the CORS answer headers for an allowed origin.
pub(crate) fn add_cors(resp: &mut Response, origin: &str) {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
}

/// The answer to a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`) from an
/// allowed origin; `None` for any other request.
fn preflight(method: &Method, headers: &HeaderMap, origin: &Origin) -> Option<Response> {
    let Origin::Allowed(o) = origin else {
        return None;
    };
    if method != Method::OPTIONS || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        return None;
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    add_cors(&mut r, o);
    let h = r.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type, x-aware-session, x-aware-agent"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    Some(r)
}

/// A body must be declared JSON: a form or `text/plain` body is what a cross-site page can send
/// without a preflight, so it is never read as JSON. An empty body needs no type.
pub(crate) fn check_media_type(headers: &HeaderMap, body_len: usize) -> Result<(), ApiError> {
    if body_len == 0 {
        return Ok(());
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    let is_json = ct.is_some_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if is_json {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "a request body must be sent with Content-Type: application/json (got {})",
            ct.map_or("no Content-Type".to_string(), |c| format!("{c:?}"))
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_off_loopback_needs_tls_or_the_opt_out() {
        let how = ("TLS", "OPT-OUT");
        let public: SocketAddr = "0.0.0.0:7420".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:7420".parse().unwrap();
        let e = check_plaintext_tokens(public, true, false, false, how).unwrap_err();
        assert!(
            e.contains("plain HTTP") && e.contains("TLS") && e.contains("OPT-OUT"),
            "{e}"
        );
        assert!(check_plaintext_tokens(public, true, true, false, how).is_ok());
        assert!(check_plaintext_tokens(public, true, false, true, how).is_ok());
        assert!(check_plaintext_tokens(public, false, false, false, how).is_ok());
        assert!(check_plaintext_tokens(lo, true, false, false, how).is_ok());
    }

    #[test]
    fn secrets_compare_by_content_only() {
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abc", b"abd"));
        assert!(!secrets_equal(b"abc", b"abcd"));
        assert!(!secrets_equal(b"", b"abc"));
    }

    fn config(bind: &str, hosts: &[&str]) -> (SocketAddr, HttpSettings) {
        let http = HttpSettings {
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..HttpSettings::default()
        };
        (bind.parse().unwrap(), http)
    }

    fn check_host(
        c: &(SocketAddr, HttpSettings),
        port: u16,
        host: Option<&str>,
    ) -> Result<(), ApiError> {
        super::check_host(c.0, &c.1, port, host)
    }

    #[test]
    fn hosts_by_bind() {
        let lo = config("127.0.0.1:7420", &[]);
        assert!(check_host(&lo, 7420, Some("localhost:7420")).is_ok());
        assert!(check_host(&lo, 7420, Some("[::1]")).is_ok());
        assert!(check_host(&lo, 7420, Some("10.0.0.5:7420")).is_err());
        assert!(check_host(&lo, 7420, Some("localhost:80")).is_err());
        assert!(check_host(&lo, 7420, None).is_err());
        let any = config("0.0.0.0:7420", &["hub.example:443"]);
        assert!(check_host(&any, 7420, Some("10.0.0.5:7420")).is_ok());
        assert!(check_host(&any, 7420, Some("[fe80::1]")).is_ok());
        assert!(check_host(&any, 7420, Some("rebound.example:7420")).is_err());
        assert!(check_host(&any, 7420, Some("hub.example:443")).is_ok());
        assert!(check_host(&any, 7420, Some("hub.example")).is_err());
        let one = config("10.0.0.5:7420", &[]);
        assert!(check_host(&one, 7420, Some("10.0.0.5")).is_ok());
        assert!(check_host(&one, 7420, Some("10.0.0.6")).is_err());
        let msg = check_host(&one, 7420, Some("x.example"))
            .unwrap_err()
            .message;
        assert!(
            msg.contains("10.0.0.5") && msg.contains("allowed_hosts"),
            "{msg}"
        );
    }

    #[test]
    fn media_types() {
        let mut h = HeaderMap::new();
        assert!(check_media_type(&h, 0).is_ok());
        assert!(check_media_type(&h, 2).is_err());
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json;charset=UTF-8"),
        );
        assert!(check_media_type(&h, 2).is_ok());
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert_eq!(
            check_media_type(&h, 2).unwrap_err().status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
    }

    #[test]
    fn authorities_split() {
        assert_eq!(
            split_authority("LocalHost:80"),
            Some(("localhost".into(), Some(80)))
        );
        assert_eq!(split_authority("[::1]"), Some(("[::1]".into(), None)));
        assert_eq!(split_authority("[::1]:7"), Some(("[::1]".into(), Some(7))));
        assert_eq!(split_authority("a:b"), None);
        assert_eq!(split_authority(""), None);
    }
}
