//! `GET /metrics` in the Prometheus text format (03 §12); every metric exists from start-up.

use crate::http::error::ApiResult;
use crate::http::stats::DURATION_BUCKETS;
use crate::state::{blocking, Shared};
use aware_core::EventKind;
use aware_engine::EngineMetrics;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use std::fmt::Write;
use std::sync::atomic::Ordering;

fn line(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// `aware_build_info` and, on Linux, the conventional `process_*` family.
fn build_and_process(out: &mut String) {
    line(
        out,
        "aware_build_info",
        "Always 1; the labels name the build.",
        "gauge",
    );
    let _ = writeln!(
        out,
        "aware_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    #[cfg(target_os = "linux")]
    if let Some(p) = proc_self::read() {
        for (name, help, kind, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                "gauge",
                p.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                "gauge",
                p.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Open file descriptors.",
                "gauge",
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Limit on open file descriptors (soft).",
                "gauge",
                p.max_fds,
            ),
            ("process_threads", "OS threads.", "gauge", p.threads),
            (
                "process_cpu_seconds_total",
                "User and system CPU time spent, in seconds.",
                "counter",
                p.cpu_seconds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds.",
                "gauge",
                p.start_time_seconds,
            ),
        ] {
            // A value /proc did not give (an unusual kernel) is left out, not reported as 0.
            if let Some(v) = value {
                line(out, name, help, kind);
                let _ = writeln!(out, "{name} {v}");
            }
        }
    }
}

/// The process's own figures from /proc, read with the `procfs` crate (Linux only; elsewhere the
/// `process_*` family is left out rather than faked).
#[cfg(target_os = "linux")]
mod proc_self {
    use procfs::process::{LimitValue, Process};

    pub(super) struct ProcSelf {
        pub resident_bytes: Option<f64>,
        pub virtual_bytes: Option<f64>,
        pub open_fds: Option<f64>,
        pub max_fds: Option<f64>,
        pub threads: Option<f64>,
        pub cpu_seconds: Option<f64>,
        pub start_time_seconds: Option<f64>,
    }

    pub(super) fn read() -> Option<ProcSelf> {
        let me = Process::myself().ok()?;
        let stat = me.stat().ok();
        // USER_HZ, from sysconf; the times of /proc/<pid>/stat are in these ticks.
        let hz = procfs::ticks_per_second() as f64;
        let status = me.status().ok();
        let max_fds = me
            .limits()
            .ok()
            .and_then(|l| match l.max_open_files.soft_limit {
                LimitValue::Value(v) => Some(v as f64),
                LimitValue::Unlimited => None,
            });
        let boot = procfs::boot_time_secs().ok();
        Some(ProcSelf {
            resident_bytes: status.and_then(|s| s.vmrss).map(|kb| kb as f64 * 1024.0),
            virtual_bytes: stat.as_ref().map(|s| s.vsize as f64),
            open_fds: me.fd_count().ok().map(|n| n as f64),
            max_fds,
            threads: stat.as_ref().map(|s| s.num_threads as f64),
            cpu_seconds: stat.as_ref().map(|s| (s.utime + s.stime) as f64 / hz),
            start_time_seconds: match (boot, stat.as_ref()) {
                (Some(b), Some(s)) => Some(b as f64 + s.starttime as f64 / hz),
                _ => None,
            },
        })
    }
}

pub(crate) async fn render(state: &Shared) -> ApiResult<Response> {
    let engine = state.engine().ok();
    // Counted now, in one read snapshot; 0 until start-up finished or when the read fails (a
    // scrape never fails because of the store).
    let counts = match engine.clone() {
        Some(e) => blocking(move || Ok(e.gauges().unwrap_or_default()))
            .await
            .unwrap_or_default(),
        None => aware_engine::storage::StoreGauges::default(),
    };
    let mut o = String::new();
    let em = engine.as_ref().map(|e| e.metrics());
    build_and_process(&mut o);
    engine_counters(&mut o, state, em);
    commits(&mut o, engine.as_ref().map(|e| e.store_metrics()));
    gauges(&mut o, state, &counts);
    wakes_and_prune(&mut o, state, em);
    http_requests(&mut o, state);
    outside_io(&mut o, state);
    crate::ops::cluster::metrics(state, &mut o);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        o,
    )
        .into_response())
}

/// The engine's and the upstream monitor's counters.
fn engine_counters(o: &mut String, state: &Shared, em: Option<&EngineMetrics>) {
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let v = |f: &dyn Fn(&EngineMetrics) -> u64| em.map_or(0, f);
    line(
        o,
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
    let mon = crate::state::monitor(state);
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
        line(o, name, help, "counter");
        let _ = writeln!(o, "{name} {value}");
    }
}

