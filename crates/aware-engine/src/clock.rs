//! The engine clock: the wall clock, or a manual clock for tests and `--test-clock`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Unix epoch milliseconds.
    fn now_ms(&self) -> i64;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to, and never backwards.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start_ms: i64) -> Self {
        ManualClock(AtomicI64::new(start_ms))
    }

    /// Sets the time; refuses to move backwards.
    pub fn set(&self, now_ms: i64) -> Result<i64, ClockBackwards> {
        let prev = self.0.fetch_max(now_ms, Ordering::SeqCst);
        if now_ms < prev {
            return Err(ClockBackwards);
        }
        Ok(now_ms)
    }

    pub fn advance(&self, ms: i64) -> i64 {
        self.0.fetch_add(ms.max(0), Ordering::SeqCst) + ms.max(0)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the test clock cannot move backwards")]
pub struct ClockBackwards;
