//! Decision D16: the fenced blocks marked ```` ```sh runnable ```` in README.md and docs/ run, in
//! order, one bash per file, against a real gateway with the built `aware` first on PATH. A doc
//! whose commands stop working fails here.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The runnable blocks of one Markdown file, in order.
fn runnable_blocks(md: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in md.lines() {
        match &mut current {
            None => {
                let info = line.trim_start().strip_prefix("```");
                if info.is_some_and(|i| {
                    let words: Vec<&str> = i.split_whitespace().collect();
                    words.first() == Some(&"sh") && words.contains(&"runnable")
                }) {
                    current = Some(String::new());
                }
            }
            Some(b) => {
                if line.trim_start().starts_with("```") {
                    blocks.push(std::mem::take(b));
                    current = None;
                } else {
                    b.push_str(line);
                    b.push('\n');
                }
            }
        }
    }
    blocks
}

fn run_file(rel: &str) -> String {
    let md = std::fs::read_to_string(root().join(rel)).unwrap();
    let blocks = runnable_blocks(&md);
    assert!(!blocks.is_empty(), "{rel} has no runnable block");
    let s = Server::start();
    let home = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(bin()).parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!("set -euo pipefail\n{}", blocks.join("\n"));
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(home.path())
        .env("PATH", path)
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("AWARE_URL", &s.base)
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_SESSION")
        .env_remove("AWARE_TIMEOUT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{rel}: the runnable blocks failed\n--- script\n{script}\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn readme_runnable_blocks_run() {
    let out = run_file("README.md");
    assert!(out.starts_with("aware "), "{out}");
}

#[test]
fn getting_started_runnable_blocks_run_and_show_the_notice() {
    let out = run_file("docs/getting-started.md");
    assert!(out.contains("all checks passed"), "{out}");
    assert!(
        out.contains("changed (other actor). Reconcile before acting"),
        "{out}"
    );
    assert!(out.contains("human_direct_message"), "{out}");
}

#[test]
fn every_doc_with_runnable_blocks_is_run() {
    // A new doc with runnable blocks must be added to the tests above.
    let mut found = Vec::new();
    for dir in [root(), root().join("docs")] {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md")
                && !runnable_blocks(&std::fs::read_to_string(&p).unwrap()).is_empty()
            {
                found.push(p.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    assert_eq!(found, ["README.md", "getting-started.md"]);
}

/// The service files in contrib/ and the MCP registry's server.json start the binary with
/// arguments it accepts.
#[test]
fn contrib_and_server_json_command_lines_parse() {
    let unit = std::fs::read_to_string(root().join("contrib/systemd/aware.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("%h/.cargo/bin/aware"));
    let args: Vec<&str> = words.collect();
    check_parses(&args);

    let plist =
        std::fs::read_to_string(root().join("contrib/launchd/dev.aware.serve.plist")).unwrap();
    let array = plist
        .split("<key>ProgramArguments</key>")
        .nth(1)
        .and_then(|r| r.split("</array>").next())
        .unwrap();
    let args: Vec<&str> = array
        .split("<string>")
        .skip(1)
        .filter_map(|s| s.split("</string>").next())
        .collect();
    assert!(args[0].ends_with("/.cargo/bin/aware"));
    check_parses(&args[1..]);

    let server: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("server.json")).unwrap())
            .unwrap();
    let pkg = &server["packages"][0];
    assert_eq!(pkg["version"], server["version"]);
    assert_eq!(pkg["version"], env!("CARGO_PKG_VERSION"));
    let mut args = Vec::new();
    for a in pkg["packageArguments"].as_array().unwrap() {
        match a["type"].as_str().unwrap() {
            "positional" => args.push(a["value"].as_str().unwrap().to_string()),
            _ => {
                args.push(a["name"].as_str().unwrap().to_string());
                args.push("agent:main:main".into());
            }
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    check_parses(&args);
}

/// `aware ARGS --help` exits 0: clap accepted every argument before the help flag.
fn check_parses(args: &[&str]) {
    let out = Command::new(bin())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
