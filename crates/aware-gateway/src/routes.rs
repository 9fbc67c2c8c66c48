//! Routes of 03 §5.4: matching, the order of checks (auth, key syntax, existence, visibility,
//! body), and the session routes. Handlers only translate between the wire and the engine.

use crate::body::{Obj, Query};
use crate::edge::Identity;
use crate::error::{ApiError, ApiResult};
use crate::server::{blocking, Req};
use crate::{admin, metrics, tools, wakes, wire};
use aware_core::{ActorType, AgentId, SessionKey, SessionRef};
use aware_engine::*;
use aware_store::SessionFilter;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

const GET: Method = Method::GET;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;
const DELETE: Method = Method::DELETE;

/// The route pattern of a path and the methods it accepts; `""` when no route matches.
pub(crate) fn route_of(s: &[&str]) -> (&'static str, &'static [Method]) {
    match s {
        ["health"] => ("/health", &[GET, Method::HEAD]),
        ["metrics"] => ("/metrics", &[GET]),
        ["v1", "sessions"] => ("/v1/sessions", &[GET, POST]),
        ["v1", "sessions", _] => ("/v1/sessions/{key}", &[GET, DELETE]),
        ["v1", "sessions", _, "reset"] => ("/v1/sessions/{key}/reset", &[POST]),
        ["v1", "sessions", _, "turns"] => ("/v1/sessions/{key}/turns", &[GET, POST]),
        ["v1", "sessions", _, "drain"] => ("/v1/sessions/{key}/drain", &[POST]),
        ["v1", "sessions", _, "pending"] => ("/v1/sessions/{key}/pending", &[GET]),
        ["v1", "sessions", _, "ack"] => ("/v1/sessions/{key}/ack", &[POST]),
        ["v1", "sessions", _, "system-events"] => ("/v1/sessions/{key}/system-events", &[POST]),
        ["v1", "sessions", _, "goal"] => ("/v1/sessions/{key}/goal", &[PUT, DELETE]),
        ["v1", "sessions", _, "runs"] => ("/v1/sessions/{key}/runs", &[POST]),
        ["v1", "sessions", _, "runs", _, "end"] => ("/v1/sessions/{key}/runs/{runId}/end", &[POST]),
        ["v1", "sessions", _, "compaction"] => ("/v1/sessions/{key}/compaction", &[POST]),
        ["v1", "sessions", _, "watches"] => ("/v1/sessions/{key}/watches", &[GET, POST]),
        ["v1", "sessions", _, "watchers"] => ("/v1/sessions/{key}/watchers", &[GET]),
        ["v1", "sessions", _, "watches", _] => ("/v1/sessions/{key}/watches/{target}", &[DELETE]),
        ["v1", "wakes"] => ("/v1/wakes", &[GET]),
        ["v1", "catalog"] => ("/v1/catalog", &[GET]),
        ["v1", "catalog", "continue"] => ("/v1/catalog/continue", &[POST]),
        ["v1", "tools"] => ("/v1/tools", &[GET]),
        ["v1", "tools", _] => ("/v1/tools/{name}", &[POST]),
        ["v1", "admin", "clock" | "prune" | "events" | "faults"] => ("/v1/admin", &[POST]),
        ["v1", "console", "sessions"] => ("/v1/console/sessions", &[GET]),
        ["v1", "console", "sessions", _] => ("/v1/console/sessions/{key}", &[GET]),
        ["v1", "console", "graph"] => ("/v1/console/graph", &[GET]),
        ["v1", "console", "overview"] => ("/v1/console/overview", &[GET]),
        ["v1", "console", "events"] => ("/v1/console/events", &[GET]),
        ["ui", ..] => ("/ui", &[GET]),
        _ => ("", &[]),
    }
}

fn ok(v: Value) -> ApiResult<Response> {
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

fn created(v: Value) -> ApiResult<Response> {
    Ok((StatusCode::CREATED, axum::Json(v)).into_response())
}

/// Strict percent-decoding of a path segment or header value: every `%` must start a two-digit
/// hex escape (a literal `%` is sent as `%25`, 03 §5.3) and the result must be UTF-8.
pub(crate) fn decode_segment(seg: &str) -> ApiResult<String> {
    let bytes = seg.as_bytes();
    let broken = bytes.iter().enumerate().any(|(i, b)| {
        *b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if broken {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_session_key",
            "malformed percent-encoding: every % must be followed by two hex digits (send % as %25)",
        ));
    }
    percent_encoding::percent_decode_str(seg)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_session_key",
                "path segment is not valid UTF-8 after percent-decoding",
            )
        })
}

