//! Gateway configuration (03 §11): a TOML file, overridden by flags, overridden by environment
//! variables for `token`, `data_dir` and `bind`. Invalid configuration names the key.

mod agents;
mod error;
mod file;
mod http;
mod store;

pub use agents::Webhook;
use aware_core::{AgentId, RetentionPolicy};
use aware_store_sqlite::Durability;
use error::bad;
pub use error::{read_token_file, ConfigError};
use file::FileConfig;
use http::apply_http;
pub use http::{normalize_allowed_host, HttpSettings, ServerTls};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use store::{cluster_key, store_options};

/// `[limits]` resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `sessions_send` calls waiting for a reply at once; more are refused with 429.
    pub max_reply_waiters: usize,
    /// Of those, how many one calling agent may have at once.
    pub max_reply_waiters_per_agent: usize,
    /// How long `/health` waits for its writer and reader probes before answering 503.
    pub health_deadline_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_reply_waiters: 256,
            max_reply_waiters_per_agent: 32,
            health_deadline_ms: 2000,
        }
    }
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
    /// `[[nodes]] ca_file`: trusted for an `https://` node besides Mozilla's roots.
    pub tls: Option<NodeTls>,
}

/// The TLS client of an `https://` node with `ca_file` (read at start).
#[derive(Clone)]
pub struct NodeTls {
    pub ca_file: PathBuf,
    pub config: std::sync::Arc<aware_tls::rustls::ClientConfig>,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl PartialEq for NodeTls {
    fn eq(&self, other: &Self) -> bool {
        self.ca_file == other.ca_file
    }
}

impl Eq for NodeTls {}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentPolicy {
    /// Other agents this agent may see; `*` means all.
    pub visible_agents: Vec<String>,
    pub webhook: Option<Webhook>,
    /// The agent's own bearer token (`token_file`): requests with it act only as this agent.
    pub token: Option<String>,
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
    /// `[wakes] stream_buffer`: wakes kept for wake streams that have not sent them yet.
    pub stream_buffer: usize,
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
    pub limits: Limits,
    pub http: HttpSettings,
    /// `[store] url` (`--store`, `AWARE_STORE_URL`): a PostgreSQL server instead of the
    /// embedded SQLite file. Its `Debug` never shows the password.
    pub postgres: Option<aware_store_pg::PgOptions>,
    /// `[cluster] key_file`: the key that signs wakes between gateways (decision D62); `None`:
    /// the key in the database.
    pub cluster_key: Option<aware_cluster::ClusterKey>,
    /// How `https://` webhooks are verified: the system's roots plus `[wakes] ca_file`. Built
    /// when a webhook URL is `https://` (or a CA file is named).
    pub webhook_tls: Option<WebhookTls>,
}

/// The TLS client of `https://` webhooks.
#[derive(Clone)]
pub struct WebhookTls {
    /// `[wakes] ca_file`, when set.
    pub ca_file: Option<PathBuf>,
    pub(crate) client_config: std::sync::Arc<aware_tls::rustls::ClientConfig>,
}

impl std::fmt::Debug for WebhookTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTls")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl WebhookTls {
    /// The system's trust store plus the certificates of `ca_file`.
    pub fn load(ca_file: Option<&Path>) -> Result<WebhookTls, ConfigError> {
        let mut roots = aware_tls::system_roots();
        if let Some(p) = ca_file {
            aware_tls::add_file(&mut roots, "wakes.ca_file", p).map_err(bad)?;
        }
        let mut config = aware_tls::client_config(roots).map_err(bad)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(WebhookTls {
            ca_file: ca_file.map(Path::to_path_buf),
            client_config: std::sync::Arc::new(config),
        })
    }
}

