//! The gateway's edge (decision D2), black box against a real `aware serve` on loopback:
//! cross-site requests, DNS rebinding, connection limits and timeouts, shutdown with SSE clients,
//! tokens, file modes, strict JSON, and start-up refusals.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One raw HTTP/1.1 exchange (`Connection: close` is added): status, lower-cased headers, body.
fn raw(s: &Server, head: &str, body: &[u8]) -> (u16, Vec<(String, String)>, String) {
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = head.replace("{port}", &s.port.to_string());
    if let Some(t) = &s.token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str(&format!(
        "Connection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    ));
    c.write_all(req.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let (h, b) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = h.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, b.to_string())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn code_of(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default()
}

const JSON: &str = "Content-Type: application/json\r\n";

#[test]
fn a_body_must_be_json_by_content_type() {
    let s = Server::start();
    let host = "Host: 127.0.0.1:{port}\r\n";
    let body = json!({"key": "agent:main:a"}).to_string();
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
    ] {
        let head = format!("POST /v1/sessions HTTP/1.1\r\n{host}Content-Type: {ct}\r\n");
        let (st, _, b) = raw(&s, &head, body.as_bytes());
        assert_eq!(st, 415, "{ct}: {b}");
        assert_eq!(code_of(&b), "unsupported_media_type", "{b}");
        assert!(b.contains("application/json"), "{b}");
    }
    // No Content-Type at all with a body.
    let (st, _, b) = raw(
        &s,
        &format!("POST /v1/sessions HTTP/1.1\r\n{host}"),
        body.as_bytes(),
    );
    assert_eq!(st, 415, "{b}");
    assert_eq!(
        s.get(&format!("/v1/sessions/{}", seg("agent:main:a")))
            .status,
        404
    );
    // Parameters are fine; so is upper case.
    let (st, _, b) = raw(
        &s,
        &format!(
            "POST /v1/sessions HTTP/1.1\r\n{host}Content-Type: Application/JSON; charset=utf-8\r\n"
        ),
        body.as_bytes(),
    );
    assert_eq!(st, 201, "{b}");
    // A body-less POST needs no Content-Type.
    let (st, _, b) = raw(
        &s,
        &format!(
            "POST /v1/sessions/{}/drain HTTP/1.1\r\n{host}",
            seg("agent:main:a")
        ),
        b"",
    );
    assert_eq!(st, 200, "{b}");
}

#[test]
fn foreign_origins_and_cross_site_fetches_are_refused() {
    let s = Server::start();
    s.create(W);
    let reset = format!("/v1/sessions/{}/reset", seg(W));
    let host = "Host: 127.0.0.1:{port}\r\n";
    for extra in [
        "Origin: http://evil.example\r\n",
        "Origin: null\r\n",
        "Origin: http://127.0.0.1:1\r\n",
        "Sec-Fetch-Site: cross-site\r\n",
    ] {
        // Body-less POST (reset) and a read.
        let (st, h, b) = raw(&s, &format!("POST {reset} HTTP/1.1\r\n{host}{extra}"), b"");
        assert_eq!(st, 403, "{extra}: {b}");
        assert_eq!(code_of(&b), "forbidden_origin", "{b}");
        assert!(header(&h, "access-control-allow-origin").is_none());
        let (st, _, b) = raw(
            &s,
            &format!("GET /v1/sessions HTTP/1.1\r\n{host}{extra}"),
            b"",
        );
        assert_eq!(st, 403, "{extra}: {b}");
    }
    // The gateway's own origin and no origin at all pass; so does same-origin fetch metadata.
    for extra in [
        "Origin: http://127.0.0.1:{port}\r\n",
        "Sec-Fetch-Site: same-origin\r\n",
        "Sec-Fetch-Site: none\r\n",
        "",
    ] {
        let (st, h, b) = raw(&s, &format!("POST {reset} HTTP/1.1\r\n{host}{extra}"), b"");
        assert_eq!(st, 200, "{extra}: {b}");
        assert!(header(&h, "access-control-allow-origin").is_none(), "{h:?}");
    }
    // No CORS unless configured: a preflight is not answered with CORS headers.
    let (st, h, _) = raw(
        &s,
        &format!("OPTIONS /v1/sessions HTTP/1.1\r\n{host}Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n"),
        b"",
    );
    assert_ne!(st, 204);
    assert!(header(&h, "access-control-allow-origin").is_none());
}

#[test]
fn configured_origins_get_cors() {
    let cfg = format!("{DEFAULT_CONFIG}[http]\nallowed_origins = [\"http://app.example\"]\n");
    let s = Server::with_config(&cfg);
    let host = "Host: 127.0.0.1:{port}\r\n";
    let (st, h, b) = raw(
        &s,
        &format!("OPTIONS /v1/sessions HTTP/1.1\r\n{host}Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"),
        b"",
    );
    assert_eq!(st, 204, "{b}");
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        Some("http://app.example")
    );
    assert!(header(&h, "access-control-allow-methods").is_some_and(|m| m.contains("POST")));
    let (st, h, b) = raw(
        &s,
        &format!("POST /v1/sessions HTTP/1.1\r\n{host}{JSON}Origin: http://app.example\r\nSec-Fetch-Site: cross-site\r\n"),
        json!({"key": W}).to_string().as_bytes(),
    );
    assert_eq!(st, 201, "{b}");
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        Some("http://app.example")
    );
    let (st, h, _) = raw(
        &s,
        &format!("GET /v1/sessions HTTP/1.1\r\n{host}Origin: http://other.example\r\n"),
        b"",
    );
    assert_eq!(st, 403);
    assert!(header(&h, "access-control-allow-origin").is_none());
}

