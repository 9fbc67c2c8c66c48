//! The gateway under soak: the real `aware serve` as a child process (so what is sampled is that
//! process alone, not the load clients), its store (a fresh SQLite data dir, or PostgreSQL), and
//! the `/proc` samples of it.

use crate::http::setup::new_agent;
use anyhow::{anyhow, bail, Context, Result};
use aware_store_pg::testing::{ClusterOptions, PgCluster};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the state lives.
pub(crate) enum Store {
    Sqlite,
    /// A URL given with `--store`, and the throw-away cluster behind it when `--store pg`
    /// started one (kept alive for the run; it stops when dropped).
    Postgres {
        url: String,
        _cluster: Option<Box<PgCluster>>,
    },
}

impl Store {
    /// `None`: SQLite; `pg`: a throw-away cluster (fsync on, for honest figures); else a URL.
    pub(crate) fn open(arg: Option<&str>) -> Result<Store> {
        match arg {
            None | Some("sqlite") => Ok(Store::Sqlite),
            Some("pg") => {
                let cluster = PgCluster::start_new(ClusterOptions {
                    fsync: true,
                    ..Default::default()
                })
                .map_err(|e| anyhow!("starting a throw-away PostgreSQL cluster: {e}"))?;
                let url = cluster
                    .database()
                    .map_err(|e| anyhow!("creating the soak database: {e}"))?;
                Ok(Store::Postgres {
                    url,
                    _cluster: Some(Box::new(cluster)),
                })
            }
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Store::Postgres {
                    url: url.to_string(),
                    _cluster: None,
                })
            }
            Some(other) => bail!("--store takes sqlite, pg or a postgres:// URL, not {other:?}"),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Store::Sqlite => "sqlite",
            Store::Postgres { .. } => "postgres",
        }
    }
}

/// A running `aware serve`.
pub(crate) struct Gateway {
    child: Child,
    pub(crate) pid: u32,
    pub(crate) base: String,
    pub(crate) data_dir: PathBuf,
}

