//! A TCP proxy on loopback that injects network faults between a gateway and PostgreSQL, switched
//! at run time, one instance per path (so one gateway can be partitioned while the others are
//! not).
//!
//! Modes ([`Fault`]):
//! - **Pass**: bytes are forwarded both ways as they come.
//! - **Blackhole**: a partition that drops packets. Connections are accepted and read (so the
//!   sender's kernel never pushes back, as with a peer that is simply gone), and nothing is
//!   forwarded, in either direction; a new connection gets no upstream. A connection that lost
//!   bytes this way is cut (FIN both ways) when the partition heals, as a real TCP connection
//!   whose peer stopped acknowledging would have died meanwhile; one that lost nothing goes on,
//!   as an idle connection survives a short partition.
//! - **Delay(d)**: every chunk is forwarded `d` after the proxy read it, per direction (a round
//!   trip costs `2 d`), in order.
//! - **Reset**: every open connection is reset (RST, both sides) and every new one is reset at
//!   once: the server or a firewall refusing.
//! - **HalfOpen**: the server side of every connection is closed (the server sees its client
//!   gone and ends the session), while the client side stays open, is read and discarded and
//!   gets nothing: the client believes its connection is up. New connections get the same.
//!
//! Not a packet-level fault: the proxy's own kernel acknowledges what it reads, so TCP
//! keep-alives and `tcp_user_timeout` on either side never fire through it, as through any
//! proxy (pgbouncer, a cloud SQL proxy). What must end a dead session then is the
//! application's own deadlines and the server's session timeouts, which is what this tests.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the proxy does to the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Blackhole,
    Delay(Duration),
    Reset,
    HalfOpen,
}

impl Fault {
    /// Whether bytes flow (at once or late).
    fn forwards(self) -> bool {
        matches!(self, Fault::Pass | Fault::Delay(_))
    }
}

/// One running proxy; stopped (and every connection through it closed) when dropped.
pub struct FaultProxy {
    port: u16,
    mode: watch::Sender<Fault>,
    /// Connections accepted so far.
    accepted: Arc<AtomicU64>,
    _runtime: tokio::runtime::Runtime,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`, in [`Fault::Pass`].
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let port = listener.local_addr()?.port();
        let (mode, rx) = watch::channel(Fault::Pass);
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        runtime.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                count.fetch_add(1, Ordering::Relaxed);
                let _ = client.set_nodelay(true);
                tokio::spawn(connection(client, upstream, rx.clone()));
            }
        });
        Ok(FaultProxy {
            port,
            mode,
            accepted,
            _runtime: runtime,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (a `postgres://…@host:port/…` URL) with its host and port replaced by the proxy's.
    pub fn url_through(&self, url: &str) -> String {
        let Some(i) = url.find("://") else {
            return url.to_string();
        };
        let rest = &url[i + 3..];
        let at = rest.find('@').map_or(0, |a| a + 1);
        let end = rest[at..].find('/').map_or(rest.len(), |e| at + e);
        format!(
            "{}{}127.0.0.1:{}{}",
            &url[..i + 3],
            &rest[..at],
            self.port,
            &rest[end..]
        )
    }

    /// Switches the mode; open connections follow at once.
    pub fn set(&self, fault: Fault) {
        self.mode.send_replace(fault);
    }

