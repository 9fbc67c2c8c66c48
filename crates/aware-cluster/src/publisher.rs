//! The publisher thread: this gateway's wakes, replies and change hints, batched, signed,
//! sent with `pg_notify` on a connection of its own.

use crate::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn publisher_loop(
    status: Arc<ClusterStatus>,
    stop: Arc<AtomicBool>,
    config: Connect,
    opts: ClusterOptions,
    rx: Receiver<String>,
) {
    let mut client: Option<Client> = None;
    let mut dialer = Dialer::new("publisher");
    let mut key: Option<Vec<u8>> = None;
    let mut last_change: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        // Wakes up at least every 200 ms, so a pending change hint leaves within that even
        // when no wake is queued.
        let mut batch = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(p) => vec![p],
            Err(RecvTimeoutError::Timeout) => Vec::new(),
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // Everything already queued goes in one round trip.
        while !batch.is_empty() && batch.len() < 256 {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let mut with_change = false;
        if last_change.is_none_or(|t| t.elapsed() >= CHANGE_HINT_EVERY)
            && status.change_pending.swap(false, Ordering::AcqRel)
        {
            batch.push(encode_change(&status.node_id));
            last_change = Some(Instant::now());
            with_change = true;
        }
        if batch.is_empty() {
            continue;
        }
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            // A short wait: the batch is dropped (hints only) rather than held behind a server
            // that does not answer; the attempt goes on for the next batch.
            let wait = opts.connect_wait.min(Duration::from_millis(500));
            let file_key = opts.key.clone();
            client = dialer
                .dial(&config, wait, move |c| signing_key(c, file_key.as_ref()))
                .map(|(c, k)| {
                    key = Some(k);
                    c
                });
        }
        let sent = match (client.as_mut(), &key) {
            (Some(c), Some(k)) => {
                let signed: Vec<String> = batch.iter().map(|b| sign(k, b)).collect();
                c.execute(
                    "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
                    &[&WAKE_CHANNEL, &signed],
                )
                .is_ok()
            }
            _ => false,
        };
        if sent {
            status
                .published
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
        } else {
            // Hints only: the repair check on the other gateways finds these notices; a change
            // hint is tried again with the next round trip.
            if with_change {
                status.change_pending.store(true, Ordering::Release);
            }
            status
                .publish_dropped
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            client = None;
            pause(&stop, opts.retry.min(Duration::from_millis(500)));
        }
    }
}
