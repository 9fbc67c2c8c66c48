//! Several gateways on one PostgreSQL: the engine's cluster hooks ([`aware_engine::WakeBus`],
//! [`aware_engine::Leadership`]) implemented on PostgreSQL.
//!
//! - **Wakes.** Every wake a gateway delivers is published with `pg_notify` on one channel from a
//!   publisher thread (its own connection, so a slow publish never holds the writer). Every
//!   gateway `LISTEN`s on a dedicated connection and hands other gateways' wakes to
//!   [`aware_engine::Engine::deliver_remote_wake`] (its SSE subscribers only; webhooks stay with
//!   the producer). Notifications are hints: one lost to a crash between the commit and the
//!   publish, or to a dropped listener connection, is repaired by the SSE catch-up on reconnect
//!   and by [`aware_engine::Engine::repair_wakes`], which the listener runs every few seconds and
//!   right after it reconnects.
//! - **Leadership.** A session-level `pg_try_advisory_lock` held on a dedicated connection, tried
//!   every `retry` while not held and proved every `retry` while held by a round trip with a
//!   deadline. A failed check drops leadership at once: PostgreSQL releases the lock when that
//!   session ends, so after `kill -9` of the leader (its socket closes) another gateway takes it
//!   on its next try. See "Bounded leadership loss" below for a leader cut off from the server.
//!
//! - **Signed payloads.** Any role that may connect to the database can `NOTIFY` on the channel,
//!   so every payload is signed (HMAC-SHA-256) with the cluster key, and a wake's `agentId` must
//!   be its session key's agent. The key comes from a key file every gateway shares
//!   ([`ClusterOptions::key`], `[cluster] key_file`, decision D62), which no database role can
//!   read; without one, from `aware_cluster_key`, which every role that may read that table
//!   can read too (`pg_read_all_data` included) and so sign with.
//!   Anything else on the channel is dropped and counted (`rejected`). A role that may connect
//!   can still read payloads (`LISTEN`) and replay one it saw: docs/deployment.md says which
//!   grants keep such roles out.
//! - **Strangers.** A role that may connect can also hold the leadership lock. When the lock is
//!   not granted and its holder runs as another role, the holder is logged and reported
//!   ([`ClusterStatus::stranger`]), so a gateway that never leads says why.
//!
//! ## Bounded leadership loss
//!
//! A leader whose packets are dropped (a partition, not a refusal) cannot close its session, and
//! by default PostgreSQL notices a dead client only when its TCP keep-alive gives up (hours), or
//! never when a proxy (pgbouncer, a cloud SQL proxy) keeps the TCP connection alive for it. The
//! lock would stay with a gateway that can no longer act, and no gateway would run the
//! singletons. Two timers bound this, one on each side, the server's strictly longer:
//!
//! - **The server ends the session.** The leadership connection sets `idle_session_timeout`
//!   ([`ClusterOptions::server_idle_timeout`], default 10 s; PostgreSQL ≥ 14) and the server's
//!   TCP keep-alives and `tcp_user_timeout` to the same bound (never shorter: they too end the
//!   session). A healthy gateway sends a check every second, so
//!   its session is never idle that long; a partitioned one's is, and the server ends it and
//!   releases the lock [`ClusterOptions::server_idle_timeout`] after the last statement it got.
//!   The idle timeout is the one that works through a proxy (the proxy answers the keep-alive
//!   probes); the keep-alives cover a server blocked writing to a dead peer. On PostgreSQL 13
//!   the `SET` fails, a warning says so, and the bound is the keep-alives' (direct TCP only).
//! - **The leader gives up first (a lease).** Leadership is valid only until the moment the last
//!   successful check was *sent* plus [`ClusterOptions::lease`] (default 5 s), and
//!   [`ClusterStatus::is_leader`] reads the clock, so it turns false when the lease runs out even
//!   while the check thread is stuck in a blocked socket call. The server processed that check
//!   no earlier than it was sent, so it keeps the lock at least `server_idle_timeout` after the
//!   send: with `lease < server_idle_timeout` the old leader stops believing it leads before
//!   the lock can be granted to anyone else, and two gateways never lead at once. The margin
//!   (5 s by default) absorbs a singleton step begun just before the lease ran out.
//!
//! So a partitioned leader stops leading within `lease` (in practice `retry + check_timeout`,
//! 3 s, when its check fails), and another gateway leads within
//! `server_idle_timeout + retry` plus a round trip (about 11 s; documented bound 12 s,
//! [`TAKEOVER_BOUND`]).
//!
//! **Epoch (fencing token).** Each time a gateway takes the lock it draws the next value of the
//! sequence `aware_leader_epoch` (created on first use), reported as [`ClusterStatus::epoch`],
//! on `/health` and in the `cluster_leadership_taken` / `cluster_leadership_lost` log lines, so
//! two leaderships are never confused in logs or tests. The singletons' writes do not check it
//! yet: the lease is what keeps an old leader from acting. The residual case the lease cannot
//! cover is the server ending the leader's session *early* (an operator's
//! `pg_terminate_backend`, a proxy closing only its server side) while the leader cannot hear
//! it: then another gateway may lead while the old one's lease runs out (at most `lease`). The
//! singletons' writes are store operations, serialised by the write lock, and the monitor's
//! records are admission-checked against the link row they read, so such an overlap is
//! expected to repeat work rather than double state; that case is not tested.
//!
//! Every cluster connection is opened with a deadline covering the whole set-up
//! ([`ClusterOptions::connect_wait`]): the driver's own connect timeout covers only the TCP
//! connect, and a server or proxy that accepts and then never answers would hold the thread.
//!
//! Architecture invariant: nothing here writes the store (the epoch sequence is the cluster's
//! own object, not store data); correctness never depends on a notification arriving.

