//! The boundaries of the hook and of `aware init` against what a repository, another process
//! or another host can plant: the waiter slot (a locked pid file, a checked signal, one waiter
//! per session), the waiter's lineage, the home directory, redirects, argument ranges, and the
//! `aware` MCP server entry that init writes whole. Black box against the real binary.

use crate::common::*;
use std::process::{Command, Stdio};

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