/// Flags of `aware serve` that override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub data_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub bind: Option<String>,
    pub token: Option<String>,
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
    pub durability: Option<String>,
    pub test_clock: bool,
    pub test_clock_start: Option<i64>,
    /// `--store`.
    pub store_url: Option<String>,
    /// `--tls-cert`, `--tls-key`.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// `--allow-plaintext-tokens`.
    pub allow_plaintext_tokens: bool,
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
            stream_buffer: 4096,
            agents: BTreeMap::new(),
            test_clock_start: None,
            monitor: MonitorSettings::default(),
            claude_root: Some(default_claude_root()),
            codex_home: Some(default_codex_home(&|k| std::env::var(k).ok())),
            nodes: Vec::new(),
            limits: Limits::default(),
            http: HttpSettings::default(),
            postgres: None,
            cluster_key: None,
            webhook_tls: None,
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
            Some(p) => file::read_file(p)?,
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
        let token = token_of(o, &file, env)?;
        c.token = token.filter(|t| !t.is_empty());
        if let Some(h) = &file.http {
            apply_http(&mut c.http, h)?;
        }
        let fh = file.http.clone().unwrap_or_default();
        let named =
            |flag: &'static str, key: &'static str, o: &Option<PathBuf>, f: Option<PathBuf>| {
                o.clone().map(|p| (flag, p)).or(f.map(|p| (key, p)))
            };
        c.http.tls = http::resolve_tls(
            named("--tls-cert", "http.tls_cert", &o.tls_cert, fh.tls_cert),
            named("--tls-key", "http.tls_key", &o.tls_key, fh.tls_key),
        )?;
        c.http.allow_plaintext_tokens =
            o.allow_plaintext_tokens || fh.allow_plaintext_tokens.unwrap_or(false);
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
            c.stream_buffer = w.stream_buffer.unwrap_or(c.stream_buffer);
            if c.stream_buffer == 0 {
                return Err(bad("wakes.stream_buffer must be at least 1 (got 0)"));
            }
        }
        c.apply_agents(&file)?;
        c.apply_upstream(&file, env)?;
        c.apply_nodes(&file)?;
        if let Some(l) = &file.limits {
            let d = &mut c.limits;
            d.max_reply_waiters = l.max_reply_waiters.unwrap_or(d.max_reply_waiters);
            d.max_reply_waiters_per_agent = l
                .max_reply_waiters_per_agent
                .unwrap_or(d.max_reply_waiters_per_agent);
            if d.max_reply_waiters_per_agent == 0 {
                return Err(bad("limits.max_reply_waiters_per_agent must be at least 1"));
            }
            d.health_deadline_ms = l.health_deadline_ms.unwrap_or(d.health_deadline_ms);
            if d.health_deadline_ms == 0 {
                return Err(bad("limits.health_deadline_ms must be at least 1"));
            }
        }
        c.postgres = store_options(o.store_url.as_deref(), &file, env)?;
        c.cluster_key = cluster_key(&file, c.postgres.is_some())?;
        if o.test_clock {
            c.test_clock_start = Some(o.test_clock_start.unwrap_or_else(wall_ms));
        }
        Ok(c)
    }

    /// Checks that only make sense on the whole configuration. Agent tokens restrict what a
    /// request may do only if unauthenticated requests are refused, so they need a main token;
    /// and no two holders may share a token, or a request could not be told apart.
    pub fn check_tokens(&self) -> Result<(), ConfigError> {
        let mut seen: Vec<(&str, &str)> = Vec::new();
        if let Some(t) = &self.token {
            seen.push(("token", t));
        }
        for (id, a) in &self.agents {
            let Some(t) = &a.token else { continue };
            if self.token.is_none() {
                return Err(bad(format!(
                    "agents.{id}.token_file needs a main token (token, token_file, --token, --token-file or AWARE_TOKEN): without one every request is the operator"
                )));
            }
            if let Some((other, _)) = seen.iter().find(|(_, s)| *s == t.as_str()) {
                return Err(bad(format!(
                    "agents.{id}.token_file holds the same token as {other}"
                )));
            }
            seen.push((id, t));
        }
        Ok(())
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("state.db")
    }

    /// May `caller` see sessions of `other`? (03 §5.3) The one rule every check uses.
    pub fn visible(&self, caller: &str, other: &str) -> bool {
        self.visible_set(caller)
            .is_none_or(|set| set.iter().any(|a| a == other))
    }

    /// The agents `caller` may see: itself and its `visible_agents`; `None` means all (`*`).
    pub fn visible_set(&self, caller: &str) -> Option<Vec<String>> {
        match self.agents.get(caller) {
            Some(p) if p.visible_agents.iter().any(|v| v == "*") => None,
            Some(p) => Some(
                std::iter::once(caller.to_string())
                    .chain(p.visible_agents.iter().cloned())
                    .collect(),
            ),
            None => Some(vec![caller.to_string()]),
        }
    }

    /// The bind address is loopback (127.0.0.0/8 or ::1).
    pub fn bind_is_loopback(&self) -> bool {
        self.bind.ip().is_loopback()
    }
}