mod dial;
mod key;
mod leader;
mod listener;
mod payload;
mod publisher;

use aware_engine::{Engine, Leadership, Wake, WakeBus};
use dial::*;
use key::*;
pub use key::{ClusterKey, KeyFileError, MIN_KEY_BYTES};
use leader::*;
use listener::*;
use payload::*;
pub use payload::{
    decode, decode_change, decode_reply, encode, encode_change, encode_reply, sign, verify,
};
use postgres::Client;
use publisher::*;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The advisory lock key of the singletons ("aware" in ASCII, then "lead"): one per database.
pub const LEADER_LOCK_KEY: i64 = 0x6177_6172_6500_6c64;
/// The shortest time between two change hints of one gateway: the console coalesces its
/// stream to one hint per 250 ms anyway, so more would only load every listener.
pub const CHANGE_HINT_EVERY: Duration = Duration::from_millis(100);

/// The documented bound of a leadership change after the leader is cut off from PostgreSQL, with
/// the default [`ClusterOptions`]: `server_idle_timeout` (10 s) + `retry` (1 s) + a round trip
/// and a connect (1 s). docs/deployment.md, "Network faults", gives the figures measured.
pub const TAKEOVER_BOUND: Duration = Duration::from_secs(12);

/// The sequence whose next value is the epoch of a new leadership.
const EPOCH_SEQUENCE: &str = "aware_leader_epoch";

/// The notification channel of wakes.
pub const WAKE_CHANNEL: &str = "aware_wakes";
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot start the cluster thread {0}: {1}")]
    Thread(&'static str, std::io::Error),
}

/// Opens a new connection to the store's database (the store's own settings: password,
/// timeouts, keep-alives). Each cluster thread owns the connections it opens.
pub type Connect = Arc<dyn Fn() -> Result<Client, String> + Send + Sync>;

/// Settings of [`Cluster::start`].
#[derive(Clone)]
pub struct ClusterOptions {
    pub connect: Connect,
    /// The advisory lock of leadership ([`LEADER_LOCK_KEY`]; tests sharing a database use
    /// their own).
    pub lock_key: i64,
    /// Pause between leadership attempts and between reconnects.
    pub retry: Duration,
    /// Interval of the repair check of lost notifications.
    pub repair_every: Duration,
    /// Deadline of one liveness round trip of the leader's and the listener's connections.
    pub check_timeout: Duration,
    /// How long [`Cluster::start`] waits for the first leadership attempt, so the gateway that
    /// starts a cluster sweeps at start.
    pub first_attempt_wait: Duration,
    /// How long a leadership lasts after the send of the last check that succeeded (see the
    /// module doc). Must be shorter than `server_idle_timeout` and longer than
    /// `retry + check_timeout`.
    pub lease: Duration,
    /// `idle_session_timeout` of the leadership connection: the server ends a session that sent
    /// nothing for this long, releasing the lock of a leader cut off from it.
    pub server_idle_timeout: Duration,
    /// Longest wait for a cluster connection to be set up (connect, authentication, the
    /// session settings); an attempt still under way is waited for again on the next try, never
    /// started twice.
    pub connect_wait: Duration,
    /// The key of `[cluster] key_file` (decision D62); `None`: the key in `aware_cluster_key`.
    pub key: Option<ClusterKey>,
}