pub(crate) fn parse_key(raw: &str) -> ApiResult<SessionKey> {
    SessionKey::parse(raw).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_session_key",
            e.to_string(),
        )
    })
}

pub(crate) fn parse_agent(field: &str, raw: &str) -> ApiResult<AgentId> {
    AgentId::parse(raw)
        .map_err(|_| ApiError::invalid(format!("{field} must match [a-z0-9][a-z0-9_-]{{0,63}}")))
}

/// The calling session from `X-Aware-Session` (+ `X-Aware-Agent`), checked to exist.
pub(crate) async fn caller(req: &Req) -> ApiResult<Option<SessionRef>> {
    let Some(raw) = req.headers.get("x-aware-session") else {
        return Ok(None);
    };
    let raw = raw.to_str().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_session_key",
            "X-Aware-Session must be ASCII (percent-encode other characters)",
        )
    })?;
    let key = parse_key(&decode_segment(raw)?)?;
    let agent = match req.headers.get("x-aware-agent") {
        Some(a) => Some(parse_agent("X-Aware-Agent", a.to_str().unwrap_or(""))?),
        None => None,
    };
    let engine = req.state.engine()?;
    let r = engine.resolve(&key, agent.as_ref())?;
    acts_as_own(req, r.key.as_str(), r.agent.as_str())?;
    let r2 = r.clone();
    let exists = blocking(move || Ok(engine.session_exists(&r2)?)).await?;
    if !exists {
        return Err(ApiError::not_found(
            "session_not_found",
            format!("caller session \"{}\" does not exist", r.key),
        ));
    }
    Ok(Some(r))
}

/// The agent whose view a request has: the calling session's agent, else the agent of the
/// token (an agent token with no `X-Aware-Session`), else `None` for the operator, who sees
/// everything. Every visibility check goes through this and `GatewayConfig::visible` (03 §5.3).
pub(crate) fn viewer(req: &Req, caller: Option<&SessionRef>) -> Option<String> {
    match (caller, &req.identity) {
        (Some(c), _) => Some(c.agent.as_str().to_string()),
        (None, Identity::Agent(a)) => Some(a.clone()),
        (None, Identity::Operator) => None,
    }
}

/// May this request see sessions of `agent`?
pub(crate) fn may_see(req: &Req, caller: Option<&SessionRef>, agent: &str) -> bool {
    viewer(req, caller).is_none_or(|v| req.state.config.visible(&v, agent))
}

/// 403 unless the caller may access `agent` (03 §5.3). Operators see everything.
pub(crate) fn check_visible(
    req: &Req,
    caller: Option<&SessionRef>,
    key: &str,
    agent: &str,
) -> ApiResult<()> {
    if may_see(req, caller, agent) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "session \"{key}\" belongs to agent \"{agent}\", which agent \"{}\" may not access",
        viewer(req, caller).unwrap_or_default()
    )))
}

/// A request with an agent's token acts only as that agent's sessions: as the caller, as the
/// session a write route changes, as the session it creates.
pub(crate) fn acts_as_own(req: &Req, key: &str, agent: &str) -> ApiResult<()> {
    match &req.identity {
        Identity::Agent(a) if a != agent => Err(ApiError::forbidden(format!(
            "this token belongs to agent \"{a}\" and may act only as its sessions, not as \"{key}\" of agent \"{agent}\""
        ))),
        _ => Ok(()),
    }
}

/// Routes only the operator (the main token) may use.
fn operator_only(req: &Req, route: &str) -> ApiResult<()> {
    match &req.identity {
        Identity::Agent(a) => Err(ApiError::forbidden(format!(
            "{route} needs the operator token; the token of agent \"{a}\" may not use it"
        ))),
        Identity::Operator => Ok(()),
    }
}

