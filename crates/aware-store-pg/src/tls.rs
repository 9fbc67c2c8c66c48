//! PostgreSQL over TLS (rustls), with libpq's parameters: `sslmode` (`disable`, `prefer`,
//! `require`, `verify-ca`, `verify-full`), `sslrootcert` (a file, or `system` for the
//! operating system's store), `sslcert`/`sslkey` (a client certificate), each from the URL's
//! query or the variables `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`; and the
//! password file (`PGPASSFILE`, else `~/.pgpass`) when no password is given.
//!
//! tokio-postgres knows only `disable`, `prefer` and `require`, and no file parameter: the TLS
//! parameters are taken off the URL here ([`driver_url`]), tokio-postgres gets the mode it
//! knows (`require` for both `verify-*`), and the checking is the rustls configuration's:
//!
//! | sslmode       | encrypted            | server certificate checked                     |
//! |---------------|----------------------|------------------------------------------------|
//! | `disable`     | no                   | —                                              |
//! | `prefer`      | if the server offers | no (as libpq)                                  |
//! | `require`     | yes                  | no; the chain if a root certificate is given    |
//! | `verify-ca`   | yes                  | the chain to a root of `sslrootcert`           |
//! | `verify-full` | yes                  | the chain, and the host name the URL connects to |
//!
//! Like libpq, `verify-ca` and `verify-full` without `sslrootcert` use `~/.postgresql/root.crt`
//! and fail when it is missing; the client certificate defaults to `~/.postgresql/
//! postgresql.crt` and `.key` when both exist. No channel binding is offered (SCRAM without
//! `-PLUS`); `sslpassword`, `sslcrl` and `sslmode=allow` are refused with a message.

use crate::PgOptions;
use aware_store::{Result, StoreError};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> std::result::Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: use prefer (TLS when the server offers it) \
                     or disable"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                "sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
            ))
            }
        })
    }

    /// What tokio-postgres is told.
    fn driver(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
        }
    }
}

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RootCert {
    File(PathBuf),
    /// `sslrootcert=system`.
    System,
}

/// The TLS parameters of one store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsParams {
    pub mode: SslMode,
    root: Option<RootCert>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn process_env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn home(env: Env<'_>) -> Option<PathBuf> {
    env("HOME").map(PathBuf::from)
}

/// Splits the TLS parameters off `url`: the URL tokio-postgres can parse, and the parameters
/// (the URL's, else the `PGSSL*` variables of `env`). A string that is not a URL is returned
/// as it is (the store refuses it elsewhere).
pub(crate) fn split_url(
    url: &str,
    env: Env<'_>,
) -> std::result::Result<(String, TlsParams), String> {
    let (base, query) = match url.split_once('?') {
        _ if !url.contains("://") => ("", ""),
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut kept = Vec::new();
    let (mut mode, mut root, mut cert, mut key) = (None, None, None, None);
    if !base.is_empty() {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let value = || {
                percent_encoding::percent_decode_str(v)
                    .decode_utf8()
                    .map(|s| s.into_owned())
                    .map_err(|_| format!("the store URL's {k} is not UTF-8"))
            };
            match k {
                "sslmode" => mode = Some(value()?),
                "sslrootcert" => root = Some(value()?),
                "sslcert" => cert = Some(value()?),
                "sslkey" => key = Some(value()?),
                "sslpassword" | "sslcrl" | "sslcrldir" | "sslsni" => {
                    return Err(format!("the store URL's {k} is not supported"))
                }
                _ => kept.push(pair),
            }
        }
    }
    let mode = mode
        .or_else(|| env("PGSSLMODE"))
        .map_or(Ok(SslMode::Prefer), |m| SslMode::parse(&m))?;
    let root = root.or_else(|| env("PGSSLROOTCERT")).map(|r| {
        if r == "system" {
            RootCert::System
        } else {
            RootCert::File(PathBuf::from(r))
        }
    });
    let params = TlsParams {
        mode,
        root,
        cert: cert.or_else(|| env("PGSSLCERT")).map(PathBuf::from),
        key: key.or_else(|| env("PGSSLKEY")).map(PathBuf::from),
    };
    if base.is_empty() {
        return Ok((url.to_string(), params));
    }
    kept.push(match mode.driver() {
        "disable" => "sslmode=disable",
        "prefer" => "sslmode=prefer",
        _ => "sslmode=require",
    });
    Ok((format!("{base}?{}", kept.join("&")), params))
}

/// The URL tokio-postgres parses (TLS file parameters taken off, `verify-*` as `require`).
pub(crate) fn driver_url(url: &str) -> Result<String> {
    split_url(url, &process_env)
        .map(|(u, _)| u)
        .map_err(StoreError::Refused)
}