impl ClusterOptions {
    pub fn new(connect: Connect) -> Self {
        ClusterOptions {
            connect,
            lock_key: LEADER_LOCK_KEY,
            retry: Duration::from_secs(1),
            repair_every: Duration::from_secs(5),
            check_timeout: Duration::from_secs(2),
            first_attempt_wait: Duration::from_secs(3),
            lease: Duration::from_secs(5),
            server_idle_timeout: Duration::from_secs(10),
            connect_wait: Duration::from_secs(3),
            key: None,
        }
    }

    /// Connections made from a driver configuration as it is (tests, tools).
    pub fn from_config(config: postgres::Config) -> Self {
        Self::new(Arc::new(move || {
            config.connect(postgres::NoTls).map_err(|e| e.to_string())
        }))
    }

    /// The options with the timing rules of the module doc enforced: a lease not shorter than
    /// the server's idle timeout would let two gateways lead at once, so it is cut to half of
    /// it (and a check deadline to under the lease) with a warning.
    fn checked(mut self) -> Self {
        if self.lease >= self.server_idle_timeout {
            let lease = self.server_idle_timeout / 2;
            tracing::warn!(event = "cluster_lease_shortened", lease_ms = lease.as_millis() as u64,
                "the leadership lease must be shorter than the server's idle session timeout; shortened");
            self.lease = lease;
        }
        if self.check_timeout >= self.lease {
            self.check_timeout = self.lease / 2;
        }
        self
    }
}

/// What this gateway knows of the cluster, for `/health` and `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterStatus {
    /// This process's id in the cluster (random per start).
    pub node_id: String,
    /// The leadership thread holds the lock (it believes so); [`ClusterStatus::is_leader`]
    /// also requires the lease.
    leader: AtomicBool,
    /// End of the lease, in nanoseconds on [`clock`]; 0 when none.
    lease_until: AtomicU64,
    /// The epoch of this gateway's current or last leadership (0: never led, or the epoch
    /// sequence could not be read).
    epoch: AtomicI64,
    listening: AtomicBool,
    /// Times this process became leader.
    pub leader_acquired: AtomicU64,
    /// Times this process lost leadership (a failed check, a closed connection, a lease that
    /// ran out, shutdown).
    pub leader_lost: AtomicU64,
    /// Times this process asked for the leader lock and another session held it.
    pub lock_refused: AtomicU64,
    pub published: AtomicU64,
    /// Wakes not published: the queue was full or PostgreSQL unreachable (repair covers them).
    pub publish_dropped: AtomicU64,
    pub received: AtomicU64,
    /// Reply signals of other gateways received (a `sessions_send` reply committed there).
    pub replies_received: AtomicU64,
    /// Change hints of other gateways received (a commit there; the console's stream hints).
    pub changes_received: AtomicU64,
    /// Listener reconnects after a lost connection.
    pub listener_reconnects: AtomicU64,
    /// Notifications on the channel dropped: unsigned, signed with another key, or a wake whose
    /// `agentId` is not its session key's agent (forgeries by a role that may connect).
    pub rejected: AtomicU64,
    /// Who holds the leadership lock when a session of another role does (never a gateway).
    stranger: Mutex<Option<String>>,
    /// A commit happened here since the publisher last sent a change hint. The publisher sends
    /// at most one hint per [`CHANGE_HINT_EVERY`], so a burst of commits is one hint, not one
    /// per commit, and the last commit of a burst is never left without one.
    change_pending: AtomicBool,
}

/// Nanoseconds since the first use in this process, on the monotonic clock.
fn clock(at: Instant) -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    // +1: 0 means "no lease".
    at.saturating_duration_since(base).as_nanos() as u64 + 1
}