/// Resolves a reference from a key and optional agent, with the caller's agent as the default.
pub(crate) fn resolve_ref(
    req: &Req,
    key: &SessionKey,
    agent: Option<&AgentId>,
    caller: Option<&SessionRef>,
) -> ApiResult<SessionRef> {
    // The caller's agent is only a default for bare keys: an agent-qualified key names its
    // own agent, whoever calls.
    let engine = req.state.engine()?;
    let default = caller
        .map(|c| &c.agent)
        .filter(|_| !key.is_agent_qualified());
    Ok(engine.resolve(key, agent.or(default))?)
}

/// The `{key}` of a session route: syntax, existence, then visibility.
async fn path_session(
    req: &Req,
    seg: &str,
    caller: Option<&SessionRef>,
    q: &mut Query,
) -> ApiResult<SessionRef> {
    let key = parse_key(&decode_segment(seg)?)?;
    let agent = match q.take("agentId")? {
        Some(a) => Some(parse_agent("agentId", &a)?),
        None => None,
    };
    let r = resolve_ref(req, &key, agent.as_ref(), caller)?;
    let engine = req.state.engine()?;
    let r2 = r.clone();
    if !blocking(move || Ok(engine.session_exists(&r2)?)).await? {
        return Err(ApiError::not_found(
            "session_not_found",
            format!("session \"{}\" does not exist", r.key),
        ));
    }
    check_visible(req, caller, r.key.as_str(), r.agent.as_str())?;
    if req.method != GET {
        acts_as_own(req, r.key.as_str(), r.agent.as_str())?;
    }
    Ok(r)
}

