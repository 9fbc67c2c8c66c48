//! TLS with certificates the test makes (`aware_tls::testing::TestCa`): `aware serve` over
//! https (a client trusting the CA gets through, plain http and a client without the CA do
//! not, the CLI with `--ca-file` / `AWARE_CA_FILE`), the refusal of a token off loopback without
//! TLS and its explicit opt-out (gateway and node), bad certificate files named at start-up, and
//! wake webhooks over https to a receiver that requires TLS.

use crate::common::*;
use aware_tls::testing::TestCa;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "tls-test-token-0123456789";

/// The PKI of one test: a CA and a leaf for the loopback names, written under `dir`.
struct Pki {
    ca: TestCa,
    ca_file: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let ca = TestCa::new("aware test CA");
    let ca_file = ca.write_ca(dir);
    let (cert, key) = ca.write_leaf(dir, "gateway", &["localhost", "127.0.0.1"]);
    Pki {
        ca,
        ca_file,
        cert,
        key,
    }
}

/// `aware serve` with `args` on a fresh data dir; returns the child and its stderr (collected).
fn spawn_serve(dir: &Path, config: &str, args: &[&str]) -> (Child, Arc<Mutex<String>>) {
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir)
        .arg("--port-file")
        .arg(dir.join("port"))
        .args(args)
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_TOKEN_FILE")
        .env_remove("AWARE_DATA_DIR")
        .env_remove("AWARE_BIND")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let logs = Arc::new(Mutex::new(String::new()));
    let (sink, stderr) = (logs.clone(), child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    (child, logs)
}

