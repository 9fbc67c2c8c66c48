//! The gateway's request-target parsing: the path into a typed `Route` (`routes::segments` and
//! `routes::parse`, what the dispatcher does with `uri.path()`), the strict percent-decoding of a
//! path capture (`decode_segment`) and the query parameters (`Query`). Pure functions, no server:
//! every input is independent.
//!
//! The input is tried twice: as a request target through `http::Uri` (what hyper hands the
//! dispatcher; only ASCII gets through) and, when it is UTF-8, as a raw path and query split at
//! the first `?` (reaching paths with any character).
//!
//! Invariants:
//! - the pattern and the allowed methods depend on the path only, never on the method; a route
//!   is given exactly for an allowed method, and the method is one the route's handler serves
//!   (no `HEAD` or `GET` reaches a write); `public` only for `/health`, `/` and `/ui/…`; the
//!   admin routes exist only in test mode and nothing else changes with it;
//! - a route re-encodes to the path it came from (`/` + the path without its leading `/`s), and
//!   that path parses to the same route;
//! - captures are single raw segments; a capture that decodes re-encodes with the clients'
//!   encoder (`aware_core::path::seg`) to a segment that decodes to the same text, and that
//!   segment, put back in the path and parsed by `http::Uri`, gives the same route with the
//!   new capture (an encoded `/` stays inside its segment);
//! - `decode_segment` accepts exactly the text a reference decoder accepts (every `%` starts a
//!   two-hex-digit escape, the bytes are UTF-8) with the same result; its error is a typed 400
//!   `invalid_session_key` with a message;
//! - `Query::parse` accepts exactly what a reference form decoder accepts, with the same pairs:
//!   `take_all` returns each name's values in order, `take` refuses a repeated name naming it,
//!   `page` stays within 1..=500 / ≥ 0 and reads the same numbers, `finish` refuses the first
//!   name left; the pairs re-encoded with `seg` parse to the same pairs.
#![no_main]

use aware_core::path::seg;
use aware_gateway::fuzzing::{
    decode_segment, routes, AdminOp, Method, Query, Route, SessionRoute, StatusCode, Uri,
};
use libfuzzer_sys::fuzz_target;

fn methods() -> [Method; 7] {
    [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
    ]
}