impl ClusterStatus {
    /// Whether this gateway leads now: it holds the lock and its lease has not run out. Read
    /// from the clock, so it turns false at the end of the lease even while the leadership
    /// thread is blocked.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
            && clock(Instant::now()) < self.lease_until.load(Ordering::SeqCst)
    }
    /// The epoch of this gateway's current or last leadership (the fencing token; 0 when it
    /// never led).
    pub fn epoch(&self) -> i64 {
        self.epoch.load(Ordering::SeqCst)
    }
    /// How long the current lease still runs (zero when not leading).
    pub fn lease_left(&self) -> Duration {
        if !self.leader.load(Ordering::SeqCst) {
            return Duration::ZERO;
        }
        let (now, until) = (
            clock(Instant::now()),
            self.lease_until.load(Ordering::SeqCst),
        );
        Duration::from_nanos(until.saturating_sub(now))
    }
    /// Whether the listener connection is up (remote wakes arrive).
    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }
    /// The session of another role that holds the leadership lock, as last seen; `None` when
    /// the lock is free or held by a gateway.
    pub fn stranger(&self) -> Option<String> {
        self.stranger.lock().ok().and_then(|s| s.clone())
    }
    fn set_stranger(&self, holder: Option<String>) {
        let Ok(mut s) = self.stranger.lock() else {
            return;
        };
        if *s != holder {
            match &holder {
                Some(h) => tracing::error!(event = "cluster_lock_held_by_stranger", holder = %h,
                    "the leadership lock is held by {h}, not by a gateway: no gateway runs retention, \
                     the restart sweep, run timeouts or the monitor while it holds it; end that \
                     session and revoke CONNECT from roles that need none (docs/deployment.md)"),
                None => tracing::info!(
                    event = "cluster_lock_stranger_gone",
                    "the leadership lock is no longer held by a stranger"
                ),
            }
            *s = holder;
        }
    }
    /// The thread holds the lock (it may be past its lease: see [`ClusterStatus::is_leader`]).
    fn holding(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }
    /// Whether the lease still runs.
    fn lease_valid(&self) -> bool {
        clock(Instant::now()) < self.lease_until.load(Ordering::SeqCst)
    }
    /// Leadership taken with epoch `epoch`, valid until `until`.
    fn take(&self, epoch: i64, until: Instant) {
        self.epoch.store(epoch, Ordering::SeqCst);
        self.lease_until.store(clock(until), Ordering::SeqCst);
        if !self.leader.swap(true, Ordering::SeqCst) {
            self.leader_acquired.fetch_add(1, Ordering::Relaxed);
            tracing::info!(event = "cluster_leadership_taken", node = %self.node_id, epoch,
                "this gateway now runs the singletons (retention, run timeouts, monitor)");
        }
    }
    /// A check sent at `sent` succeeded: the lease runs to `until`.
    fn renew(&self, until: Instant) {
        self.lease_until.store(clock(until), Ordering::SeqCst);
    }
    /// Leadership ends here, for `reason`.
    fn lose(&self, reason: &str) {
        self.lease_until.store(0, Ordering::SeqCst);
        if self.leader.swap(false, Ordering::SeqCst) {
            self.leader_lost.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(event = "cluster_leadership_lost", node = %self.node_id,
                epoch = self.epoch(), reason, "leadership lost; singletons stop here");
        }
    }
}

struct StatusLeadership(Arc<ClusterStatus>);

impl Leadership for StatusLeadership {
    fn is_leader(&self) -> bool {
        self.0.is_leader()
    }
}

struct PgBus {
    status: Arc<ClusterStatus>,
    tx: SyncSender<String>,
}