    pub fn mode(&self) -> Fault {
        *self.mode.borrow()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// A chunk read from one side, with the time it was read; `None` is the end of that side.
type Chunk = (Instant, Option<Vec<u8>>);

/// How a connection ends.
enum End {
    /// Both sides closed normally (FIN) or by their own peers.
    Closed,
    /// Reset both sides.
    Reset,
    /// Close the server side, keep the client side open and deaf.
    HalfOpen,
}

/// Serves one client connection until it ends.
#[expect(
    clippy::too_many_lines,
    reason = "one proxied connection's whole life: the fault plan is applied at each of its steps"
)]
async fn connection(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Fault>) {
    let client = Arc::new(client);
    // A connection that lost bytes in a partition is cut when it heals.
    let tainted = Arc::new(AtomicBool::new(false));
    // Wait until the path is open before reaching the server (a partition drops the SYN too);
    // what the client sends meanwhile is read and dropped.
    let (c_tx, c_rx) = mpsc::channel::<Chunk>(64);
    let reader_c = tokio::spawn(read_side(
        client.clone(),
        c_tx,
        mode.clone(),
        tainted.clone(),
    ));
    let first = loop {
        let m = *mode.borrow_and_update();
        if m.forwards() || matches!(m, Fault::Reset | Fault::HalfOpen) {
            break m;
        }
        if mode.changed().await.is_err() {
            reader_c.abort();
            return;
        }
    };
    match first {
        Fault::Reset => {
            reader_c.abort();
            reset(&client);
            return;
        }
        Fault::HalfOpen => {
            half_open(&client, reader_c, mode).await;
            return;
        }
        _ => {}
    }
    if tainted.swap(false, Ordering::SeqCst) {
        // Its first bytes were dropped: as a real connection whose SYN or first segment was
        // lost and retried too late, it dies.
        reader_c.abort();
        close(&client);
        return;
    }
    let server = match TcpStream::connect(upstream).await {
        Ok(s) => Arc::new(s),
        Err(_) => {
            reader_c.abort();
            reset(&client);
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let (s_tx, s_rx) = mpsc::channel::<Chunk>(64);
    let reader_s = tokio::spawn(read_side(
        server.clone(),
        s_tx,
        mode.clone(),
        tainted.clone(),
    ));
    let to_server = tokio::spawn(write_side(
        server.clone(),
        c_rx,
        mode.clone(),
        tainted.clone(),
    ));
    let to_client = tokio::spawn(write_side(
        client.clone(),
        s_rx,
        mode.clone(),
        tainted.clone(),
    ));
    // Supervise: the end of both directions, or a mode that ends the connection.
    let end = loop {
        if to_server.is_finished() && to_client.is_finished() {
            break End::Closed;
        }
        let m = *mode.borrow_and_update();
        match m {
            Fault::Reset => break End::Reset,
            Fault::HalfOpen => break End::HalfOpen,
            _ if m.forwards() && tainted.load(Ordering::SeqCst) => break End::Closed,
            _ => {}
        }
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { break End::Closed },
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    };
    for t in [&reader_s, &to_server, &to_client] {
        t.abort();
    }
    match end {
        End::Closed => {
            reader_c.abort();
            close(&server);
            close(&client);
        }
        End::Reset => {
            reader_c.abort();
            reset(&server);
            reset(&client);
        }
        End::HalfOpen => {
            close(&server);
            drop(server);
            half_open(&client, reader_c, mode).await;
        }
    }
}

/// A client side whose server side is gone: read and discarded (by `reader`, the mode forwarding
/// nothing) until the client goes away; reset when the path opens again, as the server's host
/// would answer a segment of a connection it no longer knows.
async fn half_open(
    client: &TcpStream,
    mut reader: tokio::task::JoinHandle<()>,
    mut mode: watch::Receiver<Fault>,
) {
    loop {
        if mode.borrow_and_update().forwards() {
            reader.abort();
            reset(client);
            return;
        }
        tokio::select! {
            _ = &mut reader => return,
            changed = mode.changed() => if changed.is_err() { return },
        }
    }
}

/// Reads one side into `tx` while the mode forwards; in other modes reads and drops (marking
/// the connection tainted). Ends at the side's end or error.
async fn read_side(
    s: Arc<TcpStream>,
    tx: mpsc::Sender<Chunk>,
    mode: watch::Receiver<Fault>,
    tainted: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match read_some(&s, &mut buf).await {
            Ok(0) | Err(_) => 0,
            Ok(n) => n,
        };
        if !mode.borrow().forwards() {
            // Dropped, the side's end included: its peer learns nothing.
            tainted.store(true, Ordering::SeqCst);
            if n > 0 {
                continue;
            }
            return;
        }
        let chunk = (n > 0).then(|| buf[..n].to_vec());
        let end = chunk.is_none();
        if tx.send((Instant::now(), chunk)).await.is_err() || end {
            return;
        }
    }
}

/// Writes what `rx` brings to `s`, each chunk when the mode lets it through; the end of the
/// other side becomes a FIN here.
async fn write_side(
    s: Arc<TcpStream>,
    mut rx: mpsc::Receiver<Chunk>,
    mut mode: watch::Receiver<Fault>,
    tainted: Arc<AtomicBool>,
) {
    'chunks: while let Some((read_at, chunk)) = rx.recv().await {
        // Wait until this chunk may go.
        loop {
            let m = *mode.borrow_and_update();
            match m {
                Fault::Pass => break,
                Fault::Delay(d) => {
                    let due = read_at + d;
                    if Instant::now() >= due {
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until(due) => break,
                        changed = mode.changed() => if changed.is_err() { return },
                    }
                }
                // Read while forwarding (or still in flight), then the path closed: lost.
                _ => {
                    tainted.store(true, Ordering::SeqCst);
                    continue 'chunks;
                }
            }
        }
        match chunk {
            Some(bytes) => {
                if write_all(&s, &bytes).await.is_err() {
                    return;
                }
            }
            None => {
                let _ = socket2::SockRef::from(&*s).shutdown(std::net::Shutdown::Write);
                return;
            }
        }
    }
}

