//! The gateway's side of a cluster: on a PostgreSQL store, start the cluster threads (wakes
//! across gateways, leadership) before start-up work, and report them in `/health` and
//! `/metrics`. On SQLite there is nothing to start and the gateway always leads.

use crate::state::AppState;
use aware_engine::Engine;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Starts the cluster threads when the engine runs on PostgreSQL (`pg`, the store `server.rs`
/// opened). Blocking (waits up to a few seconds for the first leadership attempt, so the
/// gateway that starts a cluster sweeps).
pub(crate) fn attach(state: &AppState, engine: &Engine, pg: Option<aware_store_pg::PgStore>) {
    let Some(store) = pg else {
        return;
    };
    let connect: aware_cluster::Connect =
        Arc::new(move || store.connect().map_err(|e| e.to_string()));
    let mut options = aware_cluster::ClusterOptions::new(connect);
    options.key = state.config.cluster_key.clone();
    match aware_cluster::Cluster::start(engine, options) {
        Ok(cluster) => {
            tracing::info!(event = "cluster_started", node = %cluster.status().node_id,
                leader = cluster.status().is_leader(), "cluster threads started (wakes across gateways, leadership)");
            let _ = state.cluster.set(cluster);
        }
        Err(e) => {
            // Without the threads this gateway neither leads nor hears other gateways' wakes;
            // it still serves (SSE catch-up on reconnect covers its subscribers).
            tracing::error!(event = "cluster_start_failed", error = %e, "cannot start the cluster threads");
        }
    }
}

/// Releases leadership at once (graceful shutdown): another gateway takes over on its next try.
pub(crate) fn shutdown(state: &AppState) {
    if let Some(c) = state.cluster.get() {
        c.shutdown();
    }
}

/// Whether this gateway runs the singletons now (always on SQLite).
pub(crate) fn is_leader(state: &AppState) -> bool {
    match state.cluster.get() {
        Some(c) => c.status().is_leader(),
        None => true,
    }
}

/// The `cluster` object of `/health`.
pub(crate) fn health(state: &AppState) -> serde_json::Value {
    match state.cluster.get() {
        Some(c) => {
            // `epoch` is the fencing token of this gateway's current or last leadership;
            // `leaseMs` how long its leadership lasts without a new proof (0 when following).
            let mut v = serde_json::json!({
                "node": c.status().node_id,
                "leader": c.status().is_leader(),
                "epoch": c.status().epoch(),
                "leaseMs": c.status().lease_left().as_millis() as u64,
                "listening": c.status().is_listening(),
            });
            // A session of another role holds the leadership lock: say so where operators look.
            if let Some(h) = c.status().stranger() {
                v["leaderLockHeldBy"] = h.into();
            }
            v
        }
        None => serde_json::json!({"node": null, "leader": true, "listening": false}),
    }
}

/// The cluster's lines of `/metrics`.
pub(crate) fn metrics(state: &AppState, out: &mut String) {
    use std::fmt::Write;
    let leader = is_leader(state) as u64;
    let _ = writeln!(
        out,
        "# HELP aware_cluster_leader 1 when this gateway runs the singletons (retention, sweep, run timeouts, monitor).\n# TYPE aware_cluster_leader gauge\naware_cluster_leader {leader}"
    );
    let Some(c) = state.cluster.get() else {
        return;
    };
    let s = c.status();
    let _ = writeln!(
        out,
        "# HELP aware_cluster_leader_epoch The epoch (fencing token) of this gateway's current or last leadership; 0 when it never led.\n# TYPE aware_cluster_leader_epoch gauge\naware_cluster_leader_epoch {}",
        s.epoch()
    );
    let counters: [(&str, &str, u64); 11] = [
        (
            "aware_cluster_leader_changes_total",
            "Times this gateway became leader.",
            s.leader_acquired.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_leader_lost_total",
            "Times this gateway stopped leading: a failed liveness check, a closed connection, a lease that ran out, shutdown.",
            s.leader_lost.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_wakes_published_total",
            "Wakes, reply signals and change hints this gateway published to the others (NOTIFY).",
            s.published.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_wakes_publish_dropped_total",
            "Wakes not published (queue full or PostgreSQL unreachable); the repair check covers them.",
            s.publish_dropped.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_wakes_received_total",
            "Wakes of other gateways received (LISTEN).",
            s.received.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_wakes_repaired_total",
            "Watchers woken by the repair check of lost notifications.",
            state
                .engine()
                .map(|e| aware_engine::EngineMetrics::get(&e.metrics().wakes_repaired))
                .unwrap_or(0),
        ),
        (
            "aware_cluster_changes_received_total",
            "Change hints of other gateways received (LISTEN): the console's change stream hints.",
            s.changes_received.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_replies_received_total",
            "Reply signals of other gateways received (LISTEN).",
            s.replies_received.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_replies_signalled_total",
            "sessions_send waiters here woken by a reply committed on another gateway.",
            state
                .engine()
                .map(|e| {
                    aware_engine::EngineMetrics::get(&e.metrics().replies_remote_signalled)
                })
                .unwrap_or(0),
        ),
        (
            "aware_cluster_notifications_rejected_total",
            "Notifications on the cluster channel dropped: unsigned, signed with another key, or a wake whose agentId is not its key's agent.",
            s.rejected.load(Ordering::Relaxed),
        ),
        (
            "aware_cluster_listener_reconnects_total",
            "Reconnects of the LISTEN connection.",
            s.listener_reconnects.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
}
