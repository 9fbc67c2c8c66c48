//! What a test server is made of: the binary, the store choice, the gateway count and pick,
//! the cluster opt-out list, and the path-segment encoding of keys.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::spec::*;

/// The `aware` binary under test: `AWARE_BIN` if set, else the `aware` next to the running test
/// binary's `deps/` directory (where cargo puts it for the `aware` crate's integration tests).
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("AWARE_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("path of the test binary");
        let dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("test binary in target/<profile>/deps");
        let path = dir.join(format!("aware{}", std::env::consts::EXE_SUFFIX));
        assert!(
            path.is_file(),
            "no aware binary at {}: run the test from the aware crate (cargo builds it for its \
             integration tests) or set AWARE_BIN",
            path.display()
        );
        path
    })
}

/// The store a gateway set runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreChoice {
    /// `state.db` in the set's data directory. One process owns it, so a set on SQLite has
    /// exactly one gateway.
    #[default]
    Sqlite,
    /// A fresh database on the shared throw-away PostgreSQL cluster of the test process
    /// (`aware_store_pg::testing::PgCluster::shared`), made when the set starts.
    Postgres,
    /// The PostgreSQL database at this URL, say on a cluster the test started itself
    /// ([`aware_store_pg::testing::PgCluster::start_new`]) so that it may stop or kill it.
    PostgresAt(String),
}

/// Tests (by libtest name, the `module::test` path, or `module::` for a whole module) that keep
/// one gateway on SQLite when the environment asks for a cluster, each with the reason it
/// cannot hold on several gateways over PostgreSQL. Keep it short: an entry is a scenario the
/// cluster mode does not check.
pub const CLUSTER_OPT_OUT: &[(&str, &str)] = &[
    // SQLite-specific: the test opens `state.db` with rusqlite.
    ("s011_privacy_of_content", "reads state.db with rusqlite"),
    (
        "s016_durability_modes",
        "SQLite durability modes (health says `full`/`normal`)",
    ),
    // Process-local test seams: `/v1/admin/clock` and `/metrics` act on or count in the one
    // gateway the request reaches (the fault scenarios set every gateway's plan instead).
    (
        "s106_test_clock",
        "posts /v1/admin/clock itself: each gateway has its own test clock",
    ),
    (
        "s059_coalescing_window",
        "asserts aware_wakes_coalesced_total = 1 on a random gateway (:839), but coalescing state \
         and its counter are per gateway (ARCHITECTURE.md, cluster): only the gateway that \
         produced the T0+5 s request coalesces it (others count 0), and a receiver whose test \
         clock is still before T0+20 s when the producer's merged wake arrives (set_clock moves \
         the gateways one by one) coalesces it again, so neither one gateway's count nor the sum \
         is fixed; the wakes the subscriber sees are checked and hold",
    ),
    // Beyond the scenarios (the whole `it` suite on three gateways, diagnosed one by one from
    // each failure; the scenarios above are what CI runs on the cluster).
    (
        "console::session_page_shows_the_monitors_misses_and_the_overview_its_ticks",
        "the monitor's misses come from the leader and the overview's counters are one \
         process's own",
    ),
    (
        "cli_ux::drain_follow_prints_a_header_json_lines_and_reconnects",
        "restarts the gateway on its old port, which a set of gateways does not keep",
    ),
    (
        "crash_loop::",
        "kill -9 of the one gateway that owns state.db, at SQLite's durability `full`; the \
         cluster's counterpart is model_cluster",
    ),
    (
        "http_smoke::migrate_round_trip_keeps_every_api_answer",
        "migrates from the SQLite data dir of the server it starts",
    ),
    (
        "metrics::",
        "asserts /metrics counters and gauges of one process",
    ),
    (
        "console::console_routes_timing_at_10k_sessions_100k_cursors",
        "writes 10,000 sessions into state.db through the SQLite store directly",
    ),
    (
        "metrics_spec::",
        "asserts one process's /metrics deltas and log lines, through its fault seams and its \
         upstream monitor (which only the leader runs)",
    ),
    (
        "effects_order::",
        "holds one process's writer (a per-process fault seam) and judges the order of the wakes \
         it emits; wakes of several gateways keep no order between them",
    ),
    (
        "security::no_message_text_in_events_summaries_logs_or_metrics",
        "reads state.db with rusqlite (its twin `..._on_postgresql` runs the scan on PostgreSQL)",
    ),
    (
        "stalls::",
        "webhook lanes, reply waiters and the writer-stall seam are per process, read from \
         one gateway's /metrics and /health",
    ),
    (
        "security::the_token_is_needed_on_every_route_but_health",
        "wrong tokens are counted per gateway process, and the test moves one gateway's test \
         clock to earn them back",
    ),
    (
        "gateway_boundaries::wrong_tokens_from_one_peer_are_slowed_and_other_peers_are_not",
        "the wrong-token limit is per process and the test moves that gateway's test clock",
    ),
    (
        "gateway_boundaries::one_agent_cannot_take_every_reply_wait_and_streams_and_waits_share_one_budget",
        "the budget of long-held requests is per process, read from one gateway's /metrics",
    ),
    (
        "outage::",
        "restarts the gateway on its old port (the hook's spool is kept per gateway URL), which \
         a set of gateways does not keep",
    ),
    (
        "webhook_faults::",
        "reads the first gateway's log and counters; the gateway that produced the wake \
         delivers its webhook",
    ),
    (
        "tls::webhooks_reach_an_https_receiver_with_the_ca_and_not_an_untrusted_one",
        "reads the first gateway's log and webhook counters, as webhook_faults; the gateway \
         that produced the wake delivers its webhook",
    ),
];