impl TlsParams {
    /// The rustls client these parameters call for (`None` for `disable`).
    fn client_config(
        &self,
        env: Env<'_>,
    ) -> std::result::Result<Option<Arc<rustls::ClientConfig>>, String> {
        if self.mode == SslMode::Disable {
            return Ok(None);
        }
        let dot = home(env).map(|h| h.join(".postgresql"));
        // An explicit root, else libpq's default file when it exists.
        let root = self.root.clone().or_else(|| {
            dot.as_ref()
                .map(|d| d.join("root.crt"))
                .filter(|p| p.exists())
                .map(RootCert::File)
        });
        let roots = match &root {
            None => None,
            Some(RootCert::System) => Some(aware_tls::system_roots()),
            Some(RootCert::File(p)) => Some(aware_tls::roots_from_file("sslrootcert", p)?),
        };
        let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = match (self.mode, roots)
        {
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                return Err(format!(
                    "sslmode={} needs a root certificate to check the server's against: set \
                         sslrootcert=FILE in the store URL (or sslrootcert=system, or \
                         ~/.postgresql/root.crt)",
                    if self.mode == SslMode::VerifyCa {
                        "verify-ca"
                    } else {
                        "verify-full"
                    }
                ))
            }
            (SslMode::VerifyFull, Some(r)) => aware_tls::full_verifier(r)?,
            // libpq: `require` with a root certificate checks the chain, as verify-ca.
            (SslMode::VerifyCa | SslMode::Require, Some(r)) => aware_tls::ChainOnly::new(r)?,
            _ => aware_tls::EncryptOnly::new(),
        };
        let (cert, key) = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => (Some(c.clone()), Some(k.clone())),
            (Some(_), None) | (None, Some(_)) => {
                return Err("sslcert and sslkey go together: set both or neither".into())
            }
            (None, None) => {
                let c = dot.as_ref().map(|d| d.join("postgresql.crt"));
                let k = dot.as_ref().map(|d| d.join("postgresql.key"));
                match (c, k) {
                    (Some(c), Some(k)) if c.exists() && k.exists() => (Some(c), Some(k)),
                    _ => (None, None),
                }
            }
        };
        let auth = match (cert, key) {
            (Some(c), Some(k)) => Some((
                aware_tls::read_certs("sslcert", &c)?,
                aware_tls::read_key("sslkey", &k)?,
            )),
            _ => None,
        };
        Ok(Some(Arc::new(aware_tls::client_config_auth(
            verifier, auth,
        )?)))
    }
}

impl PgOptions {
    /// The TLS connector of this store's URL: a configuration error (unreadable certificate,
    /// `verify-full` without a root) is [`StoreError::Refused`], which no retry fixes.
    pub fn tls(&self) -> Result<PgTls> {
        let (_, params) = split_url(&self.url, &process_env).map_err(StoreError::Refused)?;
        let config = params
            .client_config(&process_env)
            .map_err(|e| StoreError::Refused(format!("PostgreSQL TLS: {e}")))?;
        Ok(PgTls { config })
    }
}

/// The password file's password for what `c` connects to (its first host).
pub(crate) fn pgpass_for(c: &tokio_postgres::Config) -> Option<String> {
    let host = match c.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c.get_user()?;
    pgpass(&host, port, c.get_dbname().unwrap_or(user), user)
}

/// The password for `host`/`port`/`dbname`/`user` from the password file (`PGPASSFILE`, else
/// `~/.pgpass`), as libpq reads it: `host:port:database:user:password` lines, `*` matches
/// anything, `\:` and `\\` escape; the first match wins. A file others may read is ignored
/// (with a warning), as libpq does.
pub(crate) fn pgpass(host: &str, port: u16, dbname: &str, user: &str) -> Option<String> {
    pgpass_with(&process_env, host, port, dbname, user)
}

fn pgpass_with(env: Env<'_>, host: &str, port: u16, dbname: &str, user: &str) -> Option<String> {
    let path = env("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| home(env).map(|h| h.join(".pgpass")))?;
    let text = read_private(&path)?;
    // A unix socket directory is "localhost" in the file, as libpq has it.
    let host = if host.starts_with('/') {
        "localhost"
    } else {
        host
    };
    let port = port.to_string();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_pgpass_line(line);
        let [h, p, d, u, pw] = fields.as_slice() else {
            continue;
        };
        let hit = |pat: &str, v: &str| pat == "*" || pat == v;
        if hit(h, host) && hit(p, &port) && hit(d, dbname) && hit(u, user) {
            return Some(pw.clone());
        }
    }
    None
}

fn read_private(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                event = "pgpass_ignored",
                file = %path.display(),
                "the password file {} may be read by group or others; it is ignored (chmod 0600 it)",
                path.display()
            );
            return None;
        }
    }
    std::fs::read_to_string(path).ok()
}

fn split_pgpass_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(last)) = (chars.next(), fields.last_mut()) {
                    last.push(n);
                }
            }
            // The password is the rest of the line, colons and all (escaped or not).
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