pub(crate) async fn handle(req: Req, s: &[&str], route: &'static str) -> ApiResult<Response> {
    match route {
        "/health" => return health(&req).await,
        "/metrics" => {
            operator_only(&req, route)?;
            req.state.engine()?;
            return metrics::render(&req.state).await;
        }
        "/v1/admin" => {
            operator_only(&req, route)?;
            return admin::handle(req, s[2]).await;
        }
        "/ui" => return crate::console::asset(&s.join("/")),
        "/v1/tools" => {
            req.state.engine()?;
            return ok(tools::list());
        }
        _ => {}
    }
    let engine = req.state.engine()?;
    let caller = caller(&req).await?;
    let c = caller.as_ref();
    let mut q = Query::parse(req.query.as_deref())?;
    if route.starts_with("/v1/catalog") {
        operator_only(&req, route)?;
    }
    match route {
        "/v1/wakes" => return wakes::sse(req.state.clone(), viewer(&req, c), q).await,
        r if r.starts_with("/v1/console/") => {
            // The console is an operator's tool: its routes compute visibility from the caller
            // session, so an agent token (no caller, yet not the operator) is refused outright
            // rather than seeing everything.
            operator_only(&req, route)?;
            return crate::console::handle(&req, s, r, c, q).await;
        }
        "/v1/catalog" => return crate::catalog::list(&req, c, q).await,
        "/v1/catalog/continue" => {
            q.finish()?;
            return crate::catalog::continue_(&req, c).await;
        }
        "/v1/tools/{name}" => {
            q.finish()?;
            return tools::call(&req, &decode_segment(s[2])?, c).await;
        }
        "/v1/sessions" if req.method == GET => return list_sessions(&req, c, q).await,
        "/v1/sessions" => {
            q.finish()?;
            return create_session(&req, c).await;
        }
        _ => {}
    }
    let target = path_session(&req, s[2], c, &mut q).await?;
    let m = req.method.clone();
    macro_rules! run {
        ($f:expr) => {{
            let e = engine.clone();
            blocking(move || Ok($f(e)?)).await?
        }};
    }
    let t = target.clone();
    match (route, m) {
        ("/v1/sessions/{key}", Method::GET) => {
            q.finish()?;
            let s = run!(move |e: Engine| e.get_session(&t));
            ok(wire::session(&s))
        }
        ("/v1/sessions/{key}", _) => {
            q.finish()?;
            run!(move |e: Engine| e.delete_session(&t));
            ok(json!({"deleted": true}))
        }
        ("/v1/sessions/{key}/reset", _) => {
            q.finish()?;
            Obj::parse(&req.body, true)?.finish()?;
            let (s, prev) = run!(move |e: Engine| e.reset_session(&t));
            ok(json!({"session": wire::session(&s), "previousSessionId": prev}))
        }
        ("/v1/sessions/{key}/turns", Method::GET) => {
            let after = q.int(
                "after",
                0..=i64::MAX,
                "after must be a non-negative integer",
            )?;
            let limit = q
                .int(
                    "limit",
                    1..=500,
                    "limit must be an integer between 1 and 500",
                )?
                .unwrap_or(100) as u32;
            q.finish()?;
            let (turns, more, truncated) =
                run!(move |e: Engine| e.list_turns_capped(&t, after, limit, MAX_TURNS_PAGE_BYTES));
            ok(
                json!({"turns": turns.iter().map(wire::turn).collect::<Vec<_>>(), "hasMore": more, "truncated": truncated}),
            )
        }
        ("/v1/sessions/{key}/turns", _) => {
            q.finish()?;
            let turn = parse_turn(&req.body)?;
            let out = run!(move |e: Engine| e.post_turn(&t, turn));
            if out.duplicate {
                return ok(json!({"turn": wire::turn(&out.turn), "duplicate": true}));
            }
            let mut body = json!({"turn": wire::turn(&out.turn)});
            if let Some(ev) = &out.event {
                body["event"] = wire::event(ev);
            }
            created(body)
        }
        ("/v1/sessions/{key}/drain", _) => {
            let in_query = drain_limit_query(&mut q)?;
            q.finish()?;
            let mut b = Obj::parse(&req.body, true)?;
            let in_body = b.opt_int("limit", 1..=MAX_DRAIN_LIMIT, DRAIN_LIMIT_MSG)?;
            b.finish()?;
            if in_query.is_some() && in_body.is_some() {
                return Err(ApiError::invalid(
                    "give limit in the query or in the body, not both",
                ));
            }
            let limit = in_query.or(in_body).unwrap_or(DEFAULT_DRAIN_LIMIT) as u32;
            let d = run!(move |e: Engine| e.drain_up_to(&t, Some(limit)));
            ok(wire::drain(&d))
        }
        ("/v1/sessions/{key}/pending", _) => {
            let limit = drain_limit_query(&mut q)?.unwrap_or(DEFAULT_DRAIN_LIMIT) as u32;
            q.finish()?;
            let d = run!(move |e: Engine| e.peek_up_to(&t, Some(limit)));
            ok(wire::drain(&d))
        }
        ("/v1/sessions/{key}/ack", _) => {
            q.finish()?;
            let (notices, ids) = parse_ack(&req.body)?;
            let r = run!(move |e: Engine| e.ack(&t, notices, ids));
            ok(
                json!({"acked": r.acked, "followUps": r.follow_ups, "ignored": r.ignored, "removedSystemEvents": r.removed_system_events}),
            )
        }
        ("/v1/sessions/{key}/system-events", _) => {
            q.finish()?;
            let mut b = Obj::parse(&req.body, false)?;
            let text = b.req_str("text")?;
            let ctx = b.opt_str("contextKey")?;
            b.finish()?;
            match run!(move |e: Engine| e.enqueue_system_event(&t, &text, ctx.as_deref())) {
                Some(id) => created(json!({"id": id})),
                None => ok(json!({"deduped": true})),
            }
        }
        ("/v1/sessions/{key}/goal", Method::PUT) => {
            q.finish()?;
            let mut b = Obj::parse(&req.body, false)?;
            let text = b.req_str("text")?;
            if text.trim().is_empty() {
                return Err(ApiError::invalid(
                    "text must not be blank (clear a goal with DELETE)",
                ));
            }
            let status = match b.opt_str("status")?.as_deref() {
                None | Some("active") => GoalStatus::Active,
                Some("complete") => GoalStatus::Complete,
                Some(_) => {
                    return Err(ApiError::invalid(
                        "status must be \"active\" or \"complete\"",
                    ))
                }
            };
            let actor = goal_actor(&mut b, c)?;
            b.finish()?;
            let g = run!(move |e: Engine| e.set_goal(&t, &text, status, actor));
            ok(goal_json(&g))
        }
        ("/v1/sessions/{key}/goal", _) => {
            q.finish()?;
            let mut b = Obj::parse(&req.body, true)?;
            let actor = goal_actor(&mut b, c)?;
            b.finish()?;
            let g = run!(move |e: Engine| e.clear_goal(&t, actor));
            ok(goal_json(&g))
        }
        ("/v1/sessions/{key}/runs", _) => {
            q.finish()?;
            let mut b = Obj::parse(&req.body, true)?;
            let run_id = b.opt_str("runId")?;
            let timeout = b.opt_int(
                "timeoutSeconds",
                1..=86_400,
                "timeoutSeconds must be an integer between 1 and 86400",
            )?;
            b.finish()?;
            let r = run!(move |e: Engine| e.start_run(&t, run_id, timeout.map(|v| v as u32)));
            created(json!({"run": wire::run(&r)}))
        }
        ("/v1/sessions/{key}/runs/{runId}/end", _) => {
            q.finish()?;
            let run_id = decode_segment(s[4])?;
            let mut b = Obj::parse(&req.body, false)?;
            let outcome = b.req_str("outcome")?;
            let outcome = RunOutcome::parse(&outcome).ok_or_else(|| {
                ApiError::invalid("outcome must be one of ok, error, timeout, cancelled")
            })?;
            b.finish()?;
            let r = run!(move |e: Engine| e.end_run(&t, &run_id, outcome));
            let mut body = json!({"run": wire::run(&r.run)});
            if let Some(ev) = &r.event {
                body["event"] = wire::event(ev);
            }
            ok(body)
        }
        ("/v1/sessions/{key}/compaction", _) => {
            q.finish()?;
            let mut b = Obj::parse(&req.body, false)?;
            let op = b.req_str("operationId")?;
            let summary = b.opt_str("summary")?;
            b.finish()?;
            let out = run!(move |e: Engine| e.compaction(&t, &op, summary.as_deref()));
            let mut body = json!({});
            if let Some(ev) = &out.event {
                body["event"] = wire::event(ev);
            }
            if out.duplicate {
                body["duplicate"] = true.into();
                return ok(body);
            }
            created(body)
        }
        ("/v1/sessions/{key}/watches", Method::GET) => {
            q.finish()?;
            let rows = run!(move |e: Engine| e.watches(&t));
            ok(json!({"watches": rows.iter().map(wire::cursor).collect::<Vec<_>>()}))
        }
        ("/v1/sessions/{key}/watchers", _) => {
            q.finish()?;
            let rows = run!(move |e: Engine| e.watchers(&t));
            ok(json!({"watchers": rows.iter().map(wire::cursor).collect::<Vec<_>>()}))
        }
        ("/v1/sessions/{key}/watches", _) => {
            q.finish()?;
            let mut b = Obj::parse(&req.body, false)?;
            let tkey = parse_key(&b.req_str("target")?)?;
            let tagent = match b.opt_str("targetAgentId")? {
                Some(a) => Some(parse_agent("targetAgentId", &a)?),
                None => None,
            };
            b.finish()?;
            if !t.key.is_agent_qualified() {
                return Err(ApiError::invalid(
                    "watcher must be an agent-qualified session key",
                ));
            }
            let target_ref = resolve_ref(&req, &tkey, tagent.as_ref(), Some(&t))?;
            let tr = target_ref.clone();
            let e2 = engine.clone();
            if !blocking(move || Ok(e2.session_exists(&tr)?)).await? {
                return Err(ApiError::not_found(
                    "session_not_found",
                    format!("session \"{}\" does not exist", target_ref.key),
                ));
            }
            check_visible(
                &req,
                Some(&t),
                target_ref.key.as_str(),
                target_ref.agent.as_str(),
            )?;
            check_visible(&req, c, target_ref.key.as_str(), target_ref.agent.as_str())?;
            let row = run!(move |e: Engine| e.register_watch(&t, &target_ref));
            ok(json!({"watched": true, "cursor": wire::cursor(&row)}))
        }
        ("/v1/sessions/{key}/watches/{target}", _) => {
            let tagent = match q.take("targetAgentId")? {
                Some(a) => Some(parse_agent("targetAgentId", &a)?),
                None => None,
            };
            q.finish()?;
            let tkey = parse_key(&decode_segment(s[4])?)?;
            let target_ref = resolve_ref(&req, &tkey, tagent.as_ref(), Some(&t))?;
            check_visible(&req, c, target_ref.key.as_str(), target_ref.agent.as_str())?;
            let done = run!(move |e: Engine| e.unwatch(&t, &target_ref));
            ok(json!({"unwatched": done}))
        }
        _ => Err(ApiError::not_found("not_found", "no such route")),
    }
}

