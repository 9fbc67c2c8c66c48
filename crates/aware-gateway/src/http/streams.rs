//! One budget for the requests that hold a connection for long (decision D37, widened): the
//! streams (`GET /v1/wakes`, `GET /v1/console/events`) and the `sessions_send` calls waiting for
//! a reply (up to 600 s each).
//!
//! Each holds a connection slot for as long as it lasts, and a stream whose client never reads is
//! not cut by the write deadline of `conn.rs` while keep-alives still fit in the socket buffers
//! (days). So they are counted here, together: at most [`HttpSettings::stream_cap`] at once,
//! which the configuration keeps well below `[http] max_connections` (an eighth of the
//! connections at least stays free for `/health` and every other route). Within it, at most
//! `[http] max_streams_per_agent` streams per agent token, so one agent cannot take the streams
//! of the others; at most `[limits] max_reply_waiters` waiting sends in all and
//! `[limits] max_reply_waiters_per_agent` per calling agent, so one agent cannot take the waits
//! of the others (with agent tokens the calling agent is the token's). The operator's streams
//! are bounded by the total only. A refused stream is 429 `too_many_streams` with
//! `Connection: close`, a refused wait 429 `too_many_waiters`, before anything is sent.
//!
//! [`HttpSettings::stream_cap`]: crate::config::HttpSettings::stream_cap

use crate::config::{HttpSettings, Limits};
use crate::http::edge::Identity;
use crate::http::error::{ApiError, ApiResult};
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Open long-held requests: the total, streams per agent token, waiting sends per agent.
#[derive(Default)]
pub(crate) struct StreamSlots {
    open: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_agent: HashMap<String, usize>,
    waiters: usize,
    waiters_by_agent: HashMap<String, usize>,
}

/// What a slot holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Stream,
    Waiter,
}

/// One long-held request; the slot frees when the request ends (and so this is dropped, also
/// when the client goes away mid-wait).
pub(crate) struct StreamSlot {
    slots: Arc<StreamSlots>,
    agent: Option<String>,
    held: Held,
}

fn refuse(code: &'static str, message: String) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message)
}

fn lock(slots: &StreamSlots) -> ApiResult<std::sync::MutexGuard<'_, Counts>> {
    slots
        .open
        .lock()
        .map_err(|_| ApiError::internal("stream count lock poisoned"))
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
    let mut c = lock(slots)?;
    if c.total >= cap {
        return Err(refuse("too_many_streams", format!(
            "{cap} long-held requests (streams and waiting sends) are open, the most this gateway serves at once ([http] max_streams); close one or retry later"
        )));
    }
    if let Some(a) = &agent {
        let mine = c.by_agent.get(a).copied().unwrap_or(0);
        if mine >= per_agent {
            return Err(refuse("too_many_streams", format!(
                "the token of agent \"{a}\" has {mine} streams open, the most one agent may hold ([http] max_streams_per_agent)"
            )));
        }
        c.by_agent.insert(a.clone(), mine + 1);
    }
    c.total += 1;
    Ok(StreamSlot {
        slots: slots.clone(),
        agent,
        held: Held::Stream,
    })
}

/// Takes a slot for a `sessions_send` call of `agent` that waits for its reply, or refuses with
/// 429 `too_many_waiters`. `agent` is the calling session's agent.
pub(crate) fn claim_waiter(
    slots: &Arc<StreamSlots>,
    http: &HttpSettings,
    limits: &Limits,
    agent: &str,
) -> ApiResult<StreamSlot> {
    let cap = http.stream_cap();
    let (max, per_agent) = (limits.max_reply_waiters, limits.max_reply_waiters_per_agent);
    let busy = |what: String| {
        refuse(
            "too_many_waiters",
            format!(
                "{what}; nothing was sent: retry later, or send with timeoutSeconds 0 and read \
                 the reply with sessions_history"
            ),
        )
    };
    let mut c = lock(slots)?;
    if c.total >= cap {
        return Err(busy(format!(
            "{cap} long-held requests (streams and waiting sends) are open, the most this gateway serves at once ([http] max_streams)"
        )));
    }
    if c.waiters >= max {
        return Err(busy(format!(
            "{max} sessions_send calls are already waiting for replies (the limit, [limits] max_reply_waiters)"
        )));
    }
    let mine = c.waiters_by_agent.get(agent).copied().unwrap_or(0);
    if mine >= per_agent {
        return Err(busy(format!(
            "agent \"{agent}\" has {mine} sessions_send calls waiting for replies, the most one agent may have ([limits] max_reply_waiters_per_agent)"
        )));
    }
    c.waiters_by_agent.insert(agent.to_string(), mine + 1);
    c.waiters += 1;
    c.total += 1;
    Ok(StreamSlot {
        slots: slots.clone(),
        agent: Some(agent.to_string()),
        held: Held::Waiter,
    })
}

impl StreamSlots {
    /// `sessions_send` calls waiting for a reply now (the `aware_reply_waiters` gauge).
    pub(crate) fn waiters(&self) -> usize {
        self.open.lock().map(|c| c.waiters).unwrap_or(0)
    }
}

fn release(map: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        // A poisoned lock means a panic while counting: the counts are then unknowable anyway.
        if let Ok(mut c) = self.slots.open.lock() {
            c.total = c.total.saturating_sub(1);
            match (self.held, &self.agent) {
                (Held::Stream, Some(a)) => release(&mut c.by_agent, a),
                (Held::Stream, None) => {}
                (Held::Waiter, a) => {
                    c.waiters = c.waiters.saturating_sub(1);
                    if let Some(a) = a {
                        release(&mut c.waiters_by_agent, a);
                    }
                }
            }
        }
    }
}
