//! The route table (03 §5.4): a request's method and path segments parsed once into a typed
//! [`Route`], which the dispatcher matches exhaustively. Path captures stay raw (still
//! percent-encoded): they are decoded by the handler, after the token check, so a malformed key
//! never answers before a 401.
//!
//! The module is private; its items are `pub` only so `crate::fuzzing` can re-export them.

use axum::http::Method;

const GET: Method = Method::GET;
const HEAD: Method = Method::HEAD;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;
const DELETE: Method = Method::DELETE;

/// A matched route with its raw path captures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Health,
    Metrics,
    ListSessions,
    CreateSession,
    /// A `/v1/sessions/{key}/…` route: the raw `{key}` and what is asked of it.
    Session(String, SessionRoute),
    Wakes,
    Catalog,
    CatalogContinue,
    ToolList,
    /// `POST /v1/tools/{name}` with the raw name.
    ToolCall(String),
    Admin(AdminOp),
    /// A `/v1/console/…` read route, by its pattern (`console.rs` matches it).
    Console(&'static str),
    /// A console asset: the path under `/ui/`.
    Ui(String),
}

/// What a `/v1/sessions/{key}/…` route asks of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRoute {
    Get,
    Delete,
    Reset,
    ListTurns,
    PostTurn,
    Drain,
    Pending,
    Ack,
    SystemEvent,
    SetGoal,
    ClearGoal,
    StartRun,
    /// The raw `{runId}`.
    EndRun(String),
    Compaction,
    Replies,
    ListWatches,
    Watch,
    Watchers,
    /// The raw `{target}`.
    Unwatch(String),
}

/// The test-mode routes under `/v1/admin/` (03 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminOp {
    Clock,
    Prune,
    Events,
    Faults,
}

/// What the table says about a request.
#[derive(Debug)]
pub struct Parsed {
    /// The route pattern, the `route` label of the request metrics; `None` when no route has
    /// this path.
    pub pattern: Option<&'static str>,
    /// The methods the path accepts (for 405 and `Allow`).
    pub allowed: &'static [Method],
    /// Served without a token (the health probe, the console's page and scripts).
    pub public: bool,
    /// The route, when the path matched and the method is one of `allowed`.
    pub route: Option<Route>,
}

impl Parsed {
    fn none() -> Self {
        Parsed {
            pattern: None,
            allowed: &[],
            public: false,
            route: None,
        }
    }
}

/// The path segments [`parse`] takes: the path without its leading `/`s, split at every `/`.
/// Segments stay percent-encoded, so an encoded `%2F` stays inside its segment.
pub fn segments(path: &str) -> Vec<&str> {
    path.trim_start_matches('/').split('/').collect()
}

