//! The web console (decision D22): its static assets under `/ui/`, embedded in the binary, and the
//! read routes designed for it under `/v1/console/` (docs/api.md §7). The console's actions
//! (unwatch, drain, adopt) use the ordinary routes.

use crate::http::access::{check_visible, may_see, viewer};
use crate::http::body::Query;
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{decode_segment, parse_agent, parse_key, resolve_ref, Req};
use crate::state::blocking;
use crate::wire;
use aware_core::{EventKind, SessionRef};
use aware_engine::views::{ConsoleFilter, ConsoleRow, ConsoleSort};
use aware_engine::SessionKind;
use aware_engine::{ConsoleSession, EngineMetrics, Graph};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A human act newer than this marks a graph node (engine clock).
const HUMAN_RECENT_MS: i64 = 10 * 60 * 1000;

/// The embedded front end: path under `/ui/`, content type, bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "",
        "text/html; charset=utf-8",
        include_bytes!("../../../../console/src/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../console/src/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../../console/src/style.css"),
    ),
    (
        "vendor/cytoscape.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../../console/dist/cytoscape.min.js"),
    ),
];

/// `GET /ui/...`: public (the page itself holds no data; it asks for the token when the API
/// answers 401).
pub(crate) fn asset(path: &str) -> ApiResult<Response> {
    let rest = path
        .trim_start_matches('/')
        .strip_prefix("ui")
        .unwrap_or("");
    if rest.is_empty() {
        // `/ui` → `/ui/` so the page's relative URLs resolve under it.
        let mut r = StatusCode::PERMANENT_REDIRECT.into_response();
        r.headers_mut()
            .insert(header::LOCATION, HeaderValue::from_static("/ui/"));
        return Ok(r);
    }
    let rest = rest.trim_start_matches('/');
    let rest = if rest == "index.html" { "" } else { rest };
    let Some((_, ctype, bytes)) = ASSETS.iter().find(|(p, _, _)| *p == rest) else {
        return Err(ApiError::not_found(
            "not_found",
            format!("no console asset /ui/{rest}"),
        ));
    };
    let mut r = (StatusCode::OK, *bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    Ok(r)
}

fn ok(v: Value) -> ApiResult<Response> {
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

// Visibility here is the gateway's one rule (`access::viewer` and `access::may_see`, 03 §5.3):
// the console has no caller check of its own, so it cannot drift from the other routes.

/// The agents the request may see, for narrowing a listing: `None` when it sees every agent
/// (the operator, or a viewer with `*`).
fn visible(req: &Req, caller: Option<&SessionRef>) -> Option<Vec<String>> {
    viewer(req, caller).and_then(|v| req.state.config.visible_set(&v))
}

/// Narrows the listing to `agent` (checked against visibility) or to the visible agents.
fn agent_filter(req: &Req, caller: Option<&SessionRef>, q: &mut Query) -> ApiResult<Vec<String>> {
    match q.take("agent")? {
        Some(a) => {
            let a = parse_agent("agent", &a)?;
            if !may_see(req, caller, a.as_str()) {
                return Err(ApiError::forbidden(format!(
                    "agent \"{}\" may not access agent \"{}\"",
                    viewer(req, caller).unwrap_or_default(),
                    a
                )));
            }
            Ok(vec![a.as_str().to_string()])
        }
        None => Ok(visible(req, caller).unwrap_or_default()),
    }
}

fn row_json(r: &ConsoleRow, now: i64) -> Value {
    let s = &r.session;
    let mut m = Map::new();
    m.insert("key".into(), s.key.clone().into());
    m.insert("agentId".into(), s.agent_id.clone().into());
    m.insert("kind".into(), s.kind.clone().into());
    if let Some(l) = &s.label {
        m.insert("label".into(), l.clone().into());
    }
    if let Some(p) = &s.parent_key {
        m.insert("parentSessionKey".into(), p.clone().into());
    }
    m.insert("stateVersion".into(), r.state_version.into());
    m.insert("updatedAt".into(), s.updated_at.into());
    if let Some(t) = r.last_event_at {
        m.insert("lastEventAt".into(), t.into());
    }
    if let Some(k) = &r.last_event_kind {
        m.insert("lastEventKind".into(), k.clone().into());
    }
    m.insert("pendingAsWatcher".into(), r.pending_as_watcher.into());
    m.insert("pendingAsTarget".into(), r.pending_as_target.into());
    if let Some(t) = r.last_human_at {
        m.insert("lastHumanAt".into(), t.into());
    }
    m.insert(
        "humanRecent".into(),
        r.last_human_at
            .is_some_and(|t| now - t <= HUMAN_RECENT_MS)
            .into(),
    );
    if let Some(u) = &s.upstream {
        let mut up =
            json!({"catalogId": u.catalog_id, "hostId": u.host_id, "threadId": u.thread_id});
        if let Some(t) = r.link_last_scanned_at {
            up["lastScannedAt"] = t.into();
        }
        m.insert("upstream".into(), up);
    }
    Value::Object(m)
}

fn parse_sort(raw: &str) -> ApiResult<(ConsoleSort, bool)> {
    let (desc, name) = match raw.strip_prefix('-') {
        Some(n) => (true, n),
        None => (false, raw),
    };
    let sort =
        match name {
            "updatedAt" => ConsoleSort::Updated,
            "key" => ConsoleSort::Key,
            "agentId" => ConsoleSort::Agent,
            "kind" => ConsoleSort::Kind,
            "lastEventAt" => ConsoleSort::LastEvent,
            "stateVersion" => ConsoleSort::StateVersion,
            "pendingAsWatcher" => ConsoleSort::PendingAsWatcher,
            "pendingAsTarget" => ConsoleSort::PendingAsTarget,
            _ => return Err(ApiError::invalid(
                "sort must be one of updatedAt, key, agentId, kind, lastEventAt, stateVersion, \
                 pendingAsWatcher, pendingAsTarget, optionally prefixed with - for descending",
            )),
        };
    Ok((sort, desc))
}

async fn sessions(req: &Req, caller: Option<&SessionRef>, mut q: Query) -> ApiResult<Response> {
    let agents = agent_filter(req, caller, &mut q)?;
    let kind = q.take("kind")?;
    if let Some(k) = &kind {
        if SessionKind::parse(k).is_none() {
            return Err(ApiError::invalid(
                "kind must be one of main, subagent, adopted, group, cron, other",
            ));
        }
    }
    let text = q.take("q")?.filter(|t| !t.is_empty());
    if text.as_ref().is_some_and(|t| t.chars().count() > 200) {
        return Err(ApiError::invalid("q must be at most 200 characters"));
    }
    let (sort, descending) = parse_sort(&q.take("sort")?.unwrap_or_else(|| "-updatedAt".into()))?;
    let limit = q
        .int(
            "limit",
            1..=500,
            "limit must be an integer between 1 and 500",
        )?
        .unwrap_or(50);
    let offset = q
        .int(
            "offset",
            0..=1_000_000_000,
            "offset must be an integer between 0 and 1000000000",
        )?
        .unwrap_or(0);
    q.finish()?;
    let filter = ConsoleFilter {
        agents,
        kind,
        text,
        keys: Vec::new(),
        sort,
        descending,
        limit: limit as u32,
        offset: offset as u64,
    };
    let engine = req.state.engine()?;
    let now = req.state.now();
    let (rows, total) = blocking(move || Ok(engine.console_sessions(&filter)?)).await?;
    ok(json!({
        "sessions": rows.iter().map(|r| row_json(r, now)).collect::<Vec<_>>(),
        "total": total, "offset": offset, "limit": limit, "now": now,
    }))
}

fn cursor_json(c: &aware_engine::views::CursorRow) -> Value {
    let mut v = wire::value(wire::cursor(c));
    if let Some(a) = aware_core::SessionKey::parse(&c.watcher)
        .ok()
        .and_then(|k| k.qualified_agent())
    {
        v["watcherAgentId"] = a.as_str().into();
    }
    v
}

fn session_json(d: &ConsoleSession, with_text: bool, now: i64) -> Value {
    let events: Vec<Value> = d
        .events
        .iter()
        .map(|e| wire::compact_event(&e.compact()))
        .collect();
    let oldest = d.events.last().map(|e| e.sequence);
    let mut timeline = json!({
        "events": events, "hasMore": d.more_events,
        // The log was pruned and this page reaches down to where it was cut.
        "historyGap": d.pruned_through > 0 && !d.more_events,
        "prunedThrough": d.pruned_through,
    });
    if d.more_events {
        timeline["nextBefore"] = oldest.into();
    }
    let turns: Vec<Value> = d
        .turns
        .iter()
        .map(|t| {
            let mut v = wire::value(wire::turn(t));
            if !with_text {
                if let Some(m) = v.as_object_mut() {
                    m.remove("text");
                    m.remove("upstreamText");
                }
            }
            v
        })
        .collect();
    json!({
        "session": wire::session(&d.session),
        "timeline": timeline,
        "notices": d.notices.iter().map(wire::notice).collect::<Vec<_>>(),
        "noticesOnIt": d.notices_on.iter().map(|(w, n)| {
            let mut v = wire::value(wire::notice(n));
            v["watcherSessionKey"] = w.clone().into();
            v
        }).collect::<Vec<_>>(),
        "systemEvents": d.system_events.iter().map(wire::system_event).collect::<Vec<_>>(),
        "watches": d.watches.iter().map(cursor_json).collect::<Vec<_>>(),
        "watchers": d.watchers.iter().map(cursor_json).collect::<Vec<_>>(),
        "runs": d.runs.iter().map(wire::run).collect::<Vec<_>>(),
        "turns": turns, "turnCount": d.turn_count, "turnText": with_text, "now": now,
    })
}

/// What the console shows of a link's monitoring beyond §1.9: its physical source, and the
/// monitor's current missing streak (misses in a row; `upstream_missing` is recorded at the
/// threshold). Streaks live in the monitor's memory (04 §7), so they read 0 after a restart.
fn upstream_health(req: &Req, link: &aware_engine::views::LinkRow, up: &mut Value) {
    if !up.is_object() {
        return;
    }
    up["upstreamKind"] = link.upstream_kind.clone().into();
    if let Ok(source) = serde_json::from_str::<Value>(&link.upstream_ref_json) {
        up["source"] = source;
    }
    match crate::state::monitor(&req.state) {
        Some(m) => {
            let (misses, threshold) =
                m.missing_streak(&link.session_key, &link.agent_id, link.updated_at);
            up["monitored"] = true.into();
            up["misses"] = misses.into();
            up["missingThreshold"] = threshold.into();
        }
        None => up["monitored"] = false.into(),
    }
}

async fn session(
    req: &Req,
    caller: Option<&SessionRef>,
    seg: &str,
    mut q: Query,
) -> ApiResult<Response> {
    let key = parse_key(&decode_segment(seg)?)?;
    let agent = q
        .take("agentId")?
        .map(|a| parse_agent("agentId", &a))
        .transpose()?;
    let before = q.int("before", 1..=i64::MAX, "before must be a positive integer")?;
    let limit = q
        .int(
            "limit",
            1..=200,
            "limit must be an integer between 1 and 200",
        )?
        .unwrap_or(50);
    q.finish()?;
    let target = resolve_ref(req, &key, agent.as_ref(), caller)?;
    let engine = req.state.engine()?;
    let t2 = target.clone();
    let e2 = engine.clone();
    if !blocking(move || Ok(e2.session_exists(&t2)?)).await? {
        return Err(ApiError::not_found(
            "session_not_found",
            format!("session \"{}\" does not exist", target.key),
        ));
    }
    check_visible(req, caller, target.key.as_str(), target.agent.as_str())?;
    // Turn text is conversation content: only an operator (the viewer of no agent: no
    // `X-Aware-Session`, the operator's token) sees it; any other viewer sees roles and times.
    let with_text = viewer(req, caller).is_none();
    let now = req.state.now();
    let d =
        blocking(move || Ok(engine.console_session(&target, before, limit as u32, 50)?)).await?;
    let mut body = session_json(&d, with_text, now);
    if let Some(link) = &d.session.link {
        upstream_health(req, link, &mut body["session"]["upstream"]);
    }
    // Cursors and notices of agents the viewer may not see are left out.
    for (list, field) in [("watches", "targetAgentId"), ("watchers", "watcherAgentId")] {
        if let Some(a) = body[list].as_array_mut() {
            a.retain(|c| c[field].as_str().is_some_and(|x| may_see(req, caller, x)));
        }
    }
    if let Some(a) = body["noticesOnIt"].as_array_mut() {
        a.retain(|n| {
            n["watcherSessionKey"]
                .as_str()
                .and_then(|k| aware_core::SessionKey::parse(k).ok())
                .and_then(|k| k.qualified_agent().map(|a| a.as_str().to_string()))
                .is_some_and(|x| may_see(req, caller, &x))
        });
    }
    // Thousands of watchers made pages of megabytes (decision D7); the routes `…/watchers` page.
    crate::wire::cap_lists(&mut body, &["watches", "watchers", "noticesOnIt"], 200);
    ok(body)
}

/// One edge of §7.3, serialized straight from the engine's edge: a 2,500-edge answer built as
/// `Value` maps spent more time allocating than reading the store.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct EdgeOut {
    from: usize,
    to: usize,
    kind: &'static str,
    pending: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    implied: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_seen: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    notified: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    material: Option<i64>,
}

#[derive(serde::Serialize)]
struct GraphOut {
    nodes: Vec<Value>,
    edges: Vec<EdgeOut>,
    truncated: bool,
    now: i64,
}

/// Nodes are §7.1 rows; an edge names its ends by node index so that a 2,500-edge answer does
/// not repeat two session keys per edge (the encoding was most of the route's time).
fn graph_out(g: &Graph, now: i64) -> GraphOut {
    let index: std::collections::HashMap<(&str, &str), usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.session.key.as_str(), r.session.agent_id.as_str()), i))
        .collect();
    let edges = g
        .edges
        .iter()
        .filter_map(|e| {
            let from = *index.get(&(e.from.0.as_str(), e.from.1.as_str()))?;
            let to = *index.get(&(e.to.0.as_str(), e.to.1.as_str()))?;
            let c = e.cursor.as_ref().map(|c| &c.state);
            Some(EdgeOut {
                from,
                to,
                kind: e.kind.as_str(),
                pending: e.pending,
                implied: e.implied,
                last_seen: c.map(|c| c.last_seen),
                notified: c.map(|c| c.notified),
                material: c.map(|c| c.material),
            })
        })
        .collect();
    GraphOut {
        nodes: g.nodes.iter().map(|r| row_json(r, now)).collect(),
        edges,
        truncated: g.truncated,
        now,
    }
}

