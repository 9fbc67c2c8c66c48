//! The gateway's edge (issue 9, part A), black box against a real `aware serve` on loopback:
//! cross-site requests, DNS rebinding, connection limits and timeouts, shutdown with SSE clients,
//! tokens, file modes, strict JSON, and start-up refusals.

mod common;
use common::*;
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
