//! Connection options: the server URL, where the password comes from, the timeouts that make an
//! unreachable server fail fast. The password never appears in `Debug`, `location()` or errors.

use aware_store::{Result, StoreError};
use postgres::config::Host;
use std::time::Duration;

/// How to reach the database.
#[derive(Clone)]
pub struct PgOptions {
    /// `postgres://user[:password]@host[:port]/dbname[?…]` or a libpq key-value string.
    pub url: String,
    /// Used when the URL carries none (from `[store] password_file` or `PGPASSWORD`).
    pub password: Option<String>,
    /// Defaults for the parts the URL leaves out, from `PGHOST`, `PGPORT`, `PGUSER`,
    /// `PGDATABASE` (see [`PgOptions::with_env`]).
    pub env_host: Option<String>,
    pub env_port: Option<u16>,
    pub env_user: Option<String>,
    pub env_dbname: Option<String>,
    /// Reader connections (made lazily).
    pub readers: usize,
    /// Longest wait for a connection to open.
    pub connect_timeout: Duration,
    /// Longest a statement may run on the server (`statement_timeout`), lock waits included.
    pub statement_timeout: Duration,
    /// TCP keep-alive idle time; probes every second after it, three lost probes end the
    /// connection. `tcp_user_timeout` is set to the same bound for unacknowledged data.
    pub keepalive_idle: Duration,
    /// Take the batch's queued ops once the write lock is granted (decision D47) rather than
    /// before asking for it, so ops that arrive while another gateway holds the lock join this
    /// gateway's next commit instead of waiting for one more.
    pub batch_after_lock: bool,
    /// Locks by key (decision D56, docs/design/write-scaling.md): batches hold the cluster
    /// lock in share mode and an advisory lock per stream they touch, so gateways writing
    /// different sessions commit at the same time. Off by default; every gateway of a cluster
    /// must run the same mode. The default is read from `AWARE_PG_KEYED_LOCKS=1`, so a test
    /// suite or a bench can run every store in this mode.
    pub keyed_locks: bool,
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("readers", &self.readers)
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("batch_after_lock", &self.batch_after_lock)
            .field("keyed_locks", &self.keyed_locks)
            .finish_non_exhaustive()
    }
}

