//! The limit on wrong bearer tokens per peer address.
//!
//! Tokens are at least 16 bytes, so guessing one is hopeless at any rate; this bounds the rate
//! anyway, so a peer that sends wrong tokens is slowed to [`REFILL_PER_SEC`] guesses a second
//! after a burst of [`BURST`], and learns nothing while it waits: an empty bucket refuses every
//! request of that peer that needs a token with 429 `too_many_failed_attempts` *before* any
//! token is compared. A right token never spends the bucket, nor does a request with no token
//! at all (it guesses nothing). On loopback every local client
//! shares one address, so a local process sending wrong tokens can make the others wait out the
//! same refill (at most one second per token); that is the price of a limit that no local
//! process can step around by changing its port.
//!
//! Time is the gateway's clock (the test clock in test mode), so the refill is exact in tests.

use crate::http::error::ApiError;
use axum::http::StatusCode;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Wrong tokens a peer may send in a row before it waits.
pub(crate) const BURST: u32 = 20;
/// Wrong tokens a waiting peer earns back per second.
pub(crate) const REFILL_PER_SEC: u32 = 5;
/// Peers remembered at most; past it, the peers whose buckets are full again are forgotten,
/// then (under a flood of addresses) the whole table, so memory stays bounded.
const MAX_PEERS: usize = 4096;

const MS_PER_TOKEN: i64 = 1000 / REFILL_PER_SEC as i64;

#[derive(Default)]
pub(crate) struct FailedTokens {
    peers: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    /// Wrong tokens still allowed.
    left: u32,
    /// When `left` was last brought up to date (ms of the gateway's clock).
    at: i64,
}

impl Bucket {
    fn refill(&mut self, now: i64) {
        let earned = (now - self.at).max(0) / MS_PER_TOKEN;
        if earned > 0 {
            self.left = u32::try_from(earned)
                .unwrap_or(u32::MAX)
                .saturating_add(self.left)
                .min(BURST);
            self.at += earned * MS_PER_TOKEN;
        }
        if self.left == BURST {
            self.at = now;
        }
    }
}

impl FailedTokens {
    /// Refuses `peer` while its wrong tokens are spent; call before comparing its token.
    pub(crate) fn check(&self, peer: IpAddr, now: i64) -> Result<(), ApiError> {
        let Ok(mut peers) = self.peers.lock() else {
            return Err(ApiError::internal("failed-token table lock poisoned"));
        };
        let Some(b) = peers.get_mut(&peer) else {
            return Ok(());
        };
        b.refill(now);
        if b.left > 0 {
            return Ok(());
        }
        let wait_ms = (b.at + MS_PER_TOKEN - now).max(1);
        Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failed_attempts",
            format!(
                "{BURST} wrong bearer tokens came from {peer}; requests from it that need a token are refused for {wait_ms} ms (then {REFILL_PER_SEC} tries a second): check the token (AWARE_TOKEN, --token-file)"
            ),
        ))
    }

    /// Spends one of `peer`'s tries for a wrong token.
    pub(crate) fn failed(&self, peer: IpAddr, now: i64) {
        let Ok(mut peers) = self.peers.lock() else {
            return;
        };
        if peers.len() >= MAX_PEERS && !peers.contains_key(&peer) {
            peers.retain(|_, b| {
                b.refill(now);
                b.left < BURST
            });
            if peers.len() >= MAX_PEERS {
                peers.clear();
            }
        }
        let b = peers.entry(peer).or_insert(Bucket {
            left: BURST,
            at: now,
        });
        b.refill(now);
        b.left = b.left.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_refill_rate() {
        let t = FailedTokens::default();
        let p: IpAddr = [127, 0, 0, 1].into();
        let q: IpAddr = [127, 0, 0, 2].into();
        for _ in 0..BURST {
            t.check(p, 0).unwrap();
            t.failed(p, 0);
        }
        let e = t.check(p, 0).unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        t.check(q, 0).unwrap();
        t.check(p, MS_PER_TOKEN - 1).unwrap_err();
        t.check(p, MS_PER_TOKEN).unwrap();
        t.failed(p, MS_PER_TOKEN);
        t.check(p, MS_PER_TOKEN).unwrap_err();
        // A full second later the peer has earned REFILL_PER_SEC tries back, never more than BURST.
        t.check(p, MS_PER_TOKEN + 1000).unwrap();
        t.check(p, 1_000_000).unwrap();
    }
}
