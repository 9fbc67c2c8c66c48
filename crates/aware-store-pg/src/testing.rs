//! A throw-away PostgreSQL cluster for tests (feature `testing`).
//!
//! Uses the machine's server binaries (`/usr/lib/postgresql/<version>/bin`, the newest one),
//! runs them as the `postgres` user when the tests run as root (the server refuses root), on a
//! temporary directory with its unix socket inside it and a free loopback port. Each test takes
//! its own database ([`PgCluster::database`]). The cluster stops when dropped; a watchdog
//! process also stops it and removes its directory when the test process dies, so a panicking
//! or killed test binary leaves no server behind. [`PgCluster::shared`] is one cluster per test
//! process; outage tests start their own and use [`PgCluster::kill`], [`PgCluster::stop`] and
//! [`PgCluster::start`].
//!
//! Missing binaries are an error, never a skip: CI installs them (`.ci/run`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// Errors of the harness; messages say which command failed and how.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HarnessError(String);

type HResult<T> = std::result::Result<T, HarnessError>;

fn err(msg: impl Into<String>) -> HarnessError {
    HarnessError(msg.into())
}

/// Cluster settings.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// `fsync = on`: needed for honest throughput figures; tests run faster without (a killed
    /// server process loses nothing either way, only an OS crash would).
    pub fsync: bool,
    /// Serve TLS with this certificate and key (`ssl = on`) and accept TCP connections over
    /// TLS only (`pg_hba.conf`: `hostssl`, no `host` line); the harness itself connects over
    /// the unix socket.
    pub tls: Option<ServerTlsFiles>,
}

/// The server certificate and key of a TLS cluster (PEM files; copied into the data
/// directory, owned by the server's user, the key mode 0600).
#[derive(Debug, Clone)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A CA for client certificates (`ssl_ca_file`): then `postgres` must log in over TCP with a
    /// client certificate of this CA naming it (`cert`), and every other role with its password
    /// (`scram-sha-256`).
    pub client_ca: Option<PathBuf>,
}

/// One running (or stopped) throw-away cluster.
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// Run the server binaries as this user (`runuser -u postgres --`) when we are root.
    as_user: Option<String>,
    options: ClusterOptions,
    databases: AtomicU32,
    watchdog: Mutex<Option<std::process::Child>>,
}