/// The main token: each source gives the token or a file holding it (kept out of `ps`), in
/// precedence order: `AWARE_TOKEN`, `AWARE_TOKEN_FILE`, `--token`, `--token-file`, the file's
/// `token`, its `token_file`.
fn token_of(
    o: &Overrides,
    file: &FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    let from_file = |what: &str, p: Option<PathBuf>| -> Result<Option<String>, ConfigError> {
        p.map(|p| read_token_file(what, &p)).transpose()
    };
    if let Some(t) = env("AWARE_TOKEN") {
        return Ok(Some(t));
    }
    if let Some(t) = from_file(
        "AWARE_TOKEN_FILE",
        env("AWARE_TOKEN_FILE").map(PathBuf::from),
    )? {
        return Ok(Some(t));
    }
    if let Some(t) = o.token.clone() {
        return Ok(Some(t));
    }
    if let Some(t) = from_file("--token-file", o.token_file.clone())? {
        return Ok(Some(t));
    }
    if let Some(t) = file.token.clone() {
        return Ok(Some(t));
    }
    from_file("token_file", file.token_file.clone())
}

impl GatewayConfig {
    /// `[agents.<id>]`: visibility, webhooks, agent tokens; and the webhooks' TLS settings.
    fn apply_agents(&mut self, file: &FileConfig) -> Result<(), ConfigError> {
        let c = self;
        let mut https_webhook = false;
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
                let (webhook, https) = agents::webhook_of(&id, h)?;
                https_webhook |= https;
                policy.webhook = Some(webhook);
            }
            if let Some(p) = &a.token_file {
                let t = read_token_file(&format!("agents.{id}.token_file"), p)?;
                if t.trim().is_empty() {
                    return Err(bad(format!("agents.{id}.token_file holds an empty token")));
                }
                policy.token = Some(t);
            }
            c.agents.insert(agent.as_str().into(), policy);
        }
        let webhook_ca = file.wakes.as_ref().and_then(|w| w.ca_file.clone());
        if https_webhook || webhook_ca.is_some() {
            c.webhook_tls = Some(WebhookTls::load(webhook_ca.as_deref())?);
        }
        Ok(())
    }

    /// `[monitor]`, `[claude]` and `[codex]`: the upstream monitor and where it looks.
    fn apply_upstream(
        &mut self,
        file: &FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let c = self;
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
        Ok(())
    }

    /// `[[nodes]]`: the paired nodes, each checked and with its TLS client settings.
    fn apply_nodes(&mut self, file: &FileConfig) -> Result<(), ConfigError> {
        let c = self;
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
            let tls = match &n.ca_file {
                None => None,
                Some(p) => {
                    let what = format!("nodes.ca_file of node {:?}", n.id);
                    let mut roots = aware_tls::webpki_roots();
                    aware_tls::add_file(&mut roots, &what, p).map_err(bad)?;
                    let config = aware_tls::client_config(roots).map_err(bad)?;
                    Some(NodeTls {
                        ca_file: p.clone(),
                        config: std::sync::Arc::new(config),
                    })
                }
            };
            c.nodes.push(NodeSettings {
                id: n.id,
                url: n.url,
                token: n.token,
                tls,
            });
        }
        Ok(())
    }
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
mod tests {
    use super::file::FileHttp;
    use super::*;

