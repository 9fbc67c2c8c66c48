//! Gateway configuration (03 §11): a TOML file, overridden by flags, overridden by environment
//! variables for `token`, `data_dir` and `bind`. Invalid configuration names the key.

use aware_core::{AgentId, RetentionPolicy};
use aware_store::Durability;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    bind: Option<String>,
    token: Option<String>,
    durability: Option<String>,
    default_agent: Option<String>,
    main_key: Option<String>,
    notify_on_create: Option<bool>,
    data_dir: Option<PathBuf>,
    retention: Option<FileRetention>,
    wakes: Option<FileWakes>,
    agents: Option<BTreeMap<String, FileAgent>>,
    monitor: Option<FileMonitor>,
    claude: Option<FileClaude>,
    codex: Option<FileCodex>,
    nodes: Option<Vec<FileNode>>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileMonitor {
    enabled: Option<bool>,
    first_tick_secs: Option<u64>,
    interval_secs: Option<u64>,
    provider_timeout_secs: Option<u64>,
    missing_threshold: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileClaude {
    root: Option<PathBuf>,
    enabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileCodex {
    home: Option<PathBuf>,
    enabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    id: String,
    url: String,
    token: Option<String>,
}

/// `[monitor]` (04 §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorSettings {
    pub enabled: bool,
    pub first_tick_secs: u64,
    pub interval_secs: u64,
    pub provider_timeout_secs: u64,
    pub missing_threshold: u32,
}

impl Default for MonitorSettings {
    fn default() -> Self {
        MonitorSettings {
            enabled: true,
            first_tick_secs: 15,
            interval_secs: 60,
            provider_timeout_secs: 45,
            missing_threshold: 3,
        }
    }
}

/// A paired node (`[[nodes]]`, 04 §2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    pub id: String,
    pub url: String,
    pub token: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileRetention {
    max_age_days: Option<u32>,
    max_rows: Option<u64>,
    cursor_expiry_days: Option<u32>,
    prune_interval_secs: Option<u64>,
    batch_rows: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileWakes {
    coalesce_secs: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileAgent {
    visible_agents: Option<Vec<String>>,
    wake_webhook: Option<FileWebhook>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWebhook {
    url: String,
    secret: Option<String>,
    timeout_ms: Option<u64>,
    max_attempts: Option<u32>,
}

/// A per-agent wake webhook (02 §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    pub secret: Option<String>,
    pub timeout_ms: u64,
    pub max_attempts: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentPolicy {
    /// Other agents this agent may see; `*` means all.
    pub visible_agents: Vec<String>,
    pub webhook: Option<Webhook>,
}

/// The resolved configuration of one gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    pub token: Option<String>,
    pub durability: Durability,
    pub default_agent: AgentId,
    pub main_key: String,
    pub notify_on_create: bool,
    pub retention: RetentionPolicy,
    pub coalesce_secs: u64,
    pub agents: BTreeMap<String, AgentPolicy>,
    /// `Some(start)` in test mode (03 §9).
    pub test_clock_start: Option<i64>,
    pub monitor: MonitorSettings,
    /// `[claude] root`; `None` when the local provider is disabled.
    pub claude_root: Option<PathBuf>,
    /// `[codex] home` (`$CODEX_HOME`, default `~/.codex`); `None` when the Codex provider is
    /// disabled.
    pub codex_home: Option<PathBuf>,
    pub nodes: Vec<NodeSettings>,
}

/// Flags of `aware serve` that override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub data_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub bind: Option<String>,
    pub token: Option<String>,
    pub durability: Option<String>,
    pub test_clock: bool,
    pub test_clock_start: Option<i64>,
}

pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("aware");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/aware")
}

fn parse_durability(s: &str) -> Result<Durability, ConfigError> {
    Durability::parse(s).ok_or_else(|| {
        bad(format!(
            "durability must be \"full\" or \"normal\" (got {s:?})"
        ))
    })
}

impl GatewayConfig {
    /// Defaults for a data directory (tests and embedders).
    pub fn for_data_dir(data_dir: impl Into<PathBuf>) -> Self {
        GatewayConfig {
            data_dir: data_dir.into(),
            bind: SocketAddr::from(([127, 0, 0, 1], 7420)),
            token: None,
            durability: Durability::Full,
            default_agent: AgentId::parse("main").unwrap_or_else(|_| unreachable!()),
            main_key: "main".into(),
            notify_on_create: true,
            retention: RetentionPolicy::default(),
            coalesce_secs: 20,
            agents: BTreeMap::new(),
            test_clock_start: None,
            monitor: MonitorSettings::default(),
            claude_root: Some(default_claude_root()),
            codex_home: Some(default_codex_home(&|k| std::env::var(k).ok())),
            nodes: Vec::new(),
        }
    }

    /// Loads file, flags and environment, in increasing precedence.
    pub fn load(o: &Overrides, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env_dir = env("AWARE_DATA_DIR").map(PathBuf::from);
        let pre_dir = env_dir.clone().or(o.data_dir.clone());
        let file_path = o.config.clone().or_else(|| {
            let p = pre_dir
                .clone()
                .unwrap_or_else(default_data_dir)
                .join("config.toml");
            p.exists().then_some(p)
        });
        let file = match &file_path {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let data_dir = env_dir
            .or(o.data_dir.clone())
            .or(file.data_dir.clone())
            .unwrap_or_else(default_data_dir);
        let mut c = GatewayConfig::for_data_dir(data_dir);
        let bind = env("AWARE_BIND").or(o.bind.clone()).or(file.bind.clone());
        if let Some(b) = bind {
            c.bind = b.parse().map_err(|_| {
                bad(format!(
                    "bind must be an address like 127.0.0.1:7420 (got {b:?})"
                ))
            })?;
        }
        c.token = env("AWARE_TOKEN")
            .or(o.token.clone())
            .or(file.token.clone())
            .filter(|t| !t.is_empty());
        if let Some(d) = o.durability.as_deref().or(file.durability.as_deref()) {
            c.durability = parse_durability(d)?;
        }
        if let Some(a) = &file.default_agent {
            c.default_agent = AgentId::parse(a).map_err(|e| bad(format!("default_agent: {e}")))?;
        }
        if let Some(k) = &file.main_key {
            if k.is_empty() || k.chars().any(char::is_control) {
                return Err(bad(
                    "main_key must be a non-empty string without control characters",
                ));
            }
            c.main_key = k.clone();
        }
        if let Some(n) = file.notify_on_create {
            c.notify_on_create = n;
        }
        if let Some(r) = &file.retention {
            let p = &mut c.retention;
            p.max_age_days = r.max_age_days.unwrap_or(p.max_age_days);
            p.max_rows = r.max_rows.unwrap_or(p.max_rows);
            p.cursor_expiry_days = r.cursor_expiry_days.unwrap_or(p.cursor_expiry_days);
            p.prune_interval_secs = r.prune_interval_secs.unwrap_or(p.prune_interval_secs);
            p.batch_rows = r.batch_rows.unwrap_or(p.batch_rows);
            p.validate().map_err(|e| bad(e.to_string()))?;
        }
        if let Some(w) = &file.wakes {
            c.coalesce_secs = w.coalesce_secs.unwrap_or(c.coalesce_secs);
        }
        for (id, a) in file.agents.clone().unwrap_or_default() {
            let agent = AgentId::parse(&id).map_err(|e| bad(format!("agents.{id}: {e}")))?;
            let mut policy = AgentPolicy::default();
            for v in a.visible_agents.unwrap_or_default() {
                if v == "*" {
                    policy.visible_agents.push(v);
                } else {
                    let other = AgentId::parse(&v)
                        .map_err(|e| bad(format!("agents.{id}.visible_agents: {e}")))?;
                    policy.visible_agents.push(other.as_str().into());
                }
            }
            if let Some(h) = a.wake_webhook {
                if !(h.url.starts_with("http://") || h.url.starts_with("https://")) {
                    return Err(bad(format!(
                        "agents.{id}.wake_webhook.url must be an http:// or https:// URL"
                    )));
                }
                policy.webhook = Some(Webhook {
                    url: h.url,
                    secret: h.secret,
                    timeout_ms: h.timeout_ms.unwrap_or(5000),
                    max_attempts: h.max_attempts.unwrap_or(5).max(1),
                });
            }
            c.agents.insert(agent.as_str().into(), policy);
        }
        if let Some(m) = &file.monitor {
            let d = &mut c.monitor;
            d.enabled = m.enabled.unwrap_or(d.enabled);
            d.first_tick_secs = m.first_tick_secs.unwrap_or(d.first_tick_secs);
            d.interval_secs = m.interval_secs.unwrap_or(d.interval_secs);
            d.provider_timeout_secs = m.provider_timeout_secs.unwrap_or(d.provider_timeout_secs);
            d.missing_threshold = m.missing_threshold.unwrap_or(d.missing_threshold);
            if d.interval_secs == 0 {
                return Err(bad("monitor.interval_secs must be at least 1"));
            }
            if d.provider_timeout_secs == 0 {
                return Err(bad("monitor.provider_timeout_secs must be at least 1"));
            }
            if d.missing_threshold == 0 {
                return Err(bad("monitor.missing_threshold must be at least 1"));
            }
        }
        if let Some(cl) = &file.claude {
            if cl.enabled == Some(false) {
                c.claude_root = None;
            } else if let Some(root) = &cl.root {
                c.claude_root = Some(root.clone());
            }
        }
        c.codex_home = Some(default_codex_home(env));
        if let Some(cx) = &file.codex {
            if cx.enabled == Some(false) {
                c.codex_home = None;
            } else if let Some(home) = &cx.home {
                c.codex_home = Some(home.clone());
            }
        }
        for n in file.nodes.clone().unwrap_or_default() {
            AgentId::parse(&n.id).map_err(|_| {
                bad(format!(
                    "nodes.id {:?} must match [a-z0-9][a-z0-9_-]{{0,63}}",
                    n.id
                ))
            })?;
            if !(n.url.starts_with("http://") || n.url.starts_with("https://")) {
                return Err(bad(format!(
                    "nodes.url of node {:?} must be an http:// or https:// URL",
                    n.id
                )));
            }
            if c.nodes.iter().any(|x| x.id == n.id) {
                return Err(bad(format!("nodes.id {:?} is listed twice", n.id)));
            }
            c.nodes.push(NodeSettings {
                id: n.id,
                url: n.url,
                token: n.token,
            });
        }
        if o.test_clock {
            c.test_clock_start = Some(o.test_clock_start.unwrap_or_else(wall_ms));
        }
        Ok(c)
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("state.db")
    }

    /// May `caller` see sessions of `other`? (03 §5.3)
    pub fn visible(&self, caller: &str, other: &str) -> bool {
        caller == other
            || self
                .agents
                .get(caller)
                .is_some_and(|p| p.visible_agents.iter().any(|v| v == "*" || v == other))
    }

    /// The bind address is loopback (127.0.0.0/8 or ::1).
    pub fn bind_is_loopback(&self) -> bool {
        self.bind.ip().is_loopback()
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| bad(format!("{}: {}", path.display(), e.message())))
}

/// `~/.claude/projects`.
pub fn default_claude_root() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".claude/projects")
}

