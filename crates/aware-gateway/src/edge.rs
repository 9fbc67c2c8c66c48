//! The edge checks every request passes before it is routed: the `Host` name (DNS rebinding),
//! the browser origin (cross-site requests), CORS for configured origins, the body's media
//! type, and the bearer token with the identity it names.

use crate::config::GatewayConfig;
use crate::error::ApiError;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::net::IpAddr;

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
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
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
pub(crate) fn check_host(
    config: &GatewayConfig,
    port: u16,
    host: Option<&str>,
) -> Result<(), ApiError> {
    let accepted = || {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|s| s.to_string()).collect();
        if !config.bind_is_loopback() {
            if config.bind.ip().is_unspecified() {
                names.push("any IP address".into());
            } else {
                names.push(bracketed(config.bind.ip()));
            }
        }
        names.extend(config.http.allowed_hosts.iter().cloned());
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
            || (!config.bind_is_loopback()
                && (h == bracketed(config.bind.ip())
                    || (config.bind.ip().is_unspecified()
                        && h.trim_start_matches('[')
                            .trim_end_matches(']')
                            .parse::<IpAddr>()
                            .is_ok()))));
    let by_list = config
        .http
        .allowed_hosts
        .iter()
        .any(|e| match split_authority(e) {
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
/// (`http://` + the request's `Host`) or listed in `[http] allowed_origins`, and
/// `Sec-Fetch-Site: cross-site` is refused unless its origin is listed. Clients that send no
/// `Origin` (curl, SDKs, the CLI) are not browsers and pass.
pub(crate) fn check_origin(
    config: &GatewayConfig,
    headers: &HeaderMap,
    host: &str,
) -> Result<Origin, ApiError> {
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
    match origin {
        Some(o) if config.http.allowed_origins.contains(&o) => Ok(Origin::Allowed(o)),
        Some(o) if o == format!("http://{}", host.trim().to_ascii_lowercase()) && !cross_site => {
            Ok(Origin::Same)
        }
        Some(o) => Err(refuse(format!(
            "Origin {o:?} is not this gateway's origin (http://{host})"
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
pub(crate) fn preflight(method: &Method, headers: &HeaderMap, origin: &Origin) -> Option<Response> {
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
    fn secrets_compare_by_content_only() {
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abc", b"abd"));
        assert!(!secrets_equal(b"abc", b"abcd"));
        assert!(!secrets_equal(b"", b"abc"));
    }

    fn config(bind: &str, hosts: &[&str]) -> GatewayConfig {
        let mut c = GatewayConfig::for_data_dir("/nonexistent");
        c.bind = bind.parse().unwrap();
        c.http.allowed_hosts = hosts.iter().map(|h| h.to_string()).collect();
        c
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
