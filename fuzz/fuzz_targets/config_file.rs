//! The gateway's configuration file: `GatewayConfig::load` (the function `aware serve` calls)
//! on the input written as `config.toml`, with the data dir given as a flag and an empty
//! environment. Each input overwrites the same file in a process-wide temporary directory and
//! nothing else is kept, so every input is independent.
//!
//! An input whose TOML holds a string naming `/dev`, `/proc` or `/sys` is skipped: `token_file`,
//! `password_file` and `agents.*.token_file` are read as files, and reading `/dev/zero` or a
//! FIFO would hang the fuzzer, not find a bug (the file is the operator's own).
//!
//! Invariants:
//! - a file that loads has only known keys (every table refuses unknown ones), and what it
//!   loads keeps the documented bounds: the data dir is the flag's, node ids are valid and
//!   distinct with http(s) URLs, webhooks are `http://` URLs with a host and no credentials
//!   and at least one attempt, in flight and connect millisecond, `wakes.stream_buffer`,
//!   `monitor.*` and `limits.health_deadline_ms` at least 1, retention valid; loading it again
//!   gives the same configuration; `check_tokens` never panics;
//! - a file that does not load is an error whose message starts with "invalid configuration:"
//!   and names the key it is about, or, for a file that is not TOML or a value of the wrong type,
//!   the place (line and column) of the problem.
#![no_main]

use aware_gateway::config::ConfigError;
use aware_gateway::{GatewayConfig, Overrides};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Every key of the file (crates/aware-gateway/src/config/file.rs), for "the error names a key".
const KEYS: &[&str] = &[
    "bind",
    "token",
    "token_file",
    "http",
    "durability",
    "default_agent",
    "main_key",
    "notify_on_create",
    "data_dir",
    "retention",
    "wakes",
    "agents",
    "monitor",
    "claude",
    "codex",
    "nodes",
    "limits",
    "store",
    "url",
    "password_file",
    "max_reply_waiters",
    "health_deadline_ms",
    "enabled",
    "first_tick_secs",
    "interval_secs",
    "provider_timeout_secs",
    "missing_threshold",
    "root",
    "home",
    "id",
    "allowed_origins",
    "allowed_hosts",
    "header_timeout_secs",
    "idle_timeout_secs",
    "body_timeout_secs",
    "max_connections",
    "shutdown_grace_secs",
    "max_streams",
    "max_streams_per_agent",
    "max_age_days",
    "max_rows",
    "cursor_expiry_days",
    "prune_interval_secs",
    "batch_rows",
    "coalesce_secs",
    "stream_buffer",
    "visible_agents",
    "wake_webhook",
    "secret",
    "timeout_ms",
    "max_attempts",
    "connect_timeout_ms",
    "max_in_flight",
    "max_queued",
];

struct Dir {
    _dir: tempfile::TempDir,
    data: PathBuf,
    file: PathBuf,
}

static DIR: OnceLock<Dir> = OnceLock::new();

fn dir() -> &'static Dir {
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Dir {
            data: dir.path().to_path_buf(),
            file: dir.path().join("config.toml"),
            _dir: dir,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let parsed = std::str::from_utf8(data)
        .ok()
        .and_then(|t| toml::from_str::<toml::Value>(t).ok());
    if parsed.as_ref().is_some_and(names_a_device) {
        return;
    }
    let d = dir();
    std::fs::write(&d.file, data).expect("write config.toml");
    let o = Overrides {
        data_dir: Some(d.data.clone()),
        config: Some(d.file.clone()),
        ..Overrides::default()
    };
    let none = |_: &str| None;
    match GatewayConfig::load(&o, &none) {
        Ok(c) => {
            let v = parsed.expect("a loaded file is TOML");
            check_keys(&v, "");
            check_loaded(&c);
            let again = GatewayConfig::load(&o, &none).expect("loads again");
            assert_eq!(
                format!("{again:?}"),
                format!("{c:?}"),
                "a second load differs"
            );
        }
        Err(e) => check_error(&e, parsed.is_some()),
    }
});

fn names_a_device(v: &toml::Value) -> bool {
    match v {
        toml::Value::String(s) => ["/dev", "/proc", "/sys"].iter().any(|d| s.contains(d)),
        toml::Value::Array(a) => a.iter().any(names_a_device),
        toml::Value::Table(t) => t.values().any(names_a_device),
        _ => false,
    }
}

/// The keys of an accepted file, by table (a `[agents.<id>]` table's own name is free).
fn check_keys(v: &toml::Value, table: &str) {
    let toml::Value::Table(t) = v else { return };
    for (k, v) in t {
        if table == "agents" {
            check_keys(v, "agents.*");
            continue;
        }
        assert!(
            KEYS.contains(&k.as_str()),
            "unknown key {table}.{k} accepted"
        );
        match v {
            toml::Value::Array(items) => items.iter().for_each(|i| check_keys(i, k)),
            other => check_keys(other, k),
        }
    }
}

fn check_loaded(c: &GatewayConfig) {
    assert_eq!(c.data_dir, dir().data);
    let mut ids = Vec::new();
    for n in &c.nodes {
        assert!(
            aware_core::AgentId::parse(&n.id).is_ok(),
            "node id {:?}",
            n.id
        );
        assert!(n.url.starts_with("http://") || n.url.starts_with("https://"));
        assert!(!ids.contains(&&n.id), "node {:?} twice", n.id);
        ids.push(&n.id);
    }
    for (id, a) in &c.agents {
        assert!(aware_core::AgentId::parse(id).is_ok_and(|x| x.as_str() == id));
        // The URL itself was checked by the `url` crate (http, a host, no credentials).
        if let Some(w) = &a.webhook {
            assert!(w.max_attempts >= 1 && w.max_in_flight >= 1 && w.connect_timeout_ms >= 1);
        }
        if let Some(t) = &a.token {
            assert!(!t.trim().is_empty());
        }
    }
    assert!(c.stream_buffer >= 1);
    assert!(c.monitor.interval_secs >= 1);
    assert!(c.monitor.provider_timeout_secs >= 1);
    assert!(c.monitor.missing_threshold >= 1);
    assert!(c.limits.health_deadline_ms >= 1);
    assert!(c.retention.validate().is_ok());
    assert!(!c.main_key.is_empty() && !c.main_key.chars().any(char::is_control));
    assert!(c.token.as_ref().is_none_or(|t| !t.is_empty()));
    let _ = c.check_tokens();
}

fn check_error(e: &ConfigError, is_toml: bool) {
    let shown = e.to_string();
    assert!(shown.starts_with("invalid configuration: "), "{shown}");
    let msg = &e.0;
    assert!(!msg.is_empty());
    let names_key = KEYS.iter().any(|k| contains_word(msg, k));
    let has_place = msg.contains("line ") && msg.contains("column ");
    if !is_toml {
        // Not TOML (or not UTF-8): no key to name, so the place.
        assert!(
            has_place || msg.contains("cannot read"),
            "no place in: {msg}"
        );
    } else {
        assert!(names_key || has_place, "names no key: {msg}");
    }
}

/// `word` in `text`, not as part of a longer name (`id` is not in `invalid`).
fn contains_word(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(part)
            && !text[i + word.len()..].chars().next().is_some_and(part)
    })
}