/// `$CODEX_HOME` when set and not empty, else `~/.codex` (where Codex CLI keeps its sessions).
pub fn default_codex_home(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(h) = env("CODEX_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".codex")
}

pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod codex_tests {
    use super::*;

    fn load_with(toml: &str, codex_home_env: Option<&str>) -> GatewayConfig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, toml).unwrap();
        let o = Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            config: Some(path),
            ..Overrides::default()
        };
        let env = move |k: &str| (k == "CODEX_HOME").then(|| codex_home_env.map(str::to_string))?;
        GatewayConfig::load(&o, &env).unwrap()
    }

    #[test]
    fn codex_home_comes_from_the_file_then_codex_home_then_home() {
        let c = load_with("[codex]\nhome = \"/x/codex\"\n", Some("/env/codex"));
        assert_eq!(c.codex_home, Some(PathBuf::from("/x/codex")));
        let c = load_with("", Some("/env/codex"));
        assert_eq!(c.codex_home, Some(PathBuf::from("/env/codex")));
        let c = load_with("", Some(""));
        assert!(c.codex_home.is_some_and(|h| h.ends_with(".codex")));
        let c = load_with("[codex]\nenabled = false\nhome = \"/x\"\n", None);
        assert_eq!(c.codex_home, None);
    }

    #[test]
    fn unknown_codex_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[codex]\nroot = \"/x\"\n").unwrap();
        let o = Overrides {
            config: Some(path),
            ..Overrides::default()
        };
        let e = GatewayConfig::load(&o, &|_| None).unwrap_err();
        assert!(e.to_string().contains("root"), "{e}");
    }
}