impl std::fmt::Debug for PgCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCluster")
            .field("dir", &self.dir.path())
            .field("port", &self.port)
            .finish()
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` that has `initdb` and `pg_ctl`.
pub fn server_bin_dir() -> HResult<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .map_err(|e| {
            err(format!(
                "no PostgreSQL server binaries: cannot read {}: {e} (install the `postgresql` \
                 package; .ci/run does)",
                root.display()
            ))
        })?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.split('.').next()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").exists() && bin.join("pg_ctl").exists()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        err("no /usr/lib/postgresql/*/bin/initdb found (install the `postgresql` package)")
    })
}

fn is_root() -> bool {
    // `id -u` instead of libc: no unsafe, and tests may spawn processes anyway.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// uid and gid of a user, from /etc/passwd.
fn user_ids(user: &str) -> HResult<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| err(format!("cannot read /etc/passwd: {e}")))?;
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() > 3 && f[0] == user {
            if let (Ok(uid), Ok(gid)) = (f[2].parse(), f[3].parse()) {
                return Ok((uid, gid));
            }
        }
    }
    Err(err(format!(
        "user {user:?} does not exist; the PostgreSQL server refuses to run as root"
    )))
}

fn free_port() -> HResult<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| err(format!("cannot find a free port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| err(format!("cannot find a free port: {e}")))
}

/// The pids whose parent is `pid` (from `/proc/<pid>/stat`: the field after the state, which
/// follows the parenthesised command name).
fn children_of(pid: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .to_string();
            (ppid == pid).then_some(name)
        })
        .collect()
}

impl PgCluster {
    /// `initdb` and start a new cluster.
    pub fn start_new(options: ClusterOptions) -> HResult<PgCluster> {
        let bin = server_bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("aware-pg-")
            .tempdir()
            .map_err(|e| err(format!("cannot make a temporary directory: {e}")))?;
        let as_user = if is_root() {
            let (uid, gid) = user_ids("postgres")?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| err(format!("cannot chown {}: {e}", dir.path().display())))?;
            Some("postgres".to_string())
        } else {
            None
        };
        let cluster = PgCluster {
            bin,
            port: free_port()?,
            dir,
            as_user,
            options,
            databases: AtomicU32::new(0),
            watchdog: Mutex::new(None),
        };
        let data = cluster.data_dir();
        cluster.run(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        if let Some(tls) = &cluster.options.tls {
            cluster.install_tls(tls)?;
        }
        cluster.start()?;
        cluster.spawn_watchdog()?;
        Ok(cluster)
    }

    /// One cluster for the whole test process (its watchdog stops it when the process ends).
    pub fn shared() -> &'static PgCluster {
        static SHARED: OnceLock<PgCluster> = OnceLock::new();
        SHARED.get_or_init(|| match PgCluster::start_new(ClusterOptions::default()) {
            Ok(c) => c,
            Err(e) => panic!("cannot start the test PostgreSQL cluster: {e}"),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn log_file(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        match &self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> HResult<()> {
        let out = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| err(format!("cannot run {program}: {e}")))?;
        if !out.status.success() {
            let log = std::fs::read_to_string(self.log_file()).unwrap_or_default();
            return Err(err(format!(
                "{program} {args:?} failed ({}): {}{}\n{log}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Copies the certificate and key into the data directory and allows TCP over TLS only.
    fn install_tls(&self, tls: &ServerTlsFiles) -> HResult<()> {
        let data = self.data_dir();
        let hba = match tls.client_ca {
            None => {
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostssl all all ::1/128 trust\n\
                 hostssl replication all 127.0.0.1/32 trust\n"
            }
            Some(_) => {
                "local all all trust\n\
                 hostssl all postgres 127.0.0.1/32 cert\n\
                 hostssl all all 127.0.0.1/32 scram-sha-256\n"
            }
        };
        let mut files = vec![(&tls.cert, "server.crt"), (&tls.key, "server.key")];
        if let Some(ca) = &tls.client_ca {
            files.push((ca, "client-ca.crt"));
        }
        for (from, to) in files {
            std::fs::copy(from, data.join(to))
                .map_err(|e| err(format!("cannot copy {}: {e}", from.display())))?;
        }
        std::fs::write(data.join("pg_hba.conf"), hba)
            .map_err(|e| err(format!("cannot write pg_hba.conf: {e}")))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            data.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .map_err(|e| err(format!("cannot chmod server.key: {e}")))?;
        if self.as_user.is_some() {
            let (uid, gid) = user_ids("postgres")?;
            for f in ["server.crt", "server.key", "pg_hba.conf", "client-ca.crt"] {
                if !data.join(f).exists() {
                    continue;
                }
                std::os::unix::fs::chown(data.join(f), Some(uid), Some(gid))
                    .map_err(|e| err(format!("cannot chown {f}: {e}")))?;
            }
        }
        Ok(())
    }

    /// Where the harness's own connections go: the unix socket of a TLS-only cluster, else TCP.
    fn admin_url(&self) -> String {
        let tcp = self.url("postgres");
        match self.options.tls {
            Some(_) => self.socket_url(&tcp),
            None => tcp,
        }
    }

    /// Starts the server (again) on the same port and data; waits until it accepts connections.
    /// After [`PgCluster::kill`] the old backends take a moment to exit (they hold the shared
    /// memory the new server checks), so a failed start is retried for a few seconds.
    pub fn start(&self) -> HResult<()> {
        let mut last = Ok(());
        for _ in 0..20 {
            last = self.start_once();
            if last.is_ok() {
                return last;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        last
    }

    fn start_once(&self) -> HResult<()> {
        let fsync = if self.options.fsync { "on" } else { "off" };
        let ssl = match &self.options.tls {
            Some(t) if t.client_ca.is_some() => {
                " -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key \
                 -c ssl_ca_file=client-ca.crt"
            }
            Some(_) => " -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key",
            None => "",
        };
        let server_opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync={fsync} \
             -c full_page_writes={fsync}{ssl}",
            self.port,
            self.socket_dir().display()
        );
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data_dir().display().to_string(),
                "-l",
                &self.log_file().display().to_string(),
                "-o",
                &server_opts,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
    }

    /// A clean stop (`-m fast`): clients are disconnected.
    pub fn stop(&self) -> HResult<()> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data_dir().display().to_string(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        )
    }

    /// `kill -9` of the postmaster and its backends, as a crash (the next [`PgCluster::start`] recovers).
    pub fn kill(&self) -> HResult<()> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file)
            .map_err(|e| err(format!("cannot read {}: {e}", pid_file.display())))?;
        let pid = text
            .lines()
            .next()
            .map(str::trim)
            .filter(|p| p.parse::<u32>().is_ok())
            .ok_or_else(|| err(format!("no pid in {}", pid_file.display())))?
            .to_string();
        // The server's backends too, in the same signal: a backend outlives its postmaster for
        // a moment (it notices the death only at its next check) and could still answer a
        // query on an open connection, which a crash of the machine would not.
        let mut victims = vec![pid.clone()];
        victims.extend(children_of(&pid));
        let status = Command::new("kill")
            .arg("-9")
            .args(&victims)
            .status()
            .map_err(|e| err(format!("cannot run kill: {e}")))?;
        if !status.success() {
            return Err(err(format!("kill -9 {victims:?} failed")));
        }
        // Wait until the postmaster is gone. In a container without an init that reaps, it
        // stays a zombie, which `kill -0` (and so the server's own check of its lock file)
        // takes for alive: a dead or zombie postmaster's lock file is removed here.
        let stat = format!("/proc/{pid}/stat");
        for _ in 0..400 {
            match std::fs::read_to_string(&stat) {
                Err(_) => break,
                // The state follows the parenthesised command name.
                Ok(s)
                    if s.rsplit(')')
                        .next()
                        .map(str::trim_start)
                        .is_some_and(|r| r.starts_with('Z')) =>
                {
                    break
                }
                Ok(_) => std::thread::sleep(std::time::Duration::from_millis(25)),
            }
        }
        let _ = std::fs::remove_file(&pid_file);
        Ok(())
    }

    /// A streaming standby of this cluster (`pg_basebackup -R`), started on a port of its own.
    /// With `synchronous`, this cluster then waits for the standby to flush every commit
    /// before answering it (`synchronous_standby_names = '*'`), so nothing acknowledged is lost
    /// when the standby is promoted after this one dies.
    pub fn start_standby(&self, synchronous: bool) -> HResult<PgCluster> {
        let dir = tempfile::Builder::new()
            .prefix("aware-pg-standby-")
            .tempdir()
            .map_err(|e| err(format!("cannot make a temporary directory: {e}")))?;
        if self.as_user.is_some() {
            let (uid, gid) = user_ids("postgres")?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| err(format!("cannot chown {}: {e}", dir.path().display())))?;
        }
        let standby = PgCluster {
            bin: self.bin.clone(),
            port: free_port()?,
            dir,
            as_user: self.as_user.clone(),
            options: self.options.clone(),
            databases: AtomicU32::new(0),
            watchdog: Mutex::new(None),
        };
        // initdb's trust rules include replication connections from 127.0.0.1.
        standby.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &standby.data_dir().display().to_string(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        )?;
        standby.start()?;
        standby.spawn_watchdog()?;
        if synchronous {
            let mut c = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
                .map_err(|e| err(format!("cannot connect to the primary: {e}")))?;
            // Two statements: ALTER SYSTEM refuses the implicit transaction of a multi-statement
            // query string.
            for sql in [
                "ALTER SYSTEM SET synchronous_standby_names = '*'",
                "SELECT pg_reload_conf()",
            ] {
                c.batch_execute(sql)
                    .map_err(|e| err(format!("cannot make replication synchronous: {e:?}")))?;
            }
            // Synchronous only once the standby streams as such; until then commits would wait.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let row = c
                    .query_opt(
                        "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'",
                        &[],
                    )
                    .map_err(|e| err(format!("cannot read pg_stat_replication: {e}")))?;
                if row.is_some() {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(err("the standby never became synchronous in 30 s"));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        Ok(standby)
    }

    /// Promotes a standby to primary (`pg_ctl promote -w`: returns once it takes writes).
    pub fn promote(&self) -> HResult<()> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data_dir().display().to_string(),
                "-w",
                "-t",
                "60",
                "promote",
            ],
        )
    }

    /// The URL of database `name` of this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// The same database over the cluster's unix socket, as a gateway on the database's own
    /// machine would connect (the URL form docs/deployment.md gives: an empty host and the
    /// socket directory in `host=`).
    pub fn socket_url(&self, tcp_url: &str) -> String {
        let name = tcp_url.rsplit('/').next().unwrap_or("postgres");
        format!(
            "postgresql:///{name}?host={}&port={}&user=postgres",
            self.socket_dir().display(),
            self.port
        )
    }

    /// Creates a fresh, empty database and returns its URL.
    pub fn database(&self) -> HResult<String> {
        let n = self.databases.fetch_add(1, Ordering::SeqCst);
        let name = format!("aware_test_{}_{n}", std::process::id());
        let mut client = postgres::Client::connect(&self.admin_url(), postgres::NoTls)
            .map_err(|e| err(format!("cannot connect to the test cluster: {e}")))?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(|e| err(format!("cannot create database {name}: {e}")))?;
        Ok(self.url(&name))
    }

    /// A shell that waits for this process to end, then stops the server and removes the
    /// directory; so no server outlives its tests, whatever way they end.
    fn spawn_watchdog(&self) -> HResult<()> {
        let runas = match &self.as_user {
            Some(u) => format!("runuser -u {u} -- "),
            None => String::new(),
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {runas}{pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data_dir().display(),
            dir = self.dir.path().display(),
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| err(format!("cannot start the cluster watchdog: {e}")))?;
        if let Ok(mut w) = self.watchdog.lock() {
            *w = Some(child);
        }
        Ok(())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data_dir().display().to_string(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
        if let Ok(mut w) = self.watchdog.lock() {
            if let Some(mut child) = w.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
