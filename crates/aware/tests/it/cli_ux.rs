//! Decision D13: the CLI a new user meets, each behaviour against the real binary and a real
//! gateway (or a listener that never answers).

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `aware ARGS` with a clean environment: no AWARE_* variables, an empty XDG_CONFIG_HOME.
fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    for v in [
        "AWARE_URL",
        "AWARE_TOKEN",
        "AWARE_SESSION",
        "AWARE_TIMEOUT",
        "AWARE_TOKEN_FILE",
        "AWARE_BIND",
        "AWARE_DATA_DIR",
    ] {
        c.env_remove(v);
    }
    c.env("XDG_CONFIG_HOME", "/nonexistent-aware-test-config");
    c.args(args);
    c
}

fn run(args: &[&str]) -> Output {
    cmd(args).output().expect("run aware")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits for `path` to hold a port number (a `serve --port-file`).
fn wait_port(path: &std::path::Path) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(p) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return p;
        }
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_flags_beat_environment_variables() {
    let flag_dir = tempfile::tempdir().unwrap();
    let env_dir = tempfile::tempdir().unwrap();
    let port_file = flag_dir.path().join("port");
    let child = cmd(&[
        "serve",
        "--data-dir",
        flag_dir.path().to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
        "--token",
        "flag-token-0123456789",
        "--port-file",
        port_file.to_str().unwrap(),
    ])
    .env("AWARE_DATA_DIR", env_dir.path())
    .env("AWARE_BIND", "127.0.0.1:1")
    .env("AWARE_TOKEN", "env-token-0123456789")
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let _k = Kill(child);
    let port = wait_port(&port_file);
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while ureq::get(&format!("{url}/health")).call().is_err() {
        assert!(Instant::now() < deadline, "not healthy");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(flag_dir.path().join("state.db").exists());
    assert!(!env_dir.path().join("state.db").exists());
    let ok = run(&["list", "--url", &url, "--token", "flag-token-0123456789"]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    let refused = run(&["list", "--url", &url, "--token", "env-token-0123456789"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("set --token or AWARE_TOKEN"),
        "{}",
        text(&refused.stderr)
    );
}

#[test]
fn request_timeout_against_a_gateway_that_never_answers() {
    // Accepts connections (the kernel does) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let out = run(&["list", "--url", &url, "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("did not answer in time"),
        "{}",
        text(&out.stderr)
    );
    let out = cmd(&["status", "agent:main:main", "--url", &url])
        .env("AWARE_TIMEOUT", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = run(&["list", "--url", &url, "--timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn closed_pipe_is_not_a_panic() {
    let s = Server::family();
    let mut child = cmd(&["list", "--url", &s.base])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("panicked"));
}

#[test]
fn operator_reads_pending_tables_and_newlines() {
    let s = Server::family();
    s.hdm(C);
    // list without --session: the operator's view, a table with a header.
    let out = run(&["list", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let first = stdout.lines().next().unwrap_or("");
    assert!(
        first.starts_with("AGENT") && first.trim_end().ends_with("KEY"),
        "{stdout}"
    );
    assert!(stdout.contains(C) && stdout.ends_with('\n'), "{stdout}");
    // status without --session.
    let out = run(&["status", C, "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("State version: 2"));
    // status with changes: no raw markdown JSON block.
    let out = run(&[
        "status",
        C,
        "--url",
        &s.base,
        "--session",
        W,
        "--changes-since",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let st = text(&out.stdout);
    assert!(!st.contains("```"), "{st}");
    assert!(st.contains("#2 human_direct_message"), "{st}");
    // pending is read-only: twice the same notice, then drain takes it.
    for _ in 0..2 {
        let out = run(&["pending", W, "--url", &s.base]);
        assert_eq!(out.status.code(), Some(0));
        assert!(
            text(&out.stdout).contains(&nt(C, 1)),
            "{}",
            text(&out.stdout)
        );
    }
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    // An empty list of another kind says so.
    let out = run(&["list", "--url", &s.base, "--kind", "cron"]);
    assert_eq!(text(&out.stdout), "no sessions\n");
}

#[test]
fn catalog_table_says_no_threads_when_empty() {
    let root = tempfile::tempdir().unwrap();
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[claude]\nroot = {:?}\n",
        root.path().to_str().unwrap()
    ));
    let out = run(&["catalog", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no threads\n");
}

#[test]
fn enum_values_are_checked_by_clap_and_name_the_flag() {
    let out = run(&["turn", C, "hi", "--role", "robot"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("--role") && err.contains("assistant"), "{err}");
    let out = run(&["turn", C, "hi", "--provenance", "alien"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--provenance"));
    let out = run(&["serve", "--durability", "fast"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--durability"));
    let out = run(&["serve", "--log-level", "verbose"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--log-level"));
}

#[test]
fn client_flags_are_refused_by_serve_and_demo() {
    for args in [
        vec!["serve", "--session", W],
        vec!["demo", "--url", "http://x"],
        vec!["demo", "--json"],
        vec!["--session", W, "serve"],
    ] {
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn every_flag_and_argument_has_help() {
    let md = text(&run(&["help-markdown"]).stdout);
    for line in md.lines().filter(|l| l.starts_with("| `")) {
        let help = line.rsplit('|').nth(1).unwrap_or("").trim();
        assert!(!help.is_empty(), "no help: {line}");
    }
}

#[test]
fn send_by_label_and_send_that_times_out() {
    let s = Server::family();
    s.create(X);
    let r = s.post(
        "/v1/sessions",
        serde_json::json!({"key": "agent:main:subagent:lab", "label": "nightly"}),
    );
    assert!(r.status == 201, "{}", r.body);
    let out = run(&[
        "send",
        "--label",
        "nightly",
        "hello there",
        "--timeout",
        "0",
        "--url",
        &s.base,
        "--session",
        X,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sessionKey"], "agent:main:subagent:lab");
    // Nobody replies within 1 s: exit 1 with the reason.
    let out = run(&[
        "send",
        C,
        "anyone?",
        "--timeout",
        "1",
        "--url",
        &s.base,
        "--session",
        X,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("\nerror: timeout:"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bind_localhost_port_in_use_and_startup_log() {
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let mut child = cmd(&[
        "serve",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--bind",
        "localhost:0",
        "--port-file",
        port_file.to_str().unwrap(),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _k = Kill(child);
    let port = wait_port(&port_file);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut log = String::new();
    while !log.contains("listening on") {
        log.push_str(&rx.recv_timeout(Duration::from_secs(20)).expect("log line"));
        log.push('\n');
    }
    for words in [
        "data dir",
        "config file",
        "store",
        "Claude root",
        "listening on 127.0.0.1:",
    ] {
        assert!(log.contains(words), "{words:?} missing in {log}");
    }
    assert!(!log.contains("Some("), "{log}");
    // The same port again: said in words, exit 2.
    let dir2 = tempfile::tempdir().unwrap();
    let out = run(&[
        "serve",
        "--data-dir",
        dir2.path().to_str().unwrap(),
        "--bind",
        &format!("127.0.0.1:{port}"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("already in use"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn error_hints_and_url_scheme() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = run(&["list", "--url", &url]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(err.contains("is `aware serve` running?"), "{err}");
    assert!(!err.contains("Network Error: Network Error"), "{err}");
    let out = run(&["list", "--url", "127.0.0.1:7420"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("http://"));
}

#[test]
fn completions_are_printed() {
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out.stdout).contains("drain"), "{shell}");
    }
}

#[test]
fn committed_cli_reference_is_the_generated_one() {
    let out = run(&["help-markdown"]);
    assert_eq!(out.status.code(), Some(0));
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md"))
            .expect("docs/cli.md");
    assert!(
        committed == text(&out.stdout),
        "docs/cli.md is stale: run `cargo run -p aware -- help-markdown > docs/cli.md`"
    );
}

#[test]
fn client_context_file_supplies_url_and_session() {
    let s = Server::family();
    let cfg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cfg.path().join("aware")).unwrap();
    std::fs::write(
        cfg.path().join("aware/client.toml"),
        format!("url = {:?}\nsession = {:?}\n", s.base, W),
    )
    .unwrap();
    let out = cmd(&["status"])
        .env("XDG_CONFIG_HOME", cfg.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with(&format!("Session {W}")));
    // The environment beats the file.
    let out = cmd(&["status"])
        .env("XDG_CONFIG_HOME", cfg.path())
        .env("AWARE_SESSION", C)
        .output()
        .unwrap();
    assert!(text(&out.stdout).starts_with(&format!("Session {C}")));
    // A broken file is a usage error naming it.
    std::fs::write(cfg.path().join("aware/client.toml"), "urll = 1\n").unwrap();
    let out = cmd(&["status"])
        .env("XDG_CONFIG_HOME", cfg.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("client.toml"));
}

#[test]
fn drain_follow_prints_a_header_json_lines_and_reconnects() {
    let port = free_port();
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--bind", &format!("127.0.0.1:{port}")]);
    assert_eq!(s.port, port);
    s.create(W);
    s.create_child(C, W);
    s.hdm(C);
    let mut child = cmd(&["drain", W, "--follow", "--json", "--url", &s.base])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let _k = Kill(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let (etx, erx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = etx.send(l);
        }
    });
    let header = erx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(header.contains("following agent:main:main"), "{header}");
    let wait_for = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).expect("a drain line");
            let v: Value = serde_json::from_str(&line).expect("one JSON object per line");
            assert!(v.is_object());
            if line.contains(needle) {
                return;
            }
        }
    };
    wait_for("changesSince 1");
    s.restart();
    assert_eq!(s.port, port);
    // Past the wake coalescing window of the first notice.
    let later = s.now + 60_000;
    s.set_clock(later);
    s.hdm(C);
    wait_for("changesSince 2");
}

#[test]
fn serve_finds_its_config_under_xdg_config_home() {
    let data = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cfg.path().join("aware")).unwrap();
    let file = cfg.path().join("aware/config.toml");
    std::fs::write(
        &file,
        "[claude]\nenabled = false\n[monitor]\nenabled = false\n",
    )
    .unwrap();
    let port_file = data.path().join("port");
    let mut child = cmd(&[
        "serve",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
        "--port-file",
        port_file.to_str().unwrap(),
    ])
    .env("XDG_CONFIG_HOME", cfg.path())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _k = Kill(child);
    wait_port(&port_file);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut log = String::new();
    while !log.contains("listening on") {
        log.push_str(&rx.recv_timeout(Duration::from_secs(20)).expect("log line"));
        log.push('\n');
    }
    assert!(
        log.contains(&format!("config file {}", file.display())),
        "{log}"
    );
    assert!(log.contains("Claude root disabled"), "{log}");
}

#[test]
fn a_bare_key_is_refused_by_create_and_a_missing_key_gets_did_you_mean() {
    let s = Server::start();
    // `aware create "not a key"` made a session in the default agent; now the grammar is said.
    let out = run(&["create", "not a key", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("agent:<agentId>:<rest>") && err.contains("--agent-id"),
        "{err}"
    );
    assert_eq!(
        s.get("/v1/sessions").body["sessions"],
        serde_json::json!([])
    );
    // A bare key with its agent said is what was meant.
    let out = run(&["create", "reviewer", "--agent-id", "main", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    s.create("agent:main:reviewer");
    // A typo of a key that exists: the nearest keys, not "create it".
    let out = run(&["status", "agent:main:reviwer", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("did you mean `agent:main:reviewer`"), "{err}");
    assert!(!err.contains("create it"), "{err}");
}

#[test]
fn delete_needs_yes_then_removes_the_session() {
    let s = Server::start();
    s.create("agent:main:old");
    let out = run(&["delete", "agent:main:old", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--yes"));
    assert_eq!(
        s.get(&format!("/v1/sessions/{}", seg("agent:main:old")))
            .status,
        200
    );
    let out = run(&["delete", "agent:main:old", "--yes", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "deleted agent:main:old");
    assert_eq!(
        s.get(&format!("/v1/sessions/{}", seg("agent:main:old")))
            .status,
        404
    );
    // A key that is not there: the gateway's 404, exit 1.
    let out = run(&["delete", "agent:main:old", "--yes", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn console_prints_its_url_and_says_when_the_gateway_is_not_up() {
    let s = Server::start();
    let out = cmd(&["console", "--no-open", "--url", &s.base])
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), format!("{}/ui/", s.base));
    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = run(&["console", "--no-open", "--url", &dead]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("aware serve"),
        "{}",
        text(&out.stderr)
    );
}