#[test]
fn only_loopback_host_names_are_served_on_a_loopback_bind() {
    let s = Server::start();
    for host in [
        "127.0.0.1:{port}",
        "127.0.0.1",
        "localhost:{port}",
        "LOCALHOST",
        "[::1]:{port}",
        "[::1]",
    ] {
        let (st, _, b) = raw(
            &s,
            &format!("GET /v1/sessions HTTP/1.1\r\nHost: {host}\r\n"),
            b"",
        );
        assert_eq!(st, 200, "{host}: {b}");
    }
    for host in [
        "evil.example",
        "evil.example:{port}",
        "127.0.0.1:1",
        "localhost.evil.example:{port}",
        "127.0.0.2:{port}",
    ] {
        let (st, _, b) = raw(
            &s,
            &format!("GET /v1/sessions HTTP/1.1\r\nHost: {host}\r\n"),
            b"",
        );
        assert_eq!(st, 421, "{host}: {b}");
        assert_eq!(code_of(&b), "misdirected_request", "{b}");
        assert!(b.contains("localhost"), "{b}");
        // Also /health: a rebinding page learns nothing.
        let (st, _, _) = raw(
            &s,
            &format!("GET /health HTTP/1.1\r\nHost: {host}\r\n"),
            b"",
        );
        assert_eq!(st, 421, "{host}");
    }
    // HTTP/1.1 without Host.
    let (st, _, b) = raw(&s, "GET /v1/sessions HTTP/1.1\r\n", b"");
    assert!(st == 421 || st == 400, "{st} {b}");
}

#[test]
fn allowed_hosts_apply_off_loopback_config() {
    // The rule for configured names is the same on any bind; a loopback bind is what a test can
    // reach, so the configured list is checked to be added, not to replace the loopback names.
    let cfg = format!("{DEFAULT_CONFIG}[http]\nallowed_hosts = [\"aware.internal\"]\n");
    let s = Server::with_config(&cfg);
    let (st, _, b) = raw(
        &s,
        "GET /v1/sessions HTTP/1.1\r\nHost: aware.internal:{port}\r\n",
        b"",
    );
    assert_eq!(st, 200, "{b}");
    let (st, _, b) = raw(
        &s,
        "GET /v1/sessions HTTP/1.1\r\nHost: other.internal\r\n",
        b"",
    );
    assert_eq!(st, 421, "{b}");
    assert!(b.contains("aware.internal"), "{b}");
}

const SMALL_LIMITS: &str = "[http]\nmax_connections = 4\nheader_timeout_secs = 1\nidle_timeout_secs = 1\nbody_timeout_secs = 1\n";