impl PgOptions {
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            password: None,
            env_host: None,
            env_port: None,
            env_user: None,
            env_dbname: None,
            readers: 3,
            connect_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(5),
            keepalive_idle: Duration::from_secs(5),
            batch_after_lock: true,
            keyed_locks: std::env::var_os("AWARE_PG_KEYED_LOCKS").is_some_and(|v| v == "1"),
        }
    }

    pub fn password(mut self, password: Option<String>) -> Self {
        self.password = password;
        self
    }

    /// Takes the standard libpq variables as defaults: `PGHOST`, `PGPORT`, `PGUSER`,
    /// `PGDATABASE`, and `PGPASSWORD` when no password was set. `get` is `std::env::var` in
    /// production.
    pub fn with_env(mut self, get: impl Fn(&str) -> Option<String>) -> Self {
        let non_empty = |k: &str| get(k).filter(|v| !v.is_empty());
        self.env_host = non_empty("PGHOST");
        self.env_port = non_empty("PGPORT").and_then(|p| p.parse().ok());
        self.env_user = non_empty("PGUSER");
        self.env_dbname = non_empty("PGDATABASE");
        if self.password.is_none() {
            self.password = non_empty("PGPASSWORD");
        }
        self
    }

    /// Checks the URL parses; the message never repeats the password.
    pub fn validate(&self) -> Result<(), String> {
        crate::tls::split_url(&self.url, &|_: &str| None)
            .map_err(|e| format!("invalid PostgreSQL URL {}: {e}", redact_url(&self.url)))?
            .0
            .parse::<postgres::Config>()
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "invalid PostgreSQL URL {}: {e}; expected postgres://user@host:port/dbname",
                    redact_url(&self.url)
                )
            })
    }

    /// The driver configuration: the URL, the defaults, the password, and the session settings
    /// the store relies on (`synchronous_commit = on`, the statement timeout).
    pub(crate) fn driver_config(&self) -> Result<tokio_postgres::Config> {
        // The libpq TLS parameters tokio-postgres does not know are taken off (tls.rs).
        let mut c: tokio_postgres::Config = crate::tls::driver_url(&self.url)?
            .parse()
            .map_err(|_| StoreError::Unreachable(self.validate().err().unwrap_or_default()))?;
        if c.get_hosts().is_empty() {
            c.host(self.env_host.as_deref().unwrap_or("localhost"));
        }
        if c.get_ports().is_empty() {
            if let Some(p) = self.env_port {
                c.port(p);
            }
        }
        if c.get_user().is_none() {
            let user = self
                .env_user
                .clone()
                .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
                .unwrap_or_else(|| "postgres".into());
            c.user(&user);
        }
        if c.get_dbname().is_none() {
            if let Some(db) = &self.env_dbname {
                c.dbname(db);
            }
        }
        if c.get_password().is_none() {
            if let Some(p) = &self.password {
                c.password(p.as_bytes());
            } else if let Some(p) = crate::tls::pgpass_for(&c) {
                c.password(p.as_bytes());
            }
        }
        // Server side: a transaction left open by a gateway that vanished (partitioned
        // mid-transaction, its packets dropped) holds the cluster-wide write lock, so every
        // other gateway's writes wait on it: the server ends such a session after the statement
        // timeout (a gateway never pauses that long between the statements of a transaction),
        // and its TCP keep-alives and `tcp_user_timeout` end a session whose client is gone.
        let ours = format!(
            "-c synchronous_commit=on -c statement_timeout={} \
             -c idle_in_transaction_session_timeout={} \
             -c tcp_keepalives_idle={} -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3 \
             -c tcp_user_timeout={}",
            self.statement_timeout.as_millis(),
            self.statement_timeout.as_millis(),
            self.keepalive_idle.as_secs().max(1),
            (self.keepalive_idle + Duration::from_secs(3)).as_millis()
        );
        let options = match c.get_options() {
            Some(theirs) if !theirs.is_empty() => format!("{theirs} {ours}"),
            _ => ours,
        };
        c.options(&options)
            .application_name("aware")
            .connect_timeout(self.connect_timeout)
            .keepalives(true)
            .keepalives_idle(self.keepalive_idle)
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(self.keepalive_idle + Duration::from_secs(3));
        Ok(c)
    }

    /// The client's own deadlines ([`crate::conn::Deadlines`]): the connect timeout for the
    /// whole set-up, and the statement timeout plus two seconds of network for one exchange.
    pub(crate) fn deadlines(&self) -> crate::conn::Deadlines {
        crate::conn::Deadlines {
            connect: self.connect_timeout,
            exchange: self.exchange_timeout(),
        }
    }

    /// Longest a gateway waits for one answer of PostgreSQL before it drops the connection and
    /// answers 503 `store_unavailable` (the statement timeout plus two seconds).
    pub fn exchange_timeout(&self) -> Duration {
        self.statement_timeout + Duration::from_secs(2)
    }

    /// `postgres://user@host:port/dbname`: where the store is, never with a password.
    pub fn location(&self) -> String {
        match self.driver_config() {
            Ok(c) => {
                let host = match c.get_hosts().first() {
                    Some(Host::Tcp(h)) => h.clone(),
                    #[cfg(unix)]
                    Some(Host::Unix(p)) => p.display().to_string(),
                    None => "localhost".into(),
                };
                let port = c.get_ports().first().copied().unwrap_or(5432);
                format!(
                    "postgres://{}@{host}:{port}/{}",
                    c.get_user().unwrap_or(""),
                    c.get_dbname().or(c.get_user()).unwrap_or("")
                )
            }
            Err(_) => redact_url(&self.url),
        }
    }
}

/// Whether a store URL carries a password itself (userinfo or a `password=` parameter), i.e.
/// would show it to every local user in `ps` when given on a command line.
pub fn url_has_password(url: &str) -> bool {
    redact_url(url) != url
}

