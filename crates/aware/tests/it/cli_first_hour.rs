//! Decision D14: a new user's first hour, round two. Each behaviour through the real binary against
//! a real gateway: send says it waits and the reply ends the wait, a command creates a session,
//! history shows who acted, client.toml's session does not break the reads, colour only when
//! asked for, compact keys, adoption that did not link, `/` leads to the console.

use crate::common::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `aware ARGS` with a clean environment: no AWARE_* variables, no client.toml, no colour
/// variables.
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
        "NO_COLOR",
        "CLICOLOR_FORCE",
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

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `key` holds a message another session sent (the send was stored).
fn wait_for_sent_message(s: &Server, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = s.get(&format!("/v1/sessions/{}/turns", seg(key)));
        let sent = r.body["turns"].as_array().is_some_and(|ts| {
            ts.iter()
                .any(|t| t["provenance"]["kind"] == "inter_session")
        });
        if sent {
            return;
        }
        assert!(Instant::now() < deadline, "the message never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn send_says_it_waits_and_reply_from_another_terminal_ends_the_wait() {
    let s = Server::family();
    // Terminal one: send and wait (the default 30 s).
    let mut sender = cmd(&["send", C, "use staging?", "--url", &s.base, "--session", W])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(sender.stderr.take().unwrap());
    let mut stdout = sender.stdout.take().unwrap();
    let _k = Kill(sender);
    let mut said = String::new();
    stderr.read_line(&mut said).unwrap();
    assert!(
        said.contains("waiting up to 30 s for its reply") && said.contains("aware reply"),
        "{said}"
    );
    // Terminal two: the receiver answers the newest message sent to it.
    wait_for_sent_message(&s, C);
    let out = run(&["reply", C, "yes, staging", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("replied to run "),
        "{}",
        text(&out.stdout)
    );
    // Terminal one prints the reply and exits 0.
    let mut printed = String::new();
    stdout.read_to_string(&mut printed).unwrap();
    assert_eq!(printed, "yes, staging\n");
}

#[test]
fn send_no_wait_prints_the_run_and_reply_by_run_id_shows_in_history() {
    let s = Server::family();
    let out = run(&[
        "send",
        C,
        "status?",
        "--no-wait",
        "--url",
        &s.base,
        "--session",
        W,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Not waiting: nothing said about a wait.
    assert!(
        !text(&out.stderr).contains("waiting"),
        "{}",
        text(&out.stderr)
    );
    let said = text(&out.stdout);
    assert!(said.starts_with("accepted (run "), "{said}");
    assert!(said.contains(&format!("aware reply {C} TEXT")), "{said}");
    let run_id = said
        .split("(run ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap()
        .to_string();
    // --no-wait and --timeout together are a usage error.
    let both = run(&[
        "send",
        C,
        "x",
        "--no-wait",
        "--timeout",
        "5",
        "--url",
        &s.base,
        "--session",
        W,
    ]);
    assert_eq!(both.status.code(), Some(2));
    // `turn --run-id` is the long form of a reply.
    let out = run(&[
        "turn",
        C,
        "all green",
        "--role",
        "assistant",
        "--run-id",
        &run_id,
        "--url",
        &s.base,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The operator's history: the sender, the run and the answer, each with its time.
    let out = run(&["history", C, "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let h = text(&out.stdout);
    assert!(
        h.contains(&format!("user by agent {W} (run {run_id}): status?")),
        "{h}"
    );
    assert!(
        h.contains(&format!("assistant by agent {C} (run {run_id}): all green")),
        "{h}"
    );
    assert!(
        h.lines().all(|l| l.contains('T') && l.contains("Z ")),
        "{h}"
    );
}

#[test]
fn reply_with_nothing_to_answer_says_so() {
    let s = Server::family();
    let out = run(&["reply", C, "hello?", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("nothing to reply to") && err.contains("--run-id"),
        "{err}"
    );
}

#[test]
fn send_that_times_out_names_the_run_and_the_reply_command() {
    let s = Server::family();
    let out = run(&[
        "send",
        C,
        "anyone?",
        "--timeout",
        "1",
        "--url",
        &s.base,
        "--session",
        W,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("waiting up to 1 s"), "{err}");
    assert!(err.contains("error: timeout:"), "{err}");
    assert!(err.contains(&format!("aware reply {C} TEXT")), "{err}");
}

#[test]
fn create_makes_a_session_and_the_not_found_hint_names_it() {
    let s = Server::family();
    let reviewer = "agent:main:reviewer";
    let out = run(&["watch", C, "--session", reviewer, "--url", &s.base]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("session_not_found"), "{err}");
    assert!(err.contains("aware create KEY"), "{err}");
    let out = run(&[
        "create", reviewer, "--parent", W, "--label", "rev", "--url", &s.base,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("created {reviewer} (agent main, kind other); {W} watches it\n")
    );
    // Again: nothing changes, and it says so.
    let out = run(&["create", reviewer, "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("already exists, unchanged:"));
    assert_eq!(
        s.get(&format!("/v1/sessions/{reviewer}")).body["label"],
        "rev"
    );
    // The parent watches it from the start; the watch from the new session now works.
    assert!(s.cursor(W, reviewer).is_some());
    let out = run(&["watch", C, "--session", reviewer, "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // A bad kind is the gateway's 400, exit 1, naming what is accepted.
    let out = run(&[
        "create",
        "agent:main:x1",
        "--kind",
        "robot",
        "--url",
        &s.base,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("group, cron, other"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn history_as_operator_and_as_caller_shows_actor_channel_and_time() {
    let s = Server::family();
    let out = run(&[
        "turn",
        C,
        "use staging",
        "--channel",
        "slack",
        "--human-id",
        "alice",
        "--url",
        &s.base,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // No --session: the operator's read, exit 0.
    let out = run(&["history", C, "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let h = text(&out.stdout);
    assert!(
        h.contains("user by human alice via slack: use staging"),
        "{h}"
    );
    // The time of the turn, in UTC to the second.
    let at = s.get(&format!("/v1/sessions/{}/turns", seg(C))).body["turns"][0]["at"]
        .as_i64()
        .unwrap();
    let stamp = aware_core::time::rfc3339_millis(at);
    assert!(h.contains(&format!("{}Z", &stamp[..19])), "{h} vs {stamp}");
    // As a caller (sessions_history): the same line, the channel included.
    let out = run(&["history", C, "--url", &s.base, "--session", W]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("user by human alice via slack: use staging"),
        "{}",
        text(&out.stdout)
    );
    // A status change line says what a missing channel means, with the time.
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(C)),
        json!({"role": "user", "text": "no channel"}),
    );
    assert_eq!(r.status, 201);
    let out = run(&[
        "status",
        C,
        "--session",
        W,
        "--changes-since",
        "1",
        "--url",
        &s.base,
    ]);
    let st = text(&out.stdout);
    assert!(st.contains("human message (no channel given)"), "{st}");
    assert!(!st.contains("via unknown"), "{st}");
    assert!(st.contains("by human at 20"), "{st}");
}

#[test]
fn client_toml_session_does_not_turn_reads_into_a_missing_caller() {
    let s = Server::family();
    let cfg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cfg.path().join("aware")).unwrap();
    let nobody = "agent:main:nobody";
    std::fs::write(
        cfg.path().join("aware/client.toml"),
        format!("url = {:?}\nsession = {nobody:?}\n", s.base),
    )
    .unwrap();
    let with_file = |args: &[&str]| {
        cmd(args)
            .env("XDG_CONFIG_HOME", cfg.path())
            .output()
            .unwrap()
    };
    for args in [vec!["list"], vec!["status", C], vec!["history", C]] {
        let out = with_file(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // A command that acts still acts as the file's session, and says it does not exist.
    let out = with_file(&["spawn", "a task"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("aware create KEY"),
        "{}",
        text(&out.stderr)
    );
    // doctor: the token is fine; the missing session is a warning with the right fix.
    let project = tempfile::tempdir().unwrap();
    let out = cmd(&["doctor", "--project", project.path().to_str().unwrap()])
        .env("XDG_CONFIG_HOME", cfg.path())
        .output()
        .unwrap();
    let d = text(&out.stdout);
    assert!(d.contains("ok    no token needed"), "{d}");
    assert!(
        d.contains(&format!("warn  session {nobody} does not exist yet")),
        "{d}"
    );
    assert!(d.contains(&format!("`aware create {nobody}`")), "{d}");
    assert!(d.contains("remove `session` from client.toml"), "{d}");
    assert!(!d.contains("see the `aware serve` log"), "{d}");
}

#[test]
fn colour_only_when_forced_or_at_a_terminal_and_never_with_no_color() {
    let s = Server::family();
    let project = tempfile::tempdir().unwrap();
    let p = project.path().to_str().unwrap();
    // A pipe: plain.
    let out = run(&["doctor", "--project", p, "--url", &s.base]);
    assert!(!text(&out.stdout).contains('\x1b'), "{}", text(&out.stdout));
    // Forced (as a pager would ask): coloured words, the columns unchanged.
    let out = cmd(&["doctor", "--project", p, "--url", &s.base])
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    let d = text(&out.stdout);
    assert!(
        d.contains("\x1b[1;32mok\x1b[0m    gateway answers"),
        "{d:?}"
    );
    assert!(d.contains("\x1b[1;33mwarn\x1b[0m  "), "{d:?}");
    // NO_COLOR wins over everything.
    let out = cmd(&["doctor", "--project", p, "--url", &s.base])
        .env("CLICOLOR_FORCE", "1")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!text(&out.stdout).contains('\x1b'));
    // Errors too.
    let out = cmd(&["status", "agent:main:ghost", "--url", &s.base])
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("\x1b[1;31merror:\x1b[0m "),
        "{:?}",
        text(&out.stderr)
    );
}

#[test]
fn list_prints_every_key_whole_as_the_last_column() {
    let s = Server::family();
    let long = "agent:main:reviewer-of-the-database-migration-for-the-staging-cluster";
    s.create(long);
    let out = run(&["list", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let l = text(&out.stdout);
    assert!(!l.contains('…'), "{l}");
    let row = l
        .lines()
        .find(|r| r.contains(long))
        .unwrap_or_else(|| panic!("{l}"));
    assert!(row.trim_end().ends_with(long), "{row}");
    assert!(
        l.lines()
            .next()
            .is_some_and(|h| h.trim_end().ends_with("KEY")),
        "{l}"
    );
    // --wide, from before, still parses and changes nothing.
    let wide = run(&["list", "--wide", "--url", &s.base]);
    assert_eq!(text(&wide.stdout), l);
}

#[test]
fn adopt_names_the_root_it_searched_and_fails_when_nothing_is_linked() {
    let root = tempfile::tempdir().unwrap();
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[claude]\nroot = {:?}\n",
        root.path().to_str().unwrap()
    ));
    let out = run(&["adopt", "no-such-thread", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("transcript unavailable"), "{err}");
    assert!(err.contains(root.path().to_str().unwrap()), "{err}");
    assert!(err.contains("aware catalog"), "{err}");
    // A session under the adopted key exists (the hook made it) but no transcript: one clear
    // error, exit 1, nothing on stdout, and the session is left as it was (not `adopted`).
    let key = aware_engine::adopted_key(
        &aware_core::AgentId::parse("main").unwrap(),
        "gateway:local",
        "t-hook",
    )
    .unwrap();
    s.create(key.as_str());
    let before = s.get(&format!("/v1/sessions/{}", seg(key.as_str()))).body;
    let out = run(&["adopt", "t-hook", "--url", &s.base]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "");
    let err = text(&out.stderr);
    assert!(
        err.contains("transcript unavailable") && err.contains("t-hook"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let after = s.get(&format!("/v1/sessions/{}", seg(key.as_str()))).body;
    assert_eq!(after["kind"], before["kind"], "{after}");
    assert!(after.get("upstream").is_none(), "{after}");
}

#[test]
fn the_root_leads_to_the_console() {
    let s = Server::family();
    let addr = s.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 308"), "{head}");
    assert!(head.contains("location: /ui/"), "{head}");
}

#[test]
fn serve_prints_the_console_url_and_a_failed_start_leaves_no_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let mut child = cmd(&[
        "serve",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
        "--port-file",
        port_file.to_str().unwrap(),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _k = Kill(child);
    let mut log = String::new();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        log.push_str(&line);
        log.push('\n');
        if line.contains("listening on") {
            break;
        }
    }
    // The port file is written just after the log line: wait for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "no port file");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        log.contains(&format!("web console at http://127.0.0.1:{port}/ui/")),
        "{log}"
    );
    // The same port again: exit 2, and the new data folder was not made.
    let taken = dir.path().join("never");
    let out = run(&[
        "serve",
        "--data-dir",
        taken.to_str().unwrap(),
        "--bind",
        &format!("127.0.0.1:{port}"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("already in use"));
    assert!(
        !taken.exists(),
        "a failed start created {}",
        taken.display()
    );
}

#[test]
fn drain_follow_says_when_wakes_come() {
    let s = Server::family();
    let mut child = cmd(&["drain", W, "--follow", "--url", &s.base])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let _k = Kill(child);
    let mut said = String::new();
    for _ in 0..2 {
        stderr.read_line(&mut said).unwrap();
    }
    assert!(said.contains("at most once per 20 s"), "{said}");
    assert!(said.contains("within 60 s"), "{said}");
}

/// The README's test command on a machine that lacks the PostgreSQL server binaries and cannot
/// install them stops with exit status 2 and the fix; with them it goes on.
#[test]
fn scripts_test_sets_up_or_names_the_fix() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/test");
    let fake = tempfile::tempdir().unwrap();
    let cargo = fake.path().join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // No apt-get on PATH, no initdb where the glob points.
    let out = Command::new("/bin/bash")
        .args([script, "--setup-only"])
        .env_clear()
        .env("PATH", fake.path())
        .env("AWARE_PG_GLOB", fake.path().join("nothing/*/initdb"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("postgresql is missing"), "{err}");
    assert!(err.contains("fix: install postgresql"), "{err}");
    // The binaries present (and tmux and npm, here stand-ins that do nothing): the set-up passes
    // and says where they are.
    let initdb = fake.path().join("initdb");
    std::fs::write(&initdb, "").unwrap();
    for tool in ["tmux", "npm"] {
        std::fs::copy(&cargo, fake.path().join(tool)).unwrap();
    }
    std::os::unix::fs::symlink("/usr/bin/head", fake.path().join("head")).unwrap();
    let out = Command::new("/bin/bash")
        .args([script, "--setup-only"])
        .env_clear()
        .env("PATH", fake.path())
        .env("AWARE_PG_GLOB", &initdb)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("PostgreSQL server binaries:"));
    let out = Command::new("/bin/bash")
        .args([script, "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("accepted: --all, --setup-only"));
}

/// Waits for `child` to exit within `limit` (a gateway that retries for ever fails the test).
fn wait_exit(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < deadline, "the process did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn postgres_missing_database_exits_2_with_the_fix() {
    let cluster = aware_store_pg::testing::PgCluster::shared();
    let url = cluster.url("aware_no_such_database");
    let data = tempfile::tempdir().unwrap();
    let mut child = cmd(&[
        "serve",
        "--store",
        &url,
        "--data-dir",
        data.path().to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let code = wait_exit(&mut child, Duration::from_secs(60));
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("does not exist") && log.contains("createdb"),
        "{log}"
    );
}

#[test]
fn postgres_wrong_port_keeps_the_cause() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = tempfile::tempdir().unwrap();
    let mut child = cmd(&[
        "serve",
        "--store",
        &format!("postgres://postgres@127.0.0.1:{port}/aware"),
        "--data-dir",
        data.path().to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _k = Kill(child);
    let line = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("store_open_failed") || l.contains("cannot open the store"))
        .unwrap_or_default();
    assert!(line.to_ascii_lowercase().contains("refused"), "{line}");
}

#[test]
fn postgres_restart_logs_no_server_notices() {
    let url = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("test database");
    let mut s = Server::with_args(DEFAULT_CONFIG, &["--store", &url]);
    s.restart();
    let logs = s.all_logs();
    assert!(!logs.contains("already exists, skipping"), "{logs}");
}
