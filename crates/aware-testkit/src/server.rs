//! Black-box harness: real `aware serve --test-clock` gateways on loopback, talked to over HTTP.
//!
//! A [`Server`] is a *gateway set* over one store: [`ServerOptions::gateways`] processes started
//! on the same store ([`StoreChoice`]), and every request goes to the gateway [`Pick`] chooses
//! (the first, a fixed one, round robin, or a seeded random one). SQLite is owned by one
//! process, so a set on SQLite has one gateway; on [`StoreChoice::Postgres`] each set gets a fresh
//! database on the shared throw-away cluster and may have several gateways.
//!
//! The default options come from the environment ([`ServerOptions::from_env`]):
//! `AWARE_TEST_STORE=postgres` and `AWARE_TEST_GATEWAYS=3` run every test that starts its server
//! through the defaults against three gateways on one PostgreSQL database, each request sent to
//! a random gateway (seed printed; `AWARE_TEST_SEED` repeats it). Tests that cannot hold there
//! are named in [`CLUSTER_OPT_OUT`] with the reason, and keep one gateway on SQLite.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::options::*;

pub struct Server {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub port: u16,
    pub base: String,
    pub token: Option<String>,
    pub extra_args: Vec<String>,
    /// Everything the server wrote to stderr (logs), shared with a reader thread.
    pub logs: Arc<Mutex<String>>,
    pub now: i64,
    /// Gateways 2..N of the set (empty for one gateway).
    pub more: Vec<Gateway>,
    pub store: StoreChoice,
    /// The database URL of a set on [`StoreChoice::Postgres`] (passed as `--store`).
    pub store_url: Option<String>,
    pub pick: Pick,
    /// Requests sent so far (drives [`Pick::RoundRobin`] and [`Pick::Random`]).
    requests: AtomicU64,
}

pub struct Resp {
    pub status: u16,
    pub body: Value,
    pub headers: Vec<(String, String)>,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Server {
    pub fn start() -> Self {
        Self::with_config(DEFAULT_CONFIG)
    }

    pub fn with_config(config: &str) -> Self {
        Self::with_args(config, &[])
    }

    pub fn with_args(config: &str, extra: &[&str]) -> Self {
        Self::with_options(ServerOptions {
            config: config.to_string(),
            args: extra.iter().map(|s| s.to_string()).collect(),
            ..ServerOptions::default()
        })
    }

    /// Starts `options.gateways` gateways on `options.store`.
    pub fn with_options(options: ServerOptions) -> Self {
        let ServerOptions {
            config,
            args,
            gateways,
            store,
            pick,
        } = options;
        let (mut store, mut gateways, mut pick) = (store, gateways, pick);
        // A test that names its own store keeps it, whatever the environment asked for.
        if store == StoreChoice::Postgres && args.iter().any(|a| a == "--store") {
            (store, gateways, pick) = (StoreChoice::Sqlite, 1, Pick::First);
        }
        assert!(gateways >= 1, "a gateway set has at least one gateway");
        let store_url = match store {
            StoreChoice::Sqlite => {
                assert!(
                    gateways == 1,
                    "{gateways} gateways on SQLite: one process owns a SQLite store; several \
                     gateways need a shared store (StoreChoice::Postgres)"
                );
                None
            }
            StoreChoice::Postgres => {
                let url = aware_store_pg::testing::PgCluster::shared()
                    .database()
                    .unwrap_or_else(|e| panic!("a test database: {e}"));
                eprintln!(
                    "aware-testkit: {gateways} gateway(s) on {url}, pick {pick:?} \
                     (AWARE_TEST_SEED repeats a random pick)"
                );
                Some(url)
            }
            StoreChoice::PostgresAt(ref url) => Some(url.clone()),
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), &config).unwrap();
        let token = args
            .iter()
            .position(|a| a == "--token")
            .and_then(|i| args.get(i + 1).cloned());
        let mut s = Server {
            dir,
            child: None,
            port: 0,
            base: String::new(),
            token,
            extra_args: args,
            logs: Arc::new(Mutex::new(String::new())),
            now: T0,
            more: Vec::new(),
            store,
            store_url,
            pick,
            requests: AtomicU64::new(0),
        };
        s.spawn();
        for i in 1..gateways {
            let g = s.spawn_gateway(&format!("port-{i}"));
            s.more.push(g);
        }
        s
    }

    /// Wraps a gateway the test started itself (say without `--test-clock`) listening on
    /// `port`, so the harness's helpers apply to it; it is killed when the `Server` drops.
    pub fn from_process(dir: tempfile::TempDir, child: Child, port: u16) -> Self {
        Server {
            dir,
            child: Some(child),
            port,
            base: format!("http://127.0.0.1:{port}"),
            token: None,
            extra_args: Vec::new(),
            logs: Arc::new(Mutex::new(String::new())),
            now: T0,
            more: Vec::new(),
            store: StoreChoice::Sqlite,
            store_url: None,
            pick: Pick::First,
            requests: AtomicU64::new(0),
        }
    }