/// The `MakeTlsConnect` of every connection the store makes (pooled, `LISTEN`, leadership,
/// migration): rustls, configured from the URL's `sslmode`.
#[derive(Clone)]
pub struct PgTls {
    config: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for PgTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTls")
            .field("enabled", &self.config.is_some())
            .finish()
    }
}

impl<S> MakeTlsConnect<S> for PgTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type TlsConnect = PgTlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<PgTlsConnect> {
        Ok(PgTlsConnect {
            config: self.config.clone(),
            // Empty for a unix socket, where PostgreSQL offers no TLS (tokio-postgres then
            // never calls `connect`).
            domain: domain.to_string(),
        })
    }
}

/// One connection's TLS handshake.
pub struct PgTlsConnect {
    config: Option<Arc<rustls::ClientConfig>>,
    domain: String,
}

impl<S> TlsConnect<S> for PgTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PgTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let config = self.config.ok_or_else(|| {
                io::Error::other("TLS is disabled (sslmode=disable) but the driver asked for it")
            })?;
            let name = aware_tls::server_name(&self.domain).map_err(io::Error::other)?;
            let s = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await?;
            Ok(PgTlsStream(s))
        })
    }
}

/// A TLS stream to the server.
pub struct PgTlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for PgTlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn tls_parameters_are_taken_off_the_url() {
        let none = env_of(&[]);
        let (u, p) = split_url(
            "postgres://a@h:5/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&application_name=x",
            &none,
        )
        .unwrap();
        assert_eq!(u, "postgres://a@h:5/db?application_name=x&sslmode=require");
        assert_eq!(p.mode, SslMode::VerifyFull);
        assert_eq!(p.root, Some(RootCert::File("/tmp/ca.pem".into())));
        let (u, p) = split_url("postgres://a@h/db", &none).unwrap();
        assert_eq!(u, "postgres://a@h/db?sslmode=prefer");
        assert_eq!(p.mode, SslMode::Prefer);
        let env = env_of(&[("PGSSLMODE", "verify-ca"), ("PGSSLROOTCERT", "system")]);
        let (u, p) = split_url("postgres://a@h/db?sslmode=disable", &env).unwrap();
        assert_eq!(u, "postgres://a@h/db?sslmode=disable");
        assert_eq!((p.mode, p.root), (SslMode::Disable, Some(RootCert::System)));
        for bad in ["sslmode=allow", "sslmode=verify", "sslpassword=x"] {
            let e = split_url(&format!("postgres://a:s3cret@h/db?{bad}"), &none).unwrap_err();
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn verify_modes_need_a_root_and_certificates_go_in_pairs() {
        let env = env_of(&[("HOME", "/nonexistent-home")]);
        let (_, p) = split_url("postgres://h/db?sslmode=verify-full", &env).unwrap();
        let e = p.client_config(&env).unwrap_err();
        assert!(e.contains("sslrootcert"), "{e}");
        let (_, p) = split_url("postgres://h/db?sslmode=require&sslcert=/x.crt", &env).unwrap();
        let e = p.client_config(&env).unwrap_err();
        assert!(e.contains("sslcert and sslkey"), "{e}");
        let (_, p) = split_url("postgres://h/db?sslmode=require", &env).unwrap();
        assert!(p.client_config(&env).unwrap().is_some());
        let (_, p) = split_url("postgres://h/db?sslmode=disable", &env).unwrap();
        assert!(p.client_config(&env).unwrap().is_none());
        let (_, p) = split_url(
            "postgres://h/db?sslmode=verify-ca&sslrootcert=/nonexistent.pem",
            &env,
        )
        .unwrap();
        let e = p.client_config(&env).unwrap_err();
        assert!(
            e.contains("sslrootcert: cannot read /nonexistent.pem"),
            "{e}"
        );
    }

    #[test]
    fn the_password_file_is_read_as_libpq_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:*:no\ndb.example:5432:aware:aware:p\\:w:x\n*:*:*:*:any\n",
        )
        .unwrap();
        let env_path = file.display().to_string();
        let env = env_of(&[("PGPASSFILE", &env_path)]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            // Readable by others: ignored, as libpq does.
            assert_eq!(
                pgpass_with(&env, "db.example", 5432, "aware", "aware"),
                None
            );
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert_eq!(
            pgpass_with(&env, "db.example", 5432, "aware", "aware").as_deref(),
            Some("p:w:x")
        );
        assert_eq!(
            pgpass_with(&env, "elsewhere", 5433, "d", "u").as_deref(),
            Some("any")
        );
        let home = dir.path().display().to_string();
        let env = env_of(&[("HOME", &home)]);
        assert_eq!(pgpass_with(&env, "h", 1, "d", "u"), None);
    }
}
