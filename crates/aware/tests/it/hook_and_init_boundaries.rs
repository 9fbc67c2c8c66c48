//! The boundaries of the hook and of `aware init` against what a repository, another process
//! or another host can plant: the waiter slot (a locked pid file, a checked signal, one waiter
//! per session), the waiter's lineage, the home directory, redirects, argument ranges, and the
//! `aware` MCP server entry that init writes whole. Black box against the real binary.

use crate::common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `aware ARGS…` with the client's variables cleared and `XDG_*` pointed at nothing.
fn aware(args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    for v in [
        "AWARE_URL",
        "AWARE_TOKEN",
        "AWARE_TOKEN_FILE",
        "AWARE_SESSION",
        "CLAUDE_PID",
    ] {
        c.env_remove(v);
    }
    c.env("XDG_CONFIG_HOME", "/nonexistent-aware-test-config");
    c.args(args);
    c
}

// ---- argument ranges ----------------------------------------------------------------------

/// Values that overflowed the clock are refused with the accepted range (exit 1 for the hook,
/// 2 for init), never a panic.
#[test]
fn wait_and_timeout_arguments_are_bounded() {
    let max = u64::MAX.to_string();
    for args in [
        vec!["hook", "--wait", "--wait-secs", max.as_str()],
        vec!["hook", "--timeout-ms", max.as_str()],
        vec!["hook", "--wait", "--wait-secs", "0"],
    ] {
        let out = aware(&args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("is not in 1..="),
            "{}",
            text(&out.stderr)
        );
    }
    let project = tempfile::tempdir().unwrap();
    let p = project.path().to_str().unwrap();
    let out = aware(&["init", "claude-code", "--project", p, "--wake-secs", &max])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("1..=604800"),
        "{}",
        text(&out.stderr)
    );
}

const SID: &str = "ddc20e11-5c86-4bc2-b2b5-4e1b7a069b09";

/// Exit code, stdout and stderr of `child`, failing the test if it runs past `limit`.
fn finish(mut child: Child, limit: Duration) -> (Option<i32>, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), out, err)
}

// ---- redirects ----------------------------------------------------------------------------

/// A listener that records each request's head and answers 200 `{}`.
fn recorder() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h2 = heads.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let head = read_head(&mut stream);
            h2.lock().unwrap().push(head);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            );
        }
    });
    (format!("http://127.0.0.1:{port}"), heads)
}

fn read_head(stream: &mut std::net::TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A listener that answers every request with 302 to `to` + the request's path.
fn redirector(to: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let head = read_head(&mut stream);
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 302 Found\r\nLocation: {to}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// The client commands and the hook follow no redirect: a 3xx is an error naming it, and the
/// host it points to gets no request.
#[test]
fn the_client_follows_no_redirect() {
    let (elsewhere, heads) = recorder();
    let url = redirector(elsewhere);
    let out = aware(&["list", "--url", &url]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("redirect"),
        "{}",
        text(&out.stderr)
    );
    let prompt = json!({"session_id": SID, "hook_event_name": "UserPromptSubmit",
                        "prompt": "a private prompt"});
    let mut hook = aware(&["hook", "--url", &url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    hook.stdin
        .take()
        .unwrap()
        .write_all(prompt.to_string().as_bytes())
        .unwrap();
    let (code, _, err) = finish(hook, Duration::from_secs(30));
    assert_eq!(code, Some(0));
    assert!(err.contains("redirect"), "{err}");
    assert!(heads.lock().unwrap().is_empty(), "a redirect was followed");
}

// ---- the home directory -------------------------------------------------------------------

/// With `HOME` unset the client reads no `.config/aware/client.toml` of the current directory
/// (a repository): its token file is not sent.
#[test]
fn without_home_no_client_file_of_the_current_directory_is_read() {
    let (url, heads) = recorder();
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join(".config/aware")).unwrap();
    std::fs::write(repo.path().join("planted-token"), "planted-by-the-repo\n").unwrap();
    std::fs::write(
        repo.path().join(".config/aware/client.toml"),
        "token_file = \"planted-token\"\nsession = \"agent:main:planted\"\n",
    )
    .unwrap();
    let prompt = json!({"session_id": SID, "hook_event_name": "UserPromptSubmit",
                        "prompt": "a private prompt"});
    let mut c = aware(&["hook", "--url", &url, "--timeout-ms", "5000"]);
    c.env_remove("HOME")
        .env_remove("XDG_CONFIG_HOME")
        .current_dir(repo.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(prompt.to_string().as_bytes())
        .unwrap();
    let (code, _, err) = finish(child, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{err}");
    let heads = heads.lock().unwrap().join("\n---\n");
    assert!(
        !heads.contains("planted"),
        "the repository's client.toml was read: {heads}"
    );

    // A relative HOME is refused, not resolved against the current directory.
    let out = aware(&["list", "--url", &url])
        .env("HOME", ".")
        .env_remove("XDG_CONFIG_HOME")
        .current_dir(repo.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("HOME is a relative path"),
        "{}",
        text(&out.stderr)
    );
}