impl Gateway {
    /// Starts `aware serve` on a free loopback port over `data_dir` (and `store`) at
    /// `durability`, with JSON logs
    /// at `info` into `log`, and waits until `/health` answers 200.
    pub(crate) fn start(
        data_dir: &Path,
        store: &Store,
        durability: &str,
        log: &Path,
    ) -> Result<Gateway> {
        let exe = crate::util::aware_exe()?;
        let port_file = data_dir.join("port");
        let _ = std::fs::remove_file(&port_file);
        let log_file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--port-file")
            .arg(&port_file)
            .args(["--log-format", "json", "--log-level", "info"])
            .args(["--durability", durability])
            // A config file of the user's would change what is measured.
            .env("XDG_CONFIG_HOME", "/nonexistent-aware-bench-config")
            .env_remove("AWARE_TOKEN")
            .env_remove("AWARE_BIND")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        if let Store::Postgres { url, .. } = store {
            cmd.arg("--store").arg(url);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        let port: u16 = loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "aware serve exited with {status} before listening (log: {})",
                    log.display()
                );
            }
            if let Some(p) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break p;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("aware serve wrote no port file within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let gw = Gateway {
            child,
            pid,
            base: format!("http://127.0.0.1:{port}"),
            data_dir: data_dir.to_path_buf(),
        };
        let agent = new_agent(&gw.base)?;
        loop {
            match agent.request("GET", "/health").send(None) {
                Ok(r) if r.status() == 200 => return Ok(gw),
                _ if Instant::now() > deadline => bail!("the gateway was not ready within 60 s"),
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// SIGTERM and wait for the exit (graceful: in-flight requests finish, the store closes);
    /// the time it took, or an error when it failed or took over 30 s (then it is killed).
    pub(crate) fn stop(mut self) -> Result<Duration> {
        let t = Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("running kill -TERM")?;
        if !sent.success() {
            bail!("kill -TERM {} failed", self.pid);
        }
        while t.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("aware serve exited with {status} on SIGTERM");
                }
                return Ok(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        bail!("aware serve did not exit within 30 s of SIGTERM")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // Only when `stop` was not reached (an error path): never leave a server behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One sample of the gateway process.
#[derive(Clone, Copy, Default)]
pub(crate) struct ProcSample {
    pub(crate) rss_kb: u64,
    pub(crate) threads: u64,
    pub(crate) fds: u64,
    /// utime + stime, in clock ticks (USER_HZ, 100 on Linux).
    pub(crate) cpu_ticks: u64,
}

/// Reads `/proc/<pid>/{status,fd,stat}` of the gateway.
pub(crate) fn sample_proc(pid: u32) -> Result<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (did the gateway exit?)"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("listing /proc/{pid}/fd"))?
        .count() as u64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised command name (which may hold spaces): state is field 3,
    // utime and stime are fields 14 and 15.
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(ProcSample {
        rss_kb: field("VmRSS"),
        threads: field("Threads"),
        fds,
        cpu_ticks: tick(11) + tick(12),
    })
}

/// Bytes of the store: the data dir's files (SQLite), or the database's size (PostgreSQL,
/// through a connection opened once and kept).
pub(crate) struct StoreSizer {
    dir: PathBuf,
    pg: Option<postgres::Client>,
}

impl StoreSizer {
    pub(crate) fn new(store: &Store, dir: &Path) -> Result<StoreSizer> {
        let pg = match store {
            Store::Sqlite => None,
            Store::Postgres { url, .. } => Some(
                postgres::Client::connect(url, postgres::NoTls)
                    .context("connecting to PostgreSQL for pg_database_size")?,
            ),
        };
        Ok(StoreSizer {
            dir: dir.to_path_buf(),
            pg,
        })
    }

    /// SQLite: the checkpoint sequence number in the WAL header (bytes 12..16, big-endian),
    /// which SQLite increments each time a checkpoint lets the WAL restart from its beginning;
    /// its change over a window counts the completed checkpoints. `None` on PostgreSQL or
    /// before the WAL exists.
    pub(crate) fn wal_checkpoint_seq(&self) -> Option<u32> {
        use std::io::Read;
        self.pg.as_ref().map_or(Some(()), |_| None)?;
        let wal = std::fs::read_dir(&self.dir)
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(".db-wal"))?;
        let mut head = [0u8; 16];
        std::fs::File::open(wal.path())
            .ok()?
            .read_exact(&mut head)
            .ok()?;
        Some(u32::from_be_bytes([head[12], head[13], head[14], head[15]]))
    }

    /// (store bytes, WAL bytes).
    pub(crate) fn sample(&mut self) -> Result<(u64, u64)> {
        if let Some(client) = &mut self.pg {
            let row = client
                .query_one("SELECT pg_database_size(current_database())", &[])
                .context("pg_database_size")?;
            let bytes: i64 = row.get(0);
            return Ok((bytes.max(0) as u64, 0));
        }
        let mut total = 0;
        let mut wal = 0;
        let entries = std::fs::read_dir(&self.dir)
            .with_context(|| format!("listing {}", self.dir.display()))?;
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            total += meta.len();
            if e.file_name().to_string_lossy().ends_with("-wal") {
                wal += meta.len();
            }
        }
        Ok((total, wal))
    }
}

/// Busy share of all CPUs of the machine since the last call, from `/proc/stat` (other
/// sessions share the cores, so a burst can come from outside the gateway).
pub(crate) struct HostCpu {
    last: Option<(u64, u64)>,
}

impl HostCpu {
    pub(crate) fn new() -> HostCpu {
        HostCpu { last: None }
    }

    pub(crate) fn busy_share(&mut self) -> f64 {
        let Some((busy, total)) = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            let line = s.lines().next()?.strip_prefix("cpu ")?.to_string();
            let v: Vec<u64> = line
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal …
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            let total: u64 = v.iter().take(8).sum();
            Some((total.saturating_sub(idle), total))
        }) else {
            return 0.0;
        };
        let share = match self.last {
            Some((b0, t0)) if total > t0 => (busy - b0.min(busy)) as f64 / (total - t0) as f64,
            _ => 0.0,
        };
        self.last = Some((busy, total));
        share
    }
}

/// The 1-minute load average.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            let v: Vec<&str> = l.split_whitespace().take(3).collect();
            (v.len() == 3).then(|| v.join("/"))
        })
        .unwrap_or_else(|| "?".into())
}
