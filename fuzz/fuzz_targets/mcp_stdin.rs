//! `aware mcp`'s stdin: the line framing (`aware_client::mcp_stdin::next_line`) and the JSON-RPC check
//! of each line (`check_message`), on arbitrary bytes. Pure functions (the reader is an
//! in-memory slice, polled without a runtime): every input is independent.
//!
//! Input: the first byte picks the line limit (0–63 bytes, or `MAX_LINE` when ≥ 64), the second
//! the reader's buffer size (1–16 bytes, so lines and the limit straddle buffer refills); the
//! rest is stdin.
//!
//! Invariants:
//! - the framing gives exactly the lines of a reference split at `\n` (a last line without a
//!   newline counts, nothing after a final newline), each line longer than the limit as
//!   `TooLong(its length)` and every other one as its bytes, whatever the buffer size; the
//!   same with the production limit and a default buffer;
//! - `check_message` accepts exactly a JSON-RPC 2.0 message (an object, or a non-empty batch of
//!   them, with `"jsonrpc": "2.0"` and a string `method`, a `result` or an `error`) whose
//!   `tools/call` params are an object with a string `name` and object-or-absent `arguments`;
//!   every refusal is the JSON-RPC error object: `-32700` exactly for what is not JSON,
//!   `-32602` for bad `tools/call` params, `-32600` otherwise, with the message's `id` (or
//!   null) and a message.
#![no_main]

use aware_client::mcp_stdin::{check_message, next_line, Line, MAX_LINE};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::future::Future;
use std::task::{Context, Poll, Waker};

fuzz_target!(|data: &[u8]| {
    let [limit, cap, rest @ ..] = data else {
        return;
    };
    let max = if *limit < 64 {
        usize::from(*limit)
    } else {
        MAX_LINE
    };
    let cap = usize::from(cap % 16) + 1;
    assert_eq!(frame(rest, max, cap), reference(rest, max));
    let lines = frame(rest, MAX_LINE, 8 * 1024);
    assert_eq!(lines, reference(rest, MAX_LINE));
    for line in lines {
        if let Line::Bytes(b) = line {
            if let Ok(text) = String::from_utf8(b) {
                check(&text);
            }
        }
    }
});

/// Every line `next_line` reads from `input` through a buffer of `cap` bytes.
fn frame(input: &[u8], max: usize, cap: usize) -> Vec<Line> {
    let mut reader = tokio::io::BufReader::with_capacity(cap, input);
    let mut out = Vec::new();
    loop {
        let fut = std::pin::pin!(next_line(&mut reader, max));
        match poll_ready(fut).expect("reading a slice never fails") {
            Some(line) => out.push(line),
            None => return out,
        }
    }
}

/// A slice never makes a reader wait: the future is ready at its first poll.
fn poll_ready<T>(mut fut: std::pin::Pin<&mut impl Future<Output = T>>) -> T {
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("next_line waited on an in-memory reader"),
    }
}

fn reference(input: &[u8], max: usize) -> Vec<Line> {
    let mut parts: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    // `split` gives an empty last part after a final newline (or for no input): no line.
    if parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
        .into_iter()
        .map(|p| {
            if p.len() > max {
                Line::TooLong(p.len())
            } else {
                Line::Bytes(p.to_vec())
            }
        })
        .collect()
}

fn is_message(m: &Value) -> bool {
    m.get("jsonrpc") == Some(&Value::from("2.0"))
        && (m.get("method").is_some_and(Value::is_string)
            || m.get("result").is_some()
            || m.get("error").is_some())
}

fn check(line: &str) {
    let parsed = serde_json::from_str::<Value>(line);
    let answer = match check_message(line) {
        Ok(()) => {
            let v = parsed.expect("an accepted line is JSON");
            match &v {
                Value::Object(_) => assert!(is_message(&v), "{line}"),
                Value::Array(items) => {
                    assert!(!items.is_empty() && items.iter().all(is_message), "{line}")
                }
                _ => panic!("accepted a JSON scalar: {line}"),
            }
            if v["method"] == "tools/call" {
                let p = &v["params"];
                assert!(p.is_object() && p["name"].is_string(), "{line}");
                assert!(p["arguments"].is_null() || p["arguments"].is_object());
            }
            return;
        }
        Err(answer) => answer,
    };
    assert_eq!(answer["jsonrpc"], "2.0");
    let code = answer["error"]["code"].as_i64().expect("an error code");
    assert!(answer["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    match parsed {
        Err(_) => {
            assert_eq!(code, -32700, "{line}");
            assert_eq!(answer["id"], Value::Null);
        }
        Ok(v) => {
            assert!(code == -32600 || code == -32602, "{code} for {line}");
            assert_eq!(answer["id"], v.get("id").cloned().unwrap_or(Value::Null));
            if code == -32602 {
                assert!(is_message(&v) && v["method"] == "tools/call", "{line}");
            }
        }
    }
}
