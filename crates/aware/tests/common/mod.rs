//! The black-box harness (real `aware serve` gateways on loopback) and the scenarios' names,
//! from `aware-testkit` (one copy for every crate).
#![allow(dead_code, unused_imports)]

pub use aware_testkit::rusqlite;
pub use aware_testkit::server::*;
pub use aware_testkit::wakes::*;

/// The `aware` binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_aware")
}

/// `POST path` with a JSON body on a connection of its own; `sent` runs once the request is
/// written, before the answer is read. Returns the status and the JSON answer.
pub fn post_raw(
    port: u16,
    path: &str,
    body: &serde_json::Value,
    sent: impl FnOnce(),
) -> (u16, serde_json::Value) {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let body = body.to_string();
    use std::io::{Read, Write};
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    sent();
    let mut answer = String::new();
    c.read_to_string(&mut answer).expect("read the answer");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer}"));
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or_else(|| panic!("no JSON body: {answer}"));
    (status, json)
}
