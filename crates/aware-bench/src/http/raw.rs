//! A minimal HTTP/1.1 keep-alive client for the load loops: one prebuilt request written with
//! one `write`, the answer read into a reused buffer. The load clients run on the same cores
//! as the gateway, so what they spend is taken from it: with `aware-client` (ureq) a client
//! spent about as much CPU per request as the gateway did (URL parse, header maps, socket
//! timeouts set per request, a fresh `String` per answer), which capped the measured
//! throughput below what the gateway could do. This one spends a fraction of that. It speaks
//! only what the gateway answers these workloads with (a `Content-Length` body); anything else
//! is an error, never a guess.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;

pub(crate) struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// The answer of one request: status and body (borrowed from the connection's buffer).
pub(crate) struct RawAnswer<'a> {
    pub status: u16,
    pub body: &'a [u8],
}

impl RawConn {
    /// Connects to `base` (`http://127.0.0.1:port`).
    pub(crate) fn connect(base: &str) -> Result<RawConn> {
        let addr = base
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("the raw client speaks http:// only, not {base}"))?;
        let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(RawConn {
            stream,
            buf: Vec::with_capacity(32 * 1024),
        })
    }

    /// The bytes of a request on `base` (Host from it), with an optional JSON body and caller.
    pub(crate) fn request(
        base: &str,
        method: &str,
        path: &str,
        caller: Option<&str>,
        body: Option<&str>,
    ) -> Vec<u8> {
        let host = base.trim_start_matches("http://");
        let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
        if let Some(c) = caller {
            r.push_str(&format!("X-Aware-Session: {}\r\n", aware_client::seg(c)));
        }
        if let Some(b) = body {
            r.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            ));
        } else {
            r.push_str("\r\n");
        }
        r.into_bytes()
    }

    /// Sends `request` and reads its answer to the end (the connection stays usable).
    pub(crate) fn send(&mut self, request: &[u8]) -> Result<RawAnswer<'_>> {
        self.stream.write_all(request)?;
        self.buf.clear();
        let mut chunk = [0u8; 16 * 1024];
        // Headers first.
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                bail!("the gateway closed the connection mid-answer");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        };
        let head = std::str::from_utf8(&self.buf[..head_end])
            .map_err(|_| anyhow!("answer headers are not UTF-8"))?;
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("no status in {:?}", head.lines().next()))?;
        let len: usize = head
            .split("\r\n")
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .ok_or_else(|| anyhow!("answer without Content-Length: {head:?}"))?;
        let total = head_end + len;
        while self.buf.len() < total {
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                bail!("the gateway closed the connection mid-body");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        if self.buf.len() > total {
            bail!("the gateway sent more than its Content-Length");
        }
        Ok(RawAnswer {
            status,
            body: &self.buf[head_end..total],
        })
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Does `hay` contain `needle`?
pub(crate) fn contains(hay: &[u8], needle: &str) -> bool {
    find(hay, needle.as_bytes()).is_some()
}