impl PgBus {
    fn send(&self, payload: String) {
        match self.tx.try_send(payload) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.status.publish_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl WakeBus for PgBus {
    fn publish_reply(&self, run_id: &str) {
        let payload = encode_reply(&self.status.node_id, run_id);
        if payload.len() > MAX_PAYLOAD {
            // Run ids are bounded far below this; the waiter's own re-read covers it anyway.
            self.status.publish_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.send(payload);
    }

    fn publish(&self, wake: &Wake) {
        let payload = encode(&self.status.node_id, wake);
        if payload.len() > MAX_PAYLOAD {
            // Keys are bounded far below this; a wake that still does not fit is left to repair.
            self.status.publish_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.send(payload);
    }

    fn publish_change(&self) {
        self.status.change_pending.store(true, Ordering::Release);
    }
}

/// The running cluster threads of one gateway. Dropping it stops them (leadership is released
/// when the lock connection closes).
pub struct Cluster {
    status: Arc<ClusterStatus>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Cluster {
    /// Starts the leadership, listener and publisher threads and sets the engine's hooks. Waits
    /// up to `first_attempt_wait` for the first leadership attempt. Never fails for an
    /// unreachable database: the threads keep retrying.
    pub fn start(engine: &Engine, opts: ClusterOptions) -> Result<Cluster, ClusterError> {
        let opts = opts.checked();
        // Fixes the lease clock's origin before any lease is taken.
        clock(Instant::now());
        let status = Arc::new(ClusterStatus {
            node_id: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
            ..Default::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let config = opts.connect.clone();
        engine.set_leadership(Arc::new(StatusLeadership(status.clone())));
        let (tx, rx) = sync_channel::<String>(4096);
        engine.set_wake_bus(Arc::new(PgBus {
            status: status.clone(),
            tx,
        }));
        let mut threads = Vec::new();
        let (first_tx, first_rx) = sync_channel::<()>(1);
        {
            let (s, st, c, o) = (status.clone(), stop.clone(), config.clone(), opts.clone());
            threads.push(spawn("leader", move || leader_loop(s, st, c, o, first_tx))?);
        }
        {
            let (s, st, c, o, e) = (
                status.clone(),
                stop.clone(),
                config.clone(),
                opts.clone(),
                engine.clone(),
            );
            threads.push(spawn("listener", move || listener_loop(s, st, c, o, e))?);
        }
        {
            let (s, st, c, o) = (status.clone(), stop.clone(), config, opts.clone());
            threads.push(spawn("publisher", move || publisher_loop(s, st, c, o, rx))?);
        }
        let _ = first_rx.recv_timeout(opts.first_attempt_wait);
        Ok(Cluster {
            status,
            stop,
            threads: Mutex::new(threads),
        })
    }

    pub fn status(&self) -> &Arc<ClusterStatus> {
        &self.status
    }

    /// Stops the threads and waits for them: about one retry interval, at most
    /// [`SHUTDOWN_WAIT`]. A thread blocked on a server that does not answer is left behind
    /// (the process's exit ends it); leadership ends here at once either way.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.status.lose("shutdown");
        let threads = self
            .threads
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let end = Instant::now() + SHUTDOWN_WAIT;
        for t in threads {
            while !t.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// Longest [`Cluster::shutdown`] waits for the cluster threads.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aware_engine::WakeReason;

    #[test]
    fn payload_round_trip() {
        let w = Wake {
            id: 9,
            session_key: "agent:main:x".into(),
            agent_id: "main".into(),
            reason: WakeReason::Message,
            targets: vec![("agent:main:y".into(), "main".into())],
            run_id: Some("r1".into()),
            from: Some("agent:main:z".into()),
            at: 42,
            remote: false,
        };
        let (node, r) = decode(&encode("n1", &w)).expect("decodes");
        assert_eq!(node, "n1");
        assert_eq!(r, aware_engine::RemoteWake::of(&w));
        assert!(decode("{\"node\":\"n\"}").is_none());
        assert!(decode("not json").is_none());
        // A wake and a reply signal share the channel; neither decodes as the other.
        let reply = encode_reply("n1", "r7");
        assert_eq!(decode_reply(&reply), Some(("n1".into(), "r7".into())));
        assert!(decode(&reply).is_none());
        assert!(decode_reply(&encode("n1", &w)).is_none());
        // A change hint is neither, and neither is a change hint.
        let change = encode_change("n1");
        assert_eq!(decode_change(&change), Some("n1".into()));
        assert!(decode(&change).is_none() && decode_reply(&change).is_none());
        assert!(decode_change(&reply).is_none() && decode_change(&encode("n1", &w)).is_none());
        // A wake whose agentId is not its key's agent is refused.
        let lying = encode(
            "n1",
            &Wake {
                agent_id: "other".into(),
                ..w.clone()
            },
        );
        assert!(decode(&lying).is_none());
    }

    #[test]
    fn signatures() {
        let body = encode_change("n1");
        let signed = sign(b"k1", &body);
        assert_eq!(verify(b"k1", &signed), Some(body.as_str()));
        assert_eq!(verify(b"k2", &signed), None, "another key");
        assert_eq!(verify(b"k1", &body), None, "unsigned");
        let tampered = signed.replace("\"n1\"", "\"n2\"");
        assert_eq!(verify(b"k1", &tampered), None, "changed body");
        assert_eq!(verify(b"k1", "aware1:zz:{}"), None);
        assert!(signed.len() - body.len() <= 8000 - MAX_PAYLOAD);
    }
}