async fn health(req: &Req) -> ApiResult<Response> {
    // Cloned out first: the lock guard must not live across the probe's await.
    let phase = req.state.phase.read().map(|p| p.clone()).ok();
    let body = match phase {
        Some(crate::server::Phase::Ready(engine)) => {
            let deadline =
                std::time::Duration::from_millis(req.state.config.limits.health_deadline_ms);
            let stalled = req.state.health.stalled(&engine, deadline).await;
            if stalled.is_empty() {
                return ok(
                    json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "durability": engine.store().info().durability, "now": req.state.now()}),
                );
            }
            tracing::warn!(event = "health_stalled", stalled = ?stalled, "a health probe did not answer in time");
            json!({"status": "stalled", "stalled": stalled})
        }
        Some(crate::server::Phase::Starting) => json!({"status": "starting"}),
        _ => json!({"status": "unavailable"}),
    };
    Ok((StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response())
}

/// Turn texts per `GET …/turns` page: a page stops before passing it (issue 9: a long transcript
/// must not become one huge answer); `truncated` then says so.
const MAX_TURNS_PAGE_BYTES: usize = 4 << 20;
/// Items per drain or peek unless `limit` says otherwise, and the largest `limit`.
const DEFAULT_DRAIN_LIMIT: i64 = 1000;
const MAX_DRAIN_LIMIT: i64 = 10_000;
const DRAIN_LIMIT_MSG: &str = "limit must be an integer between 1 and 10000";

