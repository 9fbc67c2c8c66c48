//! Arguments, plan, sizes and gateway helpers shared by the HTTP workloads.

use anyhow::{anyhow, bail, Context, Result};
use aware_client::Client;
use aware_gateway::GatewayConfig;
use aware_store_sqlite::Durability;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `aware-bench http`.
#[derive(clap::Args, Debug)]
pub struct HttpBenchArgs {
    /// Print a JSON report of every figure and target on stdout (the text goes to stderr), for
    /// `aware-bench engine --compare A.json B.json`.
    #[arg(long)]
    pub json: bool,
    /// Run only these workloads, e.g. `--only 1,3` (1 = session_status page, 2 = concurrent
    /// turns, 3 = gateway RSS, 4 = the hook after a tool call).
    #[arg(long, value_delimiter = ',', value_name = "1,2,3,4")]
    pub only: Vec<String>,
    /// Divide every count by 10 (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Human turns posted per durability in workload 2.
    #[arg(long, default_value_t = 20_000)]
    pub turns: u64,
    /// Concurrent clients of workload 2 (threads, each with its own keep-alive connection and
    /// its own parent-watched session).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Hook processes timed in workload 4 (each next to a `--version` floor process).
    #[arg(long, default_value_t = 400)]
    pub hook_runs: u64,
    /// `session_status` calls measured in workload 1.
    #[arg(long, default_value_t = 2_000)]
    pub calls: u64,
    /// Drive workloads 1 and 2 with `aware-client` (ureq), as up to round 2 of decision D20,
    /// instead of the bench's raw keep-alive client, which spends far less CPU per request on
    /// the cores the gateway shares (for comparing with earlier runs).
    #[arg(long)]
    pub ureq_client: bool,
    /// Directory for the gateways' data dirs (a fresh temporary directory is made inside it and
    /// removed afterwards). Default: the system temporary directory.
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<PathBuf>,
}

pub(crate) const ALL: [&str; 4] = ["1", "2", "3", "4"];
/// Workload 1: event rows in the store before `--quick`. This is also the default retention
/// cap (`max_rows`), so the gateway's start-up prune leaves every row in place.
pub(crate) const W1_EVENT_ROWS: u64 = 50_000;
/// Workload 1: human turns per child; each child also holds its `child_spawned` event, so the
/// store has `W1_EVENT_ROWS / 51` children (980 at full scale, 49,980 rows).
pub(crate) const W1_TURNS_PER_CHILD: u64 = 50;
/// Workload 1: the page size asked for (and returned).
pub(crate) const W1_PAGE: u64 = 50;
/// Workload 3: sessions and cursors before `--quick`.
pub(crate) const W3_SESSIONS: u64 = 10_000;
pub(crate) const W3_CURSORS: u64 = 100_000;
/// Workload 3: watcher sessions (each registers on cursors / watchers targets).
pub(crate) const W3_WATCHERS: u64 = 100;
/// Client threads that set up sessions (workloads 1 and 2) and populate workload 3.
pub(crate) const SETUP_THREADS: usize = 8;
pub(crate) const TURN_BODY: &str =
    r#"{"role":"user","text":"please use the staging database","channel":"bench"}"#;

pub(crate) struct Plan {
    pub(crate) scale: u64,
    pub(crate) dir: PathBuf,
    /// Load clients on `aware-client` (ureq) instead of the raw keep-alive client.
    pub(crate) ureq_client: bool,
}

impl Plan {
    /// A fresh data dir for one gateway or engine.
    pub(crate) fn data_dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.dir.join(name);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }
    /// A time cap for a measured phase: `full` seconds, or a sixth of it with `--quick`.
    pub(crate) fn cap(&self, full: u64) -> Duration {
        Duration::from_secs(if self.scale > 1 {
            (full / 6).max(5)
        } else {
            full
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The in-process gateway and the client
// ---------------------------------------------------------------------------------------------

pub(crate) struct Gateway {
    pub(crate) runtime: Option<tokio::runtime::Runtime>,
    pub(crate) base: String,
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) server: Option<tokio::task::JoinHandle<Result<(), aware_gateway::RunError>>>,
}

impl Gateway {
    /// Starts `aware_gateway::run` on `127.0.0.1:0` over `data_dir` and waits until `/health`
    /// answers 200 (start-up done).
    pub(crate) fn start(data_dir: &Path, durability: Durability) -> Result<Gateway> {
        let mut config = GatewayConfig::for_data_dir(data_dir);
        config.notify_on_create = false;
        config.durability = durability;
        config.test_clock_start = None;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("start the async runtime")?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))?;
        let addr = listener.local_addr()?;
        config.bind = addr;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = runtime.spawn(aware_gateway::run(listener, config, async {
            let _ = stop_rx.await;
        }));
        let gw = Gateway {
            runtime: Some(runtime),
            base: format!("http://{addr}"),
            stop: Some(stop_tx),
            server: Some(server),
        };
        let agent = new_agent(&gw.base)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match agent.request("GET", "/health").send(None) {
                Ok(r) if r.status() == 200 => break,
                _ if Instant::now() > deadline => bail!("the gateway was not ready within 30 s"),
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        Ok(gw)
    }

    /// Graceful shutdown: in-flight requests finish, the engine closes.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    pub(crate) fn shutdown(&mut self) -> Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let (Some(runtime), Some(server)) = (self.runtime.take(), self.server.take()) else {
            return Ok(());
        };
        let outcome =
            runtime.block_on(async { tokio::time::timeout(Duration::from_secs(30), server).await });
        runtime.shutdown_timeout(Duration::from_secs(5));
        match outcome {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(anyhow!("the gateway failed: {e}")),
            Ok(Err(e)) => Err(anyhow!("the gateway task failed: {e}")),
            Err(_) => Err(anyhow!("the gateway did not shut down within 30 s")),
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// A client of `base` with its own keep-alive connection (pooled once a body is read to the
/// end).
pub(crate) fn new_agent(base: &str) -> Result<Client> {
    Ok(Client::new(base)?.with_timeout(Duration::from_secs(60)))
}

/// One request; any status is returned with the body read to the end (so the connection goes
/// back to the pool), transport errors fail.
pub(crate) fn send(
    agent: &Client,
    method: &str,
    path: &str,
    caller: Option<&str>,
    body: Option<&str>,
) -> Result<(u16, String)> {
    let req = agent.request(method, path);
    let req = match caller {
        Some(c) => req.as_session(c),
        None => req,
    };
    let resp = req
        .send_any(body)
        .map_err(|e| anyhow!("{method} {path}: {e}"))?;
    let code = resp.status();
    Ok((code, resp.text()?))
}

// ---------------------------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------------------------

pub(crate) fn fmt_kb(kb: u64) -> String {
    if kb < 10 * 1024 {
        format!("{:.2} MiB", kb as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", kb as f64 / 1024.0)
    }
}
