//! Workload 3: gateway RSS with 10,000 sessions and 100,000 cursors.

use super::setup::*;
use crate::raw_sqlite::count_rows;
use crate::report::*;
use crate::util::*;
use anyhow::{bail, Context, Result};
use aware_gateway::GatewayConfig;
use aware_store_sqlite::Durability;
use serde_json::json;
use std::time::{Duration, Instant};

#[expect(
    clippy::too_many_lines,
    reason = "one workload: its set-up, the timed loop and its report, read top to bottom"
)]
pub(crate) fn w3(plan: &Plan) -> Result<Vec<Outcome>> {
    let durability = Durability::Normal;
    let sessions = (W3_SESSIONS / plan.scale).max(W3_WATCHERS * 2);
    let cursors = (W3_CURSORS / plan.scale).max(W3_WATCHERS);
    let watchers = W3_WATCHERS;
    let targets = sessions - watchers;
    let per_watcher = cursors / watchers;
    if per_watcher > targets {
        bail!("{per_watcher} cursors per watcher need at least as many targets (have {targets})");
    }
    let before = ProcStatus::read()?;
    let dir = plan.data_dir("w3")?;
    let gw = Gateway::start(&dir, durability)?;
    let started = ProcStatus::read()?;
    let cap = plan.cap(240);
    let t0 = Instant::now();
    let deadline = t0 + cap;

    // Sessions: watchers agent:main:w{j}, targets agent:main:t{i}.
    let base = gw.base.clone();
    let create: Vec<Worker<()>> = (0..SETUP_THREADS)
        .map(|t| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent = new_agent(&base)?;
                let url = "/v1/sessions";
                for i in (t as u64..sessions).step_by(SETUP_THREADS) {
                    if Instant::now() > deadline {
                        bail!("creating {sessions} sessions took over {} s", cap.as_secs());
                    }
                    let key = if i < watchers {
                        format!("agent:main:w{i}")
                    } else {
                        format!("agent:main:t{}", i - watchers)
                    };
                    let (code, _) = send(
                        &agent,
                        "POST",
                        url,
                        None,
                        Some(&json!({"key": key}).to_string()),
                    )?;
                    if code != 201 {
                        bail!("creating {key} answered {code}");
                    }
                }
                Ok(Vec::new())
            })
        })
        .collect();
    join_all(create)?;
    let created_secs = t0.elapsed().as_secs_f64();

    // Cursors: watcher j registers on `per_watcher` consecutive targets from its own offset.
    let t1 = Instant::now();
    let register: Vec<Worker<()>> = (0..SETUP_THREADS)
        .map(|t| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent = new_agent(&base)?;
                for j in (t as u64..watchers).step_by(SETUP_THREADS) {
                    let url = format!("/v1/sessions/agent:main:w{j}/watches");
                    let offset = j * (targets / watchers);
                    for k in 0..per_watcher {
                        if Instant::now() > deadline {
                            bail!(
                                "registering {cursors} cursors took over {} s",
                                cap.as_secs()
                            );
                        }
                        let target = format!("agent:main:t{}", (offset + k) % targets);
                        let (code, body) = send(
                            &agent,
                            "POST",
                            &url,
                            None,
                            Some(&json!({"target": target}).to_string()),
                        )?;
                        if code != 200 || !body.contains("\"watched\":true") {
                            bail!("registering w{j} on {target} answered {code}: {body}");
                        }
                    }
                }
                Ok(Vec::new())
            })
        })
        .collect();
    join_all(register)?;
    let registered_secs = t1.elapsed().as_secs_f64();

    std::thread::sleep(Duration::from_secs(2));
    let idle = ProcStatus::read()?;

    // Check what was built, straight from the file.
    let db = GatewayConfig::for_data_dir(&dir).db_path();
    let (n_sessions, n_cursors) = (
        count_rows(&db, "sessions")?,
        count_rows(&db, "session_watch_cursors")?,
    );
    gw.stop()?;
    if n_sessions != sessions || n_cursors != cursors {
        bail!(
            "expected {sessions} sessions and {cursors} cursors, the store holds {n_sessions} and \
             {n_cursors}"
        );
    }
    let db_bytes = std::fs::metadata(&db).map_or(0, |m| m.len())
        + std::fs::metadata(db.with_extension("db-wal")).map_or(0, |m| m.len());
    let line = format!(
        "3 gateway RSS [{}]: {} sessions + {} cursors ({} watchers x {} POST \
         /v1/sessions/{{w}}/watches) built over HTTP by {SETUP_THREADS} clients (sessions {:.1} \
         s = {} req/s, cursors {:.1} s = {} req/s), then 2 s idle: VmRSS {} (RssAnon {}, \
         RssFile {}, {} threads; peak VmHWM {}) | baseline before the gateway started: VmRSS {} \
         ({} right after start-up) -> ratio {:.1}x, gateway share {} | store on disk {}",
        durability.as_str(),
        fmt_int(sessions),
        fmt_int(cursors),
        watchers,
        fmt_int(per_watcher),
        created_secs,
        fmt_int((sessions as f64 / created_secs.max(1e-9)) as u64),
        registered_secs,
        fmt_int((cursors as f64 / registered_secs.max(1e-9)) as u64),
        fmt_kb(idle.rss_kb),
        fmt_kb(idle.anon_kb),
        fmt_kb(idle.file_kb),
        idle.threads,
        fmt_kb(idle.hwm_kb),
        fmt_kb(before.rss_kb),
        fmt_kb(started.rss_kb),
        idle.rss_kb as f64 / before.rss_kb.max(1) as f64,
        fmt_kb(idle.rss_kb.saturating_sub(before.rss_kb)),
        fmt_kb(db_bytes / 1024),
    );
    let mib = |kb: u64| kb as f64 / 1024.0;
    Ok(vec![Outcome::new("HTTP3", line)
        .figure("vmrss", mib(idle.rss_kb), "MiB", Better::Lower)
        .figure("vmhwm", mib(idle.hwm_kb), "MiB", Better::Lower)
        .figure(
            "gateway_share",
            mib(idle.rss_kb.saturating_sub(before.rss_kb)),
            "MiB",
            Better::Lower,
        )
        .target("vmrss", 40.0)])
}

/// The memory lines of `/proc/self/status`, in KiB.
pub(crate) struct ProcStatus {
    pub(crate) rss_kb: u64,
    pub(crate) hwm_kb: u64,
    pub(crate) anon_kb: u64,
    pub(crate) file_kb: u64,
    pub(crate) threads: u64,
}

impl ProcStatus {
    pub(crate) fn read() -> Result<ProcStatus> {
        let text =
            std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let s = ProcStatus {
            rss_kb: field("VmRSS"),
            hwm_kb: field("VmHWM"),
            anon_kb: field("RssAnon"),
            file_kb: field("RssFile"),
            threads: field("Threads"),
        };
        if s.rss_kb == 0 {
            bail!("/proc/self/status has no VmRSS");
        }
        Ok(s)
    }
}
