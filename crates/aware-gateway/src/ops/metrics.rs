//! `GET /metrics` in the Prometheus text format (03 §12); every metric exists from start-up.
//! The figures are read at scrape time from the counters the gateway, the engine and the store
//! keep; the families are handed to the `prometheus` crate's text encoder (decision D52).

use crate::http::error::{ApiError, ApiResult};
use crate::http::stats::DURATION_BUCKETS;
use crate::state::{blocking, Shared};
use aware_core::EventKind;
use aware_engine::EngineMetrics;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use std::sync::atomic::{AtomicU64, Ordering};

use MetricType::{COUNTER, GAUGE};

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(n, v)| {
            let mut l = LabelPair::default();
            l.set_name(n.to_string());
            l.set_value(v.to_string());
            l
        })
        .collect()
}

fn sample(kind: MetricType, pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut m = Metric::from_label(labels(pairs));
    match kind {
        MetricType::COUNTER => {
            let mut c = Counter::default();
            c.set_value(value);
            m.set_counter(c);
        }
        _ => {
            let mut g = Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
        }
    }
    m
}

/// One histogram series from non-cumulative bucket counts (`upper bound`, count).
fn histogram_sample(
    pairs: &[(&str, &str)],
    buckets: impl IntoIterator<Item = (f64, u64)>,
    sum: f64,
    count: u64,
) -> Metric {
    let mut cum = 0;
    let buckets = buckets
        .into_iter()
        .map(|(upper, n)| {
            cum += n;
            let mut b = Bucket::default();
            b.set_upper_bound(upper);
            b.set_cumulative_count(cum);
            b
        })
        .collect();
    let mut h = Histogram::default();
    h.set_bucket(buckets);
    h.set_sample_sum(sum);
    h.set_sample_count(count);
    let mut m = Metric::from_label(labels(pairs));
    m.set_histogram(h);
    m
}

/// The families of one scrape, in the order they are written.
#[derive(Default)]
struct Families(Vec<MetricFamily>);

impl Families {
    fn family(&mut self, name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) {
        let mut f = MetricFamily::default();
        f.set_name(name.to_string());
        f.set_help(help.to_string());
        f.set_field_type(kind);
        f.set_metric(metrics);
        self.0.push(f);
    }

    /// A family of one sample without labels.
    fn one(&mut self, name: &str, help: &str, kind: MetricType, value: f64) {
        self.family(name, help, kind, vec![sample(kind, &[], value)]);
    }
}

/// `aware_build_info` and, on Linux, the conventional `process_*` family.
fn build_and_process(f: &mut Families) {
    f.family(
        "aware_build_info",
        "Always 1; the labels name the build.",
        GAUGE,
        vec![sample(
            GAUGE,
            &[("version", env!("CARGO_PKG_VERSION"))],
            1.0,
        )],
    );
    #[cfg(target_os = "linux")]
    if let Some(p) = proc_self::read() {
        for (name, help, kind, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                GAUGE,
                p.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                GAUGE,
                p.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Open file descriptors.",
                GAUGE,
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Limit on open file descriptors (soft).",
                GAUGE,
                p.max_fds,
            ),
            ("process_threads", "OS threads.", GAUGE, p.threads),
            (
                "process_cpu_seconds_total",
                "User and system CPU time spent, in seconds.",
                COUNTER,
                p.cpu_seconds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds.",
                GAUGE,
                p.start_time_seconds,
            ),
        ] {
            // A value /proc did not give (an unusual kernel) is left out, not reported as 0.
            if let Some(v) = value {
                f.one(name, help, kind, v);
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
    let mut f = Families::default();
    let em = engine.as_ref().map(|e| e.metrics());
    build_and_process(&mut f);
    engine_counters(&mut f, state, em);
    commits(&mut f, engine.as_ref().map(|e| e.store_metrics()));
    gauges(&mut f, state, &counts);
    wakes_and_prune(&mut f, state, em);
    http_requests(&mut f, state);
    outside_io(&mut f, state);
    // The encoder refuses a family without samples (no request answered yet).
    f.0.retain(|m| !m.get_metric().is_empty());
    let mut o = String::new();
    prometheus::TextEncoder::new()
        .encode_utf8(&f.0, &mut o)
        .map_err(|e| ApiError::internal(format!("metrics: {e}")))?;
    crate::ops::cluster::metrics(state, &mut o);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        o,
    )
        .into_response())
}

/// The engine's and the upstream monitor's counters.
fn engine_counters(f: &mut Families, state: &Shared, em: Option<&EngineMetrics>) {
    let v = |get: &dyn Fn(&EngineMetrics) -> u64| em.map_or(0, get) as f64;
    f.family(
        "aware_events_appended_total",
        "Events appended to the signal log, by kind.",
        COUNTER,
        EventKind::ALL
            .iter()
            .map(|k| {
                sample(
                    COUNTER,
                    &[("kind", k.as_str())],
                    v(&|m| m.appended_total(*k)),
                )
            })
            .collect(),
    );
    let mon = crate::state::monitor(state);
    let mv = |get: &dyn Fn(&aware_upstream::monitor::MonitorMetrics) -> &AtomicU64| {
        mon.as_ref().map_or(0, |m| load(get(&m.metrics))) as f64
    };
    let counters: [(&str, &str, f64); 15] = [
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
            load(&state.webhook_failures) as f64,
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
        f.one(name, help, COUNTER, value);
    }
}