/// The writer's commits: count, ops per commit, commit latency.
fn commits(o: &mut String, store: Option<&aware_engine::storage::StoreMetrics>) {
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    line(
        o,
        "aware_commits_total",
        "Writer transactions committed.",
        "counter",
    );
    let _ = writeln!(
        o,
        "aware_commits_total {}",
        store.map_or(0, |s| s.commits())
    );
    line(o, "aware_group_commit_ops", "Ops per commit.", "histogram");
    let mut cum = 0;
    for (i, b) in aware_engine::storage::GROUP_BUCKETS.iter().enumerate() {
        cum += store.map_or(0, |s| g(&s.group_buckets[i]));
        let _ = writeln!(o, "aware_group_commit_ops_bucket{{le=\"{b}\"}} {cum}");
    }
    let commits = store.map_or(0, |s| s.commits());
    let _ = writeln!(o, "aware_group_commit_ops_bucket{{le=\"+Inf\"}} {commits}\naware_group_commit_ops_sum {}\naware_group_commit_ops_count {commits}", store.map_or(0, |s| s.ops()));
    line(
        o,
        "aware_commit_seconds",
        "Commit latency of writer batches.",
        "histogram",
    );
    let mut cum = 0;
    for (i, b) in aware_engine::storage::COMMIT_BUCKETS_US.iter().enumerate() {
        cum += store.map_or(0, |s| g(&s.commit_us_buckets[i]));
        let _ = writeln!(
            o,
            "aware_commit_seconds_bucket{{le=\"{}\"}} {cum}",
            *b as f64 / 1e6
        );
    }
    let sum_us = store.map_or(0, |s| g(&s.commit_us_sum));
    let _ = writeln!(o, "aware_commit_seconds_bucket{{le=\"+Inf\"}} {commits}\naware_commit_seconds_sum {}\naware_commit_seconds_count {commits}", sum_us as f64 / 1e6);
}

/// What the store and the process hold now.
fn gauges(o: &mut String, state: &Shared, counts: &aware_engine::storage::StoreGauges) {
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    line(o, "aware_pending_notices", "Pending notices now.", "gauge");
    let _ = writeln!(o, "aware_pending_notices {}", counts.pending);
    for (name, help, value) in [
        (
            "aware_sessions",
            "Sessions in the store now.",
            counts.sessions,
        ),
        (
            "aware_watchers",
            "Distinct watcher sessions holding at least one cursor now.",
            counts.watchers,
        ),
        (
            "aware_wake_stream_subscribers",
            "Wake streams (GET /v1/wakes, SSE) open now.",
            g(&state.http.stream_subscribers),
        ),
    ] {
        line(o, name, help, "gauge");
        let _ = writeln!(o, "{name} {value}");
    }
    let exec = &state.provider_exec.metrics;
    line(
        o,
        "aware_provider_calls_running",
        "Provider and paired-node calls running on the provider executor now.",
        "gauge",
    );
    let _ = writeln!(o, "aware_provider_calls_running {}", g(&exec.running));
    line(
        o,
        "aware_provider_call_timeouts_total",
        "Provider calls (monitor and catalog) not answered within their deadline.",
        "counter",
    );
    let _ = writeln!(
        o,
        "aware_provider_call_timeouts_total {}",
        g(&exec.timeouts)
    );
}

/// Wake requests and deliveries, and what retention deleted.
fn wakes_and_prune(o: &mut String, state: &Shared, em: Option<&EngineMetrics>) {
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let v = |f: &dyn Fn(&EngineMetrics) -> u64| em.map_or(0, f);
    line(
        o,
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
        o,
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
        o,
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
}

/// Requests and their durations, by route and status.
fn http_requests(o: &mut String, state: &Shared) {
    line(
        o,
        "aware_http_requests_total",
        "HTTP requests by route and status.",
        "counter",
    );
    // Both families come from one map; the histogram's lines are gathered apart so that each
    // family's samples follow its own `# TYPE` line, as the text format requires.
    let mut hist = String::new();
    if let Ok(m) = state.http.series.lock() {
        for ((route, status), s) in m.iter() {
            let labels = format!("route=\"{route}\",status=\"{status}\"");
            let _ = writeln!(o, "aware_http_requests_total{{{labels}}} {}", s.count);
            let mut cum = 0;
            for (b, n) in DURATION_BUCKETS.iter().zip(s.buckets) {
                cum += n;
                let _ = writeln!(
                    hist,
                    "aware_http_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {cum}"
                );
            }
            let _ = writeln!(
                hist,
                "aware_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n\
                 aware_http_request_duration_seconds_sum{{{labels}}} {}\n\
                 aware_http_request_duration_seconds_count{{{labels}}} {}",
                s.count, s.sum_secs, s.count
            );
        }
    }
    line(
        o,
        "aware_http_request_duration_seconds",
        "Time to answer HTTP requests (until the response head), by route and status.",
        "histogram",
    );
    o.push_str(&hist);
}

/// Outside I/O bounds: webhook lanes and reply waiters.
fn outside_io(o: &mut String, state: &Shared) {
    let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    // Outside I/O bounds (decision D4): webhook lanes and reply waiters.
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
        line(o, name, help, kind);
        let _ = writeln!(o, "{name} {value}");
    }
}
