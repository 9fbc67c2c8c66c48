//! The wake stream of a test server, with marker fences instead of sleeps.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::options::seg;
use crate::server::Server;
pub use crate::spec::*;

/// A subscription to `GET /v1/wakes` that collects wake objects on a thread.
///
/// "No (more) wakes" is never judged after a sleep: [`Wakes::settle`] sends a marker wake (a
/// `sessions_send` from a session of its own to a session the subscription matches) and waits for
/// it. Wakes go out on one stream in the order they were requested, so every wake the earlier
/// actions caused, however late, arrives before the marker. Marker wakes are kept out of
/// `received`.
///
/// On a set of several gateways the stream connects to the gateway the pick gives, and wakes
/// produced on the others reach it over the store's notification channel: their order relative
/// to wakes of another gateway is not kept. So a fence sends one marker through every gateway
/// and waits for all of them; each gateway's earlier wakes precede its own marker.
pub struct Wakes {
    pub received: Arc<Mutex<Vec<Value>>>,
    markers: Arc<Mutex<Vec<String>>>,
    /// Every gateway of the set (markers go through each).
    bases: Vec<String>,
    token: Option<String>,
    /// The session the marker wakes are sent to, and the session that sends them.
    fence_to: String,
    fence_from: String,
    fenced: bool,
}

impl Wakes {
    /// Subscribes to `GET /v1/wakes{query}` on the gateway the pick gives, as `caller`.
    ///
    /// On several gateways, first waits until every wake requested so far has reached every
    /// gateway (a fence-only stream on each, fenced through all of them): a wake produced on
    /// another gateway travels over the store's notification channel, and one still under way
    /// when the stream connects would arrive after its catch-up. So, as on one gateway, the new
    /// stream carries the catch-up and the wakes requested after it connected.
    pub fn subscribe(server: &Server, query: &str, caller: Option<&str>) -> Self {
        if server.gateway_count() > 1 {
            for i in 0..server.gateway_count() {
                Self::subscribe_at(server, server.gateway_base(i), "?agent=fence", None);
            }
        }
        Self::subscribe_at(server, server.next_base(), query, caller)
    }

    /// [`Wakes::subscribe`] on the gateway at `base`, without the cluster-wide fence first.
    pub fn subscribe_at(server: &Server, base: &str, query: &str, caller: Option<&str>) -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let markers = Arc::new(Mutex::new(Vec::new()));
        let (r2, m2) = (received.clone(), markers.clone());
        let url = format!("{base}/v1/wakes{query}");
        let token = server.token.clone();
        let caller_seg = caller.map(seg);
        // A marker must match the filter: the first `session=` if any, else a session of the
        // first `agent=` (or `main`) created for the purpose.
        let param = |name: &str| {
            query
                .trim_start_matches('?')
                .split('&')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .map(|v| {
                    percent_encoding::percent_decode_str(v)
                        .decode_utf8_lossy()
                        .into_owned()
                })
        };
        // Marker sessions live in an agent of their own unless the filter or the caller's
        // visibility ties them to one, so their creation adds no "session created" line to
        // `agent:main:main`.
        let agent_of = |key: &str| key.split(':').nth(1).map(str::to_string);
        let agent = param("agent")
            .or_else(|| param("session").and_then(|k| agent_of(&k)))
            .or_else(|| caller.and_then(agent_of))
            .unwrap_or_else(|| "fence".to_string());
        // A caller's stream filtered on an agent the caller may not see can carry no marker (it
        // must carry nothing at all); only such a stream falls back to a quiet period.
        let fenced = caller.is_none_or(|c| agent_of(c).as_deref() == Some(agent.as_str()));
        let fence_from = format!("agent:{agent}:aware-test-fence-from");
        let fence_to =
            param("session").unwrap_or_else(|| format!("agent:{agent}:aware-test-fence-to"));
        for key in [&fence_from, &fence_to] {
            if fenced && key.contains("aware-test-fence") {
                let r = server.post("/v1/sessions", json!({"key": key}));
                assert!(
                    [200, 201, 409].contains(&r.status),
                    "create fence session {key}: {} {}",
                    r.status,
                    r.body
                );
            }
        }
        let from = fence_from.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout_read(Duration::from_secs(300))
                .build();
            let mut req = agent.get(&url);
            if let Some(t) = token {
                req = req.set("Authorization", &format!("Bearer {t}"));
            }
            if let Some(c) = caller_seg {
                req = req.set("X-Aware-Session", &c);
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(_) => {
                    let _ = ready_tx.send(());
                    return;
                }
            };
            let _ = ready_tx.send(());
            for ev in aware_client::sse::events(resp.into_reader()) {
                if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
                    let marker = v["reason"] == "message"
                        && v["from"]
                            .as_str()
                            .is_some_and(|f| f.contains("aware-test-fence"));
                    if marker {
                        // Markers of other subscriptions (or webhook checks) are ignored.
                        if v["from"] == from.as_str() {
                            let run = v["runId"].as_str().unwrap_or("").to_string();
                            m2.lock().unwrap().push(run);
                        }
                    } else {
                        r2.lock().unwrap().push(v);
                    }
                }
            }
        });
        let _ = ready_rx.recv_timeout(Duration::from_secs(10));
        let w = Wakes {
            received,
            markers,
            bases: (0..server.gateway_count())
                .map(|i| server.gateway_base(i).to_string())
                .collect(),
            token: server.token.clone(),
            fence_to,
            fence_from,
            fenced,
        };
        // Catch-up wakes precede live ones, so once a marker is back the catch-up is complete.
        w.settle();
        w
    }

    /// Sends a marker wake, waits (up to 20 s) until it arrived, and returns every other wake
    /// received so far. Any wake caused by an earlier request is among them.
    pub fn settle(&self) -> Vec<Value> {
        self.fence().0
    }

    /// [`Wakes::settle`], also giving the marker's `runId` (another stream with the same filter
    /// sees the same marker).
    pub fn fence(&self) -> (Vec<Value>, String) {
        if !self.fenced {
            std::thread::sleep(Duration::from_millis(200));
            return (self.received.lock().unwrap().clone(), String::new());
        }
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(60))
            .build();
        let mut runs = Vec::new();
        for base in &self.bases {
            let mut req = agent
                .post(&format!("{base}/v1/tools/sessions_send"))
                .set("X-Aware-Session", &seg(&self.fence_from));
            if let Some(t) = &self.token {
                req = req.set("Authorization", &format!("Bearer {t}"));
            }
            let body =
                json!({"sessionKey": self.fence_to, "message": "marker", "timeoutSeconds": 0});
            let answer: Value = match req.send_json(body) {
                Ok(r) => r.into_json().expect("marker answer is JSON"),
                Err(e) => panic!("marker sessions_send to {} via {base}: {e}", self.fence_to),
            };
            runs.push(answer["runId"].as_str().expect("marker runId").to_string());
        }
        let run = runs.last().cloned().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !runs
            .iter()
            .all(|r| self.markers.lock().unwrap().contains(r))
        {
            assert!(
                Instant::now() < deadline,
                "the marker wake to {} never arrived; received: {:?}",
                self.fence_to,
                self.received.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        (self.received.lock().unwrap().clone(), run)
    }
}
