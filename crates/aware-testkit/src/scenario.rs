//! The scenarios' vocabulary on a [`Server`]: the family F, `hdm`, cursors, notices, reconcile
//! pages, the test clock and `/metrics` figures, each one request of the spec's conventions.

use crate::options::seg;
use crate::server::{Resp, Server};
use crate::spec::{C, W};
use serde_json::{json, Value};

impl Server {
    /// F: W, then C with parent W (sequence 1).
    pub fn family() -> Self {
        let s = Self::start();
        s.create(W);
        s.create_child(C, W);
        s
    }
    /// hdm(S); returns the answer.
    pub fn hdm(&self, s: &str) -> Resp {
        let r = self.post(
            &format!("/v1/sessions/{}/turns", seg(s)),
            json!({"role":"user","text":"hello","channel":"telegram"}),
        );
        assert_eq!(r.status, 201, "hdm {s}: {}", r.body);
        r
    }
    pub fn hdm_seq(&self, s: &str) -> i64 {
        self.hdm(s).body["event"]["sequence"]
            .as_i64()
            .expect("event recorded")
    }
    pub fn cursor(&self, a: &str, b: &str) -> Option<Value> {
        let r = self.get(&format!("/v1/sessions/{}/watches", seg(a)));
        r.body["watches"]
            .as_array()?
            .iter()
            .find(|c| c["targetSessionKey"] == b)
            .cloned()
    }
    pub fn triple(&self, a: &str, b: &str) -> (i64, i64, i64) {
        let c = self
            .cursor(a, b)
            .unwrap_or_else(|| panic!("no cursor ({a}, {b})"));
        (
            c["lastSeen"].as_i64().unwrap(),
            c["notified"].as_i64().unwrap(),
            c["material"].as_i64().unwrap(),
        )
    }
    pub fn pending(&self, s: &str) -> Value {
        self.get(&format!("/v1/sessions/{}/pending", seg(s))).body
    }
    pub fn drain(&self, s: &str) -> Value {
        self.post(&format!("/v1/sessions/{}/drain", seg(s)), json!({}))
            .body
    }
    pub fn notice_texts(&self, s: &str) -> Vec<String> {
        self.pending(s)["notices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["text"].as_str().unwrap().to_string())
            .collect()
    }
    pub fn watch(&self, a: &str, b: &str) -> Resp {
        self.post(
            &format!("/v1/sessions/{}/watches", seg(a)),
            json!({"target": b}),
        )
    }
    pub fn status(&self, caller: &str, key: &str, since: i64) -> Value {
        let r = self.tool(
            caller,
            "session_status",
            json!({"sessionKey": key, "changesSince": since}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }
    pub fn seqs(&self, key: &str, since: i64) -> Vec<i64> {
        self.status(W, key, since)["stateChanges"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["sequence"].as_i64().unwrap())
            .collect()
    }
    /// Moves the test clock of every gateway (each has its own; each runs the timers it is due
    /// to run when its clock moves).
    pub fn set_clock(&mut self, now: i64) {
        let body = json!({"now": now}).to_string();
        for i in 0..self.gateway_count() {
            let base = self.gateway_base(i).to_string();
            let r = self.request_to(&base, "POST", "/v1/admin/clock", &[], Some(&body));
            assert_eq!(r.status, 200, "clock of gateway {i}: {}", r.body);
        }
        self.now = now;
    }
    pub fn prune(&self) -> Value {
        let r = self.post("/v1/admin/prune", json!({}));
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }
    /// The sum over every gateway of a `/metrics` line (each process counts what it did
    /// itself); `None` when no gateway has the line. For one gateway, [`Server::metric`].
    pub fn metric_sum(&self, line_prefix: &str) -> Option<f64> {
        (0..self.gateway_count())
            .filter_map(|i| {
                let r = self.request_to(self.gateway_base(i), "GET", "/metrics", &[], None);
                let text = r.body.as_str().unwrap_or("").to_string();
                text.lines().find_map(|l| {
                    l.strip_prefix(line_prefix)
                        .and_then(|rest| rest.trim().parse::<f64>().ok())
                })
            })
            .reduce(|a, b| a + b)
    }
    pub fn metric(&self, line_prefix: &str) -> Option<f64> {
        let text = self.get("/metrics").body.as_str().unwrap_or("").to_string();
        text.lines().find_map(|l| {
            l.strip_prefix(line_prefix)
                .and_then(|rest| rest.trim().parse().ok())
        })
    }
    /// Sets the fault plan (`POST /v1/admin/faults`) of every gateway of the set: the seam is
    /// per process and a request may reach any gateway, so on a cluster the failure model is
    /// every gateway failing alike (on one gateway, that one).
    pub fn set_faults(&self, body: &Value) {
        let body = body.to_string();
        for i in 0..self.gateway_count() {
            let r = self.request_to(
                self.gateway_base(i),
                "POST",
                "/v1/admin/faults",
                &[],
                Some(&body),
            );
            assert_eq!(r.status, 200, "faults of gateway {i}: {}", r.body);
        }
    }
}