fuzz_target!(|data: &[u8]| {
    if let Ok(uri) = Uri::try_from(data) {
        check_path(uri.path());
        if let Some(q) = uri.query() {
            check_query(q);
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (path, query) = text.split_once('?').unwrap_or((text, ""));
    check_path(path);
    check_query(query);
    check_decode(text);
});

fn check_path(path: &str) {
    let segs = routes::segments(path);
    let canonical = format!("/{}", segs.join("/"));
    assert_eq!(canonical, format!("/{}", path.trim_start_matches('/')));
    let mut shape = None;
    for m in methods() {
        let p = routes::parse(&m, &segs, true);
        // The pattern, the allowed methods and `public` depend on the path only.
        let this = (p.pattern, p.allowed, p.public);
        assert_eq!(*shape.get_or_insert(this), this, "{m} {path:?}");
        // Outside test mode only the admin routes change: they do not exist.
        let outside = routes::parse(&m, &segs, false);
        if p.pattern == Some("/v1/admin") {
            assert!(outside.pattern.is_none() && outside.route.is_none());
            assert!(outside.allowed.is_empty() && !outside.public);
        } else {
            assert_eq!((outside.pattern, outside.allowed, outside.public), this);
            assert_eq!(outside.route, p.route, "{m} {path:?}");
        }
        let Some(pattern) = p.pattern else {
            assert!(p.route.is_none() && p.allowed.is_empty() && !p.public);
            continue;
        };
        assert_eq!(p.route.is_some(), p.allowed.contains(&m), "{m} {pattern}");
        assert_eq!(
            p.public,
            matches!(pattern, "/health" | "/ui" | "/"),
            "{pattern}"
        );
        let Some(route) = p.route else { continue };
        assert!(serves(&route).contains(&m), "{m} reached {route:?}");
        check_route(&m, &segs, &canonical, &route);
    }
}

/// The methods a route's handler is for: reads for reads, writes for writes.
fn serves(route: &Route) -> &'static [Method] {
    use SessionRoute as S;
    const GET: &[Method] = &[Method::GET];
    const POST: &[Method] = &[Method::POST];
    const DELETE: &[Method] = &[Method::DELETE];
    match route {
        Route::Health => &[Method::GET, Method::HEAD],
        Route::Metrics
        | Route::ListSessions
        | Route::Wakes
        | Route::Catalog
        | Route::ToolList
        | Route::Console(_)
        | Route::Ui(_) => GET,
        Route::CreateSession | Route::CatalogContinue | Route::ToolCall(_) | Route::Admin(_) => {
            POST
        }
        Route::Session(_, op) => match op {
            S::Get | S::ListTurns | S::Pending | S::ListWatches | S::Watchers => GET,
            S::Delete | S::ClearGoal | S::Unwatch(_) => DELETE,
            S::SetGoal => &[Method::PUT],
            S::Reset
            | S::PostTurn
            | S::Drain
            | S::Ack
            | S::SystemEvent
            | S::StartRun
            | S::EndRun(_)
            | S::Compaction
            | S::Replies
            | S::Watch => POST,
        },
    }
}

/// The path a route stands for, from its pattern and captures. The console's `{key}` is not
/// kept in the route (`console.rs` reads it from the segments), so it is taken from `segs`.
fn render(route: &Route, segs: &[&str]) -> String {
    use SessionRoute as S;
    match route {
        Route::Health => "/health".into(),
        Route::Metrics => "/metrics".into(),
        Route::ListSessions | Route::CreateSession => "/v1/sessions".into(),
        Route::Wakes => "/v1/wakes".into(),
        Route::Catalog => "/v1/catalog".into(),
        Route::CatalogContinue => "/v1/catalog/continue".into(),
        Route::ToolList => "/v1/tools".into(),
        Route::ToolCall(name) => format!("/v1/tools/{name}"),
        Route::Admin(op) => format!(
            "/v1/admin/{}",
            match op {
                AdminOp::Clock => "clock",
                AdminOp::Prune => "prune",
                AdminOp::Events => "events",
                AdminOp::Faults => "faults",
            }
        ),
        Route::Console(pattern) => pattern.replace("{key}", segs.get(3).copied().unwrap_or("")),
        Route::Ui(p) => format!("/{p}"),
        Route::Session(k, op) => {
            let tail = match op {
                S::Get | S::Delete => String::new(),
                S::Reset => "/reset".into(),
                S::ListTurns | S::PostTurn => "/turns".into(),
                S::Drain => "/drain".into(),
                S::Pending => "/pending".into(),
                S::Ack => "/ack".into(),
                S::SystemEvent => "/system-events".into(),
                S::SetGoal | S::ClearGoal => "/goal".into(),
                S::StartRun => "/runs".into(),
                S::EndRun(run) => format!("/runs/{run}/end"),
                S::Compaction => "/compaction".into(),
                S::Replies => "/replies".into(),
                S::ListWatches | S::Watch => "/watches".into(),
                S::Watchers => "/watchers".into(),
                S::Unwatch(t) => format!("/watches/{t}"),
            };
            format!("/v1/sessions/{k}{tail}")
        }
    }
}

/// The raw captures of a route with the index of the segment each came from.
fn captures(route: &Route) -> Vec<(usize, &str)> {
    match route {
        Route::ToolCall(name) => vec![(2, name)],
        Route::Session(k, SessionRoute::EndRun(run)) => vec![(2, k), (4, run)],
        Route::Session(k, SessionRoute::Unwatch(t)) => vec![(2, k), (4, t)],
        Route::Session(k, _) => vec![(2, k)],
        _ => Vec::new(),
    }
}

fn check_route(m: &Method, segs: &[&str], canonical: &str, route: &Route) {
    let rendered = render(route, segs);
    assert_eq!(rendered, canonical, "{route:?} re-encodes to another path");
    let again = routes::parse(m, &routes::segments(&rendered), true).route;
    assert_eq!(
        again.as_ref(),
        Some(route),
        "{rendered:?} parses differently"
    );

    for (ix, raw) in captures(route) {
        assert_eq!(segs.get(ix), Some(&raw), "{route:?}: capture {ix}");
        assert!(!raw.contains('/'));
        let Ok(decoded) = decode_segment(raw) else {
            continue;
        };
        // What a client sends for this text: one segment, whatever it holds.
        let encoded = seg(&decoded);
        assert!(!encoded.contains('/') && !encoded.contains('?') && !encoded.contains('#'));
        assert_eq!(decode_segment(&encoded).as_deref(), Ok(decoded.as_str()));
        let mut swapped: Vec<&str> = segs.to_vec();
        swapped[ix] = &encoded;
        let path = format!("/{}", swapped.join("/"));
        // Through `http` only when the rest of the path (from the raw-text reading of the input)
        // is a URI path `http` keeps as it is: a `#` there would start a fragment.
        if !Uri::try_from(canonical).is_ok_and(|u| u.path() == canonical) {
            continue;
        }
        let uri = Uri::try_from(path.as_str())
            .unwrap_or_else(|e| panic!("the client's segment made {path:?} an invalid URI: {e}"));
        assert_eq!(uri.path(), path, "http changed the client's path");
        let from_uri = routes::segments(uri.path());
        let via = routes::parse(m, &from_uri, true)
            .route
            .unwrap_or_else(|| panic!("{path:?} lost its route {route:?}"));
        assert_eq!(
            std::mem::discriminant(&via),
            std::mem::discriminant(route),
            "{path:?}"
        );
        let got = captures(&via);
        let (_, cap) = got
            .iter()
            .find(|(i, _)| *i == ix)
            .unwrap_or_else(|| panic!("{path:?}: no capture {ix} in {via:?}"));
        assert_eq!(
            decode_segment(cap).as_deref(),
            Ok(decoded.as_str()),
            "{path:?}"
        );
    }
}

/// Reference percent-decoding: `strict` refuses a `%` that does not start two hex digits (the
/// path rule, 03 §5.3); otherwise such a `%` is kept as is (the query rule).
fn reference_decode(s: &str, strict: bool) -> Option<String> {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            match (
                b.get(i + 1).and_then(|&c| hex(c)),
                b.get(i + 2).and_then(|&c| hex(c)),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 3;
                    continue;
                }
                _ if strict => return None,
                _ => {}
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn check_decode(text: &str) {
    match decode_segment(text) {
        Ok(d) => assert_eq!(reference_decode(text, true).as_deref(), Some(d.as_str())),
        Err(e) => {
            assert_eq!(reference_decode(text, true), None, "{text:?}: {e:?}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert_eq!(e.code, "invalid_session_key");
            assert!(!e.message.is_empty());
        }
    }
}

fn reference_query(raw: &str) -> Option<Vec<(String, String)>> {
    let dec = |s: &str| reference_decode(&s.replace('+', " "), false);
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|part| {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            Some((dec(k)?, dec(v)?))
        })
        .collect()
}

fn check_query(raw: &str) {
    let expected = reference_query(raw);
    let q = match Query::parse(Some(raw)) {
        Ok(q) => q,
        Err(e) => {
            assert_eq!(expected, None, "{raw:?} refused: {e:?}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert_eq!(e.code, "invalid_argument");
            assert!(e.message.starts_with("query parameter "), "{e:?}");
            return;
        }
    };
    let pairs = expected.unwrap_or_else(|| panic!("{raw:?} accepted"));
    check_pairs(q, &pairs);
    // Re-encoded as a client would send them: the same pairs.
    let again: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", seg(k), seg(v)))
        .collect();
    let again = again.join("&");
    let q = Query::parse(Some(&again)).unwrap_or_else(|e| panic!("{again:?}: {e:?}"));
    check_pairs(q, &pairs);
    assert_eq!(
        Query::parse(None).map(|q| q.finish().is_ok()),
        Ok(true),
        "no query"
    );
}

fn check_pairs(q: Query, pairs: &[(String, String)]) {
    let values = |name: &str| -> Vec<String> {
        pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    };
    // `finish` names the first parameter left.
    let probe = clone_query(pairs);
    match pairs.first() {
        None => assert!(probe.finish().is_ok()),
        Some((k, _)) => {
            let Err(e) = probe.finish() else {
                panic!("unknown parameter {k:?} accepted")
            };
            assert_eq!(e.message, format!("unknown query parameter {k:?}"));
        }
    }
    // `take`: one value, or an error naming a repeated parameter.
    if let Some((k, _)) = pairs.first() {
        let mut probe = clone_query(pairs);
        let all = values(k);
        match probe.take(k) {
            Ok(v) => assert_eq!(all.len(), 1, "{k:?}: {v:?}"),
            Err(e) => {
                assert!(all.len() > 1);
                assert_eq!(
                    e.message,
                    format!("query parameter {k} must be given at most once")
                );
            }
        }
    }
    // `page`: the documented bounds and defaults, the same numbers as the text says.
    let mut probe = clone_query(pairs);
    if let Ok((limit, offset)) = probe.page() {
        assert!((1..=500).contains(&limit) && offset >= 0);
        let num = |name: &str, default: i64| match values(name).as_slice() {
            [] => default,
            [one] => one.parse().unwrap_or(-1),
            _ => -1,
        };
        assert_eq!((limit, offset), (num("limit", 100), num("offset", 0)));
    }
    // Every name taken in turn: its values in order, then nothing is left.
    let mut q = q;
    let mut names: Vec<&str> = Vec::new();
    for (k, _) in pairs {
        if !names.contains(&k.as_str()) {
            names.push(k);
        }
    }
    for k in names {
        assert_eq!(q.take_all(k), values(k), "{k:?}");
    }
    assert!(q.finish().is_ok());
}

/// The same pairs as a fresh `Query` (it has no `Clone`), through the encoder.
fn clone_query(pairs: &[(String, String)]) -> Query {
    let raw: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", seg(k), seg(v)))
        .collect();
    Query::parse(Some(&raw.join("&"))).unwrap_or_else(|e| panic!("{raw:?}: {e:?}"))
}