/// The writer's commits: count, ops per commit, commit latency.
fn commits(f: &mut Families, store: Option<&aware_engine::storage::StoreMetrics>) {
    let commits = store.map_or(0, |s| s.commits());
    f.one(
        "aware_commits_total",
        "Writer transactions committed.",
        COUNTER,
        commits as f64,
    );
    let group = aware_engine::storage::GROUP_BUCKETS
        .iter()
        .enumerate()
        .map(|(i, b)| (*b as f64, store.map_or(0, |s| load(&s.group_buckets[i]))));
    f.family(
        "aware_group_commit_ops",
        "Ops per commit.",
        MetricType::HISTOGRAM,
        vec![histogram_sample(
            &[],
            group,
            store.map_or(0, |s| s.ops()) as f64,
            commits,
        )],
    );
    let latency = aware_engine::storage::COMMIT_BUCKETS_US
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                *b as f64 / 1e6,
                store.map_or(0, |s| load(&s.commit_us_buckets[i])),
            )
        });
    let sum_us = store.map_or(0, |s| load(&s.commit_us_sum));
    f.family(
        "aware_commit_seconds",
        "Commit latency of writer batches.",
        MetricType::HISTOGRAM,
        vec![histogram_sample(&[], latency, sum_us as f64 / 1e6, commits)],
    );
}

/// What the store and the process hold now.
fn gauges(f: &mut Families, state: &Shared, counts: &aware_engine::storage::StoreGauges) {
    f.one(
        "aware_pending_notices",
        "Pending notices now.",
        GAUGE,
        counts.pending as f64,
    );
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
            load(&state.http.stream_subscribers),
        ),
    ] {
        f.one(name, help, GAUGE, value as f64);
    }
    let exec = &state.provider_exec.metrics;
    f.one(
        "aware_provider_calls_running",
        "Provider and paired-node calls running on the provider executor now.",
        GAUGE,
        load(&exec.running) as f64,
    );
    f.one(
        "aware_provider_call_timeouts_total",
        "Provider calls (monitor and catalog) not answered within their deadline.",
        COUNTER,
        load(&exec.timeouts) as f64,
    );
}

/// Wake requests and deliveries, and what retention deleted.
fn wakes_and_prune(f: &mut Families, state: &Shared, em: Option<&EngineMetrics>) {
    let v = |get: &dyn Fn(&EngineMetrics) -> u64| em.map_or(0, get) as f64;
    let by = |label: &str, values: &[(&str, f64)]| -> Vec<Metric> {
        values
            .iter()
            .map(|(l, x)| sample(COUNTER, &[(label, l)], *x))
            .collect()
    };
    f.family(
        "aware_wakes_requested_total",
        "Wake requests by reason.",
        COUNTER,
        by(
            "reason",
            &[
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
            ],
        ),
    );
    f.family(
        "aware_wakes_delivered_total",
        "Wakes delivered by channel.",
        COUNTER,
        by(
            "channel",
            &[
                ("sse", load(&state.sse_delivered) as f64),
                ("webhook", load(&state.webhook_delivered) as f64),
            ],
        ),
    );
    f.family(
        "aware_prune_deleted_total",
        "Events deleted by retention.",
        COUNTER,
        by(
            "reason",
            &[
                ("age", v(&|m| EngineMetrics::get(&m.prune_deleted_age))),
                ("cap", v(&|m| EngineMetrics::get(&m.prune_deleted_cap))),
            ],
        ),
    );
}

/// Requests and their durations, by route and status.
fn http_requests(f: &mut Families, state: &Shared) {
    let (mut requests, mut durations) = (Vec::new(), Vec::new());
    if let Ok(m) = state.http.series.lock() {
        for ((route, status), s) in m.iter() {
            let status = status.to_string();
            let pairs = [("route", *route), ("status", status.as_str())];
            requests.push(sample(COUNTER, &pairs, s.count as f64));
            durations.push(histogram_sample(
                &pairs,
                DURATION_BUCKETS.iter().copied().zip(s.buckets),
                s.sum_secs,
                s.count,
            ));
        }
    }
    f.family(
        "aware_http_requests_total",
        "HTTP requests by route and status.",
        COUNTER,
        requests,
    );
    f.family(
        "aware_http_request_duration_seconds",
        "Time to answer HTTP requests (until the response head), by route and status.",
        MetricType::HISTOGRAM,
        durations,
    );
}

/// Outside I/O bounds (decision D4): webhook lanes and reply waiters.
fn outside_io(f: &mut Families, state: &Shared) {
    let wh = &state.webhooks;
    for (name, help, kind, value) in [
        (
            "aware_wake_webhook_in_flight",
            "Webhook deliveries running now.",
            GAUGE,
            load(&wh.in_flight),
        ),
        (
            "aware_wake_webhook_queued",
            "Wakes waiting for a webhook slot (one per session).",
            GAUGE,
            load(&wh.queued),
        ),
        (
            "aware_wake_webhook_coalesced_total",
            "Waiting webhook wakes replaced by a newer one for the same session.",
            COUNTER,
            load(&wh.coalesced),
        ),
        (
            "aware_wake_webhook_dropped_total",
            "Webhook wakes dropped because the agent's queue was full.",
            COUNTER,
            load(&wh.dropped),
        ),
        (
            "aware_reply_waiters",
            "sessions_send calls waiting for a reply now.",
            GAUGE,
            state.streams.waiters() as u64,
        ),
    ] {
        f.one(name, help, kind, value as f64);
    }
}