    /// How many gateways the set has.
    pub fn gateway_count(&self) -> usize {
        1 + self.more.len()
    }

    /// The base URL of gateway `i` (0-based).
    pub fn gateway_base(&self, i: usize) -> &str {
        if i == 0 {
            &self.base
        } else {
            &self.more[i - 1].base
        }
    }

    /// The base URL the next request goes to, by [`Server::pick`].
    pub fn next_base(&self) -> &str {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        self.gateway_base(self.pick.index(n, self.gateway_count()))
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("state.db")
    }

    fn spawn(&mut self) {
        let g = self.spawn_gateway("port");
        self.child = g.child;
        self.port = g.port;
        self.base = g.base;
        self.logs = g.logs;
    }

    /// Starts one gateway process on the set's store and waits until it answers `/health`.
    fn spawn_gateway(&self, port_file_name: &str) -> Gateway {
        let port_file = self.dir.path().join(port_file_name);
        let _ = std::fs::remove_file(&port_file);
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--port-file")
            .arg(&port_file)
            .arg("--test-clock")
            .arg("--test-clock-start")
            .arg(self.now.to_string())
            .args(&self.extra_args)
            .args(
                self.store_url
                    .iter()
                    .flat_map(|u| ["--store".to_string(), u.clone()]),
            )
            .env_remove("AWARE_TOKEN")
            .env_remove("AWARE_TOKEN_FILE")
            .env_remove("AWARE_DATA_DIR")
            .env_remove("AWARE_BIND")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start aware serve");
        let stderr = child.stderr.take().unwrap();
        // The first gateway keeps appending to the set's log buffer across restarts.
        let logs = if port_file_name == "port" {
            self.logs.clone()
        } else {
            Arc::new(Mutex::new(String::new()))
        };
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let read_logs = || logs.lock().map(|l| l.clone()).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(20);
        let port: u16 = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                if let Ok(port) = p.trim().parse() {
                    break port;
                }
            }
            assert!(
                Instant::now() < deadline,
                "server did not start: {}",
                read_logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.request_to(&base, "GET", "/health", &[], None).status != 200 {
            assert!(
                Instant::now() < deadline,
                "server not healthy: {}",
                read_logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Gateway {
            child: Some(child),
            port,
            base,
            logs,
        }
    }

    /// Waits until every gateway of the set answers `/health` with 200.
    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for i in 0..self.gateway_count() {
            let base = self.gateway_base(i).to_string();
            while self.request_to(&base, "GET", "/health", &[], None).status != 200 {
                assert!(
                    Instant::now() < deadline,
                    "server not healthy: {}",
                    self.logs()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The first gateway's stderr (logs).
    pub fn logs(&self) -> String {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The stderr (logs) of every gateway of the set, gateway by gateway (for one gateway, the
    /// same as [`Server::logs`]). A request is logged by the gateway it reached, so a test that
    /// looks for a line caused by a request uses this.
    pub fn all_logs(&self) -> String {
        let mut all = self.logs();
        for g in &self.more {
            all.push_str(&g.logs.lock().map(|l| l.clone()).unwrap_or_default());
        }
        all
    }

    /// Graceful stop (SIGTERM) of every gateway, then start them again on the same store at the
    /// current test time.
    pub fn restart(&mut self) {
        self.stop();
        self.respawn();
    }

    /// `kill -9` every gateway, then start them again.
    pub fn kill9_restart(&mut self) {
        for c in self.children() {
            kill(c);
        }
        self.respawn();
    }

    /// Graceful stop (SIGTERM) of every gateway; each gets 10 s before it is killed.
    pub fn stop(&mut self) {
        for c in self.children() {
            terminate(c);
        }
    }

    fn children(&mut self) -> Vec<Child> {
        let mut all: Vec<Child> = self.child.take().into_iter().collect();
        all.extend(self.more.iter_mut().filter_map(|g| g.child.take()));
        all
    }

    fn respawn(&mut self) {
        let more = self.more.len();
        self.more.clear();
        self.spawn();
        for i in 1..=more {
            let g = self.spawn_gateway(&format!("port-{i}"));
            self.more.push(g);
        }
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        caller: Option<&str>,
        body: Option<&str>,
    ) -> Resp {
        self.request_with(
            method,
            path,
            &caller
                .map(|c| vec![("X-Aware-Session", seg(c))])
                .unwrap_or_default(),
            body,
        )
    }

    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&str>,
    ) -> Resp {
        self.request_to(self.next_base(), method, path, headers, body)
    }

    /// A request to the gateway at `base` (one of [`Server::gateway_base`]).
    pub fn request_to(
        &self,
        base: &str,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&str>,
    ) -> Resp {
        try_request(base, self.token.as_deref(), method, path, headers, body)
            .unwrap_or_else(|e| panic!("{e} (pick {:?})", self.pick))
    }

    /// `kill -9` gateway `i` (0-based) alone; the others keep serving. Its address stays in
    /// [`Server::gateway_base`] (requests to it are refused) until [`Server::start_gateway`].
    pub fn kill9_gateway(&mut self, i: usize) {
        let child = if i == 0 {
            self.child.take()
        } else {
            self.more[i - 1].child.take()
        };
        if let Some(c) = child {
            kill(c);
        }
    }

    /// Starts gateway `i` (0-based) again on the set's store (a new port) and waits until it is
    /// healthy.
    pub fn start_gateway(&mut self, i: usize) {
        if i == 0 {
            self.spawn();
        } else {
            let g = self.spawn_gateway(&format!("port-{i}"));
            self.more[i - 1] = g;
        }
    }
    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, None, None)
    }
    pub fn post(&self, path: &str, body: Value) -> Resp {
        self.request("POST", path, None, Some(&body.to_string()))
    }
    pub fn post_as(&self, caller: &str, path: &str, body: Value) -> Resp {
        self.request("POST", path, Some(caller), Some(&body.to_string()))
    }
    pub fn put(&self, path: &str, body: Value) -> Resp {
        self.request("PUT", path, None, Some(&body.to_string()))
    }
    pub fn delete(&self, path: &str) -> Resp {
        self.request("DELETE", path, None, None)
    }
    pub fn tool(&self, caller: &str, name: &str, args: Value) -> Resp {
        self.post_as(caller, &format!("/v1/tools/{name}"), args)
    }

    /// Creates a session (operator) and asserts success.
    pub fn create(&self, key: &str) -> Value {
        let r = self.post("/v1/sessions", json!({"key": key}));
        assert!(
            r.status == 201 || r.status == 200,
            "create {key}: {} {}",
            r.status,
            r.body
        );
        r.body["session"].clone()
    }
    pub fn create_child(&self, key: &str, parent: &str) -> Value {
        let r = self.post(
            "/v1/sessions",
            json!({"key": key, "parentSessionKey": parent}),
        );
        assert_eq!(r.status, 201, "create {key}: {}", r.body);
        r.body["session"].clone()
    }
}

/// One request to the gateway at `base` (with a bearer `token` if given). A transport failure
/// (refused, reset, timed out) is an `Err` saying which request failed; any HTTP status is an
/// answer. For tests that expect gateways to go away under them; [`Server::request_to`] panics
/// instead.
pub fn try_request(
    base: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&str>,
) -> Result<Resp, String> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let mut r = agent.request(method, &format!("{base}{path}"));
    if let Some(t) = token {
        r = r.set("Authorization", &format!("Bearer {t}"));
    }
    for (k, v) in headers {
        r = r.set(k, v);
    }
    let result = match body {
        Some(b) => r.set("Content-Type", "application/json").send_string(b),
        None => r.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(format!("{method} {base}{path}: {e}")),
    };
    let status = resp.status();
    let headers = resp
        .headers_names()
        .into_iter()
        .map(|n| {
            let v = resp.header(&n).unwrap_or("").to_string();
            (n, v)
        })
        .collect();
    let mut text = String::new();
    let _ = resp.into_reader().take(64 << 20).read_to_string(&mut text);
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok(Resp {
        status,
        body,
        headers,
    })
}

impl Drop for Server {
    fn drop(&mut self) {
        for c in self.children() {
            kill(c);
        }
    }
}

fn kill(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

fn terminate(mut c: Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(c.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(c);
}

#[cfg(test)]
mod tests {
    use super::Server;
    use crate::options::{Pick, ServerOptions};

    #[test]
    #[should_panic(expected = "one process owns a SQLite store")]
    fn several_gateways_on_sqlite_are_refused_before_any_start() {
        Server::with_options(ServerOptions {
            gateways: 3,
            ..ServerOptions::default()
        });
    }

    #[test]
    fn picks_stay_in_range_and_spread() {
        for pick in [
            Pick::First,
            Pick::Fixed(2),
            Pick::RoundRobin,
            Pick::Random { seed: 7 },
        ] {
            let hits: Vec<usize> = (0..300).map(|n| pick.index(n, 3)).collect();
            assert!(hits.iter().all(|&i| i < 3), "{pick:?}");
            let used = (0..3).filter(|i| hits.contains(i)).count();
            let want = if matches!(pick, Pick::First | Pick::Fixed(_)) {
                1
            } else {
                3
            };
            assert_eq!(used, want, "{pick:?}");
        }
        assert_eq!(Pick::Fixed(9).index(0, 3), 2);
        assert_eq!(Pick::RoundRobin.index(4, 3), 1);
        let a: Vec<usize> = (0..20)
            .map(|n| Pick::Random { seed: 1 }.index(n, 3))
            .collect();
        let b: Vec<usize> = (0..20)
            .map(|n| Pick::Random { seed: 1 }.index(n, 3))
            .collect();
        assert_eq!(a, b, "a seed gives the same sequence");
    }
}