    #[test]
    fn token_files_drop_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "abc\n\n").unwrap();
        assert_eq!(read_token_file("t", &p).unwrap(), "abc\n");
        std::fs::write(&p, "abc\r\n").unwrap();
        assert_eq!(read_token_file("t", &p).unwrap(), "abc");
        let e = read_token_file("token_file", &dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("token_file"), "{e}");
    }

    #[test]
    fn agent_tokens_need_a_distinct_main_token() {
        let mut c = GatewayConfig::for_data_dir("/nonexistent");
        let agent = AgentPolicy {
            token: Some("agent-token-0123456789".into()),
            ..Default::default()
        };
        c.agents.insert("ops".into(), agent);
        assert!(c
            .check_tokens()
            .unwrap_err()
            .to_string()
            .contains("main token"));
        c.token = Some("agent-token-0123456789".into());
        assert!(c
            .check_tokens()
            .unwrap_err()
            .to_string()
            .contains("same token"));
        c.token = Some("main-token-0123456789".into());
        assert!(c.check_tokens().is_ok());
    }

    #[test]
    fn http_settings_are_checked() {
        let mut d = HttpSettings::default();
        let bad_origin = FileHttp {
            allowed_origins: Some(vec!["http://a.example/path".into()]),
            ..Default::default()
        };
        assert!(apply_http(&mut d, &bad_origin).is_err());
        let zero = FileHttp {
            idle_timeout_secs: Some(0),
            ..Default::default()
        };
        assert!(apply_http(&mut d, &zero)
            .unwrap_err()
            .to_string()
            .contains("idle_timeout_secs"));
        let ok = FileHttp {
            allowed_origins: Some(vec!["HTTP://App.Example:3000".into()]),
            max_connections: Some(8),
            ..Default::default()
        };
        apply_http(&mut d, &ok).unwrap();
        assert_eq!(
            d.allowed_origins,
            vec!["http://app.example:3000".to_string()]
        );
        assert_eq!(d.max_connections, 8);
        assert_eq!(d.stream_cap(), 6);
        // Seven eighths of 8 connections: 7 may be long-held, 8 may not.
        let too_many = FileHttp {
            max_streams: Some(8),
            ..Default::default()
        };
        assert!(apply_http(&mut d, &too_many)
            .unwrap_err()
            .to_string()
            .contains("must be at most 7 with http.max_connections = 8"));
        let most = FileHttp {
            max_streams: Some(7),
            ..Default::default()
        };
        apply_http(&mut d, &most).unwrap();
        assert_eq!(d.stream_cap(), 7);
        assert_eq!(HttpSettings::max_held_allowed(1024), 896);
        assert_eq!(HttpSettings::max_held_allowed(1), 0);
        assert_eq!(HttpSettings::default().stream_cap(), 768);
        let one = HttpSettings {
            max_connections: 1,
            ..HttpSettings::default()
        };
        assert_eq!(one.stream_cap(), 0);
    }
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
    fn the_wake_stream_buffer_is_read_and_must_hold_one_wake() {
        assert_eq!(load_with("", None).stream_buffer, 4096);
        assert_eq!(
            load_with("[wakes]\nstream_buffer = 8\n", None).stream_buffer,
            8
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[wakes]\nstream_buffer = 0\n").unwrap();
        let o = Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            config: Some(path),
            ..Overrides::default()
        };
        let e = GatewayConfig::load(&o, &|_| None).unwrap_err();
        assert!(
            e.to_string().contains("stream_buffer must be at least 1"),
            "{e}"
        );
    }

    #[test]
    fn https_webhooks_are_accepted_and_a_bad_ca_file_is_named() {
        let c = load_with(
            "[agents.ops.wake_webhook]\nurl = \"https://hooks.example/x\"\n",
            None,
        );
        assert!(c.webhook_tls.is_some());
        assert!(load_with("", None).webhook_tls.is_none());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[wakes]\nca_file = \"/nonexistent/ca.pem\"\n").unwrap();
        let o = Overrides {
            config: Some(path),
            ..Overrides::default()
        };
        let e = GatewayConfig::load(&o, &|_| None).unwrap_err();
        assert!(e.to_string().contains("wakes.ca_file"), "{e}");
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

    /// Found by the `config_file` fuzz target: a value of the wrong type or a syntax error was
    /// reported without its key or place ("invalid type: string \"x\", expected usize").
    #[test]
    fn toml_errors_say_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let o = Overrides {
            config: Some(path.clone()),
            ..Overrides::default()
        };
        for (text, at) in [
            (
                "bind = \"127.0.0.1:1\"\n[http]\nmax_connections = \"x\"\n",
                "(line 3, column 19)",
            ),
            ("token = \"s3cret\"\n[wakes\n", "(line 2, column 7)"),
            (
                "main_key = \"é\"\nnotify_on_create = 1\n",
                "(line 2, column 20)",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = GatewayConfig::load(&o, &|_| None).unwrap_err().to_string();
            assert!(e.ends_with(at), "{text:?}: {e}");
            assert!(!e.contains("s3cret"), "the line is not quoted: {e}");
        }
        assert_eq!(file::line_column("ab\ncd", 4), (2, 2));
        assert_eq!(file::line_column("é", 1), (1, 1));
        assert_eq!(file::line_column("", 9), (1, 1));
    }
}

