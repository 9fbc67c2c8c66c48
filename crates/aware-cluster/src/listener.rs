//! The `LISTEN` thread: other gateways' wakes, reply signals and change hints, and the repair
//! check that makes a lost notification harmless.

use crate::*;
use aware_engine::Engine;
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn listener_loop(
    status: Arc<ClusterStatus>,
    stop: Arc<AtomicBool>,
    config: Connect,
    opts: ClusterOptions,
    engine: Engine,
) {
    let mut client: Option<Client> = None;
    let mut dialer = Dialer::new("listener");
    let mut key: Vec<u8> = Vec::new();
    let mut last_repair = Instant::now();
    let mut connected_once = false;
    while !stop.load(Ordering::SeqCst) {
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            status.listening.store(false, Ordering::SeqCst);
            // Without the key nothing can be checked: the connection counts as failed.
            let file_key = opts.key.clone();
            client = dialer
                .dial(&config, opts.connect_wait, move |c| {
                    let key = signing_key(c, file_key.as_ref())?;
                    if file_key.is_some() {
                        forget_db_key(c);
                    }
                    c.batch_execute(&format!("LISTEN {WAKE_CHANNEL}"))
                        .map_err(|e| e.to_string())?;
                    Ok(key)
                })
                .map(|(c, k)| {
                    key = k;
                    c
                });
            match client {
                Some(_) => {
                    status.listening.store(true, Ordering::SeqCst);
                    if connected_once {
                        status.listener_reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                    connected_once = true;
                    // Notifications sent while we were away are gone: look at the cursors now.
                    repair(&engine);
                    last_repair = Instant::now();
                }
                None => {
                    pause(&stop, opts.retry);
                    continue;
                }
            }
        }
        let Some(c) = client.as_mut() else { continue };
        let mut failed = false;
        {
            let mut n = c.notifications();
            let mut it = n.timeout_iter(Duration::from_millis(250));
            loop {
                match it.next() {
                    Ok(Some(note)) => {
                        let Some(payload) = verify(&key, note.payload()) else {
                            status.rejected.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(
                                event = "cluster_notification_rejected",
                                "a notification without a valid signature was dropped"
                            );
                            continue;
                        };
                        if let Some((origin, wake)) = decode(payload) {
                            if origin != status.node_id {
                                status.received.fetch_add(1, Ordering::Relaxed);
                                engine.deliver_remote_wake(wake);
                            }
                        } else if let Some((origin, run_id)) = decode_reply(payload) {
                            if origin != status.node_id {
                                status.replies_received.fetch_add(1, Ordering::Relaxed);
                                engine.signal_remote_reply(&run_id);
                            }
                        } else if let Some(origin) = decode_change(payload) {
                            if origin != status.node_id {
                                status.changes_received.fetch_add(1, Ordering::Relaxed);
                                engine.signal_remote_change();
                            }
                        } else {
                            // Signed but not a message a gateway makes (a wake whose agentId
                            // is not its key's agent): dropped and counted like a forgery.
                            status.rejected.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        if failed || c.is_closed() {
            client = None;
            continue;
        }
        if last_repair.elapsed() >= opts.repair_every {
            // The round trip also proves the connection: a dead one is found within one period.
            if c.is_valid(opts.check_timeout).is_err() {
                client = None;
                continue;
            }
            repair(&engine);
            last_repair = Instant::now();
        }
    }
    status.listening.store(false, Ordering::SeqCst);
}

pub(crate) fn repair(engine: &Engine) {
    match engine.repair_wakes() {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            event = "cluster_wakes_repaired",
            watchers = n,
            "woke watchers whose notices opened without a wake reaching this gateway"
        ),
        Err(e) => tracing::debug!(event = "cluster_repair_failed", error = %e,
            "repair check failed; next period retries"),
    }
}
