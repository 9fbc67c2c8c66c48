//! Caps on long-lived streams (`GET /v1/wakes`, `GET /v1/console/events`), decision D37.
//!
//! A stream holds a connection slot for as long as the client keeps it open, and a client that
//! never reads is not cut by the write deadline of `conn.rs` while keep-alives still fit in the
//! socket buffers (days). So streams are counted here: at most [`HttpSettings::stream_cap`] at
//! once, always fewer than `[http] max_connections`, which keeps slots free for `/health` and
//! every other route; and at most `[http] max_streams_per_agent` per agent token, so one agent
//! cannot take the streams of the others. The operator (the main token, or no token) is bounded
//! by the total only. A refused stream is 429 `too_many_streams` with `Connection: close`, so
//! the refused client does not keep a slot either.
//!
//! [`HttpSettings::stream_cap`]: crate::config::HttpSettings::stream_cap

use crate::config::HttpSettings;
use crate::http::edge::Identity;
use crate::http::error::{ApiError, ApiResult};
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Open streams: the total and per agent token.
#[derive(Default)]
pub(crate) struct StreamSlots {
    open: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_agent: HashMap<String, usize>,
}

/// One open stream; the slot frees when the stream (and so this) is dropped.
pub(crate) struct StreamSlot {
    slots: Arc<StreamSlots>,
    agent: Option<String>,
}

fn refuse(message: String) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_streams", message)
}

/// Takes a stream slot for `identity`, or refuses with 429 `too_many_streams`.
pub(crate) fn claim(
    slots: &Arc<StreamSlots>,
    http: &HttpSettings,
    identity: &Identity,
) -> ApiResult<StreamSlot> {
    let (cap, per_agent) = (http.stream_cap(), http.max_streams_per_agent);
    let agent = match identity {
        Identity::Agent(a) => Some(a.clone()),
        Identity::Operator => None,
    };
    let mut c = slots
        .open
        .lock()
        .map_err(|_| ApiError::internal("stream count lock poisoned"))?;
    if c.total >= cap {
        return Err(refuse(format!(
            "{cap} streams are open, the most this gateway serves at once ([http] max_streams); close one or retry later"
        )));
    }
    if let Some(a) = &agent {
        let mine = c.by_agent.get(a).copied().unwrap_or(0);
        if mine >= per_agent {
            return Err(refuse(format!(
                "the token of agent \"{a}\" has {mine} streams open, the most one agent may hold ([http] max_streams_per_agent)"
            )));
        }
        c.by_agent.insert(a.clone(), mine + 1);
    }
    c.total += 1;
    Ok(StreamSlot {
        slots: slots.clone(),
        agent,
    })
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        // A poisoned lock means a panic while counting: the counts are then unknowable anyway.
        if let Ok(mut c) = self.slots.open.lock() {
            c.total = c.total.saturating_sub(1);
            if let Some(a) = &self.agent {
                if let Some(n) = c.by_agent.get_mut(a) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        c.by_agent.remove(a);
                    }
                }
            }
        }
    }
}
