//! TLS for every end of aware, on `rustls` with the `ring` provider (no C toolchain beyond
//! ring's, no cmake): PEM certificate and key files read with errors that name the setting,
//! root stores (the system's, Mozilla's, a CA file), the server configuration of `aware serve`
//! and `aware node serve`, client configurations, and the two relaxed verifiers libpq's
//! `sslmode` needs (`verify-ca`: the chain without the host name; `require`: encryption only).
//!
//! Every error is a `String` naming the setting (`what`) and the file, ready to be wrapped in
//! the caller's configuration error.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore, ServerConfig,
    SignatureScheme,
};
use std::path::Path;
use std::sync::Arc;

pub use rustls;

#[cfg(feature = "testing")]
pub mod testing;

/// The one crypto provider of aware (ring), passed explicitly so no process-wide default is
/// needed.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{what}: cannot read {}: {e}", path.display()))
}

/// The certificates of a PEM file (`-----BEGIN CERTIFICATE-----`), in order; none is an error.
pub fn read_certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: {} is not a PEM file: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what}: {} holds no certificate (expected PEM, -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1). A key other users may read is
/// refused, as libpq and ssh refuse theirs: at most `0600`, or `0640` when root owns the file
/// (a group such as Debian's `ssl-cert` may then read it). The mode is read from the open file,
/// so the checked file is the one read.
pub fn read_key(what: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|e| format!("{what}: cannot read {}: {e}", path.display()))?;
    check_key_mode(what, path, &f)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .map_err(|e| format!("{what}: cannot read {}: {e}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => format!(
            "{what}: {} holds no private key (expected PEM: PKCS#8, PKCS#1 or SEC1)",
            path.display()
        ),
        e => format!("{what}: {} is not a PEM key file: {e}", path.display()),
    })
}

#[cfg(unix)]
fn check_key_mode(what: &str, path: &Path, f: &std::fs::File) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = f
        .metadata()
        .map_err(|e| format!("{what}: cannot read {}: {e}", path.display()))?;
    let mode = meta.mode() & 0o777;
    let (too_open, allowed) = if meta.uid() == 0 {
        (
            mode & 0o037 != 0,
            "u=rw,g=r (0640) or less, as it is owned by root",
        )
    } else {
        (mode & 0o077 != 0, "u=rw (0600) or less")
    };
    if too_open {
        return Err(format!(
            "{what}: the private key {} has mode {mode:04o}, so other users can read it; its permissions must be {allowed} (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_key_mode(_: &str, _: &Path, _: &std::fs::File) -> Result<(), String> {
    Ok(())
}

/// The server side of `aware serve` / `aware node serve`: the certificate chain of `cert` and
/// the key of `key` (`cert_what`, `key_what` name the settings in messages). HTTP/1.1 only.
pub fn server_config(
    cert_what: &str,
    cert: &Path,
    key_what: &str,
    key: &Path,
) -> Result<Arc<ServerConfig>, String> {
    let certs = read_certs(cert_what, cert)?;
    let key_der = read_key(key_what, key)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| {
            format!(
                "{key_what}: the key {} does not go with the certificate {} of {cert_what}, or cannot be used: {e}",
                key.display(),
                cert.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of a CA file as trust anchors; a file with none is an error.
pub fn roots_from_file(what: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    add_file(&mut roots, what, path)?;
    Ok(roots)
}

/// Adds the certificates of a CA file to `roots`.
pub fn add_file(roots: &mut RootCertStore, what: &str, path: &Path) -> Result<(), String> {
    for c in read_certs(what, path)? {
        roots.add(c).map_err(|e| {
            format!(
                "{what}: a certificate of {} is not a usable CA certificate: {e}",
                path.display()
            )
        })?;
    }
    Ok(())
}

/// The operating system's trust store (`/etc/ssl/certs`, or `SSL_CERT_FILE`/`SSL_CERT_DIR`);
/// unreadable entries are skipped.
pub fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    roots
}

/// Mozilla's root program, built in (what a client trusts when the system's store is not
/// consulted).
pub fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// A client that verifies the chain against `roots` and the host name.
pub fn client_config(roots: RootCertStore) -> Result<ClientConfig, String> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A client with its own verifier (see [`ChainOnly`], [`EncryptOnly`]).
pub fn client_config_with(verifier: Arc<dyn ServerCertVerifier>) -> Result<ClientConfig, String> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// The standard check: the chain leads to one of `roots` and the certificate names the host.
pub fn full_verifier(roots: RootCertStore) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let v: Arc<dyn ServerCertVerifier> =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
    Ok(v)
}

/// A client with `verifier` and, when given, a client certificate chain and its key.
pub fn client_config_auth(
    verifier: Arc<dyn ServerCertVerifier>,
    client_auth: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match client_auth {
        None => Ok(builder.with_no_client_auth()),
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("the client certificate and key cannot be used together: {e}")),
    }
}

/// A host name or address as TLS names it (SNI and the certificate check).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string())
        .map_err(|_| format!("{host:?} is not a host name or address TLS can verify"))
}

/// libpq's `verify-ca`: the chain must lead to a trusted root, whatever name the certificate
/// carries.
#[derive(Debug)]
pub struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ChainOnly {
    pub fn new(roots: RootCertStore) -> Result<Arc<Self>, String> {
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
        Ok(Arc::new(ChainOnly(inner)))
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// libpq's `require` without a root certificate: the connection is encrypted, the server's
/// certificate is not checked (a man in the middle is not stopped). The handshake signatures
/// are still verified.
#[derive(Debug)]
pub struct EncryptOnly(Arc<CryptoProvider>);

impl EncryptOnly {
    pub fn new() -> Arc<Self> {
        Arc::new(EncryptOnly(provider()))
    }
}

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile_dir();
        let missing = dir.join("missing.pem");
        let e = read_certs("http.tls_cert", &missing).unwrap_err();
        assert!(e.starts_with("http.tls_cert: cannot read"), "{e}");
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = read_certs("http.tls_cert", &junk).unwrap_err();
        assert!(e.contains("holds no certificate"), "{e}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = read_key("http.tls_key", &junk).unwrap_err();
            assert!(
                e.contains("other users can read it") && e.contains("chmod 600"),
                "{e}"
            );
            std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let e = read_key("http.tls_key", &junk).unwrap_err();
        assert!(
            e.contains("http.tls_key") && e.contains("no private key"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("aware-tls-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn names_parse() {
        assert!(server_name("db.example").is_ok());
        assert!(server_name("[::1]").is_ok());
        assert!(server_name("127.0.0.1").is_ok());
    }
}