/// Parses a request's method and path segments. Outside test mode the admin routes do not exist
/// at all (03 §9), whatever the method.
pub fn parse(method: &Method, s: &[&str], test_mode: bool) -> Parsed {
    use SessionRoute as S;
    let is = |m: &Method| method == m;
    // Only consulted when `method` is one of the arm's allowed methods.
    let (pattern, allowed, route): (&'static str, &'static [Method], Route) = match s {
        ["health"] => ("/health", &[GET, HEAD], Route::Health),
        ["metrics"] => ("/metrics", &[GET], Route::Metrics),
        ["v1", "sessions"] => (
            "/v1/sessions",
            &[GET, POST],
            if is(&GET) {
                Route::ListSessions
            } else {
                Route::CreateSession
            },
        ),
        ["v1", "sessions", k, rest @ ..] => {
            let (pattern, allowed, op): (_, &'static [Method], _) = match rest {
                [] => (
                    "/v1/sessions/{key}",
                    &[GET, DELETE],
                    if is(&GET) { S::Get } else { S::Delete },
                ),
                ["reset"] => ("/v1/sessions/{key}/reset", &[POST], S::Reset),
                ["turns"] => (
                    "/v1/sessions/{key}/turns",
                    &[GET, POST],
                    if is(&GET) { S::ListTurns } else { S::PostTurn },
                ),
                ["drain"] => ("/v1/sessions/{key}/drain", &[POST], S::Drain),
                ["pending"] => ("/v1/sessions/{key}/pending", &[GET], S::Pending),
                ["ack"] => ("/v1/sessions/{key}/ack", &[POST], S::Ack),
                ["system-events"] => ("/v1/sessions/{key}/system-events", &[POST], S::SystemEvent),
                ["goal"] => (
                    "/v1/sessions/{key}/goal",
                    &[PUT, DELETE],
                    if is(&PUT) { S::SetGoal } else { S::ClearGoal },
                ),
                ["runs"] => ("/v1/sessions/{key}/runs", &[POST], S::StartRun),
                ["runs", run, "end"] => (
                    "/v1/sessions/{key}/runs/{runId}/end",
                    &[POST],
                    S::EndRun(run.to_string()),
                ),
                ["compaction"] => ("/v1/sessions/{key}/compaction", &[POST], S::Compaction),
                ["replies"] => ("/v1/sessions/{key}/replies", &[POST], S::Replies),
                ["watches"] => (
                    "/v1/sessions/{key}/watches",
                    &[GET, POST],
                    if is(&GET) { S::ListWatches } else { S::Watch },
                ),
                ["watchers"] => ("/v1/sessions/{key}/watchers", &[GET], S::Watchers),
                ["watches", target] => (
                    "/v1/sessions/{key}/watches/{target}",
                    &[DELETE],
                    S::Unwatch(target.to_string()),
                ),
                _ => return Parsed::none(),
            };
            (pattern, allowed, Route::Session(k.to_string(), op))
        }
        ["v1", "wakes"] => ("/v1/wakes", &[GET], Route::Wakes),
        ["v1", "catalog"] => ("/v1/catalog", &[GET], Route::Catalog),
        ["v1", "catalog", "continue"] => ("/v1/catalog/continue", &[POST], Route::CatalogContinue),
        ["v1", "tools"] => ("/v1/tools", &[GET], Route::ToolList),
        ["v1", "tools", name] => (
            "/v1/tools/{name}",
            &[POST],
            Route::ToolCall(name.to_string()),
        ),
        ["v1", "admin", op] if test_mode => {
            let op = match *op {
                "clock" => AdminOp::Clock,
                "prune" => AdminOp::Prune,
                "events" => AdminOp::Events,
                "faults" => AdminOp::Faults,
                _ => return Parsed::none(),
            };
            ("/v1/admin", &[POST], Route::Admin(op))
        }
        ["v1", "console", rest @ ..] => {
            let pattern = match rest {
                ["sessions"] => "/v1/console/sessions",
                ["sessions", _] => "/v1/console/sessions/{key}",
                ["graph"] => "/v1/console/graph",
                ["overview"] => "/v1/console/overview",
                ["events"] => "/v1/console/events",
                _ => return Parsed::none(),
            };
            (pattern, &[GET], Route::Console(pattern))
        }
        ["ui", ..] => ("/ui", &[GET], Route::Ui(s.join("/"))),
        // A browser pointed at the gateway's address is led to the console (a redirect to
        // `/ui/`) instead of a 404 JSON answer.
        [""] => ("/", &[GET], Route::Ui(String::new())),
        _ => return Parsed::none(),
    };
    Parsed {
        pattern: Some(pattern),
        allowed,
        public: matches!(route, Route::Health | Route::Ui(_)),
        route: allowed.contains(method).then_some(route),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(m: Method, path: &str) -> Parsed {
        let s: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        parse(&m, &s, true)
    }

    #[test]
    fn methods_pick_the_route() {
        assert_eq!(route(GET, "/v1/sessions").route, Some(Route::ListSessions));
        assert_eq!(
            route(POST, "/v1/sessions").route,
            Some(Route::CreateSession)
        );
        assert_eq!(
            route(DELETE, "/v1/sessions/k/goal").route,
            Some(Route::Session("k".into(), SessionRoute::ClearGoal))
        );
        assert_eq!(
            route(POST, "/v1/sessions/a%2Fb/runs/r1/end").route,
            Some(Route::Session(
                "a%2Fb".into(),
                SessionRoute::EndRun("r1".into())
            ))
        );
        let wrong = route(PUT, "/v1/sessions/k/turns");
        assert_eq!(wrong.pattern, Some("/v1/sessions/{key}/turns"));
        assert_eq!(wrong.route, None);
        assert_eq!(wrong.allowed, &[GET, POST]);
    }

    #[test]
    fn unknown_paths_and_admin_outside_test_mode() {
        assert_eq!(route(GET, "/v1/sessions/k/nope").pattern, None);
        assert_eq!(route(POST, "/v1/admin/nope").pattern, None);
        assert_eq!(
            route(POST, "/v1/admin/clock").route,
            Some(Route::Admin(AdminOp::Clock))
        );
        assert_eq!(parse(&POST, &["v1", "admin", "clock"], false).pattern, None);
        assert!(route(POST, "/health").public);
        assert!(route(GET, "/ui/app.js").public);
        assert_eq!(route(GET, "/").route, Some(Route::Ui(String::new())));
        assert!(route(GET, "/").public);
        assert!(!route(GET, "/metrics").public);
    }
}
