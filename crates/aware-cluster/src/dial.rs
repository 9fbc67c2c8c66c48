//! The cluster threads' plumbing: named threads, a stop-aware pause, and connection attempts
//! bounded by a deadline on a thread of their own.

use crate::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(crate) fn spawn(
    name: &'static str,
    f: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, ClusterError> {
    std::thread::Builder::new()
        .name(format!("aware-cluster-{name}"))
        .spawn(f)
        .map_err(|e| ClusterError::Thread(name, e))
}

/// Sleeps `d` in small steps so a stop request is seen quickly.
pub(crate) fn pause(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
}

/// A connection attempt that runs on a thread of its own, so its wait is bounded
/// ([`ClusterOptions::connect_wait`]) even when the server accepts and never answers. At most one
/// attempt per cluster thread is under way: one not finished in time is waited for again on the
/// next try instead of starting another.
pub(crate) struct Dialer<T> {
    what: &'static str,
    pending: Option<Receiver<Result<(Client, T), String>>>,
}

impl<T: Send + 'static> Dialer<T> {
    pub(crate) fn new(what: &'static str) -> Self {
        Dialer {
            what,
            pending: None,
        }
    }

    /// A connection set up by `setup`, or `None` (failed, or still under way after `wait`).
    pub(crate) fn dial(
        &mut self,
        connect: &Connect,
        wait: Duration,
        setup: impl FnOnce(&mut Client) -> Result<T, String> + Send + 'static,
    ) -> Option<(Client, T)> {
        let rx = match self.pending.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = sync_channel(1);
                let connect = connect.clone();
                let attempt = move || {
                    let result = connect().and_then(|mut c| setup(&mut c).map(|t| (c, t)));
                    // The caller may have stopped waiting: the connection then just closes.
                    let _ = tx.send(result);
                };
                if let Err(e) = std::thread::Builder::new()
                    .name(format!("aware-cluster-dial-{}", self.what))
                    .spawn(attempt)
                {
                    tracing::warn!(event = "cluster_connect_failed", connection = self.what,
                        error = %e, "cannot start a connection attempt; retrying");
                    return None;
                }
                rx
            }
        };
        match rx.recv_timeout(wait) {
            Ok(Ok(c)) => Some(c),
            Ok(Err(e)) => {
                tracing::debug!(event = "cluster_connect_failed", connection = self.what,
                    error = %e, "cluster connection failed; retrying");
                None
            }
            Err(RecvTimeoutError::Timeout) => {
                tracing::debug!(
                    event = "cluster_connect_slow",
                    connection = self.what,
                    wait_ms = wait.as_millis() as u64,
                    "no answer from PostgreSQL yet; the attempt goes on"
                );
                self.pending = Some(rx);
                None
            }
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }
}