async fn graph(req: &Req, caller: Option<&SessionRef>, mut q: Query) -> ApiResult<Response> {
    let agents = agent_filter(req, caller, &mut q)?;
    let focus = q.take("focus")?.map(|k| parse_key(&k)).transpose()?;
    let focus_agent = q
        .take("focusAgentId")?
        .map(|a| parse_agent("focusAgentId", &a))
        .transpose()?;
    let depth = q
        .int("depth", 1..=6, "depth must be an integer between 1 and 6")?
        .unwrap_or(2) as u32;
    let limit = q
        .int(
            "limit",
            1..=500,
            "limit must be an integer between 1 and 500",
        )?
        .unwrap_or(300) as u32;
    q.finish()?;
    let focus = match focus {
        Some(k) => {
            let r = resolve_ref(req, &k, focus_agent.as_ref(), caller)?;
            let (e, r2) = (req.state.engine()?, r.clone());
            if !blocking(move || Ok(e.session_exists(&r2)?)).await? {
                return Err(ApiError::not_found(
                    "session_not_found",
                    format!("session \"{}\" does not exist", r.key),
                ));
            }
            check_visible(req, caller, r.key.as_str(), r.agent.as_str())?;
            Some(r)
        }
        None => None,
    };
    let engine = req.state.engine()?;
    let now = req.state.now();
    let g =
        blocking(move || Ok(engine.console_graph(focus.as_ref(), depth, limit, &agents)?)).await?;
    Ok((StatusCode::OK, axum::Json(graph_out(&g, now))).into_response())
}