/// Reads until the server closes the connection (or `limit` passes): true when it closed.
fn closed_within(c: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while Instant::now() < deadline {
        match c.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn idle_and_trickling_sockets_do_not_stop_health() {
    let s = Server::with_config(&format!("{DEFAULT_CONFIG}{SMALL_LIMITS}"));
    let mut held = Vec::new();
    for i in 0..60 {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        if i % 2 == 0 {
            // A trickler: a partial request head, never finished.
            let _ = c.write_all(b"GET /health HTTP/1.1\r\nHo");
        }
        held.push(c);
    }
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let r = agent
        .get(&format!("{}/health", s.base))
        .call()
        .expect("/health answers while idle sockets are held");
    assert_eq!(r.status(), 200);
    drop(held);
}

#[test]
fn a_trickled_header_is_cut() {
    let s = Server::with_config(&format!("{DEFAULT_CONFIG}{SMALL_LIMITS}"));
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.write_all(b"GET /health HTTP/1.1\r\n").unwrap();
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // One header byte at a time, never the blank line: the header deadline does not move.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut cut = false;
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        if c.write_all(b"X").is_err() {
            cut = true;
            break;
        }
        match c.read(&mut buf) {
            Ok(0) => {
                cut = true;
                break;
            }
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    assert!(cut, "a header trickled for 30 s was not cut");
    // A trickled body is cut as well: 408.
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.write_all(
        format!(
            "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{JSON}Content-Length: 100\r\n\r\n{{",
            s.port
        )
        .as_bytes(),
    )
    .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    // An idle keep-alive connection is closed after its request.
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.write_all(format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", s.port).as_bytes())
        .unwrap();
    assert!(
        closed_within(&mut c, Duration::from_secs(30)),
        "idle keep-alive connection stayed open"
    );
}

/// Opens `GET /v1/wakes` and returns the stream once its headers are in.
fn open_sse(s: &Server) -> BufReader<TcpStream> {
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(
        format!(
            "GET /v1/wakes HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
            s.port
        )
        .as_bytes(),
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    r
}

#[test]
fn sse_streams_outlive_the_idle_timeout_and_end_with_a_shutdown_event_on_sigterm() {
    let mut s = Server::with_config(&format!("{DEFAULT_CONFIG}{SMALL_LIMITS}"));
    s.create(W);
    s.create_child(C, W);
    let mut sse = open_sse(&s);
    // Let the idle timeout pass without measuring time: an idle connection opened after the
    // stream is cut first.
    let mut idle = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    assert!(closed_within(&mut idle, Duration::from_secs(30)));
    // The stream is still served: a wake arrives on it.
    s.hdm(C);
    let mut text = String::new();
    let mut line = String::new();
    while !text.contains("event: wake") {
        line.clear();
        assert!(
            sse.read_line(&mut line).unwrap() > 0,
            "stream closed early: {text}"
        );
        text.push_str(&line);
    }
    let mut child = s.child.take().unwrap();
    let st = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    // The stream gets a final event, then ends.
    let mut rest = String::new();
    let _ = sse.read_to_string(&mut rest);
    assert!(rest.contains("event: shutdown"), "{rest}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}: {}", s.logs());
}

#[test]
fn shutdown_does_not_wait_past_the_grace_period_for_a_stuck_client() {
    let cfg = format!("{DEFAULT_CONFIG}[http]\nshutdown_grace_secs = 1\n");
    let mut s = Server::with_config(&cfg);
    // A client that sent half a request body and stalls: its request cannot finish.
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.write_all(
        format!(
            "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{JSON}Content-Length: 100\r\n\r\n{{",
            s.port
        )
        .as_bytes(),
    )
    .unwrap();
    let _sse = open_sse(&s);
    let mut child = s.child.take().unwrap();
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.logs().contains("shutdown") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(s.logs().contains("connections"), "{}", s.logs());
}

const MAIN_TOKEN: &str = "main-token-0123456789";
const OPS_TOKEN: &str = "ops-token-0123456789ab";

/// A gateway with a main token and a token for agent `ops` (which may also see `shared`).
fn with_agent_tokens() -> (Server, tempfile::TempDir) {
    let secrets = tempfile::tempdir().unwrap();
    let ops = secrets.path().join("ops.token");
    std::fs::write(&ops, format!("{OPS_TOKEN}\n")).unwrap();
    let cfg = format!(
        "{DEFAULT_CONFIG}[agents.ops]\ntoken_file = \"{}\"\nvisible_agents = [\"shared\"]\n",
        ops.display()
    );
    let s = Server::with_args(&cfg, &["--token", MAIN_TOKEN]);
    for k in [W, O, "agent:shared:main"] {
        s.create(k);
    }
    (s, secrets)
}

fn as_ops(s: &Server, method: &str, path: &str, caller: Option<&str>, body: Option<Value>) -> Resp {
    let mut h = vec![("Authorization", format!("Bearer {OPS_TOKEN}"))];
    if let Some(c) = caller {
        h.push(("X-Aware-Session", seg(c)));
    }
    s.request_with(method, path, &h, body.map(|b| b.to_string()).as_deref())
}

#[test]
fn an_agent_token_acts_only_as_its_agent() {
    let (s, _secrets) = with_agent_tokens();
    // Claiming another agent's session as the caller.
    let r = as_ops(
        &s,
        "POST",
        "/v1/tools/session_status",
        Some(W),
        Some(json!({})),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "forbidden");
    assert!(r.message().contains("ops"), "{}", r.body);
    // Its own session as the caller works; seeing a session of a hidden agent does not.
    let r = as_ops(
        &s,
        "POST",
        "/v1/tools/session_status",
        Some(O),
        Some(json!({})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = as_ops(
        &s,
        "POST",
        "/v1/tools/session_status",
        Some(O),
        Some(json!({"sessionKey": W})),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // Without a caller header the token's agent is the viewer.
    let r = as_ops(&s, "GET", &format!("/v1/sessions/{}", seg(W)), None, None);
    assert_eq!(r.status, 403, "{}", r.body);
    let r = as_ops(&s, "GET", "/v1/sessions/agent%3Ashared%3Amain", None, None);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = as_ops(&s, "GET", "/v1/sessions", None, None);
    assert_eq!(r.status, 200, "{}", r.body);
    let agents: Vec<&str> = r.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["agentId"].as_str().unwrap())
        .collect();
    assert!(
        !agents.is_empty() && agents.iter().all(|a| *a == "ops" || *a == "shared"),
        "{agents:?}"
    );
    // Acting on a visible session of another agent is refused; on its own it works.
    let turn = json!({"role": "user", "text": "hi"});
    let r = as_ops(
        &s,
        "POST",
        "/v1/sessions/agent%3Ashared%3Amain/turns",
        None,
        Some(turn.clone()),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let r = as_ops(
        &s,
        "POST",
        &format!("/v1/sessions/{}/turns", seg(O)),
        None,
        Some(turn),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = as_ops(
        &s,
        "POST",
        "/v1/sessions",
        None,
        Some(json!({"key": "agent:main:x"})),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let r = as_ops(
        &s,
        "POST",
        "/v1/sessions",
        None,
        Some(json!({"key": "agent:ops:x"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    // Operator-only routes.
    for (m, p) in [
        ("GET", "/metrics"),
        ("GET", "/v1/catalog"),
        ("POST", "/v1/admin/prune"),
    ] {
        let r = as_ops(&s, m, p, None, (m == "POST").then(|| json!({})));
        assert_eq!(r.status, 403, "{p}: {}", r.body);
    }
    // The main token stays the operator.
    assert_eq!(s.get(&format!("/v1/sessions/{}", seg(W))).status, 200);
    assert_eq!(s.get("/metrics").status, 200);
    // A wrong token is no one.
    let r = s.request_with(
        "GET",
        "/v1/sessions",
        &[("Authorization", "Bearer ops-token-0123456789ac".into())],
        None,
    );
    assert_eq!(r.status, 401);
}

#[test]
fn a_token_file_keeps_the_token_out_of_the_command_line() {
    let secrets = tempfile::tempdir().unwrap();
    let f = secrets.path().join("t");
    std::fs::write(&f, format!("{MAIN_TOKEN}\n")).unwrap();
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--token-file", f.to_str().unwrap()]);
    assert_eq!(s.get("/v1/sessions").status, 401);
    s.token = Some(MAIN_TOKEN.into());
    assert_eq!(s.get("/v1/sessions").status, 200);
}

/// Runs `aware serve` expecting exit status 2; returns stderr.
fn expect_exit_2(config: &str, args: &[&str], prepare: impl FnOnce(&std::path::Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    prepare(dir.path());
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_TOKEN_FILE")
        .env_remove("AWARE_DATA_DIR")
        .env_remove("AWARE_BIND")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("aware serve {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{args:?}: {err}");
    err
}

#[test]
fn weak_tokens_off_loopback_and_bad_configs_exit_2() {
    for t in ["short", "                    "] {
        let err = expect_exit_2(
            DEFAULT_CONFIG,
            &["--bind", "0.0.0.0:0", "--token", t],
            |_| {},
        );
        assert!(err.contains("at least 16 bytes"), "{err}");
    }
    let err = expect_exit_2(
        &format!("{DEFAULT_CONFIG}[agents.ops.wake_webhook]\nurl = \"ftp://example.com/x\"\n"),
        &["--bind", "127.0.0.1:0"],
        |_| {},
    );
    assert!(err.contains("agents.ops.wake_webhook.url"), "{err}");
    let err = expect_exit_2(
        &format!("{DEFAULT_CONFIG}[agents.ops.wake_webhook]\nurl = \"http://\"\n"),
        &["--bind", "127.0.0.1:0"],
        |_| {},
    );
    assert!(err.contains("agents.ops.wake_webhook.url"), "{err}");
}

#[test]
fn a_database_newer_than_the_binary_exits_2_at_start() {
    let err = expect_exit_2(DEFAULT_CONFIG, &["--bind", "127.0.0.1:0"], |dir| {
        let c = rusqlite::Connection::open(dir.join("state.db")).unwrap();
        c.execute_batch("PRAGMA user_version = 999;").unwrap();
    });
    assert!(err.contains("newer"), "{err}");
}

#[cfg(unix)]
#[test]
fn the_data_dir_and_database_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let data = parent.path().join("fresh");
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .args(["--bind", "127.0.0.1:0", "--test-clock"])
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_DATA_DIR")
        .env_remove("AWARE_BIND")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let files = ["state.db", "state.db-wal", "state.db-shm"];
    while !files.iter().all(|f| data.join(f).exists()) {
        assert!(Instant::now() < deadline, "the store was not created");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for f in files {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn strict_json_and_inputs() {
    let mut s = Server::start();
    s.create(W);
    // Duplicate keys, also nested.
    let r = s.request(
        "POST",
        "/v1/sessions",
        None,
        Some(r#"{"key":"agent:main:a","key":"agent:main:b"}"#),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.message().contains("\"key\""), "{}", r.body);
    let r = s.request(
        "POST",
        &format!("/v1/sessions/{}/turns", seg(W)),
        None,
        Some(r#"{"role":"user","text":"x","provenance":{"kind":"human","kind":"human"}}"#),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.message().contains("kind"), "{}", r.body);
    // Bidi and zero-width controls in keys and labels.
    for bad in [
        "agent:main:a\u{202e}b",
        "agent:main:a\u{200b}",
        "agent:main:\u{2066}x",
        "agent:main:\u{feff}x",
    ] {
        let r = s.post("/v1/sessions", json!({"key": bad}));
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
    }
    let r = s.post(
        "/v1/sessions",
        json!({"key": "agent:main:lab", "label": "a\u{200f}b"}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.message().contains("label"), "{}", r.body);
    // Blank goal text.
    for text in ["", "   \n\t"] {
        let r = s.put(
            &format!("/v1/sessions/{}/goal", seg(W)),
            json!({"text": text}),
        );
        assert_eq!(r.status, 400, "{text:?}: {}", r.body);
    }
    // Self-parent.
    let r = s.post(
        "/v1/sessions",
        json!({"key": "agent:main:selfp", "parentSessionKey": "agent:main:selfp"}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    // Test-clock arithmetic that overflows.
    let r = s.post("/v1/admin/clock", json!({"advanceMs": i64::MAX}));
    assert_eq!(r.status, 400, "{}", r.body);
    s.set_clock(T0 + 1000);
    // HEAD /health: headers, no body.
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(
        format!(
            "HEAD /health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            s.port
        )
        .as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.ends_with("\r\n\r\n"),
        "HEAD answered with a body: {out}"
    );
}

/// The console's page and routes sit behind the same edge as every route: a rebound `Host` and
/// a foreign `Origin` are refused before any of them runs, and an agent token may not use the
/// console's routes (it is an operator's tool).
#[test]
fn the_console_obeys_the_host_origin_and_token_rules() {
    let s = Server::start();
    let host = "Host: 127.0.0.1:{port}\r\n";
    let (st, _, _) = raw(&s, &format!("GET /ui/ HTTP/1.1\r\n{host}"), b"");
    assert_eq!(st, 200, "the page loads on the gateway's own Host");
    let (st, _, body) = raw(
        &s,
        "GET /ui/ HTTP/1.1\r\nHost: rebound.example:{port}\r\n",
        b"",
    );
    assert_eq!(st, 421, "{body}");
    let (st, _, body) = raw(
        &s,
        "GET /v1/console/sessions HTTP/1.1\r\nHost: rebound.example:{port}\r\n",
        b"",
    );
    assert_eq!(st, 421, "{body}");
    let (st, _, body) = raw(
        &s,
        &format!("GET /v1/console/sessions HTTP/1.1\r\n{host}Origin: http://evil.example\r\n"),
        b"",
    );
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("forbidden_origin"), "{body}");

    let (s, _secrets) = with_agent_tokens();
    let r = as_ops(&s, "GET", "/v1/console/sessions", None, None);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "forbidden");
    let r = as_ops(&s, "GET", "/v1/console/overview", Some(O), None);
    assert_eq!(r.status, 403, "{}", r.body);
}
