//! `GET /metrics` in the Prometheus text format (03 §12); every metric exists from start-up.

use crate::error::ApiResult;
use crate::server::{blocking, Shared};
use aware_core::EventKind;
use aware_engine::EngineMetrics;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use std::fmt::Write;
use std::sync::atomic::Ordering;

pub(crate) fn count_request(state: &Shared, route: &'static str, status: u16) {
    if let Ok(mut m) = state.http_counts.lock() {
        *m.entry((route, status)).or_insert(0) += 1;
    }
}

fn line(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(crate) async fn render(state: &Shared) -> ApiResult<Response> {
    let engine = state.engine().ok();
    let pending = match engine.clone() {
        Some(e) => blocking(move || Ok(e.pending_count().unwrap_or(0)))
            .await
            .unwrap_or(0),
        None => 0,
    };
    let mut o = String::new();
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let em = engine.as_ref().map(|e| e.metrics());
    let v = |f: &dyn Fn(&EngineMetrics) -> u64| em.map_or(0, f);
    line(
        &mut o,
        "aware_events_appended_total",
        "Events appended to the signal log, by kind.",
        "counter",
    );
    for k in EventKind::ALL {
        let _ = writeln!(
            o,
            "aware_events_appended_total{{kind=\"{}\"}} {}",
            k.as_str(),
            v(&|m| m.appended_total(k))
        );
    }
    let mon = crate::server::monitor(state);
    let mv =
        |f: &dyn Fn(&aware_upstream::monitor::MonitorMetrics) -> &std::sync::atomic::AtomicU64| {
            mon.as_ref()
                .map_or(0, |m| f(&m.metrics).load(Ordering::Relaxed))
        };
    let counters: [(&str, &str, u64); 15] = [
        (
            "aware_event_append_failures_total",
            "Appends that failed (the primary action still stood).",
            v(&|m| EngineMetrics::get(&m.append_failures)),
        ),
        (
            "aware_event_dedupe_hits_total",
            "Appends answered by an existing event.",
            v(&|m| EngineMetrics::get(&m.dedupe_hits)),
        ),
        (
            "aware_read_failures_total",
            "Signal-log reads that failed and degraded.",
            v(&|m| EngineMetrics::get(&m.read_failures)),
        ),
        (
            "aware_notices_opened_total",
            "Notices opened.",
            v(&|m| EngineMetrics::get(&m.notices_opened)),
        ),
        (
            "aware_notice_followups_total",
            "Follow-up notices opened by acks.",
            v(&|m| EngineMetrics::get(&m.notice_followups)),
        ),
        (
            "aware_notices_acked_total",
            "Notices acknowledged.",
            v(&|m| EngineMetrics::get(&m.notices_acked)),
        ),
        (
            "aware_wakes_coalesced_total",
            "Wake requests not delivered at once.",
            v(&|m| EngineMetrics::get(&m.wakes_coalesced)),
        ),
        (
            "aware_wake_webhook_failures_total",
            "Webhook deliveries that failed for good.",
            g(&state.webhook_failures),
        ),
        (
            "aware_prune_batches_total",
            "Prune transactions that deleted events.",
            v(&|m| EngineMetrics::get(&m.prune_batches)),
        ),
        (
            "aware_cursors_expired_total",
            "Cursors removed by expiry.",
            v(&|m| EngineMetrics::get(&m.cursors_expired)),
        ),
        (
            "aware_monitor_ticks_total",
            "Upstream monitor ticks.",
            mv(&|m| &m.ticks),
        ),
        (
            "aware_monitor_ticks_skipped_total",
            "Monitor ticks skipped (previous still running).",
            mv(&|m| &m.ticks_skipped),
        ),
        (
            "aware_monitor_provider_timeouts_total",
            "Provider calls that timed out.",
            mv(&|m| &m.provider_timeouts),
        ),
        (
            "aware_upstream_human_turns_total",
            "Human turns detected upstream.",
            mv(&|m| &m.human_turns),
        ),
        (
            "aware_upstream_missing_total",
            "upstream_missing events recorded.",
            mv(&|m| &m.missing),
        ),
    ];
    for (name, help, value) in counters {
        line(&mut o, name, help, "counter");
        let _ = writeln!(o, "{name} {value}");
    }
    let store = engine.as_ref().map(|e| e.store().metrics());
    line(
        &mut o,
        "aware_commits_total",
        "Writer transactions committed.",
        "counter",
    );
    let _ = writeln!(
        o,
        "aware_commits_total {}",
        store.map_or(0, |s| s.commits())
    );
    line(
        &mut o,
        "aware_group_commit_ops",
        "Ops per commit.",
        "histogram",
    );
    let mut cum = 0;
    for (i, b) in aware_store::GROUP_BUCKETS.iter().enumerate() {
        cum += store.map_or(0, |s| g(&s.group_buckets[i]));
        let _ = writeln!(o, "aware_group_commit_ops_bucket{{le=\"{b}\"}} {cum}");
    }
    let commits = store.map_or(0, |s| s.commits());
    let _ = writeln!(o, "aware_group_commit_ops_bucket{{le=\"+Inf\"}} {commits}\naware_group_commit_ops_sum {}\naware_group_commit_ops_count {commits}", store.map_or(0, |s| s.ops()));
    line(
        &mut o,
        "aware_commit_seconds",
        "Commit latency of writer batches.",
        "histogram",
    );
    let mut cum = 0;
    for (i, b) in aware_store::COMMIT_BUCKETS_US.iter().enumerate() {
        cum += store.map_or(0, |s| g(&s.commit_us_buckets[i]));
        let _ = writeln!(
            o,
            "aware_commit_seconds_bucket{{le=\"{}\"}} {cum}",
            *b as f64 / 1e6
        );
    }
    let sum_us = store.map_or(0, |s| g(&s.commit_us_sum));
    let _ = writeln!(o, "aware_commit_seconds_bucket{{le=\"+Inf\"}} {commits}\naware_commit_seconds_sum {}\naware_commit_seconds_count {commits}", sum_us as f64 / 1e6);
    line(
        &mut o,
        "aware_pending_notices",
        "Pending notices now.",
        "gauge",
    );
    let _ = writeln!(o, "aware_pending_notices {pending}");
    let exec = &state.provider_exec.metrics;
    line(
        &mut o,
        "aware_provider_calls_running",
        "Provider and paired-node calls running on the provider executor now.",
        "gauge",
    );
    let _ = writeln!(o, "aware_provider_calls_running {}", g(&exec.running));
    line(
        &mut o,
        "aware_provider_call_timeouts_total",
        "Provider calls (monitor and catalog) not answered within their deadline.",
        "counter",
    );
    let _ = writeln!(
        o,
        "aware_provider_call_timeouts_total {}",
        g(&exec.timeouts)
    );
    line(
        &mut o,
        "aware_wakes_requested_total",
        "Wake requests by reason.",
        "counter",
    );
    for (reason, val) in [
        (
            "session-state",
            v(&|m| EngineMetrics::get(&m.wakes_requested_session_state)),
        ),
        (
            "message",
            v(&|m| EngineMetrics::get(&m.wakes_requested_message)),
        ),
        (
            "spawn",
            v(&|m| EngineMetrics::get(&m.wakes_requested_spawn)),
        ),
    ] {
        let _ = writeln!(
            o,
            "aware_wakes_requested_total{{reason=\"{reason}\"}} {val}"
        );
    }
    line(
        &mut o,
        "aware_wakes_delivered_total",
        "Wakes delivered by channel.",
        "counter",
    );
    let _ = writeln!(
        o,
        "aware_wakes_delivered_total{{channel=\"sse\"}} {}",
        g(&state.sse_delivered)
    );
    let _ = writeln!(
        o,
        "aware_wakes_delivered_total{{channel=\"webhook\"}} {}",
        g(&state.webhook_delivered)
    );
    line(
        &mut o,
        "aware_prune_deleted_total",
        "Events deleted by retention.",
        "counter",
    );
    let _ = writeln!(
        o,
        "aware_prune_deleted_total{{reason=\"age\"}} {}",
        v(&|m| EngineMetrics::get(&m.prune_deleted_age))
    );
    let _ = writeln!(
        o,
        "aware_prune_deleted_total{{reason=\"cap\"}} {}",
        v(&|m| EngineMetrics::get(&m.prune_deleted_cap))
    );
    line(
        &mut o,
        "aware_http_requests_total",
        "HTTP requests by route and status.",
        "counter",
    );
    if let Ok(m) = state.http_counts.lock() {
        for ((route, status), n) in m.iter() {
            let _ = writeln!(
                o,
                "aware_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
    }
    // Outside I/O bounds (issue 9): webhook lanes and reply waiters.
    let wh = &state.webhooks;
    for (name, help, kind, value) in [
        (
            "aware_wake_webhook_in_flight",
            "Webhook deliveries running now.",
            "gauge",
            g(&wh.in_flight),
        ),
        (
            "aware_wake_webhook_queued",
            "Wakes waiting for a webhook slot (one per session).",
            "gauge",
            g(&wh.queued),
        ),
        (
            "aware_wake_webhook_coalesced_total",
            "Waiting webhook wakes replaced by a newer one for the same session.",
            "counter",
            g(&wh.coalesced),
        ),
        (
            "aware_wake_webhook_dropped_total",
            "Webhook wakes dropped because the agent's queue was full.",
            "counter",
            g(&wh.dropped),
        ),
        (
            "aware_reply_waiters",
            "sessions_send calls waiting for a reply now.",
            "gauge",
            state.reply_waiters.load(Ordering::Relaxed) as u64,
        ),
    ] {
        line(&mut o, name, help, kind);
        let _ = writeln!(o, "{name} {value}");
    }
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        o,
    )
        .into_response())
}
