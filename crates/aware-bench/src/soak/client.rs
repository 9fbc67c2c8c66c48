//! One keep-alive connection of a load thread: each request timed under its route's name, its
//! status counted, its JSON answer parsed. Any status other than the expected one is an error:
//! the model predicts every answer, so a surprise means the model or the gateway is wrong.

use super::stats::Stats;
use crate::http::raw::RawConn;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

pub(crate) struct Conn {
    base: String,
    raw: RawConn,
    stats: Arc<Stats>,
}

impl Conn {
    pub(crate) fn connect(base: &str, stats: Arc<Stats>) -> Result<Conn> {
        Ok(Conn {
            base: base.to_string(),
            raw: RawConn::connect(base)?,
            stats,
        })
    }

    /// Sends one request and checks its status is `expect`; the answer as JSON (`Null` for an
    /// empty body).
    pub(crate) fn call(
        &mut self,
        route: &'static str,
        method: &str,
        path: &str,
        caller: Option<&str>,
        body: Option<&str>,
        expect: u16,
    ) -> Result<Value> {
        let req = RawConn::request(&self.base, method, path, caller, body);
        let t = Instant::now();
        let answer = self
            .raw
            .send(&req)
            .with_context(|| format!("{method} {path}"))?;
        let ns = t.elapsed().as_nanos() as u64;
        self.stats.record(route, ns, answer.status);
        let status = answer.status;
        let text = String::from_utf8_lossy(answer.body).into_owned();
        if status != expect {
            bail!("{method} {path} answered {status} (expected {expect}): {text}");
        }
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| anyhow!("{method} {path}: the answer is not JSON ({e}): {text}"))
    }
}
