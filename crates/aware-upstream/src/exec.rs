//! The provider executor (decision D5): provider checks, catalog pages and paired-node calls run
//! here, never on tokio's blocking pool, which the engine needs for every API request.
//!
//! Each call gets its own named thread, and each provider (host id) has a cap on calls in
//! flight, so the threads a provider can hold are bounded whatever it does: a hanging paired
//! node or a stuck file holds at most `cap` threads, and the others (and the API) go on. A call
//! waits for a slot and for its answer only until its deadline; the slot is freed when the
//! thread returns, which the providers make sure of by bounding their own I/O (non-blocking
//! opens of local files; node requests with timeouts shorter than the deadline).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Calls in flight per provider by default: one monitor check and one catalog request at once.
pub const DEFAULT_PER_PROVIDER: usize = 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// No slot freed up, or the call did not answer, before the deadline. A late answer is
    /// dropped.
    #[error("the provider did not answer within {0:?}")]
    Timeout(Duration),
    /// The thread could not be started or the call panicked.
    #[error("provider call failed: {0}")]
    Failed(String),
}

/// Counters for `/metrics` and tests.
#[derive(Debug, Default)]
pub struct ExecMetrics {
    pub calls: AtomicU64,
    pub timeouts: AtomicU64,
    /// Threads of this executor running right now.
    pub running: AtomicU64,
}

pub struct ProviderExec {
    per_provider: usize,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    pub metrics: Arc<ExecMetrics>,
}

impl Default for ProviderExec {
    fn default() -> Self {
        Self::new(DEFAULT_PER_PROVIDER)
    }
}

impl ProviderExec {
    pub fn new(per_provider: usize) -> Self {
        ProviderExec {
            per_provider: per_provider.max(1),
            slots: Mutex::new(HashMap::new()),
            metrics: Arc::default(),
        }
    }

    fn slots_of(&self, host: &str) -> Arc<Semaphore> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .entry(host.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_provider)))
            .clone()
    }

    /// Runs the blocking `f` for provider `host` on a thread of its own, waiting at most
    /// `deadline` (for a slot and the answer together).
    pub async fn run<T: Send + 'static>(
        &self,
        host: &str,
        deadline: Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ExecError> {
        self.metrics.calls.fetch_add(1, Ordering::Relaxed);
        let until = tokio::time::Instant::now() + deadline;
        let timeout = || {
            self.metrics.timeouts.fetch_add(1, Ordering::Relaxed);
            ExecError::Timeout(deadline)
        };
        let permit = match tokio::time::timeout_at(until, self.slots_of(host).acquire_owned()).await
        {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(ExecError::Failed("executor closed".into())),
            Err(_) => return Err(timeout()),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let metrics = self.metrics.clone();
        metrics.running.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("aware-provider".into())
            .spawn(move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                // The slot is held until the call really returned, so a stuck call keeps
                // counting against its provider's cap and threads stay bounded.
                drop(permit);
                metrics.running.fetch_sub(1, Ordering::Relaxed);
                let _ = tx.send(out);
            });
        if let Err(e) = spawned {
            self.metrics.running.fetch_sub(1, Ordering::Relaxed);
            return Err(ExecError::Failed(format!("cannot start a thread: {e}")));
        }
        match tokio::time::timeout_at(until, rx).await {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(_))) => Err(ExecError::Failed("the provider call panicked".into())),
            Ok(Err(_)) => Err(ExecError::Failed("the provider thread vanished".into())),
            Err(_) => Err(timeout()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stuck_provider_holds_at_most_its_cap_and_others_go_on() {
        let exec = ProviderExec::new(2);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let short = Duration::from_millis(50);
        for _ in 0..6 {
            let rx = release_rx.clone();
            let r = exec
                .run("node:stuck", short, move || {
                    let _ = rx.lock().map(|r| r.recv());
                })
                .await;
            assert_eq!(r, Err(ExecError::Timeout(short)));
        }
        assert_eq!(
            exec.metrics.running.load(Ordering::Relaxed),
            2,
            "six timed-out calls, two threads: the others never got a slot"
        );
        // Another provider is not held up.
        assert_eq!(exec.run("gateway:local", short, || 7).await, Ok(7));
        // Once the stuck calls return, their slots are free again.
        for _ in 0..2 {
            release_tx.send(()).unwrap();
        }
        let long = Duration::from_secs(30);
        assert_eq!(exec.run("node:stuck", long, || 1).await, Ok(1));
        assert_eq!(
            exec.run("node:stuck", long, || panic!("boom")).await,
            Err(ExecError::Failed("the provider call panicked".into()))
        );
        assert_eq!(exec.run("node:stuck", long, || 2).await, Ok(2));
    }
}