/// Whether the running test (its libtest thread name ends with an entry) is in
/// [`CLUSTER_OPT_OUT`].
fn opted_out() -> Option<&'static str> {
    let name = std::thread::current().name().map(str::to_string)?;
    CLUSTER_OPT_OUT
        .iter()
        .find(|(t, _)| {
            // `module::` names every test of a module.
            name == *t
                || name.ends_with(&format!("::{t}"))
                || (t.ends_with("::") && name.starts_with(t))
        })
        .map(|(t, _)| *t)
}

/// Which gateway of the set a request goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pick {
    /// Always the first gateway.
    #[default]
    First,
    /// Always gateway `i` (0-based).
    Fixed(usize),
    /// Gateway 0, 1, ..., N-1, 0, ... in request order.
    RoundRobin,
    /// A pseudo-random gateway from a seeded sequence (the seed makes a failure reproducible;
    /// it is in every panic message of the harness).
    Random { seed: u64 },
}

impl Pick {
    /// The gateway index for request number `n` of a set of `len` gateways.
    pub fn index(self, n: u64, len: usize) -> usize {
        let len = len.max(1);
        match self {
            Pick::First => 0,
            Pick::Fixed(i) => i.min(len - 1),
            Pick::RoundRobin => (n % len as u64) as usize,
            Pick::Random { seed } => {
                // splitmix64 of (seed, n): a stateless, reproducible choice per request.
                let mut z =
                    seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (z % len as u64) as usize
            }
        }
    }
}

/// How to start a [`Server`].
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub config: String,
    pub args: Vec<String>,
    /// How many gateway processes share the store (1 on SQLite).
    pub gateways: usize,
    pub store: StoreChoice,
    pub pick: Pick,
}

impl Default for ServerOptions {
    /// [`ServerOptions::from_env`].
    fn default() -> Self {
        Self::from_env()
    }
}

impl ServerOptions {
    /// One gateway on SQLite, unless the environment asks for a cluster:
    /// `AWARE_TEST_STORE=postgres` (a fresh database on the shared test cluster),
    /// `AWARE_TEST_GATEWAYS=<n>` (default 3 on PostgreSQL) and, for several gateways, a random
    /// pick seeded by `AWARE_TEST_SEED` or the time (printed either way). A test named in
    /// [`CLUSTER_OPT_OUT`] keeps one gateway on SQLite.
    pub fn from_env() -> Self {
        let mut o = ServerOptions {
            config: DEFAULT_CONFIG.to_string(),
            args: Vec::new(),
            gateways: 1,
            store: StoreChoice::Sqlite,
            pick: Pick::First,
        };
        let store = std::env::var("AWARE_TEST_STORE").unwrap_or_default();
        match store.as_str() {
            "" | "sqlite" => return o,
            "postgres" => {}
            other => panic!("AWARE_TEST_STORE={other:?}: accepted are sqlite and postgres"),
        }
        if let Some(t) = opted_out() {
            eprintln!("aware-testkit: {t} is in CLUSTER_OPT_OUT: one gateway on SQLite");
            return o;
        }
        o.store = StoreChoice::Postgres;
        o.gateways = match std::env::var("AWARE_TEST_GATEWAYS") {
            Ok(n) => n
                .trim()
                .parse()
                .ok()
                .filter(|&n: &usize| n >= 1)
                .unwrap_or_else(|| {
                    panic!("AWARE_TEST_GATEWAYS={n:?}: a positive number of gateways is accepted")
                }),
            Err(_) => 3,
        };
        if o.gateways > 1 {
            let seed = match std::env::var("AWARE_TEST_SEED") {
                Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                    panic!("AWARE_TEST_SEED={v:?}: an unsigned 64-bit integer is accepted")
                }),
                Err(_) => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0),
            };
            o.pick = Pick::Random { seed };
        }
        o
    }
}

/// One further gateway process of a set (the first one lives in [`Server`]'s own fields).
pub struct Gateway {
    pub child: Option<Child>,
    pub port: u16,
    pub base: String,
    pub logs: Arc<Mutex<String>>,
}

pub use aware_core::path::seg;
