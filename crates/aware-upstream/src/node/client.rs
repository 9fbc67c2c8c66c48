//! The gateway side's HTTP client of a paired node: a [`Provider`] for one catalog of host
//! `node:<id>` (one client per catalog the gateway monitors on that node).

use super::check::{baseline, check_paged, probe_applies, NodeItem, Paged};
use super::protocol::{
    CodexItem, ItemsAnswer, ItemsPage, NodeCatalog, NodeError, ThreadsPage, ITEMS_LIMIT,
    NODE_TIMEOUT, PAGE_LIMIT_DEFAULT, THREAD_NOT_FOUND,
};
use crate::provider::{CatalogItem, Outcome, Probe, Provider, ProviderError, ThreadInfo};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::io::Read;
use std::time::Duration;

/// Most bytes of a node answer the client reads.
const MAX_ANSWER_BYTES: u64 = 64 << 20;

impl From<NodeError> for ProviderError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::ThreadNotFound => ProviderError::ThreadNotFound,
            NodeError::Refused(m) | NodeError::Unreachable(m) | NodeError::Other(m) => {
                ProviderError::Unavailable(m)
            }
        }
    }
}

/// A paired node, as the gateway sees it: a [`Provider`] for one catalog of host `node:<id>`
/// over HTTP.
pub struct NodeClient {
    id: String,
    catalog: NodeCatalog,
    url: String,
    token: Option<String>,
    agent: ureq::Agent,
    /// Trust for an `https://` node beyond ureq's default (Mozilla's roots): `[[nodes]] ca_file`.
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Bound of one request (connect, send and read together).
    request_timeout: Duration,
    /// Bound of one `check` batch: shorter than the monitor's deadline, so the thread returns
    /// (and frees its executor slot) before the monitor gives up on it.
    check_budget: Duration,
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl NodeClient {
    /// The Claude catalog of the node at `url` (`http://host:7421`); `token` its bearer token.
    pub fn new(id: &str, url: &str, token: Option<&str>) -> Self {
        NodeClient {
            id: id.to_string(),
            catalog: NodeCatalog::Claude,
            url: url.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()).map(str::to_string),
            // No redirects: a node's 3xx must not make the gateway request another host (SSRF);
            // ureq 2 then returns the 3xx as an answer, refused below.
            agent: ureq::AgentBuilder::new()
                .redirects(0)
                .timeout_connect(NODE_TIMEOUT)
                .timeout(NODE_TIMEOUT)
                .build(),
            tls: None,
            request_timeout: NODE_TIMEOUT,
            check_budget: NODE_TIMEOUT,
        }
    }

    /// The same node, for catalog `catalog`.
    pub fn for_catalog(mut self, catalog: NodeCatalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// Fits the client under a caller's `deadline` (the monitor's provider timeout): requests
    /// and whole checks end at three quarters of it (at most 10 s per request), so a hanging
    /// node never keeps a thread past the deadline.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        let inner = deadline.mul_f64(0.75);
        self.request_timeout = NODE_TIMEOUT.min(inner);
        self.check_budget = inner;
        self.agent = self.build_agent();
        self
    }

    /// Verifies an `https://` node with `config` (e.g. Mozilla's roots plus a private CA).
    pub fn with_tls(mut self, config: Option<std::sync::Arc<rustls::ClientConfig>>) -> Self {
        self.tls = config;
        self.agent = self.build_agent();
        self
    }

    fn build_agent(&self) -> ureq::Agent {
        let b = ureq::AgentBuilder::new()
            .redirects(0)
            .timeout_connect(self.request_timeout)
            .timeout(self.request_timeout);
        match &self.tls {
            Some(t) => b.tls_config(t.clone()),
            None => b,
        }
        .build()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    fn get(
        &self,
        path: &str,
        query: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        let mut req = self
            .agent
            .get(&format!("{}{}", self.url, path))
            .timeout(timeout.min(self.request_timeout));
        for (k, v) in query {
            req = req.query(k, v);
        }
        if let Some(t) = &self.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let resp = match req.call() {
            // A redirect is not followed: the node is unavailable (`node_unavailable`).
            Ok(r) if (300..400).contains(&r.status()) => {
                return Err(NodeError::Other(format!(
                    "node {} answered {} with a redirect; redirects are not followed",
                    self.id,
                    r.status()
                )));
            }
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let body: Value = r.into_json().unwrap_or(Value::Null);
                let err_code = body.pointer("/error/code").and_then(Value::as_str);
                if code == 404 && err_code == Some(THREAD_NOT_FOUND) {
                    return Err(NodeError::ThreadNotFound);
                }
                if code == 400 {
                    return Err(NodeError::Refused(format!(
                        "node {} refused the request: {}",
                        self.id,
                        err_code.unwrap_or("")
                    )));
                }
                return Err(NodeError::Other(format!(
                    "node {} answered {code} {}",
                    self.id,
                    err_code.unwrap_or("")
                )));
            }
            Err(ureq::Error::Transport(t)) => {
                let msg = format!("node {} cannot be reached: {t}", self.id);
                return Err(match t.kind() {
                    ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => {
                        NodeError::Unreachable(msg)
                    }
                    _ => NodeError::Other(msg),
                });
            }
        };
        serde_json::from_reader(resp.into_reader().take(MAX_ANSWER_BYTES))
            .map_err(|e| NodeError::Other(format!("node {} sent a malformed answer: {e}", self.id)))
    }

