//! `aware-bench stall`: does stuck outside I/O stall the API? (decision D4)
//!
//! Two `aware serve` processes (the real binary, `127.0.0.1:0`, fresh temporary data dirs, the wall
//! clock) are measured one after the other with the same request: `GET /v1/sessions/{key}` from
//! one keep-alive client, one request at a time.
//!
//! - **baseline**: no webhook, no paired node, no other traffic;
//! - **stalled**: agent `main` has a wake webhook and the gateway a `[[nodes]]` entry, both
//!   pointing at TCP listeners of this process that accept and never answer; a thread keeps
//!   producing `message` wakes (`sessions_send` with `timeoutSeconds: 0`), four threads keep
//!   asking the hanging node for its catalog (`GET /v1/catalog?hostId=node:hang`, given up
//!   client-side after 300 ms), and `--idle` connections are open to the gateway without sending
//!   a byte.
//!
//! Printed per run: p50 and p99 latency, errors, and the gateway's thread count (`Threads:` of
//! `/proc/PID/status`, the maximum sampled during the run).

use crate::util::{fmt_dur, fmt_int, percentiles};
use anyhow::{bail, Context, Result};
use aware_client::{seg, Client};
use serde_json::json;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `aware-bench stall`.
#[derive(clap::Args, Debug)]
pub struct StallBenchArgs {
    /// A smoke run: a tenth of the requests.
    #[arg(long)]
    pub quick: bool,
    /// Requests measured per run.
    #[arg(long, default_value_t = 5_000)]
    pub requests: u64,
    /// Idle connections held open to the gateway in the stalled run.
    #[arg(long, default_value_t = 1_000)]
    pub idle: usize,
    /// Seconds the hanging peers work on the gateway before measuring starts.
    #[arg(long, default_value_t = 3)]
    pub warmup_secs: u64,
}

const KEY: &str = "agent:main:main";
const SENDER: &str = "agent:main:coord";
const TARGETS: usize = 100;

/// A TCP listener that accepts and keeps every connection, never writing a byte.
struct Hanging {
    port: u16,
    accepted: Arc<AtomicU64>,
}

impl Hanging {
    fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding a hanging listener")?;
        let port = listener.local_addr()?.port();
        let accepted = Arc::new(AtomicU64::new(0));
        let a2 = accepted.clone();
        std::thread::spawn(move || {
            let held: Mutex<Vec<TcpStream>> = Mutex::new(Vec::new());
            for s in listener.incoming().map_while(Result::ok) {
                a2.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut h) = held.lock() {
                    h.push(s);
                }
            }
        });
        Ok(Hanging { port, accepted })
    }
}

/// One `aware serve` child process.
struct Gateway {
    child: Child,
    port: u16,
    client: Client,
}