fn drain_limit_query(q: &mut Query) -> ApiResult<Option<i64>> {
    q.int("limit", 1..=MAX_DRAIN_LIMIT, DRAIN_LIMIT_MSG)
}

fn goal_json(g: &GoalChange) -> Value {
    let mut body = json!({"changed": g.changed});
    if let Some(goal) = &g.goal {
        body["goal"] =
            json!({"text": goal.text, "status": goal.status, "updatedAt": goal.updated_at});
    }
    if let Some(ev) = &g.event {
        body["event"] = wire::event(ev);
    }
    body
}

/// The caller session when identified, else the body's `actor`, else `system` (03 §4.4).
fn goal_actor(b: &mut Obj, caller: Option<&SessionRef>) -> ApiResult<Actor> {
    let given = match b.opt_obj("actor")? {
        None => None,
        Some(mut a) => {
            let t = match a.req_str("type")?.as_str() {
                "human" => ActorType::Human,
                "system" => ActorType::System,
                _ => {
                    return Err(ApiError::invalid(
                        "actor.type must be \"human\" or \"system\"",
                    ))
                }
            };
            let id = a.opt_str("id")?;
            a.finish()
                .map_err(|e| ApiError::invalid(format!("actor: {}", e.message)))?;
            Some(Actor {
                actor_type: t,
                actor_id: id,
            })
        }
    };
    Ok(match caller {
        Some(c) => Actor::agent(&c.key),
        None => given.unwrap_or_else(Actor::system),
    })
}