async fn overview(req: &Req, caller: Option<&SessionRef>, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let engine = req.state.engine()?;
    let e = engine.clone();
    let agents = visible(req, caller).unwrap_or_default();
    let (sessions, pending) = blocking(move || {
        let sessions = e
            .console_sessions(&ConsoleFilter {
                agents,
                limit: 1,
                ..Default::default()
            })?
            .1;
        Ok((sessions, e.pending_count()?))
    })
    .await?;
    let m = engine.metrics();
    let events: Map<String, Value> = EventKind::ALL
        .iter()
        .map(|k| (k.as_str().to_string(), m.appended_total(*k).into()))
        .collect();
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let store = engine.store_metrics();
    let commit_buckets: Vec<Value> = aware_engine::storage::COMMIT_BUCKETS_US
        .iter()
        .zip(store.commit_us_buckets.iter())
        .map(|(le, n)| json!({"leMicros": le, "count": g(n)}))
        .collect();
    let mon = crate::state::monitor(&req.state);
    let mv = |f: &dyn Fn(&aware_upstream::monitor::MonitorMetrics) -> u64| {
        mon.as_ref().map_or(0, |m| f(&m.metrics))
    };
    // Pending is global in the store's gauge; a session viewer gets it only as an operator
    // would, so it is left out for them.
    let mut body = json!({
        "now": req.state.now(),
        "sessions": sessions,
        "eventsAppended": events,
        "notices": {
            "opened": EngineMetrics::get(&m.notices_opened),
            "followUps": EngineMetrics::get(&m.notice_followups),
            "acked": EngineMetrics::get(&m.notices_acked),
        },
        "wakes": {"delivered": EngineMetrics::get(&m.wakes_delivered), "coalesced": EngineMetrics::get(&m.wakes_coalesced)},
        "monitor": {
            "enabled": mon.is_some(),
            "ticks": mv(&|m| g(&m.ticks)), "humanTurns": mv(&|m| g(&m.human_turns)),
            "missing": mv(&|m| g(&m.missing)), "providerTimeouts": mv(&|m| g(&m.provider_timeouts)),
            "ticksSkipped": mv(&|m| g(&m.ticks_skipped)),
        },
        "store": {
            "commits": store.commits(), "commitFailures": g(&store.commit_failures),
            "commitMicrosSum": g(&store.commit_us_sum), "commitBuckets": commit_buckets,
        },
    });
    if viewer(req, caller).is_none() {
        body["pendingNotices"] = pending.into();
    }
    if let Some(m) = &mon {
        // Engine time: under `--test-clock` it moves only with `POST /v1/admin/clock`.
        body["monitor"]["nextTickAt"] = m.next_due().into();
    }
    ok(body)
}