/// The URL with any password replaced by `***`: the userinfo's `:password` of a URL, or the
/// `password=` parameter. Used wherever a URL may be shown. A string that is not a URL (a libpq
/// `key=value` string, which `[store] url` refuses) is not shown at all when it mentions a
/// password: its quoting and spacing rules (`password = 'a b'`) are too loose to cut safely.
pub fn redact_url(url: &str) -> String {
    // Any `scheme://` URL (a mistyped scheme must not leak its password in the error either).
    if let Some(i) = url.find("://") {
        let (scheme, rest) = (&url[..i + 3], &url[i + 3..]);
        // The userinfo ends at the last '@' before the path.
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some(at) = authority.rfind('@') {
            let userinfo = &authority[..at];
            if let Some(colon) = userinfo.find(':') {
                return format!("{scheme}{}:***{}", &userinfo[..colon], &rest[at..]);
            }
        }
        // A password may also be given as a query parameter.
        return redact_pairs(&format!("{scheme}{rest}"), '&');
    }
    if url.to_ascii_lowercase().contains("password") {
        return "<a key=value string naming a password, not shown>".to_string();
    }
    url.to_string()
}

/// Replaces the value of every `password=` pair.
fn redact_pairs(s: &str, sep: char) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("password=") {
        let starts_pair = i == 0 || rest[..i].ends_with([sep, '?', ' ']);
        out.push_str(&rest[..i + "password=".len()]);
        rest = &rest[i + "password=".len()..];
        if starts_pair {
            let end = if let Some(quoted) = rest.strip_prefix('\'') {
                quoted.find('\'').map_or(rest.len(), |j| j + 2)
            } else {
                rest.find([sep, ' ']).unwrap_or(rest.len())
            };
            out.push_str("***");
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_shown() {
        assert_eq!(
            redact_url("postgres://aware:s3cret@db.example:5432/aware"),
            "postgres://aware:***@db.example:5432/aware"
        );
        assert_eq!(
            redact_url("postgresql://aware@db/aware?password=s3cret&sslmode=disable"),
            "postgresql://aware@db/aware?password=***&sslmode=disable"
        );
        for kv in [
            "host=db user=aware password='s e c' dbname=aware",
            "host=db password = s3cret",
            "host=db\tPASSWORD=s3cret",
        ] {
            assert_eq!(
                redact_url(kv),
                "<a key=value string naming a password, not shown>"
            );
        }
        assert_eq!(redact_url("host=db user=aware"), "host=db user=aware");
        assert!(url_has_password("postgres://a:b@h/d"));
        assert!(url_has_password("postgres://a@h/d?password=x"));
        assert!(!url_has_password("postgres://a@h/d"));
        assert_eq!(redact_url("postgres://db/aware"), "postgres://db/aware");
        assert_eq!(redact_url("mysql://u:pw@h/db"), "mysql://u:***@h/db");
        let o = PgOptions::new("postgres://aware:s3cret@db:5433/x").password(Some("p2".into()));
        let shown = format!("{o:?} {}", o.location());
        assert!(
            !shown.contains("s3cret") && !shown.contains("p2"),
            "{shown}"
        );
        assert!(o.location().starts_with("postgres://aware@db:5433/x"));
    }

    #[test]
    fn env_fills_what_the_url_leaves_out() {
        let env = |k: &str| match k {
            "PGUSER" => Some("u".to_string()),
            "PGPASSWORD" => Some("pw".to_string()),
            "PGDATABASE" => Some("d".to_string()),
            _ => None,
        };
        let o = PgOptions::new("postgres://h:1/").with_env(env);
        let c = o.driver_config().unwrap();
        assert_eq!(c.get_user(), Some("u"));
        assert_eq!(c.get_password(), Some(&b"pw"[..]));
        assert_eq!(c.get_dbname(), Some("d"));
        // An explicit password (the password file) wins over PGPASSWORD.
        let o = PgOptions::new("postgres://h/")
            .password(Some("file".into()))
            .with_env(env);
        assert_eq!(
            o.driver_config().unwrap().get_password(),
            Some(&b"file"[..])
        );
        assert!(PgOptions::new("postgres://h:notaport/").validate().is_err());
    }
}