impl Gateway {
    fn start(dir: &Path, config: &str) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("config.toml"), config)?;
        let port_file = dir.join("port");
        let child = Command::new(crate::util::aware_exe()?)
            .arg("serve")
            .arg("--data-dir")
            .arg(dir)
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--port-file")
            .arg(&port_file)
            .env_remove("AWARE_TOKEN")
            .env_remove("AWARE_DATA_DIR")
            .env_remove("AWARE_BIND")
            .env("AWARE_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting aware serve")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
            {
                break Some(port);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut child = child;
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("aware serve did not start within 30 s");
        };
        let base = format!("http://127.0.0.1:{port}");
        let g = Gateway {
            child,
            client: Client::new(&base)?,
            port,
        };
        let agent = g.client(Duration::from_secs(5));
        while agent
            .request("GET", "/health")
            .send(None)
            .map(|r| r.status())
            .unwrap_or(0)
            != 200
        {
            if Instant::now() > deadline {
                bail!("aware serve did not become healthy within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(g)
    }

    fn threads(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// A client of this gateway with connections of its own.
    fn client(&self, timeout: Duration) -> Client {
        self.client.fresh().with_timeout(timeout)
    }

    fn post(&self, a: &Client, path: &str, caller: Option<&str>, body: &str) -> Result<u16> {
        let r = a.request("POST", path);
        let r = match caller {
            Some(c) => r.as_session(c),
            None => r.operator(),
        };
        Ok(r.send_any(Some(body))?.status())
    }

    fn metric(&self, name: &str) -> Option<String> {
        let text = self
            .client(Duration::from_secs(5))
            .request("GET", "/metrics")
            .send(None)
            .ok()?
            .text()
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Outcome {
    p50: u64,
    p99: u64,
    max: u64,
    errors: u64,
    threads_max: u64,
}

/// `n` sequential `GET /v1/sessions/{KEY}` on one keep-alive connection.
fn measure(g: &Gateway, n: u64) -> Outcome {
    let a = g.client(Duration::from_secs(30));
    let path = format!("/v1/sessions/{}", seg(KEY));
    let mut samples = Vec::with_capacity(n as usize);
    let (mut errors, mut threads_max) = (0, g.threads());
    for i in 0..n {
        let t = Instant::now();
        match a.request("GET", &path).send(None) {
            Ok(r) if r.status() == 200 => {
                let _ = r.into_reader().read_to_end(&mut Vec::new());
                samples.push(t.elapsed().as_nanos() as u64);
            }
            _ => errors += 1,
        }
        if i % 50 == 0 {
            threads_max = threads_max.max(g.threads());
        }
    }
    threads_max = threads_max.max(g.threads());
    let (p50, p99) = percentiles(&mut samples);
    Outcome {
        p50,
        p99,
        max: samples.last().copied().unwrap_or(0),
        errors,
        threads_max,
    }
}

fn setup_sessions(g: &Gateway) -> Result<()> {
    let a = g.client(Duration::from_secs(30));
    for key in [KEY.to_string(), SENDER.to_string()]
        .into_iter()
        .chain((0..TARGETS).map(|i| format!("agent:main:t{i}")))
    {
        let s = g.post(&a, "/v1/sessions", None, &json!({"key": key}).to_string())?;
        if s != 201 && s != 200 {
            bail!("creating {key}: HTTP {s}");
        }
    }
    Ok(())
}

const BASE_CONFIG: &str =
    "notify_on_create = false\n[monitor]\nenabled = false\n[claude]\nenabled = false\n";

#[expect(
    clippy::too_many_lines,
    reason = "one experiment start to finish: the set-up, the stall, the measurement and the verdict"
)]
pub fn run(args: StallBenchArgs) -> Result<()> {
    let requests = if args.quick {
        (args.requests / 10).max(1)
    } else {
        args.requests
    };
    let tmp = tempfile::Builder::new()
        .prefix("aware-bench-stall-")
        .tempdir()
        .context("creating the bench directory")?;
    let dir = |name: &str| -> PathBuf { tmp.path().join(name) };
    say!(
        "bench-stall: GET /v1/sessions/{{key}}, {} requests per run, one keep-alive client",
        fmt_int(requests)
    );

    let base = Gateway::start(&dir("baseline"), BASE_CONFIG)?;
    setup_sessions(&base)?;
    let b = measure(&base, requests);
    drop(base);

    let hook = Hanging::start()?;
    let node = Hanging::start()?;
    let config = format!(
        "{BASE_CONFIG}[agents.main.wake_webhook]\nurl = \"http://127.0.0.1:{}/hook\"\ntimeout_ms = 60000\nmax_attempts = 1\n[[nodes]]\nid = \"hang\"\nurl = \"http://127.0.0.1:{}\"\n",
        hook.port, node.port
    );
    let g = Arc::new(Gateway::start(&dir("stalled"), &config)?);
    setup_sessions(&g)?;
    let stop = Arc::new(AtomicBool::new(false));
    let wakes = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    {
        let (g, stop, wakes) = (g.clone(), stop.clone(), wakes.clone());
        load.push(std::thread::spawn(move || {
            let a = g.client(Duration::from_secs(10));
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let body = json!({"sessionKey": format!("agent:main:t{}", i % TARGETS), "message": "go", "timeoutSeconds": 0});
                if let Ok(200) = g.post(&a, "/v1/tools/sessions_send", Some(SENDER), &body.to_string()) {
                    wakes.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        }));
    }
    for _ in 0..4 {
        let (g, stop) = (g.clone(), stop.clone());
        load.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // A fresh client each time: the abandoned connection must not be reused.
                let _ = g
                    .client(Duration::from_millis(300))
                    .request("GET", "/v1/catalog?hostId=node:hang")
                    .send(None);
            }
        }));
    }
    let mut idle = Vec::with_capacity(args.idle);
    for _ in 0..args.idle {
        match TcpStream::connect(("127.0.0.1", g.port)) {
            Ok(s) => idle.push(s),
            Err(e) => {
                say!(
                    "  note: opened {} idle connections, then: {e}",
                    fmt_int(idle.len() as u64)
                );
                break;
            }
        }
    }
    std::thread::sleep(Duration::from_secs(args.warmup_secs));
    let s = measure(&g, requests);
    let (in_flight, queued) = (
        g.metric("aware_wake_webhook_in_flight"),
        g.metric("aware_wake_webhook_queued"),
    );
    stop.store(true, Ordering::Relaxed);
    for h in load {
        let _ = h.join();
    }
    let line = |name: &str, o: &Outcome| {
        say!(
            "  {name:<9} p50 {:>9}  p99 {:>9}  max {:>9}  errors {}  threads (max) {}",
            fmt_dur(o.p50),
            fmt_dur(o.p99),
            fmt_dur(o.max),
            o.errors,
            o.threads_max
        );
    };
    line("baseline", &b);
    line("stalled", &s);
    say!(
        "  stalled run: {} idle connections, {} wakes sent, {} webhook connections held, {} node connections held, webhook in flight {} queued {}",
        fmt_int(idle.len() as u64),
        fmt_int(wakes.load(Ordering::Relaxed)),
        hook.accepted.load(Ordering::Relaxed),
        node.accepted.load(Ordering::Relaxed),
        in_flight.as_deref().unwrap_or("?"),
        queued.as_deref().unwrap_or("?"),
    );
    drop(idle);
    Ok(())
}
