//! The client against a canned one-connection server on loopback: what it sends (headers,
//! encoded path) and how each failure is typed and mapped to an exit status.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_client::{seg, Client, ClientError};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

/// Serves one request with `answer` (a whole HTTP response) and hands back the request head.
fn one_shot(answer: &'static str) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut head = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        head.push_str(&String::from_utf8_lossy(&body));
        let _ = tx.send(head);
        let mut stream = stream;
        let _ = stream.write_all(answer.as_bytes());
    });
    (url, rx)
}

#[test]
fn sends_token_and_caller_headers_and_one_encoding_of_the_key() {
    let (url, rx) = one_shot(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}",
    );
    let c = Client::new(&format!("{url}/"))
        .unwrap()
        .with_token(Some("s3cret".into()))
        .with_caller(Some("team/a b".into()), Some("main".into()));
    let v = c
        .post(
            &format!("/v1/sessions/{}/drain", seg("team/a b")),
            &json!({}),
        )
        .unwrap();
    assert_eq!(v, json!({"ok": true}));
    let head = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        head.starts_with("POST /v1/sessions/team%2Fa%20b/drain HTTP/1.1"),
        "{head}"
    );
    assert!(head.contains("Authorization: Bearer s3cret"), "{head}");
    assert!(head.contains("X-Aware-Session: team%2Fa%20b"), "{head}");
    assert!(head.contains("X-Aware-Agent: main"), "{head}");
    assert!(head.ends_with("{}"), "{head}");
}

#[test]
fn an_operator_request_sends_no_caller() {
    let (url, rx) = one_shot("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    let c = Client::new(&url)
        .unwrap()
        .with_caller(Some("agent:main:main".into()), None);
    c.request("GET", "/v1/sessions")
        .operator()
        .json(None)
        .unwrap();
    let head = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        !head.to_ascii_lowercase().contains("x-aware-session"),
        "{head}"
    );
}

#[test]
fn an_error_answer_is_its_code_and_message_with_exit_status_1() {
    let (url, _rx) = one_shot(
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 68\r\n\r\n\
         {\"error\":{\"code\":\"session_not_found\",\"message\":\"no such session\"}}",
    );
    let e = Client::new(&url)
        .unwrap()
        .get("/v1/sessions/x")
        .unwrap_err();
    assert!(
        matches!(e, ClientError::Status { status: 404, .. }),
        "{e:?}"
    );
    assert_eq!(e.code(), "session_not_found");
    assert_eq!(e.to_string(), "session_not_found: no such session");
    assert_eq!(e.exit_status(), 1);
}

#[test]
fn an_error_answer_without_a_body_names_its_status() {
    let (url, _rx) = one_shot("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
    let e = Client::new(&url).unwrap().get("/health").unwrap_err();
    assert_eq!(e.to_string(), "internal: HTTP status 502");
    assert_eq!(e.exit_status(), 1);
}

#[test]
fn send_any_returns_error_statuses_as_answers() {
    let (url, _rx) = one_shot("HTTP/1.1 409 Conflict\r\nContent-Length: 4\r\n\r\nnope");
    let r = Client::new(&url)
        .unwrap()
        .request("POST", "/x")
        .send_any(Some("{}"))
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.text().unwrap(), "nope");
}

#[test]
fn a_refused_connection_is_unreachable_with_exit_status_3() {
    // A port that was just free: nothing listens there any more.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = Client::new(&format!("http://127.0.0.1:{port}"))
        .unwrap()
        .get("/health")
        .unwrap_err();
    assert!(matches!(e, ClientError::Unreachable { .. }), "{e:?}");
    assert_eq!(e.exit_status(), 3);
    assert!(
        e.to_string()
            .starts_with("cannot reach the gateway at http://127.0.0.1:"),
        "{e}"
    );
}

#[test]
fn a_silent_gateway_is_a_timeout_with_exit_status_3() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Accepts and never answers.
    let keep = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let e = Client::new(&url)
        .unwrap()
        .with_timeout(Duration::from_millis(200))
        .get("/health")
        .unwrap_err();
    assert!(matches!(e, ClientError::Timeout { .. }), "{e:?}");
    assert_eq!(e.exit_status(), 3);
    drop(keep);
}

#[test]
fn a_url_without_scheme_is_a_usage_error() {
    let e = Client::new("127.0.0.1:7420").unwrap_err();
    assert!(matches!(e, ClientError::BadUrl { .. }));
    assert_eq!(e.exit_status(), 2);
    assert!(Client::new("HTTPS://example.com").is_ok());
}

#[test]
fn seg_escapes_what_restructures_a_path_or_query_and_keeps_keys_readable() {
    assert_eq!(seg("agent:main:main"), "agent:main:main");
    assert_eq!(seg("a/b?c#d%e f"), "a%2Fb%3Fc%23d%25e%20f");
    assert_eq!(seg("k=v&x+y"), "k%3Dv%26x%2By");
    assert_eq!(seg("é"), "%C3%A9");
    assert_eq!(seg("a.b_c-d~e"), "a.b_c-d~e");
}

#[test]
fn a_stream_is_read_line_by_line_and_its_error_answer_is_typed() {
    let (url, rx) = one_shot(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: wake\ndata: {}\n\n",
    );
    let c = Client::new(&url)
        .unwrap()
        .with_caller(Some("agent:main:main".into()), None);
    let resp = c
        .request("GET", &format!("/v1/wakes?session={}", seg("a/b")))
        .stream(Duration::from_secs(5))
        .unwrap();
    let lines: Vec<String> = BufReader::new(resp.into_reader())
        .lines()
        .map_while(Result::ok)
        .collect();
    assert_eq!(lines[0], "event: wake");
    let head = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        head.starts_with("GET /v1/wakes?session=a%2Fb HTTP/1.1"),
        "{head}"
    );

    let (url, _rx) = one_shot(
        "HTTP/1.1 401 Unauthorized\r\nContent-Length: 54\r\n\r\n\
         {\"error\":{\"code\":\"unauthorized\",\"message\":\"no token\"}}",
    );
    let e = Client::new(&url)
        .unwrap()
        .request("GET", "/v1/wakes")
        .stream(Duration::from_secs(5))
        .err()
        .unwrap();
    assert_eq!(e.code(), "unauthorized");
    assert_eq!(e.exit_status(), 1);
}