fn parse_turn(body: &[u8]) -> ApiResult<NewTurn> {
    let mut b = Obj::parse(body, false)?;
    let role = b.req_str("role")?;
    let role = match Role::parse(&role) {
        Some(r) if r != Role::Compaction => r,
        _ => {
            return Err(ApiError::invalid(
                "role must be one of user, assistant, tool",
            ))
        }
    };
    let text = b.req_str("text")?;
    let provenance = match b.opt_obj("provenance")? {
        None => None,
        Some(mut p) => {
            let kind = match p.req_str("kind")?.as_str() {
                "human" => ProvenanceKind::Human,
                "inter_session" => ProvenanceKind::InterSession,
                "internal_system" => ProvenanceKind::InternalSystem,
                _ => {
                    return Err(ApiError::invalid(
                        "provenance.kind must be one of human, inter_session, internal_system",
                    ))
                }
            };
            let human_id = p.opt_str("humanId")?;
            let source = match p.opt_str("sourceSessionKey")? {
                Some(k) => Some(parse_key(&k)?),
                None => None,
            };
            let tool = p.opt_str("sourceTool")?;
            p.finish()
                .map_err(|e| ApiError::invalid(format!("provenance: {}", e.message)))?;
            if kind == ProvenanceKind::InterSession && source.is_none() {
                return Err(ApiError::invalid(
                    "provenance.sourceSessionKey is required when provenance.kind is inter_session",
                ));
            }
            Some(Provenance {
                kind,
                human_id,
                source_session_key: source,
                source_tool: tool,
            })
        }
    };
    let channel = b.opt_str("channel")?;
    if let Some(ch) = &channel {
        aware_core::event::validate_channel(ch).map_err(|e| ApiError::invalid(e.to_string()))?;
    }
    let run_id = b.opt_str("runId")?;
    let occurred_at = b.opt_int(
        "occurredAt",
        0..=i64::MAX,
        "occurredAt must be a non-negative integer (epoch milliseconds)",
    )?;
    let idempotency_key = b.opt_str("idempotencyKey")?;
    let upstream_text = b.opt_str("upstreamText")?;
    let origin = b.opt_str("origin")?;
    if let Some(o) = &origin {
        if o != "import" && o != "hook" {
            return Err(ApiError::invalid("origin must be \"import\" or \"hook\""));
        }
    }
    b.finish()?;
    Ok(NewTurn {
        role,
        text,
        provenance,
        channel,
        run_id,
        occurred_at,
        idempotency_key,
        upstream_text,
        origin,
    })
}

fn parse_ack(body: &[u8]) -> ApiResult<(Vec<AckNotice>, Vec<i64>)> {
    let mut b = Obj::parse(body, true)?;
    let mut notices = Vec::new();
    for v in b.opt_array("notices")?.unwrap_or_default() {
        let Value::Object(map) = v else {
            return Err(ApiError::invalid("notices must be an array of objects"));
        };
        let mut n = Obj::from_map(map);
        let context_key = n
            .req_str("contextKey")
            .map_err(|_| ApiError::invalid("notices[].contextKey is required (a string)"))?;
        let target_agent = n
            .opt_str("targetAgentId")?
            .map(|a| parse_agent("notices[].targetAgentId", &a).map(|a| a.as_str().to_string()))
            .transpose()?;
        let last_seen = n.opt_int(
            "lastSeen",
            0..=i64::MAX,
            "notices[].lastSeen must be a non-negative integer",
        )?;
        n.finish()
            .map_err(|e| ApiError::invalid(format!("notices[]: {}", e.message)))?;
        notices.push(AckNotice {
            context_key,
            target_agent,
            last_seen,
        });
    }
    let mut ids = Vec::new();
    for v in b.opt_array("systemEventIds")?.unwrap_or_default() {
        ids.push(
            v.as_i64()
                .ok_or_else(|| ApiError::invalid("systemEventIds must be an array of integers"))?,
        );
    }
    b.finish()?;
    Ok((notices, ids))
}

