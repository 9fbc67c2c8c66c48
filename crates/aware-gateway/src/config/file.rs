//! The TOML shapes of the configuration file, as read (every table refuses unknown keys);
//! `config` resolves them with flags and environment into `GatewayConfig`.

use super::error::{bad, ConfigError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) bind: Option<String>,
    pub(super) token: Option<String>,
    pub(super) token_file: Option<PathBuf>,
    pub(super) http: Option<FileHttp>,
    pub(super) durability: Option<String>,
    pub(super) default_agent: Option<String>,
    pub(super) main_key: Option<String>,
    pub(super) notify_on_create: Option<bool>,
    pub(super) data_dir: Option<PathBuf>,
    pub(super) retention: Option<FileRetention>,
    pub(super) wakes: Option<FileWakes>,
    pub(super) agents: Option<BTreeMap<String, FileAgent>>,
    pub(super) monitor: Option<FileMonitor>,
    pub(super) claude: Option<FileClaude>,
    pub(super) codex: Option<FileCodex>,
    pub(super) nodes: Option<Vec<FileNode>>,
    pub(super) limits: Option<FileLimits>,
    pub(super) store: Option<FileStore>,
    pub(super) cluster: Option<FileCluster>,
}

/// `[cluster]`: what the gateways sharing one PostgreSQL share besides the store.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCluster {
    /// The key that signs wakes between gateways (decision D62): the same file on every one.
    pub(super) key_file: Option<PathBuf>,
}

/// `[store]`: where the state lives. Without `url`, the embedded SQLite file in the data dir.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStore {
    pub(super) url: Option<String>,
    pub(super) password_file: Option<PathBuf>,
}

/// `[limits]`: bounds that keep slow callers and a stuck store from stalling the gateway.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimits {
    pub(super) max_reply_waiters: Option<usize>,
    pub(super) max_reply_waiters_per_agent: Option<usize>,
    pub(super) health_deadline_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMonitor {
    pub(super) enabled: Option<bool>,
    pub(super) first_tick_secs: Option<u64>,
    pub(super) interval_secs: Option<u64>,
    pub(super) provider_timeout_secs: Option<u64>,
    pub(super) missing_threshold: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileClaude {
    pub(super) root: Option<PathBuf>,
    pub(super) enabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCodex {
    pub(super) home: Option<PathBuf>,
    pub(super) enabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileNode {
    pub(super) id: String,
    pub(super) url: String,
    pub(super) token: Option<String>,
    pub(super) ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileHttp {
    pub(super) allowed_origins: Option<Vec<String>>,
    pub(super) allowed_hosts: Option<Vec<String>>,
    pub(super) header_timeout_secs: Option<u64>,
    pub(super) idle_timeout_secs: Option<u64>,
    pub(super) body_timeout_secs: Option<u64>,
    pub(super) max_connections: Option<usize>,
    pub(super) shutdown_grace_secs: Option<u64>,
    pub(super) max_streams: Option<usize>,
    pub(super) max_streams_per_agent: Option<usize>,
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) allow_plaintext_tokens: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRetention {
    pub(super) max_age_days: Option<u32>,
    pub(super) max_rows: Option<u64>,
    pub(super) cursor_expiry_days: Option<u32>,
    pub(super) prune_interval_secs: Option<u64>,
    pub(super) batch_rows: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileWakes {
    pub(super) coalesce_secs: Option<u64>,
    pub(super) stream_buffer: Option<usize>,
    pub(super) ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAgent {
    pub(super) visible_agents: Option<Vec<String>>,
    pub(super) token_file: Option<PathBuf>,
    pub(super) wake_webhook: Option<FileWebhook>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileWebhook {
    pub(super) url: String,
    pub(super) secret: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) max_attempts: Option<u32>,
    pub(super) connect_timeout_ms: Option<u64>,
    pub(super) max_in_flight: Option<usize>,
    pub(super) max_queued: Option<usize>,
}

/// Reads and parses the configuration file; an error names the file and where in it.
pub(super) fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        // `message()` alone names neither the key nor the place of a value of the wrong type
        // ("invalid type: string \"x\", expected u64") or of a syntax error, and the full
        // rendering quotes the line, which may hold a token: the position is added instead.
        let at = e
            .span()
            .map(|s| {
                let (line, column) = line_column(&text, s.start);
                format!(" (line {line}, column {column})")
            })
            .unwrap_or_default();
        bad(format!("{}: {}{at}", path.display(), e.message()))
    })
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = text.get(..end).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before.get(line_start..).map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
