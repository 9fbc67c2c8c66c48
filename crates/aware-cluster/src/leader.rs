//! Leadership: the advisory lock on its own session, the lease, and the epoch.

use crate::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The session settings of the leadership connection (see the module doc): the server ends
/// the session, and so releases the lock, when the gateway goes quiet or its peer is gone.
/// Settings the server does not know (`idle_session_timeout` before PostgreSQL 14) are
/// reported, not fatal.
pub(crate) fn leader_session(c: &mut Client, idle: Duration) -> Result<(), String> {
    // The server's TCP detection of a dead client ends the session too, so it must not come
    // sooner than the idle timeout either: keep-alives after half of it, then one probe a
    // second for the other half; `tcp_user_timeout` (unacknowledged data) the whole of it.
    // Anything shorter than the lease could free the lock while the old leader still leads.
    let half = (idle.as_secs() / 2).max(1);
    let keepalives = format!(
        "SET tcp_keepalives_idle = {half}; SET tcp_keepalives_interval = 1; \
         SET tcp_keepalives_count = {half}; SET tcp_user_timeout = {}",
        idle.as_millis()
    );
    c.batch_execute(&keepalives).map_err(|e| e.to_string())?;
    if let Err(e) = c.batch_execute(&format!("SET idle_session_timeout = {}", idle.as_millis())) {
        if c.is_closed() {
            return Err(e.to_string());
        }
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(event = "cluster_idle_session_timeout_unsupported", error = %e,
                "the server refused idle_session_timeout (PostgreSQL 14 or newer has it): a \
                 leader cut off behind a proxy keeps the lock until the proxy drops it; over \
                 direct TCP the keep-alives bound it");
        }
    }
    Ok(())
}

/// The next leadership epoch (creating the sequence on first use).
pub(crate) fn next_epoch(c: &mut Client) -> Result<i64, postgres::Error> {
    let next = format!("SELECT nextval('{EPOCH_SEQUENCE}')");
    match c.query_one(&next, &[]) {
        Ok(row) => row.try_get(0),
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => {
            c.batch_execute(&format!("CREATE SEQUENCE IF NOT EXISTS {EPOCH_SEQUENCE}"))?;
            c.query_one(&next, &[])?.try_get(0)
        }
        Err(e) => Err(e),
    }
}

pub(crate) fn leader_loop(
    status: Arc<ClusterStatus>,
    stop: Arc<AtomicBool>,
    config: Connect,
    opts: ClusterOptions,
    first: SyncSender<()>,
) {
    let mut client: Option<Client> = None;
    let mut dialer = Dialer::new("leader");
    let mut first = Some(first);
    while !stop.load(Ordering::SeqCst) {
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            status.lose("the leadership connection closed");
            let idle = opts.server_idle_timeout;
            client = dialer
                .dial(&config, opts.connect_wait, move |c| leader_session(c, idle))
                .map(|(c, ())| c);
        }
        if let Some(c) = client.as_mut() {
            let ok = if status.holding() {
                lead_check(&status, c, &opts)
            } else {
                try_lead(&status, c, &opts)
            };
            if !ok {
                // Closing the connection ends the session, which releases the lock if it is
                // still held; a partitioned server ends it by its idle timeout instead.
                client = None;
            }
        }
        if let Some(f) = first.take() {
            let _ = f.try_send(());
        }
        pause(&stop, opts.retry);
    }
    status.lose("shutdown");
}

/// While leading: proves the session (and its lock) alive with a round trip and renews the
/// lease from the moment the check was sent. False when leadership ended.
pub(crate) fn lead_check(status: &ClusterStatus, c: &mut Client, opts: &ClusterOptions) -> bool {
    if !status.lease_valid() {
        // The thread was held up past the lease: is_leader() already says no. The session may
        // still hold the lock, but a leadership that lapsed is not resumed: a new one (new
        // epoch) is taken on a new session.
        status.lose(&format!(
            "lease of {:?} ran out before a check could prove the session",
            opts.lease
        ));
        return false;
    }
    let sent = Instant::now();
    match c.is_valid(opts.check_timeout) {
        Ok(()) if status.lease_valid() => {
            status.renew(sent + opts.lease);
            true
        }
        Ok(()) => {
            status.lose(&format!(
                "lease of {:?} ran out while the check was under way",
                opts.lease
            ));
            false
        }
        Err(e) => {
            status.lose(&format!(
                "liveness check failed (deadline {:?}): {e}",
                opts.check_timeout
            ));
            false
        }
    }
}

/// While not leading: asks for the lock; on success draws the epoch and starts the lease from
/// the moment the request was sent. False when the connection failed.
pub(crate) fn try_lead(status: &ClusterStatus, c: &mut Client, opts: &ClusterOptions) -> bool {
    let sent = Instant::now();
    let got = match c.query_one("SELECT pg_try_advisory_lock($1)", &[&opts.lock_key]) {
        Ok(row) => row.try_get::<_, bool>(0).unwrap_or(false),
        Err(_) => return false,
    };
    if !got {
        status.lock_refused.fetch_add(1, Ordering::Relaxed);
        let holder = aware_store_pg::stranger_holding(c, opts.lock_key);
        status.set_stranger(holder.map(|h| h.to_string()));
        return true;
    }
    let epoch = match next_epoch(c) {
        Ok(e) => e,
        Err(e) if c.is_closed() || e.is_closed() => return false,
        Err(e) => {
            // A role that may not create the sequence still leads; only the token is missing.
            tracing::warn!(event = "cluster_epoch_unavailable", error = %e,
                "cannot draw the leadership epoch (sequence {EPOCH_SEQUENCE}); leading with epoch 0");
            0
        }
    };
    if sent.elapsed() >= opts.lease {
        // Taking the lock and the epoch took longer than a lease: too slow to lead safely.
        // Dropping the connection gives the lock back.
        return false;
    }
    status.take(epoch, sent + opts.lease);
    status.set_stranger(None);
    true
}