#[cfg(test)]
mod store_tests {
    use super::*;

    fn load(
        toml: &str,
        flag: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<GatewayConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            toml.replace("DIR", &dir.path().display().to_string()),
        )
        .unwrap();
        std::fs::write(dir.path().join("pw"), "from-file\n").unwrap();
        let o = Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            config: Some(path),
            store_url: flag.map(str::to_string),
            ..Overrides::default()
        };
        GatewayConfig::load(&o, env)
    }

    #[test]
    fn store_url_comes_from_flag_then_env_then_file_and_never_shows_a_password() {
        let none = |_: &str| None;
        assert!(load("", None, &none).unwrap().postgres.is_none());
        let file = "[store]\nurl = \"postgres://aware:s3cret@file-host/aware\"\n";
        let c = load(file, None, &none).unwrap();
        let pg = c.postgres.as_ref().expect("postgres");
        assert!(pg
            .location()
            .starts_with("postgres://aware@file-host:5432/aware"));
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "password in Debug: {shown}");
        let c = load(file, Some("postgres://flag-host/aware"), &none).unwrap();
        assert!(c.postgres.unwrap().location().contains("flag-host"));
        let env =
            |k: &str| (k == "AWARE_STORE_URL").then(|| "postgres://env-host/aware".to_string());
        let c = load(file, Some("postgres://flag-host/aware"), &env).unwrap();
        assert!(c.postgres.unwrap().location().contains("flag-host"));
        let c = load(file, None, &env).unwrap();
        assert!(c.postgres.unwrap().location().contains("env-host"));
    }

    #[test]
    fn store_password_from_the_file_then_pgpassword() {
        let pgpass = |k: &str| (k == "PGPASSWORD").then(|| "from-env".to_string());
        let c = load(
            "[store]\nurl = \"postgres://aware@h/aware\"\npassword_file = \"DIR/pw\"\n",
            None,
            &pgpass,
        )
        .unwrap();
        assert_eq!(c.postgres.unwrap().password.as_deref(), Some("from-file"));
        let c = load(
            "[store]\nurl = \"postgres://aware@h/aware\"\n",
            None,
            &pgpass,
        )
        .unwrap();
        assert_eq!(c.postgres.unwrap().password.as_deref(), Some("from-env"));
    }

    #[test]
    fn bad_store_settings_are_refused_without_echoing_the_password() {
        let none = |_: &str| None;
        let e = load("[store]\nurl = \"mysql://u:s3cret@h/db\"\n", None, &none).unwrap_err();
        assert!(e.to_string().contains("postgres://"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = load("[store]\npassword_file = \"DIR/pw\"\n", None, &none).unwrap_err();
        assert!(e.to_string().contains("store.url"), "{e}");
        let e = load(
            "[store]\nurl = \"postgres://u:s3cret@h:port/db\"\n",
            None,
            &none,
        )
        .unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = load("[store]\nuri = \"postgres://h/db\"\n", None, &none).unwrap_err();
        assert!(e.to_string().contains("uri"), "{e}");
    }

    /// `[cluster] key_file` (decision D62): read at start from a private file, refused when its
    /// group or others may read it, and only with a PostgreSQL store.
    #[test]
    fn the_cluster_key_file_must_be_private_and_needs_a_postgres_store() {
        use std::os::unix::fs::PermissionsExt;
        let none = |_: &str| None;
        let keys = tempfile::tempdir().unwrap();
        let key = keys.path().join("cluster.key");
        std::fs::write(&key, "ab".repeat(32)).unwrap();
        let toml = format!(
            "[store]\nurl = \"postgres://aware@h/aware\"\n[cluster]\nkey_file = \"{}\"\n",
            key.display()
        );
        for mode in [0o644, 0o640] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = load(&toml, None, &none).unwrap_err();
            assert!(e.to_string().contains("cluster.key_file"), "{e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = load(&toml, None, &none).unwrap();
        assert!(c.cluster_key.is_some());
        assert!(
            !format!("{c:?}").contains(&"ab".repeat(32)),
            "the key in Debug"
        );
        assert!(load("", None, &none).unwrap().cluster_key.is_none());
        let e = load(
            &format!("[cluster]\nkey_file = \"{}\"\n", key.display()),
            None,
            &none,
        )
        .unwrap_err();
        assert!(e.to_string().contains("store.url"), "{e}");
    }
}
