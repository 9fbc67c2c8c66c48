//! What the soak's threads share, and the resolved plan of a run (a leaf module, so the
//! threads' modules need not refer back to the soak's root).

use super::stats::Stats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the load threads share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) base: String,
    pub(crate) stats: Arc<Stats>,
    pub(crate) stop: Arc<AtomicBool>,
    /// The current manager of each team, for the wake streams' `session=` filters.
    pub(crate) managers: Arc<Mutex<Vec<String>>>,
}

impl Shared {
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The resolved plan of a run.
pub(crate) struct Plan {
    pub(crate) duration: Duration,
    pub(crate) rate: u32,
    pub(crate) teams: usize,
    pub(crate) wake_streams: usize,
    pub(crate) window: Duration,
    pub(crate) store: &'static str,
    pub(crate) durability: String,
    pub(crate) quick: bool,
}