async fn create_session(req: &Req, caller: Option<&SessionRef>) -> ApiResult<Response> {
    let mut b = Obj::parse(&req.body, false)?;
    let key = parse_key(&b.req_str("key")?)?;
    let agent = match b.opt_str("agentId")? {
        Some(a) => Some(parse_agent("agentId", &a)?),
        None => None,
    };
    let kind = match b.opt_str("kind")?.as_deref() {
        None => None,
        Some("group") => Some(SessionKind::Group),
        Some("cron") => Some(SessionKind::Cron),
        Some("other") => Some(SessionKind::Other),
        Some(_) => return Err(ApiError::invalid("kind must be one of group, cron, other")),
    };
    let label = b.opt_str("label")?;
    let parent = match b.opt_str("parentSessionKey")? {
        Some(p) => Some(parse_key(&p)?),
        None => None,
    };
    // Only the Claude Code hook (03 §8) sets this; every other create is `api`.
    let created_via = match b.opt_str("createdVia")?.as_deref() {
        None => CreatedVia::Api,
        Some("hook") => CreatedVia::Hook,
        Some(_) => return Err(ApiError::invalid("createdVia must be hook")),
    };
    b.finish()?;
    let target = resolve_ref(req, &key, agent.as_ref(), caller)?;
    if let Some(p) = &parent {
        if SessionRef::with_default(p.clone(), &target.agent) == target {
            return Err(ApiError::invalid(
                "parentSessionKey must name a session other than the new one",
            ));
        }
    }
    check_visible(req, caller, target.key.as_str(), target.agent.as_str())?;
    acts_as_own(req, target.key.as_str(), target.agent.as_str())?;
    let engine = req.state.engine()?;
    // An existing session is answered as it is (idempotent create, 03 §3.4), even when the
    // parent named in the repeat has since been deleted.
    let (e, t2) = (engine.clone(), target.clone());
    let already = blocking(move || Ok(e.session_exists(&t2)?)).await?;
    if let Some(p) = parent.as_ref().filter(|_| !already) {
        let pref = SessionRef::with_default(p.clone(), &target.agent);
        let (e, pr) = (engine.clone(), pref.clone());
        if !blocking(move || Ok(e.session_exists(&pr)?)).await? {
            return Err(ApiError::not_found(
                "session_not_found",
                format!("parent session \"{}\" does not exist", pref.key),
            ));
        }
        check_visible(req, caller, pref.key.as_str(), pref.agent.as_str())?;
    }
    let create = CreateSession {
        key,
        agent: Some(target.agent.clone()),
        kind,
        label,
        parent,
        caller: caller.cloned().map_or(Caller::Operator, Caller::Session),
        created_via,
    };
    let (was_created, s) = blocking(move || Ok(engine.create_session(create)?)).await?;
    let body = json!({"created": was_created, "session": wire::session(&s)});
    if was_created {
        created(body)
    } else {
        ok(body)
    }
}

async fn list_sessions(
    req: &Req,
    caller: Option<&SessionRef>,
    mut q: Query,
) -> ApiResult<Response> {
    let mut filter = SessionFilter {
        limit: 100,
        ..Default::default()
    };
    if let Some(a) = q.take("agentId")? {
        let a = parse_agent("agentId", &a)?;
        if !may_see(req, caller, a.as_str()) {
            return Err(ApiError::forbidden(format!(
                "agent \"{}\" may not access agent \"{}\"",
                viewer(req, caller).unwrap_or_default(),
                a
            )));
        }
        filter.agents = vec![a.as_str().into()];
    } else if let Some(v) = viewer(req, caller) {
        filter.agents = req.state.config.visible_set(&v).unwrap_or_default();
    }
    if let Some(k) = q.take("kind")? {
        if SessionKind::parse(&k).is_none() {
            return Err(ApiError::invalid(
                "kind must be one of main, subagent, adopted, group, cron, other",
            ));
        }
        filter.kinds = vec![k];
    }
    filter.parent_key = q
        .take("parentSessionKey")?
        .map(|p| parse_key(&p).map(|k| k.as_str().to_string()))
        .transpose()?;
    filter.label = q.take("label")?;
    let limit = q
        .int(
            "limit",
            1..=500,
            "limit must be an integer between 1 and 500",
        )?
        .unwrap_or(100);
    let offset = q
        .int(
            "offset",
            0..=i64::MAX,
            "offset must be a non-negative integer",
        )?
        .unwrap_or(0);
    q.finish()?;
    filter.limit = limit as u32 + 1;
    filter.offset = offset as u64;
    let engine = req.state.engine()?;
    let mut rows = blocking(move || Ok(engine.list_sessions(&filter)?)).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let mut body =
        json!({"sessions": rows.iter().map(wire::session).collect::<Vec<_>>(), "hasMore": more});
    if more {
        body["nextOffset"] = (offset + limit).into();
    }
    ok(body)
}

/// The agents a caller may list: its own plus `visible_agents` (empty = all, for `*`).
pub(crate) fn visible_agents(req: &Req, caller: &SessionRef) -> Vec<String> {
    req.state
        .config
        .visible_set(caller.agent.as_str())
        .unwrap_or_default()
}