    /// A typed answer, or "malformed" naming what was expected.
    fn get_typed<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        timeout: Duration,
        what: &str,
    ) -> Result<T, NodeError> {
        let body = self.get(path, query, timeout)?;
        serde_json::from_value(body)
            .map_err(|e| NodeError::Other(format!("node {} sent a malformed {what}: {e}", self.id)))
    }

    /// The newest `limit` items of a thread, newest first (the v1 request).
    fn items<I: DeserializeOwned>(
        &self,
        thread_id: &str,
        limit: usize,
        timeout: Duration,
    ) -> Result<Vec<I>, NodeError> {
        let path = self.catalog.items_path(thread_id);
        let answer: ItemsAnswer<I> = self.get_typed(
            &path,
            &[("limit", &limit.to_string())],
            timeout,
            "item list",
        )?;
        Ok(answer.items)
    }

    /// One page of the items after `after` (from the start when `None`), oldest first.
    fn page<I: DeserializeOwned>(
        &self,
        thread_id: &str,
        after: Option<&str>,
        timeout: Duration,
    ) -> Result<ItemsPage<I>, NodeError> {
        let path = self.catalog.items_path(thread_id);
        let limit = PAGE_LIMIT_DEFAULT.to_string();
        self.get_typed(
            &path,
            &[("after", after.unwrap_or("")), ("limit", &limit)],
            timeout,
            "page",
        )
    }

    fn thread_info<I: NodeItem + DeserializeOwned>(
        &self,
        thread_id: &str,
        with_history: bool,
    ) -> Result<ThreadInfo, ProviderError> {
        let items: Vec<I> = self.items(thread_id, ITEMS_LIMIT, self.request_timeout)?;
        Ok(ThreadInfo {
            upstream_kind: self.catalog.upstream_kind().into(),
            upstream_ref: json!({"nodeId": self.id, "threadId": thread_id}),
            baseline: baseline(&items),
            history: if with_history {
                I::history(&items)
            } else {
                Vec::new()
            },
        })
    }

    fn check_with<I: NodeItem + DeserializeOwned>(&self, probes: &[Probe]) -> Vec<Outcome> {
        let until = std::time::Instant::now() + self.check_budget;
        let mut outcomes = Vec::new();
        for probe in probes {
            if !probe_applies(probe, &self.id) {
                continue;
            }
            // A Codex client leaves a link of another kind alone, as the local Codex check does.
            if self.catalog == NodeCatalog::Codex
                && probe.upstream_kind != self.catalog.upstream_kind()
            {
                continue;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::debug!(node = %self.id, "check budget spent; the remaining probes wait for the next tick");
                break;
            }
            let paged = check_paged::<I>(probe, wall_ms(), until, |after| {
                let left = until.saturating_duration_since(std::time::Instant::now());
                self.page(&probe.thread_id, after, left)
            });
            match paged {
                Paged::Outcome(o) => outcomes.extend(o),
                // The node answered, definitively, that the thread is gone: counted like a
                // deleted local file (decision D25; 04 §10 step 2 said never).
                Paged::Missing => outcomes.push(Outcome::Missing {
                    session_key: probe.session_key.clone(),
                }),
                Paged::Fallback => {
                    let left = until.saturating_duration_since(std::time::Instant::now());
                    match self.items::<I>(&probe.thread_id, ITEMS_LIMIT, left) {
                        Ok(items) => outcomes.extend(I::unknown_marker(probe, &items, wall_ms())),
                        Err(e) => {
                            tracing::debug!(node = %self.id, session = %probe.session_key, error = ?e, "paired-node probe gave no outcome");
                        }
                    }
                }
                Paged::Unreachable => {
                    tracing::debug!(node = %self.id, "paired node unreachable; no outcome for the batch");
                    break;
                }
            }
        }
        outcomes
    }
}

impl Provider for NodeClient {
    fn host_id(&self) -> String {
        format!("node:{}", self.id)
    }

    fn catalog_id(&self) -> &'static str {
        self.catalog.id()
    }

    fn list(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<CatalogItem>, Option<String>), ProviderError> {
        let limit = limit.to_string();
        let mut query = vec![("limit", limit.as_str())];
        if let Some(c) = cursor {
            query.push(("cursor", c));
        }
        let page: ThreadsPage = self.get_typed(
            &self.catalog.threads_path(),
            &query,
            self.request_timeout,
            "thread list",
        )?;
        let items = page
            .items
            .into_iter()
            .map(|e| CatalogItem {
                thread_id: e.thread_id,
                updated_at: e.updated_at,
                size_bytes: e.size_bytes,
                cwd: e.cwd,
                title: e.title,
            })
            .collect();
        Ok((items, page.next_cursor))
    }

    fn open_thread(
        &self,
        thread_id: &str,
        with_history: bool,
    ) -> Result<ThreadInfo, ProviderError> {
        match self.catalog {
            NodeCatalog::Claude => self.thread_info::<Value>(thread_id, with_history),
            NodeCatalog::Codex => self.thread_info::<CodexItem>(thread_id, with_history),
        }
    }

    fn check(&self, probes: &[Probe]) -> Result<Vec<Outcome>, ProviderError> {
        Ok(match self.catalog {
            NodeCatalog::Claude => self.check_with::<Value>(probes),
            NodeCatalog::Codex => self.check_with::<CodexItem>(probes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::check::tests::{probe, THREAD};

    #[test]
    fn client_maps_errors() {
        // Nothing listens on port 9 of loopback (discard); a refused connection is unavailable.
        let c = NodeClient::new("laptop", "http://127.0.0.1:9/", Some("t"));
        assert_eq!(c.host_id(), "node:laptop");
        assert!(matches!(
            c.open_thread(THREAD, false),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            c.list(10, None),
            Err(ProviderError::Unavailable(_))
        ));
        assert_eq!(c.check(&[probe(json!({"uuid": null}))]), Ok(Vec::new()));
    }
}