async fn read_some(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

async fn write_all(s: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        s.writable().await?;
        match s.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Makes the close of the connection a reset (RST instead of FIN) when its last handle goes,
/// which the caller's return does (the tasks holding it are aborted first).
fn reset(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Closes both directions (FIN).
fn close(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// An echo server on loopback.
    fn echo() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            for s in l.incoming().map_while(Result::ok) {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(c: &mut std::net::TcpStream, what: &[u8]) -> io::Result<Vec<u8>> {
        c.write_all(what)?;
        let mut got = vec![0u8; what.len()];
        c.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn modes_switch_at_run_time() {
        let p = FaultProxy::start(echo()).expect("proxy");
        let connect = || {
            let c = std::net::TcpStream::connect(("127.0.0.1", p.port())).expect("connect");
            c.set_read_timeout(Some(Duration::from_millis(600)))
                .expect("timeout");
            c
        };
        let mut a = connect();
        assert_eq!(round_trip(&mut a, b"one").expect("pass"), b"one");
        // Blackhole: nothing comes back; after the heal the connection that lost bytes is cut,
        // a new one works.
        p.set(Fault::Blackhole);
        assert!(round_trip(&mut a, b"two").is_err(), "a blackhole answered");
        p.set(Fault::Pass);
        let mut buf = [0u8; 8];
        a.set_read_timeout(Some(Duration::from_secs(5))).expect("t");
        assert!(
            matches!(a.read(&mut buf), Ok(0) | Err(_)),
            "a tainted connection survived the heal"
        );
        let mut b = connect();
        assert_eq!(round_trip(&mut b, b"three").expect("healed"), b"three");
        // Delay: still answers, late.
        p.set(Fault::Delay(Duration::from_millis(100)));
        let t = std::time::Instant::now();
        b.set_read_timeout(Some(Duration::from_secs(5))).expect("t");
        assert_eq!(round_trip(&mut b, b"four").expect("delayed"), b"four");
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        // Reset: the open connection is reset, a new one too.
        p.set(Fault::Reset);
        assert!(
            round_trip(&mut b, b"five").is_err(),
            "a reset connection answered"
        );
        let mut c = connect();
        assert!(
            round_trip(&mut c, b"six").is_err(),
            "a new connection answered"
        );
        // Half-open: the client side stays open and silent.
        p.set(Fault::Pass);
        let mut d = connect();
        assert_eq!(round_trip(&mut d, b"seven").expect("pass"), b"seven");
        p.set(Fault::HalfOpen);
        let err = round_trip(&mut d, b"eight").expect_err("half-open answered");
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "half-open must look open and silent, got {err:?}"
        );
        assert!(p.accepted() >= 4);
    }

    #[test]
    fn url_through_replaces_host_and_port_only() {
        let p = FaultProxy::start(echo()).expect("proxy");
        let port = p.port();
        assert_eq!(
            p.url_through("postgres://postgres@127.0.0.1:5432/db_1"),
            format!("postgres://postgres@127.0.0.1:{port}/db_1")
        );
        assert_eq!(
            p.url_through("postgres://db.example:5/x?sslmode=disable"),
            format!("postgres://127.0.0.1:{port}/x?sslmode=disable")
        );
    }
}