/// `GET /v1/console/events`: a hint each time the store changed (at most one per 250 ms). It
/// carries no session data, so every viewer may have it; the page then re-reads what it shows.
async fn events(req: &Req, q: Query) -> ApiResult<Response> {
    q.finish()?;
    let engine = req.state.engine()?;
    // Counted with the wake streams (streams.rs): the slot lives inside the stream.
    let slot =
        crate::http::streams::claim(&req.state.streams, &req.state.config.http, &req.identity)?;
    let rx = engine.subscribe_changes();
    let first = *rx.borrow();
    let hello = futures_util::stream::once(async move {
        Ok::<Event, Infallible>(
            Event::default()
                .event("hello")
                .data(json!({"generation": first}).to_string()),
        )
    });
    let changes = futures_util::stream::unfold((rx, slot), |(mut rx, slot)| async move {
        rx.changed().await.ok()?;
        let generation = *rx.borrow_and_update();
        let ev = Event::default()
            .event("change")
            .data(json!({"generation": generation}).to_string());
        // A burst of commits becomes one hint: the page re-reads everything anyway.
        tokio::time::sleep(Duration::from_millis(250)).await;
        Some((Ok::<Event, Infallible>(ev), (rx, slot)))
    });
    use futures_util::StreamExt;
    Ok(Sse::new(hello.chain(changes))
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("keep-alive"),
        )
        .into_response())
}

pub(crate) async fn handle(
    req: &Req,
    s: &[&str],
    route: &'static str,
    caller: Option<&SessionRef>,
    q: Query,
) -> ApiResult<Response> {
    match route {
        "/v1/console/sessions" => sessions(req, caller, q).await,
        "/v1/console/sessions/{key}" => session(req, caller, s[3], q).await,
        "/v1/console/graph" => graph(req, caller, q).await,
        "/v1/console/overview" => overview(req, caller, q).await,
        "/v1/console/events" => events(req, q).await,
        _ => Err(ApiError::not_found("not_found", "no such route")),
    }
}
