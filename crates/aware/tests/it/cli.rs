//! The CLI against a real gateway (S113 and the exit statuses of 03 §10).

use crate::common::*;
use std::process::{Command, Output};

fn aware(server_url: &str, args: &[&str]) -> Output {
    Command::new(bin())
        .env("AWARE_URL", server_url)
        .env_remove("AWARE_SESSION")
        .env_remove("AWARE_TOKEN")
        .args(args)
        .output()
        .expect("run aware")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn s113_cli() {
    let s = Server::family();
    s.create(X);
    let out = aware(
        &s.base,
        &[
            "--session",
            X,
            "send",
            C,
            "hi",
            "--watch",
            "--timeout",
            "0",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["watched"].clone(), v["status"].clone()),
        (true.into(), "accepted".into())
    );
    assert_eq!(s.triple(X, C), (1, 1, 1));

    let out = aware(&s.base, &["--session", X, "status", "agent:main:nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("error: session_not_found:")),
        "{err}"
    );

    let out = aware(&s.base, &["--session", X, "status", C, "--bogus-flag"]);
    assert_eq!(out.status.code(), Some(2));

    // Human output: the drain prompt, then nothing pending.
    s.hdm(C);
    let out = aware(&s.base, &["drain", W]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("System: [2026-01-01T00:00:00.000Z] {}", nt(C, 1))
    );
    let out = aware(&s.base, &["drain", W, "--peek"]);
    assert_eq!(text(&out.stdout).trim(), "(nothing pending)");

    let out = aware(
        &s.base,
        &["--session", W, "status", C, "--changes-since", "1"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("State version: 2"),
        "{}",
        text(&out.stdout)
    );

    let out = aware(
        &s.base,
        &["turn", C, "from the cli", "--channel", "cli", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["event"]["summary"], "human message via cli");
}

#[test]
fn s113_unreachable_gateway_exits_3() {
    let mut s = Server::family();
    let url = s.base.clone();
    s.stop();
    for args in [
        vec!["--session", W, "status"],
        vec!["drain", W],
        vec!["list", "--session", W],
    ] {
        let out = aware(&url, &args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn s113_demo_prints_the_notice() {
    let out = Command::new(bin()).arg("demo").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("changed (other actor). Reconcile before acting"));
}

#[test]
fn restart_keeps_sequences_and_acknowledged_state() {
    let mut s = Server::family();
    s.hdm(C);
    s.drain(W);
    s.hdm(C);
    s.restart();
    assert_eq!(s.notice_texts(W), vec![nt(C, 2)]);
    assert_eq!(s.hdm_seq(C), 4);
    s.kill9_restart();
    assert_eq!(s.seqs(C, 0), vec![1, 2, 3, 4]);
    assert_eq!(s.drain(W)["notices"].as_array().unwrap().len(), 1);
    assert!(s.drain(W)["notices"].as_array().unwrap().is_empty());
}
