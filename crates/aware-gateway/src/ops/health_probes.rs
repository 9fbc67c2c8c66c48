//! `/health` probes (decision D4): an empty op through the writer and a snapshot read through the
//! reader pool, each with a deadline, so a supervisor sees a stalled engine. One probe per part
//! is in flight at a time: a `/health` that finds one running waits for it (until that probe's
//! deadline) instead of queueing another op behind a stuck writer.

use aware_engine::Engine;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Clone)]
pub(crate) struct PartProbe {
    /// When the probe in flight started; a std mutex held only to read or set it.
    since: Arc<Mutex<Option<Instant>>>,
    /// Bumped each time a probe of this part finishes.
    finished: Arc<watch::Sender<u64>>,
    /// Whether the last finished probe failed (the store answered with an error: a database
    /// that is unreachable answers quickly, so it is not stalled but degraded).
    failing: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for PartProbe {
    fn default() -> Self {
        PartProbe {
            since: Arc::new(Mutex::new(None)),
            finished: Arc::new(watch::channel(0).0),
            failing: Default::default(),
        }
    }
}

impl PartProbe {
    /// Whether the part answered within `deadline` of the start of the probe in flight (one is
    /// started when none is).
    async fn answers<F>(&self, deadline: Duration, start: impl FnOnce() -> F) -> bool
    where
        F: Future<Output = bool> + Send + 'static,
    {
        // Subscribe before looking, so a probe that finishes in between is seen.
        let mut rx = self.finished.subscribe();
        let since = {
            let Ok(mut slot) = self.since.lock() else {
                return false;
            };
            match *slot {
                Some(t) => t,
                None => {
                    let now = Instant::now();
                    *slot = Some(now);
                    let (fut, since, finished, failing) = (
                        start(),
                        self.since.clone(),
                        self.finished.clone(),
                        self.failing.clone(),
                    );
                    tokio::spawn(async move {
                        let ok = fut.await;
                        failing.store(!ok, std::sync::atomic::Ordering::SeqCst);
                        if let Ok(mut s) = since.lock() {
                            *s = None;
                        }
                        finished.send_modify(|n| *n += 1);
                    });
                    now
                }
            }
        };
        tokio::time::timeout_at(since + deadline, rx.changed())
            .await
            .is_ok()
    }
}

#[derive(Default)]
pub(crate) struct HealthProbes {
    writer: PartProbe,
    reader: PartProbe,
}

impl HealthProbes {
    /// The parts that did not answer in time: `writer`, `reader`.
    pub(crate) async fn stalled(&self, engine: &Engine, deadline: Duration) -> Vec<&'static str> {
        let (e1, e2) = (engine.clone(), engine.clone());
        let writer = self.writer.answers(deadline, move || async move {
            // An empty op: it needs the writer thread to take a batch and commit, nothing else.
            e1.probe_writer().await
        });
        let reader = self.reader.answers(deadline, move || async move {
            matches!(
                tokio::task::spawn_blocking(move || e2.probe_reader()).await,
                Ok(true)
            )
        });
        let (w, r) = tokio::join!(writer, reader);
        let mut out = Vec::new();
        if !w {
            out.push("writer");
        }
        if !r {
            out.push("reader");
        }
        out
    }

    /// The parts whose last finished probe failed: `writer`, `reader`. Read after
    /// [`HealthProbes::stalled`], which waits for the probes.
    pub(crate) fn failing(&self) -> Vec<&'static str> {
        let f = |p: &PartProbe| p.failing.load(std::sync::atomic::Ordering::SeqCst);
        let mut out = Vec::new();
        if f(&self.writer) {
            out.push("writer");
        }
        if f(&self.reader) {
            out.push("reader");
        }
        out
    }
}