/// Waits for the port file, or for the child to exit (then `Err(status)`).
fn port_or_exit(dir: &Path, child: &mut Child) -> Result<u16, Option<i32>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(p) = std::fs::read_to_string(dir.join("port"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            return Ok(p);
        }
        if let Some(st) = child.try_wait().unwrap() {
            return Err(st.code());
        }
        assert!(
            Instant::now() < deadline,
            "aware serve neither started nor exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_2(dir: &Path, config: &str, args: &[&str]) -> String {
    let (mut child, logs) = spawn_serve(dir, config, args);
    let r = port_or_exit(dir, &mut child);
    let _ = child.kill();
    let _ = child.wait();
    // The reader thread may still be copying the last line (the message starts `error:`).
    wait_until(Duration::from_secs(10), || {
        logs.lock().unwrap().contains("error:")
    });
    let err = logs.lock().unwrap().clone();
    assert_eq!(r, Err(Some(2)), "{args:?}: {err}");
    err
}

/// An agent that trusts `ca` (and nothing else).
fn trusting(ca: &Path) -> ureq::Agent {
    let roots = aware_tls::roots_from_file("ca", ca).unwrap();
    let config = aware_tls::client_config(roots).unwrap();
    ureq::AgentBuilder::new()
        .tls_config(Arc::new(config))
        .timeout(Duration::from_secs(10))
        .build()
}

fn wait_https_health(agent: &ureq::Agent, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match agent
            .get(&format!("https://127.0.0.1:{port}/health"))
            .call()
        {
            Ok(r) if r.status() == 200 => return,
            other => assert!(
                Instant::now() < deadline,
                "https /health never answered 200: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn aware_cli(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(bin())
        .args(args)
        .env_remove("AWARE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_CA_FILE")
        .env_remove("AWARE_SESSION")
        .env("XDG_CONFIG_HOME", "/nonexistent-aware-config")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn serve_over_https_trusted_plain_http_and_strangers_refused_cli_with_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let (cert, key) = (p.cert.to_str().unwrap(), p.key.to_str().unwrap());
    let (mut child, logs) = spawn_serve(
        dir.path(),
        DEFAULT_CONFIG,
        &[
            "--bind",
            "127.0.0.1:0",
            "--token",
            TOKEN,
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ],
    );
    let port = port_or_exit(dir.path(), &mut child).unwrap();
    let agent = trusting(&p.ca_file);
    wait_https_health(&agent, port);
    let base = format!("https://127.0.0.1:{port}");

    // With the CA trusted and the token: the API answers, over TLS.
    let r = agent
        .post(&format!("{base}/v1/sessions"))
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .send_json(serde_json::json!({"key": "agent:main:tls"}))
        .unwrap();
    assert_eq!(r.status(), 201, "{}", logs.lock().unwrap());
    // Also by the name the certificate carries.
    let r = agent
        .get(&format!("https://localhost:{port}/health"))
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);

    // Plain http to the TLS port gets no answer (the handshake fails).
    let plain = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build()
        .get(&format!("http://127.0.0.1:{port}/health"))
        .call();
    assert!(plain.is_err(), "plain http answered: {plain:?}");
    // A client that does not trust the CA refuses the certificate.
    let stranger = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build()
        .get(&format!("{base}/health"))
        .call();
    let e = stranger.unwrap_err().to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    // The gateway still serves after both.
    assert_eq!(
        agent
            .get(&format!("{base}/health"))
            .call()
            .unwrap()
            .status(),
        200
    );

    // The CLI: --ca-file, then AWARE_CA_FILE; without either it cannot verify (exit 3).
    let ca = p.ca_file.to_str().unwrap();
    let (code, out) = aware_cli(
        &[
            "status",
            "agent:main:tls",
            "--url",
            &base,
            "--token",
            TOKEN,
            "--ca-file",
            ca,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("agent:main:tls"), "{out}");
    let (code, out) = aware_cli(
        &["status", "agent:main:tls", "--json"],
        &[
            ("AWARE_URL", &base),
            ("AWARE_TOKEN", TOKEN),
            ("AWARE_CA_FILE", ca),
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = aware_cli(
        &["status", "agent:main:tls", "--url", &base, "--token", TOKEN],
        &[],
    );
    assert_eq!(code, Some(3), "{out}");
    // A CA file that is not one is a usage error naming it.
    let (code, out) = aware_cli(
        &[
            "status",
            "agent:main:tls",
            "--url",
            &base,
            "--ca-file",
            p.key.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("CA file"), "{out}");
    assert!(
        wait_until(Duration::from_secs(10), || logs
            .lock()
            .unwrap()
            .contains("https://127.0.0.1")),
        "{}",
        logs.lock().unwrap()
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_token_off_loopback_needs_tls_or_an_explicit_opt_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    // A token on a public bind without TLS: refused, with why and how.
    let err = exit_2(
        dir.path(),
        DEFAULT_CONFIG,
        &["--bind", "0.0.0.0:0", "--token", TOKEN],
    );
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 with a bearer token over plain HTTP"),
        "{err}"
    );
    assert!(
        err.contains("tls_cert") && err.contains("allow_plaintext_tokens"),
        "{err}"
    );
    // The opt-out, by flag and by the file, and TLS: each starts.
    let file_opt_out = format!("{DEFAULT_CONFIG}[http]\nallow_plaintext_tokens = true\n");
    let (cert, key) = (p.cert.to_str().unwrap(), p.key.to_str().unwrap());
    let runs: [(&str, Vec<&str>); 3] = [
        (
            DEFAULT_CONFIG,
            vec![
                "--bind",
                "0.0.0.0:0",
                "--token",
                TOKEN,
                "--allow-plaintext-tokens",
            ],
        ),
        (&file_opt_out, vec!["--bind", "0.0.0.0:0", "--token", TOKEN]),
        (
            DEFAULT_CONFIG,
            vec![
                "--bind",
                "0.0.0.0:0",
                "--token",
                TOKEN,
                "--tls-cert",
                cert,
                "--tls-key",
                key,
            ],
        ),
    ];
    for (config, args) in runs {
        let d = tempfile::tempdir().unwrap();
        let (mut child, logs) = spawn_serve(d.path(), config, &args);
        let r = port_or_exit(d.path(), &mut child);
        let _ = child.kill();
        let _ = child.wait();
        assert!(r.is_ok(), "{args:?}: {r:?} {}", logs.lock().unwrap());
    }
    // Loopback with a token and no TLS stays as it was.
    let d = tempfile::tempdir().unwrap();
    let (mut child, _) = spawn_serve(
        d.path(),
        DEFAULT_CONFIG,
        &["--bind", "127.0.0.1:0", "--token", TOKEN],
    );
    let r = port_or_exit(d.path(), &mut child);
    let _ = child.kill();
    let _ = child.wait();
    assert!(r.is_ok(), "{r:?}");

    // The node server: the same rule.
    let node = |extra: &[&str]| {
        let d = tempfile::tempdir().unwrap();
        let mut child = Command::new(bin())
            .args(["node", "serve", "--bind", "0.0.0.0:0", "--token", TOKEN])
            .args(extra)
            .arg("--port-file")
            .arg(d.path().join("port"))
            .arg("--claude-root")
            .arg(d.path())
            .arg("--no-codex")
            .env_remove("AWARE_TOKEN")
            .env_remove("AWARE_NODE_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let r = port_or_exit(d.path(), &mut child);
        let _ = child.kill();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let _ = child.wait();
        (r, err)
    };
    let (r, err) = node(&[]);
    assert_eq!(r, Err(Some(2)), "{err}");
    assert!(
        err.contains("over plain HTTP") && err.contains("--tls-cert"),
        "{err}"
    );
    let (r, err) = node(&["--allow-plaintext-tokens"]);
    assert!(r.is_ok(), "{err}");
    let (r, err) = node(&["--tls-cert", cert, "--tls-key", key]);
    assert!(r.is_ok(), "{err}");
}

#[test]
fn bad_certificate_or_key_files_exit_2_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let other = p.ca.write_leaf(dir.path(), "other", &["localhost"]);
    let (cert, key) = (p.cert.to_str().unwrap(), p.key.to_str().unwrap());
    let lo = ["--bind", "127.0.0.1:0"];
    let err = exit_2(
        dir.path(),
        DEFAULT_CONFIG,
        &[
            &lo[..],
            &["--tls-cert", "/nonexistent/cert.pem", "--tls-key", key],
        ]
        .concat(),
    );
    assert!(
        err.contains("--tls-cert: cannot read /nonexistent/cert.pem"),
        "{err}"
    );
    // A key that is not the certificate's.
    let err = exit_2(
        dir.path(),
        DEFAULT_CONFIG,
        &[
            &lo[..],
            &["--tls-cert", cert, "--tls-key", other.1.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(
        err.contains("--tls-key") && err.contains("does not go with"),
        "{err}"
    );
    // The file's keys: a key file that holds a certificate, and a certificate without a key.
    let cert_as_key = dir.path().join("cert-as-key.pem");
    std::fs::copy(cert, &cert_as_key).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let owner_only = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(&cert_as_key, owner_only).unwrap();
    }
    let config = format!(
        "{DEFAULT_CONFIG}[http]\ntls_cert = \"{cert}\"\ntls_key = \"{}\"\n",
        cert_as_key.display()
    );
    let err = exit_2(dir.path(), &config, &lo);
    assert!(
        err.contains("http.tls_key") && err.contains("no private key"),
        "{err}"
    );
    let config = format!("{DEFAULT_CONFIG}[http]\ntls_cert = \"{cert}\"\n");
    let err = exit_2(dir.path(), &config, &lo);
    assert!(err.contains("http.tls_cert is set but no key"), "{err}");
}

/// A webhook receiver that speaks only TLS, with a certificate of `ca` for `localhost`: counts
/// handshakes that failed and requests it read whole (answered 200).
struct TlsReceiver {
    port: u16,
    bodies: Arc<Mutex<Vec<String>>>,
    failed_handshakes: Arc<AtomicUsize>,
}

impl TlsReceiver {
    fn start(ca: &TestCa) -> TlsReceiver {
        let leaf = ca.issue(&["localhost"]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.pem"), &leaf.cert_pem).unwrap();
        std::fs::write(dir.path().join("k.pem"), &leaf.key_pem).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let owner_only = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(dir.path().join("k.pem"), owner_only).unwrap();
        }
        let config = aware_tls::server_config(
            "cert",
            &dir.path().join("c.pem"),
            "key",
            &dir.path().join("k.pem"),
        )
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(AtomicUsize::new(0));
        let (b2, f2) = (bodies.clone(), failed.clone());
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { continue };
                let (config, b3, f3) = (config.clone(), b2.clone(), f2.clone());
                std::thread::spawn(move || {
                    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let conn = aware_tls::rustls::ServerConnection::new(config).unwrap();
                    let mut tls = aware_tls::rustls::StreamOwned::new(conn, tcp);
                    match read_request(&mut tls) {
                        Some(body) => {
                            b3.lock().unwrap().push(body);
                            let _ = tls.write_all(
                                b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                            );
                            let _ = tls.flush();
                            tls.conn.send_close_notify();
                            let _ = tls.flush();
                        }
                        None => {
                            f3.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        TlsReceiver {
            port,
            bodies,
            failed_handshakes: failed,
        }
    }
}

/// Reads one HTTP/1.1 request with a `content-length` body; `None` when the handshake or the
/// read fails.
fn read_request(r: &mut impl Read) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match r.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}

fn webhook_config(port: u16, ca_file: &Path) -> String {
    format!(
        "{DEFAULT_CONFIG}[wakes]\nca_file = \"{}\"\n[agents.main.wake_webhook]\n\
         url = \"https://localhost:{port}/hook\"\ntimeout_ms = 5000\nmax_attempts = 1\n",
        ca_file.display()
    )
}

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    cond()
}

#[test]
fn webhooks_reach_an_https_receiver_with_the_ca_and_not_an_untrusted_one() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("webhook CA");
    let ca_file = ca.write_ca(dir.path());

    // Trusted: the wake arrives over TLS, delivered and counted.
    let good = TlsReceiver::start(&ca);
    let s = Server::with_config(&webhook_config(good.port, &ca_file));
    s.create(W);
    s.create_child(C, W);
    s.hdm(C);
    assert!(
        wait_until(Duration::from_secs(20), || !good
            .bodies
            .lock()
            .unwrap()
            .is_empty()),
        "no wake arrived: {}",
        s.logs()
    );
    let body: serde_json::Value = serde_json::from_str(&good.bodies.lock().unwrap()[0]).unwrap();
    assert_eq!(body["sessionKey"], W, "{body}");
    assert!(
        wait_until(Duration::from_secs(10), || s
            .metric("aware_wakes_delivered_total{channel=\"webhook\"}")
            == Some(1.0)),
        "{}",
        s.logs()
    );
    assert_eq!(s.metric("aware_wake_webhook_failures_total"), Some(0.0));

    // Untrusted: a receiver whose certificate comes from another CA gets nothing; the failure
    // is counted and logged, the notice stays pending.
    let stranger_ca = TestCa::new("someone else's CA");
    let bad = TlsReceiver::start(&stranger_ca);
    let s = Server::with_config(&webhook_config(bad.port, &ca_file));
    s.create(W);
    s.create_child(C, W);
    s.hdm(C);
    assert!(
        wait_until(Duration::from_secs(20), || s
            .metric("aware_wake_webhook_failures_total")
            == Some(1.0)),
        "{}",
        s.logs()
    );
    // The receiver sees the refused handshake on its own thread, maybe after the gateway
    // counted it.
    assert!(wait_until(Duration::from_secs(10), || bad
        .failed_handshakes
        .load(Ordering::SeqCst)
        >= 1));
    assert!(bad.bodies.lock().unwrap().is_empty());
    // The log line is written before the counter moves, but reaches the test through the
    // harness's stderr reader thread, which may not have read it yet.
    let logged = |l: &str| l.contains("wake_webhook_failed") && l.contains("TLS handshake");
    assert!(
        wait_until(Duration::from_secs(10), || logged(&s.logs())),
        "{}",
        s.logs()
    );
    assert_eq!(
        s.metric("aware_wakes_delivered_total{channel=\"webhook\"}"),
        Some(0.0)
    );
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
}

#[test]
fn a_gateway_on_a_postgresql_that_requires_tls() {
    use aware_store_pg::testing::{ClusterOptions, PgCluster, ServerTlsFiles};
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("pg CA");
    let ca_file = ca.write_ca(dir.path());
    let (cert, key) = ca.write_leaf(dir.path(), "pg", &["localhost", "127.0.0.1"]);
    let pg = PgCluster::start_new(ClusterOptions {
        tls: Some(ServerTlsFiles {
            cert,
            key,
            client_ca: None,
        }),
        ..Default::default()
    })
    .unwrap();
    let url = pg.database().unwrap();

    // verify-full against the test CA: the gateway opens the store and serves.
    let verified = format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        ca_file.display()
    );
    let s = Server::with_args(DEFAULT_CONFIG, &["--store", &verified]);
    s.create(W);
    s.create_child(C, W);
    s.hdm(C);
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    drop(s);

    // sslmode=disable: the server refuses it (hostssl only); serve exits 2 and says why.
    let d = tempfile::tempdir().unwrap();
    let plain = format!("{url}?sslmode=disable");
    // (It listens first, then fails to open the store.)
    let (mut child, logs) = spawn_serve(
        d.path(),
        DEFAULT_CONFIG,
        &["--bind", "127.0.0.1:0", "--store", &plain],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "serve did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    wait_until(Duration::from_secs(10), || {
        logs.lock().unwrap().contains("error:")
    });
    let err = logs.lock().unwrap().clone();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("no encryption") && err.contains("pg_hba.conf"),
        "{err}"
    );
}

#[test]
fn a_gateway_reaches_an_https_node_with_its_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let root = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("node-port");
    let mut node = Command::new(bin())
        .args([
            "node",
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--node-id",
            "laptop",
        ])
        .args(["--token", TOKEN, "--no-codex"])
        .arg("--tls-cert")
        .arg(&p.cert)
        .arg("--tls-key")
        .arg(&p.key)
        .arg("--port-file")
        .arg(&port_file)
        .arg("--claude-root")
        .arg(root.path())
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_NODE_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "node did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let config = |ca: Option<&Path>| {
        let ca = ca.map_or(String::new(), |c| {
            format!("ca_file = {:?}\n", c.display().to_string())
        });
        format!(
            "{DEFAULT_CONFIG}[[nodes]]\nid = \"laptop\"\nurl = \"https://127.0.0.1:{port}\"\n\
             token = {TOKEN:?}\n{ca}"
        )
    };
    let s = Server::with_config(&config(Some(&p.ca_file)));
    let r = s.get("/v1/catalog?hostId=node:laptop");
    assert_eq!(r.status, 200, "{}", r.body);
    drop(s);
    // Without the CA the node's certificate is not trusted: the node is unavailable.
    let s = Server::with_config(&config(None));
    let r = s.get("/v1/catalog?hostId=node:laptop");
    assert_eq!(
        (r.status, r.code()),
        (502, "node_unavailable"),
        "{}",
        r.body
    );
    let _ = node.kill();
    let _ = node.wait();
}

#[test]
fn a_stalled_tls_handshake_is_cut_at_the_head_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let config = format!("{DEFAULT_CONFIG}[http]\nheader_timeout_secs = 1\n");
    let (cert, key) = (p.cert.to_str().unwrap(), p.key.to_str().unwrap());
    let (mut child, _logs) = spawn_serve(
        dir.path(),
        &config,
        &[
            "--bind",
            "127.0.0.1:0",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ],
    );
    let port = port_or_exit(dir.path(), &mut child).unwrap();
    let agent = trusting(&p.ca_file);
    wait_https_health(&agent, port);
    // Silent after connecting, and silent after the first bytes of a ClientHello: both are
    // closed by the gateway within the 1 s deadline (give it 5).
    for first in [&b""[..], &[0x16, 0x03, 0x01, 0x02, 0x00][..]] {
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.write_all(first).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 64];
        let r = tcp.read(&mut buf);
        assert!(
            matches!(r, Ok(0))
                || r.as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{first:?}: {r:?} after {:?}",
            start.elapsed()
        );
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
    }
    assert_eq!(
        agent
            .get(&format!("https://127.0.0.1:{port}/health"))
            .call()
            .unwrap()
            .status(),
        200
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn over_tls_the_consoles_own_https_origin_may_write_and_a_foreign_one_may_not() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let (cert, key) = (p.cert.to_str().unwrap(), p.key.to_str().unwrap());
    let (mut child, _logs) = spawn_serve(
        dir.path(),
        DEFAULT_CONFIG,
        &["--token", TOKEN, "--tls-cert", cert, "--tls-key", key],
    );
    let port = port_or_exit(dir.path(), &mut child).unwrap();
    let agent = trusting(&p.ca_file);
    wait_https_health(&agent, port);
    // The status and body of a create sent with `origin`.
    let create = |origin: &str, key: &str| -> (u16, String) {
        match agent
            .post(&format!("https://127.0.0.1:{port}/v1/sessions"))
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .set("Origin", origin)
            .send_json(serde_json::json!({"key": key}))
        {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(st, r)) => (st, r.into_string().unwrap()),
            Err(e) => panic!("{origin}: {e}"),
        }
    };
    // The console page is served from https://127.0.0.1:<port>: its writes are same-origin.
    let (st, body) = create(&format!("https://127.0.0.1:{port}"), "agent:main:console");
    assert_eq!(st, 201, "{body}");
    // The plain-http spelling of the same host is not this listener's origin, nor is a stranger.
    for foreign in [
        format!("http://127.0.0.1:{port}"),
        "https://evil.example".to_string(),
    ] {
        let (st, body) = create(&foreign, "agent:main:foreign");
        assert_eq!(st, 403, "{foreign}: {body}");
        assert!(body.contains("forbidden_origin"), "{foreign}: {body}");
        assert!(
            body.contains(&format!("https://127.0.0.1:{port}")),
            "{body}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_tls_private_key_other_users_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path());
    let (cert, key) = (p.cert.to_str().unwrap(), p.key.to_str().unwrap());
    std::fs::set_permissions(&p.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = exit_2(
        dir.path(),
        DEFAULT_CONFIG,
        &["--tls-cert", cert, "--tls-key", key],
    );
    assert!(
        err.contains("--tls-key")
            && err.contains("other users can read it")
            && err.contains("0644"),
        "{err}"
    );
    // Group-readable is accepted only when root owns the key (as PostgreSQL does); the tests
    // may run as root or not, so the owner decides what 0640 gets.
    std::fs::set_permissions(&p.key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (mut child, logs) = spawn_serve(
        dir.path(),
        DEFAULT_CONFIG,
        &["--tls-cert", cert, "--tls-key", key],
    );
    let started = port_or_exit(dir.path(), &mut child);
    let _ = child.kill();
    let _ = child.wait();
    let root = std::fs::metadata(&p.key)
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap();
    assert_eq!(started.is_ok(), root, "{:?}", logs.lock().unwrap());
    let _ = p.ca;
}
