//! Wake streams (`GET /v1/wakes`, SSE) that stay connected for a few seconds, then reconnect:
//! every connect runs the stream's catch-up read, which is what the first soak (decision D41) found growing with the
//! store. Stream `i` follows the current manager of team `i` (`session=`); every fourth stream
//! follows the whole agent (`agent=main`), whose catch-up reads every pending watcher.

use super::shared::Shared;
use anyhow::{anyhow, bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a stream stays connected before it reconnects: 3 s to 8 s, by stream.
fn hold(i: usize) -> Duration {
    Duration::from_millis(3_000 + (i as u64 * 1_300) % 5_000)
}

/// One stream's life until the stop flag: connect, read wakes, reconnect.
pub(crate) fn run(i: usize, shared: Shared) -> Result<()> {
    let addr = shared
        .base
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("the wake streams speak http:// only"))?
        .to_string();
    while !shared.stopped() {
        let query = if i % 4 == 3 {
            "agent=main".to_string()
        } else {
            let managers = shared
                .managers
                .lock()
                .map_err(|_| anyhow!("the managers list is poisoned"))?;
            let n = managers.len().max(1);
            match managers.get(i % n) {
                Some(m) if !m.is_empty() => format!("session={}", aware_client::seg(m)),
                _ => "agent=main".to_string(),
            }
        };
        let t = Instant::now();
        let mut s = TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_millis(250)))?;
        s.write_all(format!("GET /v1/wakes?{query} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())?;
        let mut buf = Vec::with_capacity(8 * 1024);
        let mut chunk = [0u8; 8 * 1024];
        let mut head_done = false;
        let until = t + hold(i);
        while Instant::now() < until && !shared.stopped() {
            let n = match s.read(&mut chunk) {
                Ok(0) => bail!("the gateway closed a wake stream ({query})"),
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) => return Err(e).context("reading a wake stream"),
            };
            buf.extend_from_slice(&chunk[..n]);
            if !head_done {
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                let status = head.split(' ').nth(1).unwrap_or("?");
                shared
                    .stats
                    .record("GET /v1/wakes (headers)", t.elapsed().as_nanos() as u64, {
                        status.parse().unwrap_or(0)
                    });
                if status != "200" {
                    bail!("GET /v1/wakes?{query} answered {head:?}");
                }
                shared.stats.wake_connects.fetch_add(1, Ordering::Relaxed);
                buf.drain(..end + 4);
                head_done = true;
            }
            // Count complete events; keep a partial one for the next read. The body is
            // chunked, so a chunk-size line may sit between events: only `event: wake` counts.
            while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                let event = &buf[..end];
                if event.windows(11).any(|w| w == b"event: wake") {
                    shared.stats.wake_events.fetch_add(1, Ordering::Relaxed);
                }
                buf.drain(..end + 2);
            }
        }
    }
    Ok(())
}
